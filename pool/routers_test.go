package pool

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func routerScrape(t time.Time, start float64, requests float64, processed map[string]float64) *collectors.MetricsScrape {
	return &collectors.MetricsScrape{Target: "r0", Role: collectors.RoleRouter, At: t, Profile: "vllm-router", ProcessStart: f(start),
		Router: &collectors.RouterMetrics{Requests: f(requests), Processed: processed}}
}

func TestRouterRestartDetection(t *testing.T) {
	p := func(a, b float64) map[string]float64 { return map[string]float64{"http://a:1": a, "http://b:1": b} }
	cases := []struct {
		name   string
		second *collectors.MetricsScrape
		want   int
	}{
		{"requests counter dropped, no per-label series", routerScrape(at(10), 1000, 3, nil), 1},
		// The sum fell because a label set vanished; every series that
		// still exists grew and the process is the same: no restart.
		{"summed requests dropped while every label grew", routerScrape(at(10), 1000, 70, p(70, 61)), 0},
		{"process start changed", routerScrape(at(10), 2000, 130, p(60, 60)), 1},
		{"processed counters dropped", &collectors.MetricsScrape{Target: "r0", Role: collectors.RoleRouter, At: at(10),
			Router: &collectors.RouterMetrics{Processed: p(2, 1)}}, 1},
		{"a vanished worker label is no restart", routerScrape(at(10), 1000, 130, map[string]float64{"http://a:1": 70}), 0},
		{"counters grew", routerScrape(at(10), 1000, 130, p(70, 60)), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewState(Options{Routers: []RouterSpec{{Name: "r0"}}})
			s.Apply(routerScrape(at(0), 1000, 120, p(60, 60)))
			s.Apply(c.second)
			r := s.Snapshot(at(10)).Routers[0]
			if r.Restarts != c.want || (c.want > 0) != (r.LastRestart != nil) {
				t.Fatalf("restarts %d last %v; want %d", r.Restarts, r.LastRestart, c.want)
			}
			if c.want > 0 && !r.LastRestart.Equal(at(10)) {
				t.Fatalf("last restart %v", r.LastRestart)
			}
		})
	}
}

// TestRouterRecovery: the pool hit rate is 80% until the router restarts
// at t=100, 20% until t=130, 80% after. The recovery state follows the
// 10 s trailing rate (the NOW column, in every state): back within
// tolerance at t=140 (the first 10 s all after t=130) and held for 10 s.
func TestRouterRecovery(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Routers: []RouterSpec{{Name: "r0"}}, Window: time.Minute})
	var q, h, reqs float64
	start := 1000.0
	type check struct {
		state    snapshot.RecoveryState
		seconds  float64
		current  float64
		alert    string
		baseline float64
	}
	checks := map[int]check{
		99:  {"steady", 0, 0.8, "", 0},
		120: {"recovering", 20, 0.2, "r0 restarted 14:01:40: pool hit 20% vs 80% before; recovering for 20 s", 0.8},
		134: {"recovering", 34, 0.44, "", 0.8}, // 6 s at 20%, 4 s at 80%
		139: {"recovering", 39, 0.74, "", 0.8},
		149: {"recovering", 49, 0.8, "", 0.8},
		150: {"recovered", 40, 0.8, "", 0.8},
		200: {"recovered", 40, 0.8, "", 0.8},
	}
	for k := 0; k <= 200; k++ {
		frac := 0.8
		if k > 100 && k <= 130 {
			frac = 0.2
		}
		if k > 0 {
			q += 100
			h += 100 * frac
			reqs += 10
		}
		if k == 100 {
			start, reqs = 2000, 0 // the router restarts
		}
		s.Apply(scrape("w0", at(float64(k)), counters("", 0, q, h)))
		s.Apply(routerScrape(at(float64(k)), start, reqs, nil))
		snap := s.Snapshot(at(float64(k)))
		c, ok := checks[k]
		if !ok {
			continue
		}
		rec := snap.Routers[0].Recovery
		if rec.CurrentS != 10 {
			t.Fatalf("t=%d: current over %v s, want the last 10 s", k, rec.CurrentS)
		}
		if rec.State != c.state || !eqp(rec.Current, &c.current) {
			t.Fatalf("t=%d: recovery %s current %v; want %s %v", k, rec.State, show(rec.Current), c.state, c.current)
		}
		if c.state != "steady" && (!eqp(rec.Seconds, &c.seconds) || !eqp(rec.Baseline, &c.baseline)) {
			t.Fatalf("t=%d: seconds %v baseline %v; want %v %v", k, show(rec.Seconds), show(rec.Baseline), c.seconds, c.baseline)
		}
		if c.state == "steady" && (rec.Seconds != nil || rec.Baseline != nil) {
			t.Fatalf("t=%d: steady with seconds %v baseline %v", k, show(rec.Seconds), show(rec.Baseline))
		}
		var alert string
		for _, a := range snap.Alerts {
			if a.Kind == "router_recovering" {
				alert = a.Text
			}
		}
		if (c.state == "recovering") != (alert != "") || (c.alert != "" && alert != c.alert) {
			t.Fatalf("t=%d: alert %q, want %q", k, alert, c.alert)
		}
	}
}

