package pool

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// buildPool sums the up workers into the pool summary: queue, running, KV
// use weighted by num_gpu_blocks, the windowed hit rates and load skew.
func (s *State) buildPool(snap *snapshot.Snapshot, now time.Time) {
	ps := &snap.Pool
	ps.Name = s.opt.Name
	ps.Workers = len(s.workers)
	for _, w := range s.workers {
		if w.left() {
			ps.Workers--
		}
	}
	ps.Churn = s.buildChurn(now)
	ps.IndexComplete = true
	for i := range snap.Workers {
		if snap.Workers[i].Blocks != nil {
			n := s.index.distinct()
			ps.Blocks = &n
			break
		}
	}
	var all upSum
	for i, w := range s.workers {
		row := &snap.Workers[i]
		if w.left() {
			continue // last-known: in no pool figure
		}
		if !row.IndexComplete {
			ps.IndexComplete = false
		}
		if row.IndexFull {
			ps.IndexFull = true
		}
		all.add(row)
	}
	ps.Up = all.up
	ps.Queue, ps.Running, ps.KVUsage = all.queue.value(), all.running.value(), all.kvUsage()
	var left []*worker
	h := s.poolHitFed(now.Add(-s.window), now, func(w *worker, in bool) {
		switch {
		case in:
			w.leftPoolHit = time.Time{}
		case w.inPoolHit:
			w.leftPoolHit = now
		}
		w.inPoolHit = in
		if !w.leftPoolHit.IsZero() && now.Sub(w.leftPoolHit) <= s.window {
			left = append(left, w)
		}
	})
	sort.SliceStable(left, func(i, j int) bool { return left[i].leftPoolHit.After(left[j].leftPoolHit) })
	ps.PrefixHitRate.Left = len(left)
	ps.PrefixHitRate.LeftWorkers = make([]string, len(left))
	for i, w := range left {
		ps.PrefixHitRate.LeftWorkers[i] = w.name
	}
	ps.PrefixHitRate.Tokens = h.rate()
	ps.PrefixHitRate.CoveredS = h.covered.Seconds()
	ps.PrefixHitRate.Reason = h.reason()
	for i := range snap.Workers {
		if snap.Workers[i].Role == snapshot.RoleDecode && h.ok {
			ps.PrefixHitRate.TransferredTokens = fp(h.transferred)
			break
		}
	}
	if hits, n, _ := s.outcomes.sum(now, s.window); n > 0 {
		ps.PrefixHitRate.Requests = fraction(hits / n)
	}
	ps.LoadSkew = loadSkew(all.queues)
	s.buildRoles(snap)
	s.judgeSkew(ps, snap.Seq, now)
}

// overheat is the workers overheating on one prefix (for the alert),
// heaviest share first.
type overheat struct {
	workers []string
	shares  []float64
	queues  []float64
	prefix  snapshot.Prefix
	median  float64
	// medianOf names it: "pool median", or "decode median" in a pool of
	// several roles.
	medianOf string
}

// buildPrefixes fills the hot prefixes, marks overheating workers and
// returns what overheats.
func (s *State) buildPrefixes(snap *snapshot.Snapshot, now time.Time) []overheat {
	// Decisions that name a prefix are the better source while they come
	// (about one within the window); else estimate from events.
	pc, src := s.decPrefix, "decisions"
	if pc.decayedNamed(now) < minPrefixRequests {
		pc, src = s.evPrefix, "events"
	}
	top := pc.top(now, s.opt.Limits.Prefixes)
	keys := make([]uint64, 0, len(top))
	memo := map[uint64]depthInfo{}
	for _, t := range top {
		keys = append(keys, t.key)
		d := s.index.depth(t.key, memo)
		p := snapshot.Prefix{
			ID:                 t.id,
			OverheatingWorkers: []string{},
			Tokens:             s.depthTokens(t.key, d.blocks),
			Share:              clamp01(t.share),
			Replicas:           s.index.replicas(t.key),
			Workers:            map[string]float64{},
			Source:             src,
			Requests:           t.n,
			Orphan:             d.orphan || d.blocks == 0,
		}
		if p.ID == "" {
			p.ID = fmt.Sprintf("%016x", hashOf(t.key))
		}
		for _, wc := range t.workers {
			if wc.w != nil && t.n > 0 {
				p.Workers[wc.w.name] = clamp01(p.Workers[wc.w.name] + wc.n/t.n)
			}
		}
		snap.Prefixes = append(snap.Prefixes, p)
	}
	s.hot.set(keys)

	// Worker rows by name, the pool median queue, and the rule.
	rowOf := make(map[*worker]*snapshot.Worker, len(s.workers))
	for i, w := range s.workers {
		rowOf[w] = &snap.Workers[i]
	}
	hot := s.judgeOverheating(snap, top, rowOf, queueMedians(snap), now)
	s.buildHotRest(snap, keys, now)
	for i := range hot {
		for j := range snap.Prefixes {
			if snap.Prefixes[j].ID == hot[i].prefix.ID {
				hot[i].prefix = snap.Prefixes[j] // with its requests' latency
			}
		}
	}
	// The hot prefixes each worker holds now, with its share of their traffic.
	for i, t := range top {
		p := &snap.Prefixes[i]
		for j, w := range s.workers {
			if w.idx.holds(t.key) {
				row := &snap.Workers[j]
				row.TopPrefixes = append(row.TopPrefixes, snapshot.WorkerPrefix{ID: p.ID, Tokens: cpInt(p.Tokens), Share: p.Workers[w.name]})
			}
		}
	}
	// HotShare: every worker's share of the hottest prefix, one meaning
	// for the whole column (the overheating prefix is OverheatPrefix).
	if len(top) > 0 {
		for i, w := range s.workers {
			row := &snap.Workers[i]
			v := 0.0
			for _, wc := range top[0].workers {
				if wc.w == w && top[0].n > 0 {
					v = clamp01(wc.n / top[0].n)
				}
			}
			row.HotShare = &v
		}
	}
	return hot
}

