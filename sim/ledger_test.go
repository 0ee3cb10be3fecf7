package sim

import (
	"testing"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/kvcache"
)

func stored(parent uint64, hashes ...uint64) kvcache.Event {
	return kvcache.Event{Kind: kvcache.Stored, Hashes: hashes, Parent: parent, HasParent: parent != 0}
}

func removed(hashes ...uint64) kvcache.Event {
	return kvcache.Event{Kind: kvcache.Removed, Hashes: hashes}
}

// The ledger classifies every block an engine computes, scripted here
// block by block (16 tokens each) on three workers, w2 hashing with a
// seed of its own.
func TestLedgerClasses(t *testing.T) {
	seeds := []uint64{0, 0, 7}
	l := newLedger(3, 1)
	saw := func(w int, evs ...kvcache.Event) { l.saw(w, 0, evs, seeds) }
	const a1, a2, a3, b1, c1, c2, d1 = 0xa1, 0xa2, 0xa3, 0xb1, 0xc1, 0xc2, 0xd1

	saw(0, stored(0, a1, a2, a3))       // w0 new ×3
	saw(1, stored(0, a1, a2, a3))       // w1 routing ×3: w0 holds them
	saw(2, stored(0, a1, a2))           // w2 configuration ×2: the content, under another seed
	saw(0, removed(a3), stored(a2, a3)) // w0 evicts a3 and computes it again: routing (w1 holds it)
	saw(1, removed(a3))
	saw(0, removed(a3), stored(a2, a3)) // evicted everywhere, by w0 too: capacity
	saw(0, stored(0, b1), removed(b1))  // w0 new, evicts it
	saw(1, stored(0, b1))               // pool capacity: w0 evicted it, w1 never held it
	saw(0, stored(0, a1))               // a copy: w0 holds it already
	ld := stored(0, c1, c2)
	ld.Loaded = 1
	saw(1, ld)                                   // c1 loaded from a CPU tier, c2 new
	saw(2, kvcache.Event{Kind: kvcache.Cleared}) // a reset is no eviction
	saw(2, stored(0, a1))                        // seen under w2's hash: pool capacity
	cpu := stored(0, d1)                         // an offload tier's store: not the GPU's
	cpu.Medium = "CPU"
	rep := stored(0, a1, a2)
	rep.Reused = true // a reuse report: nothing computed
	saw(0, cpu, rep)

	want := []LadderTruth{
		{New: 3*16 + 16, Routing: 16, Capacity: 16, Copies: 16},
		{Routing: 3 * 16, PoolCapacity: 16, New: 16, Loaded: 16},
		{Configuration: 2 * 16, PoolCapacity: 16},
	}
	for w := range want {
		if got := l.by[w]; got != want[w] {
			t.Errorf("w%d: %+v, want %+v", w, got, want[w])
		}
	}

	// A restart forgets what the worker holds, without an eviction, and
	// carries its counters over.
	engines := []*engine.Engine{engine.New(engine.DefaultConfig())}
	l.restart(0, engines)
	saw(1, stored(a3, d1))
	saw(0, stored(0, a1)) // w1 still holds a1: routing
	if got := l.by[0].Routing; got != 2*16 {
		t.Errorf("w0 after its restart: routing %v tokens, want 32", got)
	}
	saw(1, removed(a1))
	saw(0, removed(a1), stored(0, a1)) // w0's own eviction this time: capacity
	if got := l.truth(0, engines); got.Capacity != 2*16 || !got.Exact {
		t.Errorf("w0: %+v, want capacity 32 tokens, exact", got)
	}
}

// The pool's account sums the workers'; Sub and Add invert each other.
func TestLadderTruthArithmetic(t *testing.T) {
	a := LadderTruth{Routing: 1, Capacity: 2, PoolCapacity: 3, Configuration: 4, New: 5, Copies: 6, Loaded: 7, PromptTokens: 8, HitTokens: 9, Exact: true}
	b := LadderTruth{Routing: 10, Capacity: 20, PoolCapacity: 30, Configuration: 40, New: 50, Copies: 60, Loaded: 70, PromptTokens: 80, HitTokens: 90, Exact: true}
	if got := a.Add(b).Sub(b); got != a {
		t.Errorf("(a + b) − b = %+v, want %+v", got, a)
	}
	if got := a.Avoidable(); got != 1+2+3+4 {
		t.Errorf("avoidable %v, want 10", got)
	}
	b.Exact = false
	if a.Add(b).Exact || b.Sub(a).Exact {
		t.Error("an inexact account made the sum exact")
	}
}
