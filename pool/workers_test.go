package pool

import (
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func TestTokenHitRateIsWindowedNotLifetime(t *testing.T) {
	s := newTestState("w0")
	// 60 s of perfect hits, then 60 s of misses: the lifetime ratio is
	// 50%, the last minute is 0%.
	for sec := 0; sec <= 120; sec++ {
		q := 100.0 * float64(sec)
		h := 100.0 * float64(min(sec, 60))
		s.Apply(scrape("w0", at(float64(sec)), counters("", 0, q, h)))
	}
	snap := s.Snapshot(at(120))
	w := row(t, snap, "w0")
	if w.PrefixHitRate.Tokens == nil || *w.PrefixHitRate.Tokens != 0 {
		t.Fatalf("windowed hit rate = %v, want a measured 0 (lifetime would say 0.5)", show(w.PrefixHitRate.Tokens))
	}
	if w.PrefixHitRate.CoveredS != 60 {
		t.Fatalf("covered_s = %v, want 60", w.PrefixHitRate.CoveredS)
	}
	if p := snap.Pool.PrefixHitRate.Tokens; p == nil || *p != 0 {
		t.Fatalf("pool hit rate = %v, want 0", show(p))
	}
}

func TestTokenHitRatePartialCoverageAndReset(t *testing.T) {
	s := newTestState("w0")
	// Starts at t=30 (partial window); the process restarts at t=45 and
	// its counters start again from small values.
	pts := []struct{ t, q, h float64 }{{30, 1000, 500}, {40, 1100, 590}, {45, 20, 20}, {50, 60, 50}}
	for _, p := range pts {
		s.Apply(scrape("w0", at(p.t), counters("", 0, p.q, p.h)))
	}
	w := row(t, s.Snapshot(at(50)), "w0")
	// Δq = 100 + 20 + 40 = 160, Δh = 90 + 20 + 30 = 140.
	if !eqp(w.PrefixHitRate.Tokens, f(140.0/160)) || w.PrefixHitRate.CoveredS != 20 {
		t.Fatalf("hit = %v covered %v; want 0.875 over 20 s", show(w.PrefixHitRate.Tokens), w.PrefixHitRate.CoveredS)
	}
	if w.Restarts != 1 {
		t.Fatalf("restarts = %d, want 1 (two counters went back at once)", w.Restarts)
	}
}

func TestHitRateNilWithoutQueries(t *testing.T) {
	s := newTestState("w0")
	for sec := 0; sec <= 60; sec += 10 {
		s.Apply(scrape("w0", at(float64(sec)), counters("", 0, 500, 400)))
	}
	snap := s.Snapshot(at(60))
	w := row(t, snap, "w0")
	if w.PrefixHitRate.Tokens != nil || snap.Pool.PrefixHitRate.Tokens != nil {
		t.Fatalf("hit rate with zero queries = %v / pool %v, want nil", show(w.PrefixHitRate.Tokens), show(snap.Pool.PrefixHitRate.Tokens))
	}
	if !strings.Contains(w.Reason, "no prefix-cache queries in the window") {
		t.Fatalf("reason %q does not say why the hit rate is unknown", w.Reason)
	}
}

func TestDataParallelEnginesSummedAndWeighted(t *testing.T) {
	cases := []struct {
		name   string
		blocks [2]*float64
		wantKV float64
	}{
		{"weighted by num_gpu_blocks", [2]*float64{f(1000), f(3000)}, (0.9*1000 + 0.1*3000) / 4000},
		{"plain mean when geometry unknown", [2]*float64{f(1000), nil}, 0.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			for i, sec := range []float64{0, 60} {
				k := float64(i)
				e0 := em{Engine: "0", Waiting: f(2), Running: f(3), KVUsage: f(0.9), NumGPUBlocks: c.blocks[0], PrefixQueries: f(100 * k), PrefixHits: f(90 * k)}
				e1 := em{Engine: "1", Waiting: f(10), Running: f(1), KVUsage: f(0.1), NumGPUBlocks: c.blocks[1], PrefixQueries: f(300 * k), PrefixHits: f(30 * k)}
				s.Apply(scrape("w0", at(sec), e0, e1))
			}
			snap := s.Snapshot(at(60))
			w := row(t, snap, "w0")
			if !eqp(w.Queue, f(12)) || !eqp(w.Running, f(4)) || !eqp(w.KVUsage, f(c.wantKV)) {
				t.Fatalf("queue %v running %v kv %v; want 12 4 %v", show(w.Queue), show(w.Running), show(w.KVUsage), c.wantKV)
			}
			// Hit rate from summed deltas: (90+30)/(100+300), not the mean of 0.9 and 0.1.
			if !eqp(w.PrefixHitRate.Tokens, f(0.3)) {
				t.Fatalf("hit = %v, want 0.3", show(w.PrefixHitRate.Tokens))
			}
			if len(w.Engines) != 2 || !eqp(w.Engines[0].HitTokens, f(0.9)) || !eqp(w.Engines[1].HitTokens, f(0.1)) ||
				!eqp(w.Engines[1].Queue, f(10)) {
				t.Fatalf("engines = %+v", w.Engines)
			}
			if !eqp(snap.Pool.KVUsage, f(c.wantKV)) || !eqp(snap.Pool.Queue, f(12)) {
				t.Fatalf("pool kv %v queue %v", show(snap.Pool.KVUsage), show(snap.Pool.Queue))
			}
		})
	}
}

