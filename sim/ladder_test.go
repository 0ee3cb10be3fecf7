package sim_test

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/scenario"
)

// The ladder scenario makes each loss dominate, by the sim's own account
// (sim.LadderTruth): 5 s of each phase, from 12 s in. The account covers
// every block the engines stored on the GPU, each once.
func TestLadderScenarioForcesEachLoss(t *testing.T) {
	s := startSim(t, sim.Options{Scenario: "ladder", Workers: 4, Ledger: true})
	account := func() (sum sim.LadderTruth, stored uint64) {
		sum.Exact = true
		for w := 0; w < 4; w++ {
			lt, ok := s.LadderTruth(w)
			tr, ok2 := s.Truth(w, 0)
			if !ok || !ok2 {
				t.Fatalf("w%d: no account", w)
			}
			sum = sum.Add(lt)
			stored += tr.Stored
		}
		return sum, stored
	}
	for _, ph := range []struct {
		name string
		at   time.Duration
		// the loss that dominates: compulsory or an avoidable class
		share func(d sim.LadderTruth) (forced, others float64)
	}{
		{"compulsory", 0, func(d sim.LadderTruth) (float64, float64) {
			return d.PromptTokens - d.HitTokens - d.Avoidable(), d.Avoidable()
		}},
		{"configuration", scenario.LadderPhase, func(d sim.LadderTruth) (float64, float64) {
			return d.Configuration, max(d.Routing, d.Capacity, d.PoolCapacity)
		}},
		{"routing", 2 * scenario.LadderPhase, func(d sim.LadderTruth) (float64, float64) {
			return d.Routing, max(d.Configuration, d.Capacity, d.PoolCapacity)
		}},
		{"capacity", 3 * scenario.LadderPhase, func(d sim.LadderTruth) (float64, float64) {
			return d.Capacity, max(d.Routing, d.Configuration, d.PoolCapacity)
		}},
	} {
		advance(t, s, ph.at+12*time.Second-s.Now())
		before, stored0 := account()
		advance(t, s, 5*time.Second)
		after, stored1 := account()
		d := after.Sub(before)
		forced, others := ph.share(d)
		t.Logf("%s (%s): T %.0f H %.0f routing %.0f capacity %.0f pool %.0f configuration %.0f new %.0f copies %.0f",
			ph.name, s.Phase(), d.PromptTokens, d.HitTokens, d.Routing, d.Capacity, d.PoolCapacity, d.Configuration, d.New, d.Copies)
		if forced <= 0 || forced < 2*others {
			t.Errorf("%s phase: %.0f tokens of it against %.0f of the next loss", ph.name, forced, others)
		}
		if got, want := d.Avoidable()+d.New+d.Copies+d.Loaded, float64(16*(stored1-stored0)); got != want || !d.Exact {
			t.Errorf("%s phase: the account covers %.0f tokens, the engines stored %.0f (exact %v)", ph.name, got, want, d.Exact)
		}
	}
}

// Without Options.Ledger the sim keeps no account.
func TestLadderTruthOff(t *testing.T) {
	s := startSim(t, sim.Options{Workers: 1})
	if _, ok := s.LadderTruth(0); ok {
		t.Error("an account without Options.Ledger")
	}
	if _, ok := s.PoolLadderTruth(); ok {
		t.Error("a pool account without Options.Ledger")
	}
}