// buildStates sets each worker's one-word state, most important first.
// A worker whose scrapes fail while its events still arrive is serving:
// "no_metrics", not "down".
func (s *State) buildStates(snap *snapshot.Snapshot, now time.Time) {
	for i, w := range s.workers {
		row := &snap.Workers[i]
		switch {
		case w.left():
			row.State = snapshot.WorkerLeft
		case !w.up && !podServing(w.tg.kube):
			row.State = snapshot.WorkerDown
		case w.scraped && !w.up && s.eventsArriving(w, now):
			row.State = snapshot.WorkerNoMetrics
		case w.scraped && !w.up:
			row.State = snapshot.WorkerDown
		case row.Overheating:
			row.State = snapshot.WorkerOverheating
		case s.staleIndex(w, row, now):
			row.State = snapshot.WorkerStale
		case !w.scraped:
			row.State = snapshot.WorkerUnknown
		case w.saturated:
			row.State = snapshot.WorkerSaturated
		default:
			row.State = snapshot.WorkerOK
		}
	}
}

// staleIndex: the worker's index is incomplete for a reason worth a state
// (history lost, a gap open, a stream disconnected or connecting past the
// grace, the index full). A stream connecting within the grace leaves
// index_complete false without making the worker stale: at start-up every
// stream connects for a moment.
func (s *State) staleIndex(w *worker, row *snapshot.Worker, now time.Time) bool {
	if row.IndexFull {
		return true
	}
	for j, p := range w.pubs {
		if s.incomplete(p, row.Streams[j].State, now) {
			return true
		}
	}
	return false
}

// depthTokens is a prefix's depth in tokens: its resolved blocks × the
// block size of a publisher that holds it (else of the holder worker's
// cache geometry). Workers may run different block sizes, so one global
// size would be wrong. nil when unresolved or no size is known.
func (s *State) depthTokens(key uint64, blocks int) *int {
	if blocks <= 0 {
		return nil
	}
	for _, w := range s.workers {
		if !w.idx.holds(key) {
			continue
		}
		for _, p := range w.pubs {
			if p.idx.blockSize > 0 && p.idx.t.lookup(key) >= 0 {
				n := blocks * p.idx.blockSize
				return &n
			}
		}
		if bs := w.blockSize(); bs > 0 {
			n := blocks * bs
			return &n
		}
	}
	return nil
}

// buildRouters fills router rows (advancing their recovery), each
// worker's share of routed requests over the window, and the routers'
// circuit breakers per worker.
func (s *State) buildRouters(snap *snapshot.Snapshot, now time.Time) {
	perWorker := map[string]float64{}
	mapped := map[string]bool{} // workers some router label maps to
	breaker := map[string]string{}
	var all float64
	for _, r := range s.routers {
		row := snapshot.Router{
			Name:        r.name,
			Profile:     r.profile,
			Up:          r.up,
			Restarts:    r.restarts,
			Recovery:    s.recovery(r, now),
			RoutedShare: map[string]float64{},
			Breakers:    map[string]string{},
			Unmapped:    []string{},
		}
		if r.scraped && !r.up {
			msg := r.errMsg
			row.Error = &msg
		}
		if !r.lastRestart.IsZero() {
			t := r.lastRestart
			row.LastRestart = &t
		}
		per, total, cov := s.routed(r, now)
		if total > 0 && !math.IsInf(total, 0) {
			for k, v := range per {
				row.RoutedShare[k] = clamp01(v / total)
				perWorker[k] += v
			}
			all += total
		}
		for label := range r.processed {
			if i := s.names.lookup(label); i >= 0 {
				mapped[s.workers[i].name] = true
			} else {
				row.Unmapped = append(row.Unmapped, label)
			}
		}
		sort.Strings(row.Unmapped)
		if r.up {
			for label, cb := range r.cb {
				name := s.workerName(label)
				word := breakerWord(cb.v)
				row.Breakers[name] = worseBreaker(row.Breakers[name], word)
				if s.names.lookup(label) >= 0 {
					breaker[name] = worseBreaker(breaker[name], word)
				}
			}
		}
		if d, c, ok := r.requests.delta(now, s.window); ok && c > 0 {
			row.RequestsPerS = fp(d / c.Seconds())
		} else if cov > 0 {
			row.RequestsPerS = fp(total / cov.Seconds())
		}
		s.routerPredictions(r, &row, now)
		snap.Routers = append(snap.Routers, row)
	}
	for i := range snap.Workers {
		row := &snap.Workers[i]
		if b, ok := breaker[row.Name]; ok {
			row.Breaker = &b
		}
		// A worker no router label maps to has an unknown share, not 0%.
		if all > 0 && !math.IsInf(all, 0) && mapped[row.Name] {
			row.RoutedShare = fraction(perWorker[row.Name] / all)
		}
	}
}

// breakerWord names a circuit breaker state as routers expose it (0
// closed, 1 open, 2 half-open).
func breakerWord(v float64) string {
	switch v {
	case 0:
		return "closed"
	case 1:
		return "open"
	case 2:
		return "half-open"
	}
	return "unknown"
}

var breakerRank = map[string]int{"": 0, "unknown": 1, "closed": 2, "half-open": 3, "open": 4}

func worseBreaker(a, b string) string {
	if breakerRank[b] > breakerRank[a] {
		return b
	}
	return a
}