func TestZeroIsNotAbsent(t *testing.T) {
	cases := []struct {
		name       string
		page       em
		wantQueue  *float64
		wantKV     *float64
		wantHit    bool
		wantReason string
	}{
		{"all zero is measured", em{Waiting: f(0), Running: f(0), KVUsage: f(0), PrefixQueries: f(0), PrefixHits: f(0)}, f(0), f(0), false, ""},
		{"queue absent", em{Running: f(1), KVUsage: f(0.2), PrefixQueries: f(0), PrefixHits: f(0)}, nil, f(0.2), false, "metric missing: queue"},
		{"kv absent", em{Waiting: f(3), Running: f(1), PrefixQueries: f(0), PrefixHits: f(0)}, f(3), nil, false, "metric missing: kv_usage"},
		{"counters absent", em{Waiting: f(0), Running: f(0), KVUsage: f(0)}, f(0), f(0), false, "metric missing: prefix_cache counters"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			s.Apply(scrape("w0", at(0), c.page))
			s.Apply(scrape("w0", at(10), c.page))
			w := row(t, s.Snapshot(at(10)), "w0")
			if !eqp(w.Queue, c.wantQueue) || !eqp(w.KVUsage, c.wantKV) {
				t.Fatalf("queue %v kv %v; want %v %v", show(w.Queue), show(w.KVUsage), show(c.wantQueue), show(c.wantKV))
			}
			if c.wantReason != "" && !strings.Contains(w.Reason, c.wantReason) {
				t.Fatalf("reason %q, want it to contain %q", w.Reason, c.wantReason)
			}
			if c.wantReason == "" && strings.Contains(w.Reason, "missing") {
				t.Fatalf("reason %q for a page with every metric", w.Reason)
			}
			if w.State != "ok" || !w.Up {
				t.Fatalf("state %q up %v, want ok", w.State, w.Up)
			}
		})
	}
}

