package pool

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// idle is an engine page without prefix-cache counters: vLLM creates them
// at the first request.
func idle(engine string) em {
	return em{Engine: engine, Waiting: f(0), Running: f(0), KVUsage: f(0)}
}

// The measured case: kvtop starts before the first request, so the page
// has no prefix counters; they appear with the first request's tokens
// already in them. Taking that first value as a baseline showed 0.82
// after 30 requests against a true 0.685: it must show 0.685.
func TestLateCountersCountFromZero(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), idle("")))
	// Request 1: 988 tokens looked up, none cached (cold).
	q, h := 988.0, 0.0
	s.Apply(scrape("w0", at(1), counters("", 0, q, h)))
	// Requests 2..30: 5 012 more tokens, 4 110 of them hits.
	for k := 2; k <= 30; k++ {
		q += 5012.0 / 29
		h += 4110.0 / 29
		s.Apply(scrape("w0", at(float64(k)), counters("", 0, q, h)))
	}
	w := row(t, s.Snapshot(at(30)), "w0")
	if !eqp(w.PrefixHitRate.Tokens, f(0.685)) {
		t.Fatalf("hit %v after 30 requests, want the true 0.685 (the first request's tokens count)", show(w.PrefixHitRate.Tokens))
	}
}

// A 40-request burst between two scrapes, then nothing: the counters'
// first value is all there is. As a baseline it read null ("no queries").
func TestBurstIntoLateCountersIsNotNull(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), idle("")))
	s.Apply(scrape("w0", at(1), counters("", 0, 8000, 5000)))
	for k := 2; k <= 10; k++ {
		s.Apply(scrape("w0", at(float64(k)), counters("", 0, 8000, 5000)))
	}
	snap := s.Snapshot(at(10))
	w := row(t, snap, "w0")
	if !eqp(w.PrefixHitRate.Tokens, f(0.625)) || !eqp(snap.Pool.PrefixHitRate.Tokens, f(0.625)) {
		t.Fatalf("hit %v (pool %v) after a 40-request burst, want 0.625", show(w.PrefixHitRate.Tokens), show(snap.Pool.PrefixHitRate.Tokens))
	}
	if strings.Contains(w.Reason, "no prefix-cache queries") {
		t.Fatalf("reason %q", w.Reason)
	}
}

// A counter already there at kvtop's first scrape is a baseline: its
// value counted before kvtop looked, maybe hours ago.
func TestCounterAtFirstScrapeIsABaseline(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), counters("", 0, 1000, 900)))
	s.Apply(scrape("w0", at(10), counters("", 0, 1100, 950)))
	if w := row(t, s.Snapshot(at(10)), "w0"); !eqp(w.PrefixHitRate.Tokens, f(0.5)) {
		t.Fatalf("hit %v, want 50/100 over the window, not the lifetime 950/1100", show(w.PrefixHitRate.Tokens))
	}
}

// noStart is a page like an engine without process_start_time_seconds.
func noStart(t float64, q, h, prompt float64) *collectors.MetricsScrape {
	e := counters("", 0, q, h)
	e.PromptTokens = f(prompt)
	return scrape("w0", at(t), e)
}

func restartIncidents(st *snapshot.Stream) []snapshot.Incident {
	var out []snapshot.Incident
	for _, in := range st.History {
		if in.Kind == "restart" {
			out = append(out, in)
		}
	}
	return out
}

