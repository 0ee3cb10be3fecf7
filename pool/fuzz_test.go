package pool

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// refIndex is the obviously-correct model of the block index the fuzzer
// checks the real one against: refcounts per (worker, rank, medium[/group],
// hash), where a GPU store of a resident hash is a touch (a re-announce)
// when its event has no parent and a copy under one, and an offload
// medium's counts every copy; only the GPU's group 0 (full attention)
// counts in blocks.
type refIndex map[[2]int]map[uint64]map[string]int

func (r refIndex) pub(w, rank int) map[uint64]map[string]int {
	k := [2]int{w, rank}
	if r[k] == nil {
		r[k] = map[uint64]map[string]int{}
	}
	return r[k]
}

// resident: the publisher holds h on some medium.
func resident(p map[uint64]map[string]int, h uint64) bool {
	for _, n := range p[h] {
		if n > 0 {
			return true
		}
	}
	return false
}

// entries is what the index limit counts: resident hashes per publisher,
// summed.
func (r refIndex) entries() int {
	n := 0
	for _, p := range r {
		for h := range p {
			if resident(p, h) {
				n++
			}
		}
	}
	return n
}

func (r refIndex) distinct(keep func(w, rank int) bool) int {
	seen := map[uint64]bool{}
	for k, p := range r {
		if !keep(k[0], k[1]) {
			continue
		}
		for h, media := range p {
			for m, n := range media {
				if n > 0 && m == "GPU" { // prefix blocks: the GPU's
					seen[h] = true
				}
			}
		}
	}
	return len(seen)
}

// restarts models what a changed process_start_time does to the index:
// each existing publisher of the worker not cleared since the worker's
// previous good scrape loses its blocks.
//
// A restart concluded from counters (reset after a down period, or all
// gone at once) with no process start on one side drops the same way; the model takes that verdict
// from the state (the rule itself is tested case by case), and checks
// what it does to the index.
type restarts struct {
	procStart map[int]float64
	lastGood  map[int]time.Time
	cleared   map[[2]int]time.Time
	exists    map[[2]int]bool
	full      map[[2]int]bool // a store was dropped at the index limit since the last clear
}

func newRestarts() *restarts {
	return &restarts{procStart: map[int]float64{}, lastGood: map[int]time.Time{}, cleared: map[[2]int]time.Time{},
		exists: map[[2]int]bool{}, full: map[[2]int]bool{}}
}

// scrape models a good scrape's process start; it returns the previous
// good scrape's time and whether the process start decided the restart
// question (both sides known).
func (m *restarts) scrape(ref refIndex, wi int, ps *float64, now time.Time) (prev time.Time, decided bool) {
	prev = m.lastGood[wi]
	m.lastGood[wi] = now
	if ps == nil || math.IsNaN(*ps) || math.IsInf(*ps, 0) {
		return prev, false
	}
	old, ok := m.procStart[wi]
	if ok && old != *ps {
		m.drop(ref, wi, prev, now)
	}
	m.procStart[wi] = *ps
	return prev, ok
}

// drop clears each existing publisher of the worker not cleared since
// prev.
func (m *restarts) drop(ref refIndex, wi int, prev, now time.Time) {
	for rank := 0; rank < 2; rank++ {
		k := [2]int{wi, rank}
		if !m.exists[k] {
			continue
		}
		if c, ok := m.cleared[k]; ok && c.After(prev) {
			continue
		}
		m.clear(ref, k, now)
	}
}

func (m *restarts) clear(ref refIndex, k [2]int, now time.Time) {
	delete(ref, k)
	m.cleared[k], m.full[k] = now, false
}

// fuzzReader hands out bytes of the input; zeros once it runs out.
type fuzzReader struct {
	b []byte
	i int
}

func (r *fuzzReader) next() int {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return int(r.b[r.i-1])
}

func (r *fuzzReader) more() bool { return r.i < len(r.b) }

var (
	fuzzWorkers = []string{"w0", "w1", "http://10.0.0.7:8000"} // the third aliases w2
	fuzzMedia   = []string{"GPU", "CPU", "", "DISK"}
	fuzzStates  = []snapshot.StreamState{snapshot.StreamConnecting, snapshot.StreamLive, snapshot.StreamReplaying,
		snapshot.StreamHistoryLost, snapshot.StreamJoinedLate, snapshot.StreamDisconnected}
)