func TestDownAndNotScraped(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	s.Apply(scrape("w0", at(0), counters("", 4, 100, 50)))
	s.Apply(scrape("w1", at(0), counters("", 4, 100, 50)))
	s.Apply(failedScrape("w1", at(5), "dial tcp 10.0.0.6:8000: connection refused"))
	snap := s.Snapshot(at(5))

	w1 := row(t, snap, "w1")
	if w1.Up || w1.Error == nil || *w1.Error != "dial tcp 10.0.0.6:8000: connection refused" ||
		w1.Queue != nil || w1.Running != nil || w1.KVUsage != nil || w1.PrefixHitRate.Tokens != nil ||
		w1.State != "down" || w1.Reason != "down: dial tcp 10.0.0.6:8000: connection refused" {
		t.Fatalf("down worker = %+v", w1)
	}
	w2 := row(t, snap, "w2")
	if w2.Up || w2.Error != nil || w2.State != "unknown" || w2.Reason != "not scraped yet" || w2.Queue != nil || w2.LastScrape != nil {
		t.Fatalf("unscraped worker = %+v", w2)
	}
	if snap.Pool.Up != 1 || snap.Pool.Workers != 3 || !eqp(snap.Pool.Queue, f(4)) {
		t.Fatalf("pool up %d/%d queue %v; want 1/3 and only the up worker's queue", snap.Pool.Up, snap.Pool.Workers, show(snap.Pool.Queue))
	}
	if len(snap.Errors) != 1 || snap.Errors[0].Kind != "refused" || snap.Errors[0].Source != "w1 metrics" {
		t.Fatalf("errors = %+v", snap.Errors)
	}
	if len(snap.Alerts) != 1 || snap.Alerts[0].Kind != "down" || snap.Alerts[0].Text != "w1 down: dial tcp 10.0.0.6:8000: connection refused" {
		t.Fatalf("alerts = %+v", snap.Alerts)
	}
	// Back up: numbers return, the error goes.
	s.Apply(scrape("w1", at(6), counters("", 1, 110, 60)))
	w1 = row(t, s.Snapshot(at(6)), "w1")
	if !w1.Up || w1.Error != nil || !eqp(w1.Queue, f(1)) || w1.State != "ok" {
		t.Fatalf("recovered worker = %+v", w1)
	}
}

func TestWorkerRestarts(t *testing.T) {
	cases := []struct {
		name   string
		second *collectors.MetricsScrape
		want   int
	}{
		{"process start changed", &collectors.MetricsScrape{ProcessStart: f(2000),
			Engines: []em{{PrefixQueries: f(200), PrefixHits: f(100), PromptTokens: f(900)}}}, 1},
		{"several counters went back", &collectors.MetricsScrape{ProcessStart: f(1000),
			Engines: []em{{PrefixQueries: f(5), PrefixHits: f(100), PromptTokens: f(3)}}}, 1},
		{"one counter went back is only a reset", &collectors.MetricsScrape{ProcessStart: f(1000),
			Engines: []em{{PrefixQueries: f(5), PrefixHits: f(100), PromptTokens: f(900)}}}, 0},
		{"nothing changed", &collectors.MetricsScrape{ProcessStart: f(1000),
			Engines: []em{{PrefixQueries: f(200), PrefixHits: f(100), PromptTokens: f(900)}}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			s.Apply(&collectors.MetricsScrape{Target: "w0", At: at(0), ProcessStart: f(1000),
				Engines: []em{{PrefixQueries: f(100), PrefixHits: f(50), PromptTokens: f(800)}}})
			c.second.Target, c.second.At = "w0", at(10)
			s.Apply(c.second)
			if got := row(t, s.Snapshot(at(10)), "w0").Restarts; got != c.want {
				t.Fatalf("restarts = %d, want %d", got, c.want)
			}
		})
	}
}