// An engine without process_start_time restarts: its scrapes are refused
// for a while, then the page comes back with a lower counter. It is a
// restart: counted, its old blocks dropped (the new process has an empty
// cache and, idle, sends no event), and its stream's history says so.
func TestRestartSeenFromCountersAfterRefusedScrapes(t *testing.T) {
	s := newTestState("w0")
	s.Apply(noStart(0, 1000, 800, 5000))
	s.Apply(batch("w0", 0, 7, at(1), stored(0, false, 1, 2, 3)))
	st := status("w0", 0, snapshot.StreamLive, at(2), collectors.StreamIncident{Kind: "gap", FromSeq: 3, ToSeq: 4, Missing: 2, Replayed: 2, Start: at(1), End: at(1.5)})
	s.Apply(st)
	s.Apply(noStart(5, 1100, 880, 5400))
	s.Apply(failedScrape("w0", at(10), "connection refused"))
	s.Apply(failedScrape("w0", at(15), "connection refused"))
	// Back: only the prompt counter shows it went back; the prefix
	// counters happen to be above their old values already.
	s.Apply(noStart(20, 1200, 900, 300))
	snap := s.Snapshot(at(20))
	w := row(t, snap, "w0")
	if w.Restarts != 1 || blocksOf(w.Blocks) != 0 || blocksOf(snap.Pool.Blocks) != 0 {
		t.Fatalf("restarts %d, blocks %d (pool %d); want 1 restart and its 3 blocks dropped", w.Restarts, blocksOf(w.Blocks), blocksOf(snap.Pool.Blocks))
	}
	if !strings.Contains(w.Reason, "restarted 14:00:20: 3 indexed blocks dropped") {
		t.Fatalf("reason %q", w.Reason)
	}
	ins := restartIncidents(&w.Streams[0])
	want := "engine restarted while its metrics were down (counters reset): 3 indexed blocks dropped"
	if len(ins) != 1 || ins[0].Note != want || ins[0].Origin != "metrics" || !ins[0].Start.Equal(at(20)) {
		t.Fatalf("stream history %+v, want one restart incident %q", w.Streams[0].History, want)
	}
	if h := w.Streams[0].History; len(h) != 2 || h[0].Kind != "gap" || h[0].Origin != "" {
		t.Fatalf("history %+v: the collector's gap first, then the restart", h)
	}
	a := alertOf(snap, "worker_restart")
	if a == nil || a.Text != "w0 restarted 14:00:20: 3 indexed blocks dropped (a restarted engine's cache is empty) — counters reset while its metrics were down" {
		t.Fatalf("alert %+v", a)
	}
	// Every counter starts again from 0: 1200 queries and 900 hits since
	// the restart, plus the 100/80 of the first 5 s.
	if !eqp(w.PrefixHitRate.Tokens, f(980.0/1300)) {
		t.Fatalf("hit %v, want %v (fresh counters after the restart)", show(w.PrefixHitRate.Tokens), 980.0/1300)
	}
}

// A new process that has served nothing yet has no prefix counters: they
// vanished over the down period. That is a restart too, and when they
// appear they count from zero.
func TestRestartSeenFromVanishedCounters(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), counters("", 0, 1000, 800)))
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2)))
	s.Apply(failedScrape("w0", at(5), "connection refused"))
	s.Apply(scrape("w0", at(10), idle("")))
	s.Apply(scrape("w0", at(11), counters("", 0, 400, 100)))
	w := row(t, s.Snapshot(at(11)), "w0")
	if w.Restarts != 1 || blocksOf(w.Blocks) != 0 || len(restartIncidents(&w.Streams[0])) != 1 {
		t.Fatalf("restarts %d blocks %d history %+v", w.Restarts, blocksOf(w.Blocks), w.Streams[0].History)
	}
	if !eqp(w.PrefixHitRate.Tokens, f(0.25)) {
		t.Fatalf("hit %v, want 100/400 since the counters appeared", show(w.PrefixHitRate.Tokens))
	}
}

// While the worker was up, one counter going back is a reset, not a
// restart (today's rule: two at once are). With a down period but an
// unchanged process_start_time, the process says it did not restart.
func TestSingleCounterResetIsNotARestart(t *testing.T) {
	cases := []struct {
		name   string
		down   bool
		start  *float64
		q      float64
		prompt float64
	}{
		{"one counter back while up", false, nil, 5, 5400},
		{"down, counters higher", true, nil, 1200, 5400},
		{"down, counter back, same process start", true, f(1000), 5, 5400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			first := noStart(0, 1000, 800, 5000)
			first.ProcessStart = c.start
			s.Apply(first)
			s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3)))
			if c.down {
				s.Apply(failedScrape("w0", at(5), "connection refused"))
			}
			next := noStart(10, c.q, 800, c.prompt)
			next.ProcessStart = c.start
			s.Apply(next)
			w := row(t, s.Snapshot(at(10)), "w0")
			if w.Restarts != 0 || blocksOf(w.Blocks) != 3 || len(restartIncidents(&w.Streams[0])) != 0 {
				t.Fatalf("restarts %d blocks %d history %+v; want no restart, blocks kept", w.Restarts, blocksOf(w.Blocks), w.Streams[0].History)
			}
		})
	}
}