// FuzzApply runs arbitrary sequences of observations through a State and
// checks, at every snapshot, the block counts against a reference model,
// the journal counters, shares within [0, 1], and that the snapshot
// encodes as JSON (no NaN, no cycles).
func FuzzApply(fz *testing.F) {
	fz.Add([]byte{0, 1, 0, 0, 2, 3, 4, 9, 0})
	fz.Add([]byte{0, 0, 0, 0, 3, 1, 2, 3, 1, 0, 0, 0, 1, 1, 9, 1})
	fz.Add([]byte{0, 0, 1, 1, 2, 5, 5, 0, 0, 1, 0, 2, 5, 1, 0, 0, 1, 1, 5, 9, 2, 2, 0, 0, 3, 0, 1, 9, 7})
	fz.Add([]byte{5, 1, 2, 1, 3, 6, 1, 2, 0, 1, 9, 3, 5, 1, 2, 1, 3, 9, 200})
	fz.Add([]byte{7, 0, 5, 7, 0, 250, 8, 4, 8, 1, 9, 40, 4, 2, 3, 9, 1})
	fz.Add([]byte("\x00\x02\x01\x03\x0f\x0e\x0d\x01\x04\x02\x03\x09\x02\x00\x00\x09\x05"))
	fz.Fuzz(fuzzApply)
}

