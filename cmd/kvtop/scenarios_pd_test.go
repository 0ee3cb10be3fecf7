package main

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// TestScenarioPD: `kvtop sim --pd 1:2` end to end. The router sends every
// request to the prefill worker; the decode workers receive its KV by
// transfer. kvtop reads each role from the sim's config, sums the roles
// apart, keeps the decode workers' transferred prompt tokens out of their
// hit rates and names them a transfer among the pool's hits by tier.
func TestScenarioPD(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{PD: "1:2"}, nil)
	if len(r.c.Workers) != 3 || r.c.Workers[0].Role != "prefill" || r.c.Workers[1].Role != "decode" {
		t.Fatalf("the sim's config: %+v", r.c.Workers)
	}
	r.jumpTo(20 * time.Second)
	s := r.waitFor("both decode workers received transfers", func(s *snapshot.Snapshot) bool {
		for _, n := range []string{"w1", "w2"} {
			w := workerOf(s, n)
			if w == nil || w.PrefixHitRate.TransferredTokens == nil || *w.PrefixHitRate.TransferredTokens <= 0 {
				return false
			}
		}
		return true
	})
	for _, c := range []struct{ w, role string }{{"w0", "prefill"}, {"w1", "decode"}, {"w2", "decode"}} {
		if w := workerOf(s, c.w); w.Role != c.role || w.RoleSource != snapshot.RoleFromConfig {
			t.Errorf("%s: role %q from %q, want %q from config", c.w, w.Role, w.RoleSource, c.role)
		}
	}
	if w := workerOf(s, "w0"); w.PrefixHitRate.TransferredTokens != nil {
		t.Errorf("the prefill worker has transferred tokens %v", *w.PrefixHitRate.TransferredTokens)
	}
	if len(s.Pool.Roles) != 2 || s.Pool.Roles[0].Role != "prefill" || s.Pool.Roles[0].Workers != 1 || s.Pool.Roles[1].Workers != 2 {
		t.Errorf("pool roles %+v", s.Pool.Roles)
	}
	// A decode worker's own cache serves what it held from earlier turns;
	// the rest arrived by transfer and is no miss: its hit rate is high,
	// where counting the transfers as misses would have sunk it.
	for _, n := range []string{"w1", "w2"} {
		if h := workerOf(s, n).PrefixHitRate.Tokens; h == nil || *h < 0.5 {
			t.Errorf("%s: hit rate %v with transfers out of it", n, h)
		}
	}
	if c := s.Pool.CacheTiers; c == nil {
		t.Error("no hits by tier")
	} else {
		for _, h := range c.Hits {
			if h.Tier != "GPU" && h.Tier != pool.TransferTier {
				t.Errorf("hits by tier name %q: a transfer read as a cache tier", h.Tier)
			}
		}
	}
	// Every decision chose the prefill worker.
	for _, d := range s.Decisions.Recent {
		if d.Chosen != "w0" {
			t.Fatalf("decision %s chose %s, a decode worker", d.RequestID, d.Chosen)
		}
	}
	if len(s.Decisions.Recent) == 0 {
		t.Error("no decisions")
	}
}

// TestScenarioTwoModels: `kvtop sim --models 2`: odd workers serve a second
// model, each conversation keeps its model and is routed to its workers
// only; kvtop groups the workers by the model their pages name.
func TestScenarioTwoModels(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Models: 2}, nil)
	r.jumpTo(15 * time.Second)
	s := r.waitFor("two models on the pages and decisions for both", func(s *snapshot.Snapshot) bool {
		models := map[string]bool{}
		for _, d := range s.Decisions.Recent {
			models[d.Model] = true
		}
		for _, m := range s.Pool.Models {
			if m.HitTokens == nil {
				return false
			}
		}
		return len(s.Pool.Models) == 2 && len(models) == 2
	})
	serves := map[string]string{}
	for _, w := range s.Workers {
		serves[w.Name] = w.Model
	}
	if serves["w0"] != sim.Model || serves["w1"] != sim.Model70B || serves["w2"] != sim.Model || serves["w3"] != sim.Model70B {
		t.Fatalf("workers' models %v", serves)
	}
	for _, m := range s.Pool.Models {
		if m.Workers != 2 || m.HitTokens == nil {
			t.Errorf("model %s: %d workers, hit %v", m.Model, m.Workers, m.HitTokens)
		}
	}
	for _, d := range s.Decisions.Recent {
		if d.Chosen != "" && serves[d.Chosen] != d.Model {
			t.Fatalf("decision %s for %s chose %s, which serves %s", d.RequestID, d.Model, d.Chosen, serves[d.Chosen])
		}
	}
}
