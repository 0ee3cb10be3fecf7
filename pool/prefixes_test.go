package pool

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

func decide(req, chosen, prefix string, t time.Time) *collectors.Decision {
	return &collectors.Decision{RequestID: req, Chosen: chosen, Prefix: prefix, At: t, TS: t, Format: "kvtop"}
}

func TestHotPrefixFromDecisions(t *testing.T) {
	s := newTestState("w1", "w3")
	// Events say something else; decisions that name a prefix win.
	s.Apply(batch("w1", 0, 0, at(0), stored(0, false, 0x77), stored(0x77, true, 0x78), stored(0x77, true, 0x79)))
	for i := 0; i < 20; i++ {
		prefix, chosen := "", "w1"
		switch {
		case i < 8:
			prefix, chosen = "0x9F2C00000000AA01", "w3"
		case i < 10:
			prefix = "9f2c00000000aa01"
		}
		s.Apply(decide(fmt.Sprint("r", i), chosen, prefix, at(1)))
	}
	snap := s.Snapshot(at(1))
	if len(snap.Prefixes) != 1 {
		t.Fatalf("prefixes = %+v", snap.Prefixes)
	}
	p := snap.Prefixes[0]
	if p.ID != "9f2c00000000aa01" || p.Source != "decisions" || !near(p.Share, 0.5) || !near(p.Requests, 10) ||
		!near(p.Workers["w3"], 0.8) || !near(p.Workers["w1"], 0.2) || p.Replicas != 0 || !p.Orphan {
		t.Fatalf("prefix = %+v", p)
	}
}

func TestHotPrefixFromEvents(t *testing.T) {
	s := newTestState("w0", "w1")
	const doc = 0xd0c
	// A document (3 blocks) stored on w0 and w1 a while ago; then 4
	// requests continue it on w0 and 1 on w1 (which holds its own copy).
	s.Apply(batch("w0", 0, 0, at(-4), stored(0, false, 0xd0a, 0xd0b, doc)))
	s.Apply(batch("w1", 0, 0, at(-4), stored(0, false, 0xd0a, 0xd0b, doc)))
	for i := 0; i < 4; i++ {
		s.Apply(batch("w0", 0, uint64(i+1), at(1), stored(doc, true, uint64(0x100+i))))
	}
	s.Apply(batch("w1", 0, 1, at(1), stored(doc, true, 0x200)))
	snap := s.Snapshot(at(1))
	p := snap.Prefixes[0]
	// 7 BlockStored events in all (the 2 document stores 5 s ago, decayed
	// by e^(-5/60)), 5 continue the document.
	if p.ID != "0000000000000d0c" || p.Source != "events" || !near(p.Requests, 5) || !near(p.Share, 5/(5+2*math.Exp(-5.0/60))) ||
		!near(p.Workers["w0"], 0.8) || !near(p.Workers["w1"], 0.2) || p.Replicas != 2 || blocksOf(p.Tokens) != 48 || p.Orphan {
		t.Fatalf("prefix = %+v", p)
	}
	// w1 evicts everything, then gets the document again in one chain:
	// the chain includes the hot hash, so it counts for it (on w1).
	s.Apply(batch("w1", 0, 2, at(1), removed(0xd0a, 0xd0b, doc, 0x200)))
	s.Apply(batch("w1", 0, 3, at(1), stored(0, false, 0xd0a, 0xd0b, doc, 0x300)))
	snap = s.Snapshot(at(1))
	p = snap.Prefixes[0]
	if p.ID != "0000000000000d0c" || !near(p.Requests, 6) || !near(p.Workers["w1"], 2.0/6) {
		t.Fatalf("after a re-store: %+v", p)
	}
	w0 := row(t, snap, "w0")
	if len(w0.TopPrefixes) == 0 || w0.TopPrefixes[0].ID != p.ID || !near(w0.TopPrefixes[0].Share, 4.0/6) || blocksOf(w0.TopPrefixes[0].Tokens) != 48 {
		t.Fatalf("w0 top prefixes = %+v", w0.TopPrefixes)
	}
}

func TestPrefixCountersBounded(t *testing.T) {
	const limit = 100
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Limits: Limits{PrefixCounters: limit, Prefixes: 5}})
	// One heavy prefix among 10× the limit of one-off prefixes: lossy
	// counting must keep it, with its full count.
	for i := 0; i < 10*limit; i++ {
		evs := []collectors.KVEvent{stored(uint64(1_000_000+i), true, uint64(2_000_000+i))}
		if i%5 == 0 {
			evs = append(evs, stored(0xbeef, true, uint64(3_000_000+i)))
		}
		s.Apply(batch("w0", 0, uint64(i), at(0), evs...))
	}
	if n := len(s.evPrefix.ents); n > limit || len(s.evPrefix.idx) != n {
		t.Fatalf("%d prefix counters (%d indexed), limit %d", n, len(s.evPrefix.idx), limit)
	}
	snap := s.Snapshot(at(0))
	if len(snap.Prefixes) != 5 || snap.Prefixes[0].ID != "000000000000beef" || !near(snap.Prefixes[0].Requests, 200) {
		t.Fatalf("top = %+v", snap.Prefixes[0])
	}
}

func TestPrefixTrafficDecays(t *testing.T) {
	s := newTestState("w0")
	for i := 0; i < 100; i++ {
		s.Apply(batch("w0", 0, uint64(i), at(0), stored(0xaaa, true, uint64(i+10))))
	}
	for i := 0; i < 10; i++ {
		s.Apply(batch("w0", 0, uint64(200+i), at(600), stored(0xbbb, true, uint64(i+500))))
	}
	snap := s.Snapshot(at(600))
	// Ten windows later, 100 old requests weigh 100·e^-10 ≈ 0.005: no
	// traffic in the window, not listed.
	if len(snap.Prefixes) != 1 || snap.Prefixes[0].ID != "0000000000000bbb" || !near(snap.Prefixes[0].Requests, 10) {
		t.Fatalf("prefixes = %+v", snap.Prefixes)
	}
	if e := s.evPrefix.ents[s.evPrefix.idx[0xaaa]]; math.Abs(e.n*s.evPrefix.scale(at(600))-100*math.Exp(-10)) > 1e-9 {
		t.Fatalf("old prefix weighs %v", e.n*s.evPrefix.scale(at(600)))
	}
	// Far in the future the boosted weights are rebased, not overflowed.
	s.Apply(batch("w0", 0, 300, at(1e6), stored(0xccc, true, 999)))
	snap = s.Snapshot(at(1e6))
	if p := snap.Prefixes[0]; p.ID != "0000000000000ccc" || !near(p.Requests, 1) || math.IsNaN(p.Share) || p.Share > 1 {
		t.Fatalf("after a long time: %+v", p)
	}
}

func TestNthLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 1; n < 60; n++ {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(rng.IntN(10)) // many ties
		}
		sorted := slices.Clone(v)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		for k := 1; k <= n; k++ {
			if got := nthLargest(slices.Clone(v), k); got != sorted[k-1] {
				t.Fatalf("n=%d k=%d: %v, want %v", n, k, got, sorted[k-1])
			}
		}
	}
}