func TestRouterRecoveryUnknownWithoutBaseline(t *testing.T) {
	s := NewState(Options{Routers: []RouterSpec{{Name: "r0"}}})
	s.Apply(routerScrape(at(0), 1000, 50, nil))
	s.Apply(routerScrape(at(1), 1001, 0, nil))
	r := s.Snapshot(at(2)).Routers[0]
	if r.Recovery.State != "unknown" || r.Restarts != 1 || r.Recovery.Baseline != nil {
		t.Fatalf("recovery = %+v", r.Recovery)
	}
}

func TestRoutedShareAndDown(t *testing.T) {
	s := NewState(Options{
		Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"http://10.0.0.5:8000"}}, {Name: "w1", Aliases: []string{"http://10.0.0.6:8000"}}},
		Routers: []RouterSpec{{Name: "r0"}, {Name: "r1"}},
	})
	for k := 0; k <= 60; k += 10 {
		x := float64(k)
		s.Apply(routerScrape(at(x), 1000, 10*x, map[string]float64{
			"http://10.0.0.5:8000": 5 * x, "http://10.0.0.6:8000/": 3 * x, "http://10.9.9.9:1": 2 * x}))
	}
	s.Apply(&collectors.MetricsScrape{Target: "r1", Role: collectors.RoleRouter, At: at(60),
		Err: &collectors.SourceError{Source: "r1 metrics", Kind: "timeout", Message: "context deadline exceeded", At: at(60)}})
	snap := s.Snapshot(at(60))
	r0, r1 := snap.Routers[0], snap.Routers[1]
	if !near(r0.RoutedShare["w0"], 0.5) || !near(r0.RoutedShare["w1"], 0.3) || !near(r0.RoutedShare["http://10.9.9.9:1"], 0.2) ||
		!eqp(r0.RequestsPerS, f(10)) || !r0.Up || r0.Profile != "vllm-router" || r0.Recovery.State != "steady" {
		t.Fatalf("r0 = %+v", r0)
	}
	if r1.Up || r1.Error == nil || *r1.Error != "context deadline exceeded" {
		t.Fatalf("r1 = %+v", r1)
	}
	if w0 := row(t, snap, "w0"); !eqp(w0.RoutedShare, f(0.5)) {
		t.Fatalf("w0 routed share %v", show(w0.RoutedShare))
	}
}

// A worker no router label maps to has an unknown routed share, not 0%,
// and an info alert names the label to add to the aliases.
func TestRoutedShareUnknownForUnmappedWorker(t *testing.T) {
	s := NewState(Options{
		Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"http://10.0.0.5:8000"}}, {Name: "w1"}},
		Routers: []RouterSpec{{Name: "r0"}},
	})
	for k := 0; k <= 60; k += 10 {
		x := float64(k)
		s.Apply(routerScrape(at(x), 1000, 10*x, map[string]float64{"http://10.0.0.5:8000": 6 * x, "http://w1.svc:8000": 4 * x}))
	}
	snap := s.Snapshot(at(60))
	if w0 := row(t, snap, "w0"); !eqp(w0.RoutedShare, f(0.6)) {
		t.Fatalf("w0 routed %v, want 0.6", show(w0.RoutedShare))
	}
	if w1 := row(t, snap, "w1"); w1.RoutedShare != nil {
		t.Fatalf("w1 routed %v, want unknown: no router label maps to it", show(w1.RoutedShare))
	}
	a := alertOf(snap, "unmapped_worker")
	if a == nil || a.Severity != "info" ||
		a.Text != "r0 routes to http://w1.svc:8000, which is no configured worker: add it to that worker's aliases" {
		t.Fatalf("alert = %+v", a)
	}
	if u := snap.Routers[0].Unmapped; len(u) != 1 || u[0] != "http://w1.svc:8000" {
		t.Fatalf("router unmapped = %v", u)
	}
}