func fuzzApply(t *testing.T, data []byte) {
	{
		if len(data) > 4096 {
			return
		}
		s := NewState(Options{Window: time.Minute, Limits: Limits{Decisions: 16, RecentDecisions: 4, PrefixCounters: 8, Prefixes: 3, Incidents: 3, Errors: 5,
			IndexBlocks: fuzzIndexBlocks},
			Workers: []WorkerSpec{{Name: "w0"}, {Name: "w1"}, {Name: "w2", Aliases: []string{"http://10.0.0.7:8000"}}},
			Routers: []RouterSpec{{Name: "r0"}}})
		ref := refIndex{}
		rs := newRestarts()
		r := &fuzzReader{b: data}
		now := t0
		seq := uint64(0)
		for r.more() {
			op := r.next() % 13
			wi := r.next() % 3
			rank := r.next() % 2
			key := [2]int{wi, rank}
			now = now.Add(time.Duration(r.next()%7-1) * time.Second) // sometimes backwards
			seq++
			switch op {
			case 0, 1:
				medium := fuzzMedia[r.next()%len(fuzzMedia)]
				refMedium := medium
				if refMedium == "" {
					refMedium = "GPU"
				}
				n := 1 + r.next()%4
				hashes := make([]uint64, n)
				for i := range hashes {
					hashes[i] = uint64(r.next() % 16)
				}
				ev := collectors.KVEvent{Hashes: hashes, Medium: medium, BlockSize: 16}
				// Group 1 is a sliding-window group (named on its stores):
				// a column of its own, never prefix blocks.
				if r.next()%4 == 0 {
					ev.Group = 1
					refMedium += "/1"
					if op == 0 {
						ev.GroupKind = "sliding_window"
					}
				}
				p := ref.pub(wi, rank)
				if op == 0 {
					ev.Kind = collectors.BlockStored
					ev.Parent, ev.HasParent = uint64(r.next()%16), r.next()%2 == 0
					if !ev.HasParent && r.next()%2 == 0 {
						ev.RootContent = uint64(1 + r.next()%4) // a few contents, under whatever hashes
					}
					for _, h := range hashes {
						if !resident(p, h) && ref.entries() >= fuzzIndexBlocks {
							rs.full[key] = true // dropped at the limit
							continue
						}
						if p[h] == nil {
							p[h] = map[string]int{}
						}
						if strings.Contains(refMedium, "GPU") && !ev.HasParent && p[h][refMedium] > 0 {
							continue // a re-announce: a touch (under a parent: a copy)
						}
						p[h][refMedium]++
					}
				} else {
					ev.Kind = collectors.BlockRemoved
					for _, h := range hashes {
						if p[h][refMedium] > 0 {
							p[h][refMedium]--
						}
					}
				}
				b := batch(fuzzWorkers[wi], rank, seq, now, ev)
				b.Replayed = r.next()%4 == 0
				s.Apply(b)
				rs.exists[key] = true
			case 2:
				s.Apply(batch(fuzzWorkers[wi], rank, seq, now, collectors.KVEvent{Kind: collectors.AllBlocksCleared}))
				rs.exists[key] = true
				rs.clear(ref, key, now)
			case 3:
				s.Apply(&collectors.StreamReset{Worker: fuzzWorkers[wi], Rank: rank, At: now})
				rs.exists[key] = true
				rs.clear(ref, key, now)
			case 4:
				rs.exists[key] = true
				st := status(fuzzWorkers[wi], rank, fuzzStates[r.next()%len(fuzzStates)], now)
				for i := r.next() % 5; i > 0; i-- {
					st.History = append(st.History, collectors.StreamIncident{Kind: []string{"gap", "history_lost", "joined_late"}[r.next()%3],
						FromSeq: uint64(r.next()), Start: now.Add(-time.Duration(r.next()) * time.Second)})
				}
				st.DecodeErrors = uint64(r.next())
				s.Apply(st)
			case 5:
				d := &collectors.Decision{RequestID: fmt.Sprint("r", r.next()%8), AttemptID: []string{"", "1", "2"}[r.next()%3],
					Chosen: fuzzWorkers[wi], At: now, Reason: []string{"", "retry"}[r.next()%2], Prefix: fmt.Sprintf("%x", r.next()%4)}
				if r.next()%2 == 0 {
					d.Prediction = &collectors.Prediction{Units: []string{"blocks", "chars", "tokens"}[r.next()%3], Owner: fuzzWorkers[r.next()%3],
						Matched: f(float64(r.next() % 3)), BlockSize: r.next() % 3 * 8}
					if r.next()%2 == 0 {
						d.Candidates = []collectors.Candidate{{Worker: fuzzWorkers[r.next()%3], Matched: fuzzValue(r)}}
					}
				}
				d.Backfill = r.next()%4 == 0
				d.Source = []string{"a", "b"}[r.next()%2]
				if r.next()%4 == 0 {
					d.Chosen = fmt.Sprintf("worker_%d/dp%d", r.next()%3, r.next()%3)
				}
				s.Apply(d)
			case 6:
				var done *bool
				if x := r.next() % 3; x < 2 {
					done = bp(x == 0)
				}
				var cached *int
				if x := r.next() % 3; x < 2 {
					cached = ip(16 * x)
				}
				s.Apply(&collectors.Outcome{RequestID: fmt.Sprint("r", r.next()%8), AttemptID: []string{"", "1", "2"}[r.next()%3],
					Worker: fuzzWorkers[wi], HTTPStatus: []int{0, 200, 503}[r.next()%3], CachedTokens: cached, Done: done,
					Format: []string{"kvtop", "production-stack"}[r.next()%2], Backfill: r.next()%4 == 0, Source: "a", At: now,
					TTFTMS: fuzzValue(r), QueueMS: fuzzValue(r)})
			case 7:
				if r.next()%4 == 0 {
					s.Apply(failedScrape(fuzzWorkers[wi], now, "refused"))
					break
				}
				m := &collectors.MetricsScrape{Target: fuzzWorkers[wi], At: now, ProcessStart: fuzzValue(r),
					Engines: []em{{Engine: fmt.Sprint(rank), Waiting: fuzzValue(r), Running: fuzzValue(r), KVUsage: fuzzValue(r),
						NumGPUBlocks: fuzzValue(r), PrefixQueries: fuzzValue(r), PrefixHits: fuzzValue(r), BlockSize: fuzzValue(r)}}}
				if r.next()%3 == 0 {
					m.WorkerTotals = &em{PrefixQueries: fuzzValue(r), PrefixHits: fuzzValue(r), Waiting: fuzzValue(r), KVUsage: fuzzValue(r)}
				}
				if r.next()%2 == 0 { // latency histograms and throughput counters, reset or not
					e := &m.Engines[0]
					e.TTFT, e.ITL = fuzzHistogram(r), fuzzHistogram(r)
					e.PromptTokens, e.RequestsFinished = fuzzValue(r), fuzzValue(r)
					if m.WorkerTotals != nil {
						m.WorkerTotals.E2E = fuzzHistogram(r)
					}
				}
				if r.next()%4 == 0 {
					// The page lacks the prefix counters (a new process
					// before its first request), or the collector
					// rejected one.
					m.Engines[0].PrefixQueries, m.Engines[0].PrefixHits = nil, nil
					if r.next()%2 == 0 {
						m.Engines[0].PrefixHits = fuzzValue(r)
						m.Invalid = []collectors.InvalidValue{{Engine: m.Engines[0].Engine, Field: "prefix_queries", Note: "duplicate"}}
					}
				}
				prev, decided := rs.scrape(ref, wi, m.ProcessStart, now)
				w := s.workers[wi]
				before := w.restartDrops
				s.Apply(m)
				// Counters reset after a down period, or every series gone
				// at once: the state's verdict, applied to the model.
				if !decided && w.restartDrops != before && (w.restartWhy == restartCounters || w.restartWhy == restartSeriesGone) {
					rs.drop(ref, wi, prev, now)
				}
			case 8:
				s.Apply(routerScrape(now, float64(r.next()%2), float64(r.next()), map[string]float64{fuzzWorkers[wi]: float64(r.next())}))
			case 9:
				checkSnapshot(t, s, ref, rs, now)
			case 10:
				s.Apply(&collectors.DecisionSource{Source: []string{"a", "b"}[r.next()%2], Lines: uint64(r.next()), Skipped: uint64(r.next()),
					SkippedBy: map[string]uint64{"no request id": uint64(r.next())}, Waiting: r.next()%2 == 0, At: now})
			case 11:
				s.Apply(&collectors.MetricsScrape{Target: "r0", Role: collectors.RoleRouter, At: now, Router: &collectors.RouterMetrics{
					CBState: map[string]float64{fuzzWorkers[wi]: *fuzzValue(r), "http://x:1": float64(r.next() % 3)}}})
			case 12:
				s.Apply(&collectors.SourceError{Source: "decisions a", Kind: "bad_line", Message: "x", Backfill: r.next()%2 == 0, At: now})
			}
		}
		checkSnapshot(t, s, ref, rs, now)
	}
}

