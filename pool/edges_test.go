package pool

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// A down worker says when it was last scraped well apart from its last
// (failed) attempt: "scraped 1 s ago" of a worker down for a minute is the
// failure, not fresh figures.
func TestDownWorkerLastGoodScrapeApartFromLastAttempt(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), counters("", 2, 100, 50)))
	snap := s.Snapshot(at(0.5))
	w := row(t, snap, "w0")
	if w.LastScrape == nil || w.LastScrapeOK == nil || !w.LastScrape.Equal(at(0)) || !w.LastScrapeOK.Equal(at(0)) {
		t.Fatalf("up: last scrape %v, last good %v; want both at 0 s", w.LastScrape, w.LastScrapeOK)
	}
	for k := 1; k <= 60; k++ {
		s.Apply(failedScrape("w0", at(float64(k)), "connection refused"))
	}
	w = row(t, s.Snapshot(at(61)), "w0")
	if w.State != snapshot.WorkerDown || !w.LastScrape.Equal(at(60)) || !w.LastScrapeOK.Equal(at(0)) {
		t.Fatalf("down: state %s, last attempt %v, last good %v; want down, attempt at 60 s, good at 0 s", w.State, w.LastScrape, w.LastScrapeOK)
	}
	raw, _ := json.Marshal(w)
	if !strings.Contains(string(raw), `"last_scrape_ok":"2026-09-05T14:00:00Z"`) {
		t.Errorf("JSON lacks the last good scrape: %s", raw)
	}
	never := newTestState("w1")
	never.Apply(failedScrape("w1", at(1), "connection refused"))
	if w := row(t, never.Snapshot(at(2)), "w1"); w.LastScrape == nil || w.LastScrapeOK != nil {
		t.Errorf("never scraped well: last attempt %v, last good %v; want an attempt and no good one", w.LastScrape, w.LastScrapeOK)
	}
}

// A data-parallel worker that goes down keeps its engine rows as its last
// good scrape left them, marked last known (the views dim them), instead
// of rows that vanish; they count in no figure.
func TestDownWorkerKeepsLastKnownEngines(t *testing.T) {
	s := newTestState("w0", "w1")
	e0, e1 := counters("0", 3, 100, 50), counters("1", 9, 100, 80)
	e1.KVUsage = f(0.97)
	s.Apply(scrape("w0", at(0), e0, e1))
	s.Apply(scrape("w1", at(0), counters("", 1, 10, 5)))
	s.Apply(scrape("w0", at(10), counters("0", 3, 200, 100), counters("1", 9, 200, 160)))
	s.Apply(failedScrape("w0", at(11), "connection refused"))
	snap := s.Snapshot(at(12))
	w := row(t, snap, "w0")
	if len(w.Engines) != 2 {
		t.Fatalf("down worker shows %d engine rows, want its 2 last known", len(w.Engines))
	}
	for i, e := range w.Engines {
		if !e.LastKnown {
			t.Errorf("engine %s not marked last known", e.Engine)
		}
		if want := []float64{3, 9}[i]; e.Engine != []string{"0", "1"}[i] || e.Queue == nil || *e.Queue != want {
			t.Errorf("engine row %d: %s queue %v, want engine %d queue %v", i, e.Engine, show(e.Queue), i, want)
		}
	}
	if w.Queue != nil || w.KVUsage != nil {
		t.Errorf("a down worker's totals are unknown, got queue %v KV %v", show(w.Queue), show(w.KVUsage))
	}
	if snap.Pool.Queue == nil || *snap.Pool.Queue != 1 || snap.Pool.KVUsage == nil || *snap.Pool.KVUsage != 0.5 {
		t.Errorf("pool queue %v KV %v: the last-known engines must count in no pool figure (want w1's 1 and 50%%)", show(snap.Pool.Queue), show(snap.Pool.KVUsage))
	}
	if w.State != snapshot.WorkerDown {
		t.Errorf("state %s: a saturated last-known engine must not make the worker saturated", w.State)
	}
	s.Apply(scrape("w0", at(13), counters("0", 4, 300, 150)))
	if w := row(t, s.Snapshot(at(13)), "w0"); len(w.Engines) != 1 || w.Engines[0].LastKnown {
		t.Errorf("back up: engines %+v, want engine 0 current", w.Engines)
	}
}