func TestRequestWeightedHitRate(t *testing.T) {
	s := newTestState("w0", "w1")
	cached := func(n int) *int { return &n }
	outs := []struct {
		w      string
		cached *int
		t      float64
	}{
		{"w0", cached(32), 50}, {"w0", cached(0), 55}, {"w0", cached(16), 58}, {"w0", cached(64), 59},
		{"w1", cached(0), 59}, {"w1", nil, 59}, // unknown cached_tokens: not counted either way
		{"w1", cached(16), -35}, // outside the window ending at 100
	}
	for i, o := range outs {
		s.Apply(&collectors.Outcome{RequestID: string(rune('a' + i)), Worker: o.w, HTTPStatus: 200, CachedTokens: o.cached, At: at(o.t + 40)})
	}
	snap := s.Snapshot(at(100))
	if w0 := row(t, snap, "w0"); !eqp(w0.PrefixHitRate.Requests, f(0.75)) {
		t.Fatalf("w0 request hit = %v, want 0.75", show(w0.PrefixHitRate.Requests))
	}
	if w1 := row(t, snap, "w1"); !eqp(w1.PrefixHitRate.Requests, f(0)) {
		t.Fatalf("w1 request hit = %v, want a measured 0", show(w1.PrefixHitRate.Requests))
	}
	if !eqp(snap.Pool.PrefixHitRate.Requests, f(0.6)) {
		t.Fatalf("pool request hit = %v, want 3/5", show(snap.Pool.PrefixHitRate.Requests))
	}
}

func TestWorkerStatePrecedence(t *testing.T) {
	lost := func(s *State) {
		s.Apply(status("w0", 0, snapshot.StreamHistoryLost, at(1)))
	}
	hotKV := em{Waiting: f(1), Running: f(1), KVUsage: f(0.95)}
	cases := []struct {
		name  string
		setup func(s *State)
		want  snapshot.WorkerState
	}{
		{"ok", func(s *State) { s.Apply(scrape("w0", at(0), counters("", 1, 0, 0))) }, "ok"},
		{"saturated at the threshold", func(s *State) {
			s.Apply(scrape("w0", at(0), em{Waiting: f(1), KVUsage: f(0.90)}))
		}, "saturated"},
		{"stale beats saturated", func(s *State) { s.Apply(scrape("w0", at(0), hotKV)); lost(s) }, "stale"},
		{"down beats stale", func(s *State) { lost(s); s.Apply(failedScrape("w0", at(2), "timeout")) }, "down"},
		{"events only: unknown", func(s *State) { s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 1))) }, "unknown"},
		{"events only but stale", func(s *State) { lost(s) }, "stale"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			c.setup(s)
			if got := row(t, s.Snapshot(at(3)), "w0").State; got != c.want {
				t.Fatalf("state = %q, want %q", got, c.want)
			}
		})
	}
}

func TestDiscoveredWorkersAndAliases(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{
		{Name: "w0", Aliases: []string{"http://10.0.0.5:8000", "10.0.0.5:8000"}},
		{Name: "w1", Aliases: []string{"http://10.0.0.6:8000"}},
	}})
	// Centralized layout: the topic id is host:port of the metrics URL.
	s.Apply(batch("10.0.0.5:8000", 0, 0, at(0), stored(0, false, 1, 2)))
	// A worker no one configured is appended, in order of discovery.
	s.Apply(batch("10.0.0.9:8000", 0, 0, at(0), stored(0, false, 3)))
	s.Apply(&collectors.Decision{RequestID: "r", Chosen: "HTTP://10.0.0.6:8000/v1", At: at(0)})
	// A decision naming no configured worker makes no ghost row: it is
	// named in an alert instead.
	s.Apply(&collectors.Decision{RequestID: "r2", Chosen: "pod-x", At: at(0)})
	snap := s.Snapshot(at(1))
	var names []string
	for _, w := range snap.Workers {
		names = append(names, w.Name)
	}
	if got := strings.Join(names, ","); got != "w0,w1,10.0.0.9:8000" {
		t.Fatalf("workers = %s", got)
	}
	if w := row(t, snap, "10.0.0.9:8000"); w.Reason != "discovered from events" || w.State != "unknown" {
		t.Fatalf("discovered worker reason %q state %q", w.Reason, w.State)
	}
	if blocksOf(row(t, snap, "w0").Blocks) != 2 || blocksOf(row(t, snap, "10.0.0.9:8000").Blocks) != 1 {
		t.Fatal("blocks not attributed through the alias")
	}
	if snap.Decisions.Recent[0].Chosen != "w1" {
		t.Fatalf("chosen = %q, want the URL mapped to w1 by host:port", snap.Decisions.Recent[0].Chosen)
	}
}