// fuzzIndexBlocks is the index limit under fuzzing: small enough that
// sequences reach it.
const fuzzIndexBlocks = 12

func checkSnapshot(t *testing.T, s *State, ref refIndex, rs *restarts, now time.Time) {
	t.Helper()
	snap := s.Snapshot(now)
	if _, err := json.Marshal(snap); err != nil {
		t.Fatalf("snapshot does not encode: %v", err)
	}
	checkFractions(t, snap)
	// Last-known engines belong to workers not up; those who left the
	// pool hit figure are workers, once each, none of them up and fed.
	left := map[string]bool{}
	for _, n := range snap.Pool.PrefixHitRate.LeftWorkers {
		if left[n] {
			t.Fatalf("%s left the hit figure twice: %v", n, snap.Pool.PrefixHitRate.LeftWorkers)
		}
		left[n] = true
	}
	if snap.Pool.PrefixHitRate.Left != len(left) {
		t.Fatalf("left %d, left_workers %v", snap.Pool.PrefixHitRate.Left, snap.Pool.PrefixHitRate.LeftWorkers)
	}
	for _, w := range snap.Workers {
		for _, e := range w.Engines {
			if e.LastKnown == w.Up {
				t.Fatalf("worker %s up %v has engine %s last_known %v", w.Name, w.Up, e.Engine, e.LastKnown)
			}
		}
		if left[w.Name] && w.Up && w.PrefixHitRate.Tokens != nil {
			t.Fatalf("worker %s left the hit figure but is up with a hit rate", w.Name)
		}
		delete(left, w.Name)
	}
	if len(left) > 0 {
		t.Fatalf("left_workers names no worker: %v", left)
	}
	if s.index.entries != ref.entries() || s.index.entries > fuzzIndexBlocks {
		t.Fatalf("index entries %d, reference %d (limit %d)", s.index.entries, ref.entries(), fuzzIndexBlocks)
	}
	anyFull := false
	for wi := 0; wi < 3; wi++ {
		w := snap.Workers[wi]
		full := rs.full[[2]int{wi, 0}] || rs.full[[2]int{wi, 1}]
		anyFull = anyFull || full
		if w.IndexFull != full || full && (w.IndexComplete || w.State == "ok" || w.State == "saturated") {
			t.Fatalf("worker %s index_full %v (reference %v), complete %v, state %q", w.Name, w.IndexFull, full, w.IndexComplete, w.State)
		}
		if want := ref.distinct(func(w, _ int) bool { return w == wi }); max(blocksOf(w.Blocks), 0) != want {
			t.Fatalf("worker %s blocks %d, reference %d", w.Name, blocksOf(w.Blocks), want)
		}
		for _, st := range w.Streams {
			if want := ref.distinct(func(w, rank int) bool { return w == wi && rank == st.Rank }); st.Blocks != want {
				t.Fatalf("worker %s rank %d blocks %d, reference %d", w.Name, st.Rank, st.Blocks, want)
			}
		}
	}
	// A worker not up is down or serving without metrics, never both, and
	// its alert says which.
	alerted := map[string]string{}
	for _, a := range snap.Alerts {
		if a.Kind == "down" || a.Kind == "no_metrics" {
			alerted[a.Subject] += string(a.Kind)
		}
	}
	for _, w := range snap.Workers {
		if (w.State == "down" || w.State == "no_metrics") && (w.Up || alerted[w.Name] != string(w.State)) {
			t.Fatalf("worker %s state %q up %v alerts %q", w.Name, w.State, w.Up, alerted[w.Name])
		}
	}
	// Pending: no outcome yet, and not (yet) no_outcome.
	for _, r := range snap.Decisions.Recent {
		if r.Pending && (r.Outcome != nil || strings.Contains(strings.Join(r.Flags, ","), "no_outcome")) {
			t.Fatalf("pending row %+v", r)
		}
	}
	if snap.Pool.IndexFull != anyFull || anyFull != (alertOf(snap, "index_full") != nil) {
		t.Fatalf("pool index_full %v, reference %v, alert %v", snap.Pool.IndexFull, anyFull, alertOf(snap, "index_full"))
	}
	if want := ref.distinct(func(int, int) bool { return true }); max(blocksOf(snap.Pool.Blocks), 0) != want {
		t.Fatalf("pool blocks %d, reference %d", blocksOf(snap.Pool.Blocks), want)
	}
	d := snap.Decisions
	if d.WithOutcome > d.Records || d.Records+d.OrphanOutcomes > 16 || d.OwnerMismatch < 0 || d.PredictionErrors < 0 ||
		d.Truncated < 0 || d.PredictionErrors > d.WithOutcome || len(d.Recent) > 4 {
		t.Fatalf("decision counters %+v", d)
	}
	for _, p := range snap.Prefixes {
		sum := 0.0
		for _, v := range p.Workers {
			sum += v
		}
		if p.Share < 0 || p.Share > 1+1e-9 || sum > 1+1e-9 || p.Replicas > len(snap.Workers) {
			t.Fatalf("prefix %+v", p)
		}
	}
}

