package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// TestScenarioRecompute: the seed's story through the real sim, the real
// collectors and the real pool. The same pool, model and load, first
// under a round-robin router, then under a cache-aware one: round-robin
// recomputes prefixes its neighbours hold (kvtop measures it from its own
// index: the router predicts nothing) and its TTFT p95 is higher; the
// cache-aware router recomputes little, at the same request rate.
func TestScenarioRecompute(t *testing.T) {
	t.Parallel()
	// A window short enough that each phase fills it at three simulated
	// seconds per wall second: round-robin runs 60 s of sim time.
	const window, speed = 8 * time.Second, 3
	r := startScenario(t, sim.Options{Scenario: "recompute"}, func(c *config.Config) { c.Window = window })
	r.jumpTo(20 * time.Second) // conversations under way, caches warm
	r.run(speed)
	from, simFrom := time.Now(), r.s.Now()
	rr := r.waitFor("round-robin over a full window", func(s *snapshot.Snapshot) bool {
		return s.At.Sub(from) > window+time.Second && s.Pool.TTFTMS.P95 != nil && s.Pool.RequestsPerS != nil
	})
	rrSpeed := simSpeed(r, from, simFrom)
	if ph := r.s.Phase(); !strings.HasPrefix(ph, "round-robin") {
		t.Fatalf("phase %q: the round-robin window ran into the next phase (sim time %s)", ph, r.s.Now())
	}
	r.jumpTo(75 * time.Second) // cache-aware from 60 s
	r.run(speed)
	from, simFrom = time.Now(), r.s.Now()
	ca := r.waitFor("cache-aware over a full window", func(s *snapshot.Snapshot) bool {
		return s.At.Sub(from) > window+time.Second && s.Pool.TTFTMS.P95 != nil && s.Pool.RequestsPerS != nil
	})
	caSpeed := simSpeed(r, from, simFrom)
	if ph := r.s.Phase(); !strings.HasPrefix(ph, "cache-aware") {
		t.Fatalf("phase %q at sim time %s", ph, r.s.Now())
	}
	t.Logf("round-robin: %s", story(rr))
	t.Logf("cache-aware: %s", story(ca))
	t.Logf("sim speed %.1f× then %.1f× (wall clock)", rrSpeed, caSpeed)

	// The same request rate. kvtop's window follows the wall clock and a
	// loaded machine slows the simulated one, so the rates compare per
	// simulated second: within a third.
	if a, b := *rr.Pool.RequestsPerS/rrSpeed, *ca.Pool.RequestsPerS/caSpeed; a > 1.5*b || b > 1.5*a {
		t.Errorf("requests per simulated second %.2f under round-robin vs %.2f cache-aware (sim at %.1f× and %.1f×): not the same load",
			a, b, rrSpeed, caSpeed)
	}
	// A different p95.
	if p, q := *rr.Pool.TTFTMS.P95, *ca.Pool.TTFTMS.P95; p <= 1.2*q {
		t.Errorf("TTFT p95 %.0f ms under round-robin vs %.0f ms cache-aware: want round-robin clearly higher\n%s", p, q, dump(rr))
	}
	// Round-robin recomputes, measured from the index; cache-aware little.
	rc, cc := rr.Pool.Recompute, ca.Pool.Recompute
	if rc.Share == nil || *rc.Share < 0.03 || rc.Requests < 5 || rc.NotMeasurable > rc.Measured/10 {
		t.Errorf("round-robin recompute %+v (share %s): want a measured share of several %%", rc, fv(rc.Share))
	}
	if cc.Share == nil || rc.Share != nil && *cc.Share > *rc.Share/3 {
		t.Errorf("cache-aware recompute share %s vs round-robin %s: want far less", fv(cc.Share), fv(rc.Share))
	}
	// The records say who held the prefix, and how kvtop knew.
	var flagged *snapshot.DecisionRow
	for i := range rr.Decisions.Recent {
		d := &rr.Decisions.Recent[i]
		if slices.Contains(d.Flags, "recompute") && d.Recompute != nil && d.Recompute.Source == "index" {
			flagged = d
			break
		}
	}
	if flagged == nil || flagged.Recompute.Worker == "" || flagged.Recompute.Worker == flagged.Chosen ||
		*flagged.Recompute.Tokens <= 0 || *flagged.Recompute.ElsewhereTokens < *flagged.Recompute.Tokens {
		t.Errorf("no round-robin record flagged recompute, naming the other worker from the index: %+v", flagged)
	}
	for _, w := range rr.Workers {
		if w.Recompute.TokensPerS == nil || w.TTFTMS.P95 == nil || w.TokensPerS.Prompt == nil || w.ITLMS.P95 == nil {
			t.Errorf("%s under round-robin: recompute %s/s, TTFT p95 %s, prompt %s tok/s, ITL p95 %s: want all known",
				w.Name, fv(w.Recompute.TokensPerS), fv(w.TTFTMS.P95), fv(w.TokensPerS.Prompt), fv(w.ITLMS.P95))
		}
	}
	// The cache-aware router's records are measured from its prediction.
	n := 0
	for _, d := range ca.Decisions.Recent[len(ca.Decisions.Recent)/2:] {
		if d.Recompute != nil && d.Recompute.Source == "prediction" {
			n++
		}
	}
	if n == 0 {
		t.Errorf("no cache-aware record measured from the router's prediction")
	}
}

// simSpeed is how many simulated seconds went by per wall second since
// from (the pump slows down on a loaded machine).
func simSpeed(r *scnRun, from time.Time, simFrom time.Duration) float64 {
	return (r.s.Now() - simFrom).Seconds() / time.Since(from).Seconds()
}

// story is one line of the figures the seed's table compares.
func story(s *snapshot.Snapshot) string {
	p := s.Pool
	return fmt.Sprintf("%s req/s, TTFT p50 %s p95 %s p99 %s ms (%s obs), hit %s tok, recomputed %s tok/s = %s of prompt tokens (%d requests, %d not measurable)",
		fv(p.RequestsPerS), fv(p.TTFTMS.P50), fv(p.TTFTMS.P95), fv(p.TTFTMS.P99), fv(p.TTFTMS.Observations), fv(p.PrefixHitRate.Tokens),
		fv(p.Recompute.TokensPerS), fv(p.Recompute.Share), p.Recompute.Requests, p.Recompute.NotMeasurable)
}