func TestHostPort(t *testing.T) {
	cases := map[string]string{
		"http://10.0.0.5:8000":         "10.0.0.5:8000",
		"https://Worker-A:443/metrics": "worker-a:443",
		"10.0.0.5:8000":                "10.0.0.5:8000",
		"[::1]:8000":                   "[::1]:8000",
		"w0":                           "",
		"pod/name:1":                   "",
		"http://":                      "",
		"":                             "",
		"worker_123":                   "",
	}
	for in, want := range cases {
		if got := hostPort(in); got != want {
			t.Errorf("hostPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestScrapeTimesShown(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(3), counters("", 0, 0, 0)))
	w := row(t, s.Snapshot(at(4)), "w0")
	if w.ScrapeMS == nil || *w.ScrapeMS != 12 || w.LastScrape == nil || !w.LastScrape.Equal(at(3)) || w.Engine != "vllm" {
		t.Fatalf("scrape_ms %v last %v engine %q", show(w.ScrapeMS), w.LastScrape, w.Engine)
	}
}

// An SGLang data-parallel page labels its scheduler gauges with dp_rank
// but not its token counters: those are worker-level figures
// (WorkerTotals). The worker's hit rate comes from them, they are never
// an engine row, and the engines are not "missing" counters.
func TestWorkerTotalsOfADataParallelPage(t *testing.T) {
	s := newTestState("w0")
	for k := 0; k <= 60; k += 10 {
		x := float64(k)
		s.Apply(&collectors.MetricsScrape{Target: "w0", Role: collectors.RoleWorker, At: at(x), Profile: "sglang",
			Engines: []em{
				{Engine: "0", Waiting: f(2), Running: f(4), KVUsage: f(0.5)},
				{Engine: "1", Waiting: f(6), Running: f(1), KVUsage: f(0.7)},
			},
			WorkerTotals: &em{PrefixQueries: f(1000 * x), PrefixHits: f(600 * x)},
		})
	}
	snap := s.Snapshot(at(60))
	w := row(t, snap, "w0")
	if len(w.Engines) != 2 || w.Engines[0].Engine != "0" || w.Engines[1].Engine != "1" {
		t.Fatalf("engines = %+v, want exactly dp 0 and 1", w.Engines)
	}
	if !eqp(w.PrefixHitRate.Tokens, f(0.6)) || w.PrefixHitRate.CoveredS != 60 || !eqp(snap.Pool.PrefixHitRate.Tokens, f(0.6)) {
		t.Fatalf("hit tok %v covered %v pool %v; want 0.6 over 60 s from the worker's counters",
			show(w.PrefixHitRate.Tokens), w.PrefixHitRate.CoveredS, show(snap.Pool.PrefixHitRate.Tokens))
	}
	if strings.Contains(w.Reason, "missing") || !eqp(w.Queue, f(8)) {
		t.Fatalf("reason %q queue %v", w.Reason, show(w.Queue))
	}
}

// One saturated engine next to an idle one: the weighted worker figure is
// moderate, but the worker is saturated and the reason names the engine.
func TestSaturatedEngineBehindIdleSibling(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(scrape("w0", at(0),
		em{Engine: "0", Waiting: f(0), KVUsage: f(0.10), NumGPUBlocks: f(1000)},
		em{Engine: "1", Waiting: f(9), KVUsage: f(0.96), NumGPUBlocks: f(1000)}))
	s.Apply(scrape("w1", at(0), em{Waiting: f(1), KVUsage: f(0.93)}))
	snap := s.Snapshot(at(1))
	w0 := row(t, snap, "w0")
	if !eqp(w0.KVUsage, f(0.53)) || w0.State != "saturated" || !strings.Contains(w0.Reason, "engine 1 KV 96%") {
		t.Fatalf("w0 kv %v state %q reason %q; want saturated naming engine 1", show(w0.KVUsage), w0.State, w0.Reason)
	}
	if w1 := row(t, snap, "w1"); w1.State != "saturated" || !strings.Contains(w1.Reason, "KV 93%") || strings.Contains(w1.Reason, "engine") {
		t.Fatalf("w1 state %q reason %q", w1.State, w1.Reason)
	}
}

// After a fast restart the counters may already be above their old
// values: the increase since the restart is the new value, not new − old.
func TestProcessRestartResetsCounterWindows(t *testing.T) {
	s := newTestState("w0")
	page := func(t, start, q, h float64) *collectors.MetricsScrape {
		m := scrape("w0", at(t), counters("", 0, q, h))
		m.ProcessStart = f(start)
		return m
	}
	s.Apply(page(0, 1000, 1000, 900))
	s.Apply(page(10, 1000, 1100, 990)) // 100 queries, 90 hits
	// Restarted; since then 2000 queries with 200 hits (cold cache).
	s.Apply(page(20, 1015, 2000, 200))
	w := row(t, s.Snapshot(at(20)), "w0")
	// Δq = 100 + 2000, Δh = 90 + 200. Taken as new − old it would read
	// (90 + 0) / (100 + 900), hiding the cold cache.
	if !eqp(w.PrefixHitRate.Tokens, f(290.0/2100)) || w.Restarts != 1 {
		t.Fatalf("hit %v restarts %d; want %v and 1", show(w.PrefixHitRate.Tokens), w.Restarts, 290.0/2100)
	}
}

// Unknown figures say why: no metrics configured, or where a discovered
// worker came from; never "not scraped yet" forever.
func TestReasonsForWorkersWithoutMetrics(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0", NoMetrics: true}, {Name: "w1"}}})
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 1)))
	s.Apply(batch("kv-7", 0, 0, at(0), stored(0, false, 2)))
	snap := s.Snapshot(at(60))
	for name, want := range map[string]string{"w0": "no metrics configured", "w1": "not scraped yet", "kv-7": "discovered from events"} {
		if w := row(t, snap, name); w.Reason != want || w.State != "unknown" {
			t.Errorf("%s: reason %q state %q, want %q", name, w.Reason, w.State, want)
		}
	}
}