// When workers go down the pool token hit rate jumps, because their hits
// and queries leave the sum: the snapshot says how many left (and who)
// for one window.
func TestPoolHitRateSaysWhoLeftIt(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3")
	s.opt.Window, s.window = 20*time.Second, 20*time.Second
	page := func(name string, x float64) {
		hits := map[string]float64{"w0": 0, "w1": 0, "w2": 50, "w3": 50}[name]
		s.Apply(scrape(name, at(x), counters("", 1, 100*x, hits*x)))
	}
	for x := 0.0; x <= 10; x++ {
		for _, n := range []string{"w0", "w1", "w2", "w3"} {
			page(n, x)
		}
	}
	snap := s.Snapshot(at(10))
	if p := snap.Pool.PrefixHitRate; !eqp(p.Tokens, f(0.25)) || p.Left != 0 || len(p.LeftWorkers) != 0 {
		t.Fatalf("all up: hit %v, left %d %v; want 25%%, none left", show(p.Tokens), p.Left, p.LeftWorkers)
	}
	s.Apply(failedScrape("w1", at(11), "connection refused"))
	s.Apply(failedScrape("w0", at(11), "connection refused"))
	page("w2", 11)
	page("w3", 11)
	snap = s.Snapshot(at(11))
	p := snap.Pool.PrefixHitRate
	if !eqp(p.Tokens, f(0.5)) || p.Left != 2 || strings.Join(p.LeftWorkers, ",") != "w0,w1" {
		t.Fatalf("two down: hit %v, left %d %v; want 50%%, 2 left: w0,w1", show(p.Tokens), p.Left, p.LeftWorkers)
	}
	// w1 comes back: in the sum again, out of the list.
	page("w1", 12)
	if p := s.Snapshot(at(12)).Pool.PrefixHitRate; p.Left != 1 || strings.Join(p.LeftWorkers, ",") != "w0" {
		t.Fatalf("w1 back: left %d %v, want 1: w0", p.Left, p.LeftWorkers)
	}
	// A window after w0 left, the figure no longer has its hits anyway.
	if p := s.Snapshot(at(31.5)).Pool.PrefixHitRate; p.Left != 0 || len(p.LeftWorkers) != 0 {
		t.Fatalf("a window later: left %d %v, want none", p.Left, p.LeftWorkers)
	}
	raw, _ := json.Marshal(snap.Pool.PrefixHitRate)
	if !strings.Contains(string(raw), `"left":2,"left_workers":["w0","w1"]`) || !strings.Contains(string(raw), `"tokens":0.5`) {
		t.Errorf("JSON %s", raw)
	}
}

// The pool keeps the request-weighted hit rate and the load skew over the
// window too, for the big-terminal POOL panel.
func TestPoolSeriesHitRequestsAndSkew(t *testing.T) {
	s := newTestState("w0", "w1")
	for k := 0; k < 3; k++ {
		x := float64(k)
		s.Apply(scrape("w0", at(x), counters("", 1, 0, 0)))
		s.Apply(scrape("w1", at(x), counters("", 3+x, 0, 0)))
		o := outcome("r"+string(rune('a'+k)), "1", "w0", 200, ip(4*k), bp(true))
		o.At, o.TS = at(x), at(x)
		s.Apply(o)
		s.Snapshot(at(x))
	}
	ps := s.Snapshot(at(3)).Pool.Series
	if len(ps.Skew) != 4 || ps.Skew[0].V != 1.5 || ps.Skew[3].V != 10.0/6 {
		t.Errorf("skew series %v, want max/mean per refresh: 1.5 … 1.67", ps.Skew)
	}
	if len(ps.HitRequests) != 4 || ps.HitRequests[0].V != 0 || !near(ps.HitRequests[3].V, 2.0/3) {
		t.Errorf("request hit series %v, want 0 … 2/3", ps.HitRequests)
	}
}

// At start-up, while every stream is still connecting, nothing is indexed:
// index_complete is false (pool and workers), though no worker is called
// stale before the grace. Connected, a stream has told nothing either
// until its first batch (seq 0 here: the whole history).
func TestIndexNotCompleteWhileStreamsConnect(t *testing.T) {
	s := newTestState("w0", "w1")
	for _, w := range []string{"w0", "w1"} {
		s.Apply(scrape(w, at(0), counters("", 1, 0, 0)))
		s.Apply(status(w, 0, "connecting", at(0)))
	}
	snap := s.Snapshot(at(0.5))
	if snap.Pool.IndexComplete {
		t.Fatal("pool index_complete is true while every stream is connecting")
	}
	for _, w := range snap.Workers {
		if w.IndexComplete || w.State != snapshot.WorkerOK {
			t.Errorf("%s: complete %v state %s; want incomplete, ok (within the grace)", w.Name, w.IndexComplete, w.State)
		}
	}
	s.Apply(status("w0", 0, "live", at(0.6)))
	s.Apply(status("w1", 0, "live", at(0.6)))
	if snap := s.Snapshot(at(1)); snap.Pool.IndexComplete {
		t.Error("pool index complete once every stream is live, before any batch")
	}
	s.Apply(batch("w0", 0, 0, at(1.1), stored(0, false, 1)))
	s.Apply(batch("w1", 0, 0, at(1.1), stored(0, false, 2)))
	if snap := s.Snapshot(at(1.2)); !snap.Pool.IndexComplete {
		t.Error("pool index incomplete once every stream delivered its first batch")
	}
}

// A router down from the start shows the profile its config names (not a
// blank), and the detected one once a scrape succeeds.
func TestDownRouterShowsConfiguredProfile(t *testing.T) {
	s := NewState(Options{Routers: []RouterSpec{{Name: "r0", Profile: "dynamo"}, {Name: "r1", Profile: "auto"}}})
	fail := failedScrape("r0", at(1), "connection refused")
	fail.Role = collectors.RoleRouter
	s.Apply(fail)
	snap := s.Snapshot(at(2))
	if r := snap.Routers[0]; r.Up || r.Profile != "dynamo" {
		t.Errorf("down router: up %v profile %q, want down, dynamo", r.Up, r.Profile)
	}
	if r := snap.Routers[1]; r.Profile != "" {
		t.Errorf("auto, never scraped: profile %q, want unknown (empty)", r.Profile)
	}
	s.Apply(routerScrape(at(3), 100, 1, nil))
	if r := s.Snapshot(at(3)).Routers[0]; !r.Up || r.Profile != "vllm-router" {
		t.Errorf("scraped: up %v profile %q, want the detected vllm-router", r.Up, r.Profile)
	}
}