var fuzzValues = []float64{0, 1, 2, 7, -3, math.NaN(), math.Inf(1), 1e300}

// fuzzHistogram is a histogram in one of a few layouts, its counts
// usually cumulative, sometimes not, sometimes absent.
func fuzzHistogram(r *fuzzReader) *collectors.Histogram {
	layouts := [][]float64{{0.1, 0.5, 1}, {0, 0.1, 0.5}, {0.25, 2.5}, {}}
	l := layouts[r.next()%len(layouts)]
	if r.next()%5 == 0 {
		return nil
	}
	h := &collectors.Histogram{}
	c := 0.0
	for _, b := range l {
		c += float64(r.next() % 4)
		if r.next()%7 == 0 {
			c = *fuzzValue(r)
		}
		h.Buckets = append(h.Buckets, collectors.Bucket{UpperBound: b, Count: c})
	}
	h.Count = c + float64(r.next()%3)
	h.Buckets = append(h.Buckets, collectors.Bucket{UpperBound: math.Inf(1), Count: h.Count})
	return h
}

func fuzzValue(r *fuzzReader) *float64 {
	x := fuzzValues[r.next()%len(fuzzValues)]
	return &x
}

// checkFractions walks every fraction a snapshot publishes: each is within
// 0..1, or null (pointers). The list is the Snapshot type's, field by
// field; a new fraction belongs here.
func checkFractions(t *testing.T, snap *snapshot.Snapshot) {
	t.Helper()
	check := func(path string, p *float64) {
		if p != nil && !(*p >= 0 && *p <= 1) {
			t.Fatalf("%s = %v, outside 0..1", path, *p)
		}
	}
	val := func(path string, v float64) { check(path, &v) }
	points := func(path string, ps []snapshot.Point) {
		for _, pt := range ps {
			val(path, pt.V)
		}
	}
	hit := func(path string, h snapshot.HitRate) {
		check(path+".tokens", h.Tokens)
		check(path+".requests", h.Requests)
		if h.Tokens != nil && h.Reason != "" {
			t.Fatalf("%s has a rate %v and a reason %q", path, *h.Tokens, h.Reason)
		}
	}
	p := snap.Pool
	check("pool.kv_usage", p.KVUsage)
	hit("pool.prefix_hit_rate", p.PrefixHitRate.HitRate)
	check("pool.load_skew.gini", p.LoadSkew.Gini)
	points("pool.series.hit_tokens", p.Series.HitTokens)
	for _, w := range snap.Workers {
		pre := "workers[" + w.Name + "]"
		check(pre+".kv_usage", w.KVUsage)
		hit(pre+".prefix_hit_rate", w.PrefixHitRate)
		check(pre+".hot_share", w.HotShare)
		check(pre+".overheat_share", w.OverheatShare)
		check(pre+".routed_share", w.RoutedShare)
		points(pre+".series.kv_usage", w.Series.KVUsage)
		points(pre+".series.hit_tokens", w.Series.HitTokens)
		for _, e := range w.Engines {
			check(pre+".engines.kv_usage", e.KVUsage)
			check(pre+".engines.hit_tokens", e.HitTokens)
			if e.Queue != nil && *e.Queue < 0 || e.Running != nil && *e.Running < 0 {
				t.Fatalf("%s engine %s queue %v running %v: negative", pre, e.Engine, show(e.Queue), show(e.Running))
			}
		}
		if w.Queue != nil && *w.Queue < 0 || w.Running != nil && *w.Running < 0 {
			t.Fatalf("%s queue %v running %v: negative", pre, show(w.Queue), show(w.Running))
		}
		for _, tp := range w.TopPrefixes {
			val(pre+".top_prefixes.share", tp.Share)
		}
	}
	for _, x := range snap.Prefixes {
		val("prefixes.share", x.Share)
		for _, v := range x.Workers {
			val("prefixes.workers", v)
		}
	}
	lat := func(path string, l snapshot.Latency) {
		vals := []*float64{l.P50, l.P95, l.P99}
		for i, v := range vals {
			if v != nil && !(*v >= 0 && *v < math.Inf(1)) {
				t.Fatalf("%s = %v: a latency is a finite duration", path, *v)
			}
			if i > 0 && v != nil && vals[i-1] != nil && *v < *vals[i-1]-1e-9 {
				t.Fatalf("%s quantiles out of order: %v", path, vals)
			}
			if v == nil && l.Reason == "" {
				t.Fatalf("%s unknown without a reason", path)
			}
		}
	}
	lat("pool.ttft_ms", p.TTFTMS)
	lat("pool.itl_ms", p.ITLMS)
	lat("pool.e2e_ms", p.E2EMS)
	check("pool.recompute.share", p.Recompute.Share)
	if v := p.Recompute.TokensPerS; v != nil && *v < 0 {
		t.Fatalf("pool recompute %v tokens/s", *v)
	}
	for _, w := range snap.Workers {
		lat("workers["+w.Name+"].ttft_ms", w.TTFTMS)
		check("workers["+w.Name+"].recompute.share", w.Recompute.Share)
		for _, e := range w.Engines {
			lat("workers["+w.Name+"].engines.ttft_ms", e.TTFTMS)
		}
	}
	for _, r := range snap.Routers {
		for _, v := range r.RoutedShare {
			val("routers.routed_share", v)
		}
		check("routers.recovery.baseline", r.Recovery.Baseline)
		check("routers.recovery.current", r.Recovery.Current)
	}
	checkCache(t, snap)
}