// The pool's covered_s weighs each worker's coverage by its queries: one
// worker that joined 2 s ago does not make the pool read "2 of 60 s".
func TestPoolCoverageWeightedByQueries(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	for k := 0; k <= 60; k++ {
		x := float64(k)
		s.Apply(scrape("w0", at(x), counters("", 0, 1000*x, 500*x)))
		s.Apply(scrape("w1", at(x), counters("", 0, 1000*x, 500*x)))
		if k >= 58 {
			s.Apply(scrape("w2", at(x), counters("", 0, 1000*(x-58), 0)))
		}
	}
	snap := s.Snapshot(at(60))
	// 60 s × 60 000 × 2 + 2 s × 2 000, over 122 000 queries.
	want := (60*60000*2 + 2*2000) / 122000.0
	if got := snap.Pool.PrefixHitRate.CoveredS; !near(got, want) {
		t.Fatalf("pool covered %v s, want %v (the new worker's 2 s weigh 2 000 of 122 000 queries)", got, want)
	}
	if row(t, snap, "w2").PrefixHitRate.CoveredS != 2 {
		t.Fatalf("w2 covered %v, want its own 2 s", row(t, snap, "w2").PrefixHitRate.CoveredS)
	}
}

// After a down period the last sample before the window may be minutes
// old: the increase built up over that gap is not put whole into the
// window (a per-second rate would be overstated).
func TestCounterWindowAfterADownPeriod(t *testing.T) {
	var w counterWindow
	w.add(at(0), 0, time.Minute)
	w.add(at(600), 6000, time.Minute) // 10 minutes down, 10/s meanwhile
	for k := 601; k <= 630; k++ {
		w.add(at(float64(k)), 6000+10*float64(k-600), time.Minute)
	}
	d, cov, ok := w.delta(at(630), time.Minute)
	// The window [570, 630]: 30 s of the gap at its average 10/s, then 300.
	if !ok || !near(d, 600) || cov != time.Minute {
		t.Fatalf("delta %v over %v; want 600 over 1m (%v/s, not %v/s)", d, cov, 10.0, 6300.0/60)
	}
}

