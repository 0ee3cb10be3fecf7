package pool

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
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
		{"requests counter dropped", routerScrape(at(10), 1000, 3, p(60, 60)), 1},
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
// 5 s trailing rate: back within tolerance at t=135 and held for 10 s.
func TestRouterRecovery(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Routers: []RouterSpec{{Name: "r0"}}, Window: time.Minute})
	var q, h, reqs float64
	start := 1000.0
	type check struct {
		state    string
		seconds  float64
		current  float64
		alert    string
		baseline float64
	}
	checks := map[int]check{
		99:  {"steady", 0, 0.8, "", 0},
		120: {"recovering", 20, 0.2, "r0 restarted 14:01:40: pool hit 20% vs 80% before; recovering for 20 s", 0.8},
		134: {"recovering", 34, 0.68, "", 0.8},
		144: {"recovering", 44, 0.8, "", 0.8},
		145: {"recovered", 35, 0.8, "", 0.8},
		200: {"recovered", 35, 0.8, "", 0.8},
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