// checkCache: cache figures are rates ≥ 0, shares within 0..1, residency
// finite; request quantiles ordered, null below 20 samples with a reason;
// hash pairs name two known workers and at least one prefix.
func checkCache(t *testing.T, snap *snapshot.Snapshot) {
	t.Helper()
	cache := func(path string, c snapshot.Cache) {
		for name, v := range map[string]*float64{"stored_per_s": c.StoredPerS, "removed_per_s": c.RemovedPerS, "thrash_per_s": c.ThrashPerS,
			"residency_s.p50": c.ResidencyS.P50, "residency_s.mean": c.ResidencyS.Mean} {
			if v != nil && !(*v >= 0 && *v < math.Inf(1)) {
				t.Fatalf("%s.%s = %v", path, name, *v)
			}
		}
		for name, v := range map[string]*float64{"thrash_share": c.ThrashShare, "sample_rate": c.SampleRate} {
			if v != nil && !(*v >= 0 && *v <= 1) {
				t.Fatalf("%s.%s = %v, outside 0..1", path, name, *v)
			}
		}
		if c.ThrashShare != nil && c.StoredPerS == nil || c.ResidencyS.P50 != nil && c.ResidencyS.Samples == 0 {
			t.Fatalf("%s = %+v: a share without stores, or a residency without samples", path, c)
		}
		for name, v := range map[string]*int{"capacity_tokens": c.CapacityTokens, "resident_tokens": c.ResidentTokens} {
			if v != nil && *v < 0 {
				t.Fatalf("%s.%s = %d", path, name, *v)
			}
		}
	}
	quant := func(path string, q snapshot.RequestQuantiles) {
		vals := []*float64{q.P50, q.P95, q.P99}
		for i, v := range vals {
			if v != nil && (*v < 0 || i > 0 && vals[i-1] != nil && *v < *vals[i-1]) {
				t.Fatalf("%s = %+v: negative or out of order", path, q)
			}
		}
		if (q.P50 == nil) != (q.N < minQuantileSamples) || q.P50 == nil && q.Reason == "" {
			t.Fatalf("%s = %+v: null exactly below %d samples, with a reason", path, q, minQuantileSamples)
		}
	}
	p := snap.Pool
	cache("pool.cache", p.Cache)
	for _, w := range snap.Workers {
		cache("workers["+w.Name+"].cache", w.Cache)
		for _, e := range w.Engines {
			cache("workers["+w.Name+"].engines["+e.Engine+"].cache", e.Cache)
		}
		points("workers["+w.Name+"].series.thrash_per_s", w.Series.ThrashPerS, t)
	}
	for _, l := range []snapshot.RequestLatency{p.Rest, p.OverheatingWorkers, p.OtherWorkers} {
		quant("pool request classes ttft", l.TTFTMS)
		quant("pool request classes queue", l.QueueMS)
	}
	for _, x := range snap.Prefixes {
		quant("prefixes["+x.ID+"].ttft_ms", x.TTFTMS)
		quant("prefixes["+x.ID+"].queue_ms", x.QueueMS)
	}
	hm := p.HashMismatch
	names := map[string]bool{}
	for _, w := range snap.Workers {
		names[w.Name] = true
	}
	for _, pr := range hm.Pairs {
		if !names[pr.A] || !names[pr.B] || pr.A == pr.B || pr.Prefixes < 1 {
			t.Fatalf("hash pair %+v", pr)
		}
	}
	if hm.Fingerprints > hm.FingerprintsLimit || hm.Agreeing > hm.Fingerprints {
		t.Fatalf("hash_mismatch %+v", hm)
	}
}

func points(path string, ps []snapshot.Point, t *testing.T) {
	for _, pt := range ps {
		if !(pt.V >= 0 && pt.V < math.Inf(1)) {
			t.Fatalf("%s point %v", path, pt.V)
		}
	}
}