// A worker whose /metrics fails while its event stream keeps delivering is
// serving traffic: "no_metrics" with a warning, not "down" with a critical
// alert. Events that stopped before the failures began, or long ago, prove
// nothing: that worker is down.
func TestScrapeFailsWhileEventsArrive(t *testing.T) {
	timeout := func(sec float64) *collectors.MetricsScrape {
		// A 2 s timeout: the scrape began 2 s before it failed.
		m := failedScrape("w0", at(sec), "GET http://10.0.0.5:8000/metrics: no answer within 2s")
		m.Duration, m.Err.Kind = 2*time.Second, "timeout"
		return m
	}
	cases := []struct {
		name    string
		batches []float64 // batch times, seconds
		now     float64
		want    snapshot.WorkerState
	}{
		{"events after the failure began", []float64{9, 11, 12.5}, 13, "no_metrics"},
		{"an event while the failing scrape hung", []float64{10.6}, 13, "no_metrics"},
		// Taken by kvtop's reader 0.2 s after the failure began: the
		// dying process's last batch, stamped late by the reader's pause.
		{"the last event, stamped just after the failure began", []float64{9, 10.2}, 13, "down"},
		{"events stopped before the failure", []float64{5, 9.9}, 13, "down"},
		{"no events at all", nil, 13, "down"},
		{"events after the failure, but 6 s ago", []float64{11}, 17, "down"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			s.Apply(scrape("w0", at(0), counters("", 3, 100, 50)))
			s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1)))
			for i, b := range c.batches {
				s.Apply(batch("w0", 0, uint64(i+1), at(b), stored(uint64(i+1), true, uint64(i+2))))
			}
			s.Apply(timeout(12)) // began at 10 s
			snap := s.Snapshot(at(c.now))
			w := row(t, snap, "w0")
			if w.State != c.want || w.Up || w.Queue != nil {
				t.Fatalf("state %q up %v queue %v, want %q, not up, queue unknown", w.State, w.Up, show(w.Queue), c.want)
			}
			if len(snap.Alerts) != 1 {
				t.Fatalf("alerts = %+v, want one", snap.Alerts)
			}
			a := snap.Alerts[0]
			if c.want == "down" {
				if a.Kind != "down" || a.Severity != "critical" || !strings.HasPrefix(w.Reason, "down: ") {
					t.Fatalf("down: alert %+v, reason %q", a, w.Reason)
				}
				return
			}
			const text = "w0 metrics: GET http://10.0.0.5:8000/metrics: no answer within 2s — its events are still arriving"
			if a.Kind != "no_metrics" || a.Severity != "warning" || a.Text != text {
				t.Fatalf("alert %+v, want a warning %q", a, text)
			}
			if !strings.HasPrefix(w.Reason, "no metrics: ") || !strings.Contains(w.Reason, "events are still arriving") {
				t.Fatalf("reason %q", w.Reason)
			}
			if w.Blocks == nil || *w.Blocks == 0 {
				t.Fatalf("blocks %v: the live index must show", w.Blocks)
			}
		})
	}
}