// When a label set vanishes the summed requests counter drops: neither a
// restart nor a burst of traffic.
func TestVanishedLabelIsNoTrafficBurst(t *testing.T) {
	s := NewState(Options{Routers: []RouterSpec{{Name: "r0"}}})
	for k := 0; k <= 30; k++ {
		x := float64(k)
		s.Apply(routerScrape(at(x), 1000, 20*x, map[string]float64{"http://a:1": 10 * x, "http://b:1": 10 * x}))
	}
	// b leaves the router's page; its 600 leave the sum.
	for k := 31; k <= 60; k++ {
		x := float64(k)
		s.Apply(routerScrape(at(x), 1000, 10*x, map[string]float64{"http://a:1": 10 * x}))
	}
	r := s.Snapshot(at(60)).Routers[0]
	// 30 s at 20/s, one step of 0, 29 s at 10/s.
	if r.Restarts != 0 || !eqp(r.RequestsPerS, f((30*20+29*10)/60.0)) {
		t.Fatalf("restarts %d requests/s %v; want 0 and %v", r.Restarts, show(r.RequestsPerS), (30*20+29*10)/60.0)
	}
}

// Circuit breakers: per worker in the snapshot (the worst over routers),
// per router, and an alert while one is open.
func TestCircuitBreakers(t *testing.T) {
	s := NewState(Options{
		Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"http://10.0.0.5:8000"}}, {Name: "w1", Aliases: []string{"http://10.0.0.6:8000"}}, {Name: "w2"}},
		Routers: []RouterSpec{{Name: "r0"}, {Name: "r1"}},
	})
	cb := func(name string, t float64, states map[string]float64) *collectors.MetricsScrape {
		return &collectors.MetricsScrape{Target: name, Role: collectors.RoleRouter, At: at(t),
			Router: &collectors.RouterMetrics{CBState: states}}
	}
	s.Apply(cb("r0", 0, map[string]float64{"http://10.0.0.5:8000": 0, "http://10.0.0.6:8000": 0}))
	s.Apply(cb("r1", 0, map[string]float64{"http://10.0.0.5:8000": 0, "http://10.0.0.6:8000": 2}))
	s.Apply(cb("r0", 5, map[string]float64{"http://10.0.0.5:8000": 0, "http://10.0.0.6:8000": 1}))
	snap := s.Snapshot(at(6))
	want := map[string]string{"w0": "closed", "w1": "open"}
	for _, w := range snap.Workers {
		got := "<nil>"
		if w.Breaker != nil {
			got = *w.Breaker
		}
		if exp, ok := want[w.Name]; (ok && got != exp) || (!ok && w.Breaker != nil) {
			t.Errorf("%s breaker %s, want %v", w.Name, got, exp)
		}
	}
	if b := snap.Routers[1].Breakers; b["w1"] != "half-open" || b["w0"] != "closed" {
		t.Fatalf("r1 breakers = %v", b)
	}
	a := alertOf(snap, "breaker_open")
	if a == nil || a.Subject != "w1" || a.Text != "r0's circuit breaker for w1 is open since 14:00:05 — it gets no requests from r0" {
		t.Fatalf("alert = %+v", a)
	}
	s.Apply(cb("r0", 7, map[string]float64{"http://10.0.0.5:8000": 0, "http://10.0.0.6:8000": 0}))
	if a := alertOf(s.Snapshot(at(8)), "breaker_open"); a != nil {
		t.Fatalf("closed again, still alerted: %+v", a)
	}
}