// The pool's restart incidents are bounded like the collector's and
// merged with them in time order.
func TestRestartIncidentsMergedAndBounded(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Window: time.Minute, Limits: Limits{Incidents: 3}})
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 1)))
	for k := 0; k < 5; k++ {
		base := float64(100 * k)
		s.Apply(noStart(base, 1000, 800, 5000))
		s.Apply(batch("w0", 0, 0, at(base+1), stored(0, false, 1)))
		s.Apply(failedScrape("w0", at(base+50), "connection refused"))
		s.Apply(noStart(base+60, 10, 8, 50)) // restarted
	}
	s.Apply(status("w0", 0, snapshot.StreamLive, at(470),
		collectors.StreamIncident{Kind: "gap", Start: at(305), End: at(306)},
		collectors.StreamIncident{Kind: "gap", Start: at(465), End: at(466)}))
	w := row(t, s.Snapshot(at(470)), "w0")
	h := w.Streams[0].History
	if w.Restarts != 5 || len(h) != 3 {
		t.Fatalf("restarts %d, history %d incidents; want 5 and the last 3", w.Restarts, len(h))
	}
	// The last three by time: restart at 360, restart at 460, gap at 465.
	if h[0].Kind != "restart" || !h[0].Start.Equal(at(360)) || h[1].Kind != "restart" || !h[1].Start.Equal(at(460)) ||
		h[2].Kind != "gap" || !h[2].Start.Equal(at(465)) {
		t.Fatalf("history %+v", h)
	}
}

// A value the collector rejected shows as invalid with its note, never as
// "metric missing"; JSON lists it.
func TestInvalidValuesShownAsInvalid(t *testing.T) {
	s := newTestState("w0")
	note := `vllm:num_requests_waiting{engine="0"} = -3: a queue cannot be negative`
	m := scrape("w0", at(0), em{Engine: "0", Running: f(2), KVUsage: f(0.4), PrefixQueries: f(100), PrefixHits: f(50)})
	m.Invalid = []collectors.InvalidValue{{Engine: "0", Field: "queue", Note: note}}
	s.Apply(m)
	snap := s.Snapshot(at(0))
	w := row(t, snap, "w0")
	if w.Queue != nil || !strings.HasPrefix(w.Reason, "invalid: "+note) || strings.Contains(w.Reason, "metric missing") {
		t.Fatalf("queue %v reason %q; want null and the note, not 'metric missing'", show(w.Queue), w.Reason)
	}
	raw, _ := json.Marshal(w)
	var doc struct {
		Invalid []map[string]string `json:"invalid"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Invalid) != 1 || doc.Invalid[0]["engine"] != "0" ||
		doc.Invalid[0]["field"] != "queue" || doc.Invalid[0]["note"] != note {
		t.Fatalf("json invalid = %v (%v)", doc.Invalid, err)
	}
	// Fixed on the next page: nothing invalid, [] in JSON.
	s.Apply(scrape("w0", at(1), em{Engine: "0", Waiting: f(1), Running: f(2), KVUsage: f(0.4), PrefixQueries: f(100), PrefixHits: f(50)}))
	w = row(t, s.Snapshot(at(1)), "w0")
	if raw, _ := json.Marshal(w); strings.Contains(w.Reason, "invalid") || w.Queue == nil || !strings.Contains(string(raw), `"invalid":[]`) {
		t.Fatalf("reason %q json %s", w.Reason, raw)
	}
}

// A counter rejected on one page (a duplicate series) did not vanish: it
// is not "absent", so when it is readable again it is not counted from
// zero (that would read 600/200 = 3.0, or null).
func TestInvalidCounterIsNotAbsent(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), counters("0", 0, 1000, 500)))
	m := scrape("w0", at(1), em{Engine: "0", Waiting: f(0), Running: f(1), KVUsage: f(0.5), PrefixQueries: f(1100)})
	m.Invalid = []collectors.InvalidValue{{Engine: "0", Field: "prefix_hits",
		Note: `vllm:prefix_cache_hits_total{engine="0"} appears twice (lines 40 and 41): never summed`}}
	s.Apply(m)
	if w := row(t, s.Snapshot(at(1)), "w0"); strings.Contains(w.Reason, "metric missing") || !strings.HasPrefix(w.Reason, "invalid: ") {
		t.Fatalf("reason %q", w.Reason)
	}
	s.Apply(scrape("w0", at(2), counters("0", 0, 1200, 600)))
	if w := row(t, s.Snapshot(at(2)), "w0"); !eqp(w.PrefixHitRate.Tokens, f(0.5)) || w.Restarts != 0 {
		t.Fatalf("hit %v restarts %d; want 100/200 and no restart", show(w.PrefixHitRate.Tokens), w.Restarts)
	}
}

// The pool rejects what cannot be true itself, whatever the source.
func TestPoolRejectsImpossibleGauges(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), em{Engine: "0", Waiting: f(-3), Running: f(-1), KVUsage: f(1.5), PrefixQueries: f(-7), PrefixHits: f(0)}))
	snap := s.Snapshot(at(0))
	w := row(t, snap, "w0")
	if w.Queue != nil || w.Running != nil || w.KVUsage != nil || snap.Pool.Queue != nil || snap.Pool.KVUsage != nil {
		t.Fatalf("queue %v running %v kv %v pool queue %v", show(w.Queue), show(w.Running), show(w.KVUsage), show(snap.Pool.Queue))
	}
	var fields []string
	for _, v := range w.Invalid {
		fields = append(fields, v.Field)
	}
	if strings.Join(fields, ",") != "queue,running,kv_usage,prefix_queries" ||
		w.Invalid[0].Note != "queue = -3 (engine 0): a queue cannot be negative" ||
		!strings.HasPrefix(w.Reason, "invalid: queue = -3 (engine 0): a queue cannot be negative (+3 more)") {
		t.Fatalf("invalid %+v reason %q", w.Invalid, w.Reason)
	}
}

// Hits above queries over the window cannot be a hit rate: null with the
// reason at engine, worker and pool level, never 3.0. Counters that
// oscillate look like resets and do exactly that.
func TestHitsAboveQueriesAreNull(t *testing.T) {
	s := newTestState("w0", "w1")
	hits := []float64{1000, 900, 1000, 900, 1000}
	for k := 0; k < 5; k++ {
		x := float64(k)
		s.Apply(scrape("w0", at(x), counters("0", 0, 100*x, 50*x), counters("1", 0, 100*x, hits[k])))
		s.Apply(scrape("w1", at(x), counters("", 0, 100*x, 50*x)))
	}
	snap := s.Snapshot(at(4))
	w := row(t, snap, "w0")
	// Δhits = 900 + 100 + 900 + 100 (each drop read as a reset).
	why := "hits exceed queries over the window (2000 > 400): counters inconsistent"
	if e := w.Engines[1]; e.HitTokens != nil || e.HitReason != why {
		t.Fatalf("engine 1 hit %v reason %q, want null and %q", show(e.HitTokens), e.HitReason, why)
	}
	if !eqp(w.Engines[0].HitTokens, f(0.5)) {
		t.Fatalf("engine 0 hit %v: its own counters are fine", show(w.Engines[0].HitTokens))
	}
	if w.PrefixHitRate.Tokens != nil || w.PrefixHitRate.Reason != "engine 1: "+why || !strings.Contains(w.Reason, "hit rate unknown: engine 1: "+why) {
		t.Fatalf("worker hit %v reason %q / %q", show(w.PrefixHitRate.Tokens), w.PrefixHitRate.Reason, w.Reason)
	}
	if p := snap.Pool.PrefixHitRate; p.Tokens != nil || p.Reason != "w0 engine 1: "+why {
		t.Fatalf("pool hit %v reason %q", show(p.Tokens), p.Reason)
	}
	if !eqp(row(t, snap, "w1").PrefixHitRate.Tokens, f(0.5)) || len(w.Series.HitTokens) != 0 {
		t.Fatalf("w1 %v, w0 series %v", show(row(t, snap, "w1").PrefixHitRate.Tokens), w.Series.HitTokens)
	}
}

// The block index stops growing at Limits.IndexBlocks: stores new to a
// publisher are dropped and counted, copies and removals still work, and
// the workers that lost stores stay incomplete ("index full", stale) until
// their block set is known again.
func TestIndexFullStopsGrowing(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}, {Name: "w1"}}, Window: time.Minute, Limits: Limits{IndexBlocks: 8}})
	s.Apply(scrape("w0", at(0), counters("", 0, 0, 0)))
	s.Apply(scrape("w1", at(0), counters("", 0, 0, 0)))
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3, 4, 5)))
	s.Apply(batch("w1", 0, 0, at(2), stored(0, false, 10, 11, 12, 13, 14)))
	// Copies of resident blocks still count, on any medium.
	cpu := stored(0, false, 1)
	cpu.Medium = "CPU"
	s.Apply(batch("w0", 0, 1, at(3), cpu, stored(0, false, 10)))
	copy10 := stored(0, false, 10)
	copy10.Origin = collectors.OriginNew // a second physical copy, not a re-announce
	s.Apply(batch("w1", 0, 1, at(3), copy10))
	snap := s.Snapshot(at(3))
	w0, w1 := row(t, snap, "w0"), row(t, snap, "w1")
	if blocksOf(w0.Blocks) != 5 || blocksOf(w1.Blocks) != 3 || w1.Streams[0].DroppedBlocks != 2 || w0.Streams[0].DroppedBlocks != 1 {
		t.Fatalf("blocks w0 %d w1 %d, dropped w0 %d w1 %d; want 5, 3 (cap 8), 1, 2", blocksOf(w0.Blocks), blocksOf(w1.Blocks),
			w0.Streams[0].DroppedBlocks, w1.Streams[0].DroppedBlocks)
	}
	reason := "index full: 8 blocks (limits.index_blocks)"
	for _, w := range []*snapshot.Worker{w0, w1} {
		if !w.IndexFull || w.IndexComplete || w.State != "stale" || !strings.Contains(w.Reason, reason) {
			t.Fatalf("%s: full %v complete %v state %q reason %q", w.Name, w.IndexFull, w.IndexComplete, w.State, w.Reason)
		}
	}
	a := alertOf(snap, "index_full")
	if !snap.Pool.IndexFull || a == nil || a.Text != "index full: w0, w1 not fully indexed since 14:00:02 (limits.index_blocks 8)" {
		t.Fatalf("pool index_full %v alert %+v", snap.Pool.IndexFull, a)
	}
	// w1 holds 10 twice: one removal leaves it resident.
	s.Apply(batch("w1", 0, 2, at(4), removed(10)))
	// w0 frees room (1 stays on CPU, a tier of its own, not in w0's
	// blocks); w1 can store again, but what it
	// lost is still unknown: it stays index_full until a clear.
	s.Apply(batch("w0", 0, 2, at(4), removed(1, 2, 3, 4, 5)))
	s.Apply(batch("w1", 0, 3, at(5), stored(0, false, 15)))
	snap = s.Snapshot(at(5))
	w0 = row(t, snap, "w0")
	if w1 := row(t, snap, "w1"); blocksOf(w1.Blocks) != 4 || !w1.IndexFull || blocksOf(w0.Blocks) != 0 || tierBlocks(w0, "CPU") != 1 {
		t.Fatalf("w1 blocks %d full %v, w0 blocks %d (CPU %d)", blocksOf(w1.Blocks), w1.IndexFull, blocksOf(w0.Blocks), tierBlocks(w0, "CPU"))
	}
	s.Apply(batch("w1", 0, 4, at(6), collectors.KVEvent{Kind: collectors.AllBlocksCleared}))
	s.Apply(&collectors.StreamReset{Worker: "w0", Rank: 0, Reason: "restart", At: at(6)})
	snap = s.Snapshot(at(6))
	for _, name := range []string{"w0", "w1"} {
		if w := row(t, snap, name); w.IndexFull || !w.IndexComplete || w.State != "ok" || strings.Contains(w.Reason, "index full") {
			t.Fatalf("%s after its clear: full %v state %q reason %q", name, w.IndexFull, w.State, w.Reason)
		}
	}
	if snap.Pool.IndexFull || alertOf(snap, "index_full") != nil || s.index.entries != 0 {
		t.Fatalf("pool index_full %v, entries %d", snap.Pool.IndexFull, s.index.entries)
	}
	raw, _ := json.Marshal(snap)
	for _, k := range []string{`"index_full":false`, `"dropped_blocks":2`} {
		if !strings.Contains(string(raw), k) {
			t.Fatalf("json has no %s", k)
		}
	}
}

// A process restart seen in metrics also ends "index full": the new
// process's cache is empty, so its block set is known again.
func TestRestartEndsIndexFull(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Window: time.Minute, Limits: Limits{IndexBlocks: 2}})
	pg := func(t, start float64) *collectors.MetricsScrape {
		m := scrape("w0", at(t), counters("", 0, 0, 0))
		m.ProcessStart = f(start)
		return m
	}
	s.Apply(pg(0, 1000))
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3)))
	if w := row(t, s.Snapshot(at(1)), "w0"); !w.IndexFull || w.State != "stale" {
		t.Fatalf("full %v state %q", w.IndexFull, w.State)
	}
	s.Apply(pg(10, 1009))
	w := row(t, s.Snapshot(at(10)), "w0")
	if w.IndexFull || w.State != "ok" || blocksOf(w.Blocks) != 0 || w.Streams[0].DroppedBlocks != 1 {
		t.Fatalf("after the restart: full %v state %q blocks %d dropped %d", w.IndexFull, w.State, blocksOf(w.Blocks), w.Streams[0].DroppedBlocks)
	}
}

// A pool fed everything that cannot be true at once: KV use above 1,
// absurd cache geometry, hits above queries, oscillating counters,
// negative gauges, a router whose counters go back, decisions and
// outcomes. Every fraction in the snapshot stays within 0..1 or is null,
// and what is null says why.
func TestFractionsStayWithinZeroAndOne(t *testing.T) {
	s := NewState(Options{Window: time.Minute,
		Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"http://w0"}}, {Name: "w1", Aliases: []string{"http://w1"}}, {Name: "w2"}},
		Routers: []RouterSpec{{Name: "r0"}}})
	osc := []float64{1000, 10, 1000, 10, 1000, 10}
	for k := 0; k < 6; k++ {
		x := float64(k)
		s.Apply(scrape("w0", at(x),
			em{Engine: "0", Waiting: f(-2 * x), Running: f(3), KVUsage: f(1 + x), NumGPUBlocks: f(1e300), PrefixQueries: f(10 * x), PrefixHits: f(osc[k])},
			em{Engine: "1", Waiting: f(4), Running: f(1), KVUsage: f(0.99999999999), NumGPUBlocks: f(1e300), PrefixQueries: f(osc[k]), PrefixHits: f(5 * x)}))
		s.Apply(scrape("w1", at(x), em{Waiting: f(1e300), Running: f(1), KVUsage: f(-0.2), PrefixQueries: f(100 * x), PrefixHits: f(300 * x)}))
		s.Apply(scrape("w2", at(x), counters("", 2, 100*x, 60*x)))
		s.Apply(routerScrape(at(x), 1000, osc[k], map[string]float64{"http://w0": osc[k], "http://w1": 7 * x}))
	}
	for i := 0; i < 20; i++ {
		s.Apply(batch([]string{"w0", "w1", "w2"}[i%3], 0, uint64(i), at(5), stored(uint64(i%2), i%2 == 1, uint64(100+i%4))))
		id := fmt.Sprint("r-", i)
		s.Apply(&collectors.Decision{RequestID: id, AttemptID: "1", Chosen: "w0", Prefix: "64", At: at(5), TS: at(5)})
		s.Apply(outcome(id, "1", "w0", 200, ip(16), bp(true)))
	}
	snap := s.Snapshot(at(5))
	checkFractions(t, snap)
	w0, w1 := row(t, snap, "w0"), row(t, snap, "w1")
	if w1.PrefixHitRate.Tokens != nil || !strings.Contains(w1.PrefixHitRate.Reason, "hits exceed queries") ||
		snap.Pool.PrefixHitRate.Tokens != nil || snap.Pool.PrefixHitRate.Reason == "" {
		t.Fatalf("w1 hit %v %q, pool %v %q: hits above queries must be null with a reason", show(w1.PrefixHitRate.Tokens),
			w1.PrefixHitRate.Reason, show(snap.Pool.PrefixHitRate.Tokens), snap.Pool.PrefixHitRate.Reason)
	}
	if w0.Engines[0].KVUsage != nil || w1.KVUsage != nil || w0.Engines[0].Queue != nil || !eqp(w0.Engines[1].KVUsage, f(0.99999999999)) {
		t.Fatalf("w0 engines %+v, w1 kv %v", w0.Engines, show(w1.KVUsage))
	}
	if !eqp(row(t, snap, "w2").PrefixHitRate.Tokens, f(0.6)) {
		t.Fatalf("w2 hit %v: a sound worker keeps its figure", show(row(t, snap, "w2").PrefixHitRate.Tokens))
	}
}

// The recent-tails table follows a publisher's store rate, not how long
// it runs: 100 stores/s keep ~300 live tails, so it stays near 16 slots
// per live one (it used to grow on every live collision, to 1 MB per
// publisher: 256 MB for a pool of 256 workers).
func TestRecentTailsFollowTheRate(t *testing.T) {
	var r recentTails
	for i := 0; i < 100_000; i++ {
		r.put(mix(uint64(i)), int64(i)*int64(10*time.Millisecond)+1)
	}
	if n := len(r.slots); n > 16*512 {
		t.Fatalf("%d slots for ~300 live tails", n)
	}
	// Recent tails are still found.
	ns := int64(99_999)*int64(10*time.Millisecond) + 1
	found := 0
	for i := 99_900; i < 100_000; i++ {
		if r.take(mix(uint64(i)), ns) {
			found++
		}
	}
	if found < 90 {
		t.Fatalf("%d of the last 100 tails found", found)
	}
}

// TestTooManyMediaIsIndexFullNotAPanic: a publisher naming more storage
// media than a column set holds (found reading upstream: `medium` is free
// text on the wire) has those stores dropped and counted, and its worker
// says why; the pool goroutine goes on.
func TestTooManyMediaIsIndexFullNotAPanic(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Window: time.Minute})
	s.Apply(scrape("w0", at(0), counters("", 0, 0, 0)))
	var evs []collectors.KVEvent
	for i := range maxColumns + 10 {
		ev := stored(0, false, uint64(1000+i))
		ev.Medium = fmt.Sprintf("M%d", i)
		evs = append(evs, ev)
	}
	s.Apply(batch("w0", 0, 0, at(1), evs...))
	w0 := row(t, s.Snapshot(at(1)), "w0")
	// GPU is column 0, so maxColumns-1 other media get a column: each a
	// tier of one block, none of them GPU blocks.
	if got := len(w0.Tiers); got != maxColumns-1 || blocksOf(w0.Blocks) != 0 || w0.Streams[0].DroppedBlocks != 11 {
		t.Fatalf("tiers %d blocks %d dropped %d, want %d, 0 and 11", got, blocksOf(w0.Blocks), w0.Streams[0].DroppedBlocks, maxColumns-1)
	}
	if tierBlocks(w0, "M0") != 1 {
		t.Fatalf("tier M0 holds %d blocks, want 1", tierBlocks(w0, "M0"))
	}
	if !w0.IndexFull || w0.State != "stale" || !strings.Contains(w0.Reason, "more than 255 storage media") {
		t.Fatalf("full %v state %q reason %q", w0.IndexFull, w0.State, w0.Reason)
	}
}
