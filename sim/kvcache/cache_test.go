package kvcache

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

func toks(seed uint64, n int) []uint32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(r.IntN(151936))
	}
	return out
}

func TestHashChain(t *testing.T) {
	h := NewHasher(7)
	tk := toks(1, 100)
	hs := h.Extend(nil, tk)
	if len(hs) != 6 {
		t.Fatalf("%d hashes for 100 tokens, want 6 full blocks", len(hs))
	}
	if hs[0] != h.Block(0, false, tk[:16]) || hs[3] != h.Block(hs[2], true, tk[48:64]) {
		t.Fatal("Extend does not chain Block")
	}
	// Extending a prefix's chain gives the same hashes as hashing it whole.
	part := h.Extend(nil, tk[:40])
	if got := h.Extend(part, tk); got[5] != hs[5] {
		t.Fatal("incremental Extend differs")
	}
	// One token changed early changes every later hash (the chain names the prefix).
	tk2 := append([]uint32(nil), tk...)
	tk2[3]++
	hs2 := h.Extend(nil, tk2)
	for i := range hs {
		if hs[i] == hs2[i] {
			t.Errorf("block %d hash unchanged after an earlier token changed", i)
		}
	}
	if NewHasher(8).Extend(nil, tk)[0] == hs[0] {
		t.Error("different seeds give the same hash")
	}
	// Like vLLM's, hashes are uniform over 64 bits: about half above int64.
	above := 0
	all := h.Extend(nil, toks(2, 16*2000))
	for _, x := range all {
		if x > math.MaxInt64 {
			above++
		}
	}
	if above < 900 || above > 1100 {
		t.Errorf("%d of 2000 hashes above the int64 range, want about half", above)
	}
}

func TestBytes32(t *testing.T) {
	b := Bytes32(0x0123456789abcdef)
	if binary.BigEndian.Uint64(b[24:]) != 0x0123456789abcdef {
		t.Fatalf("last 8 bytes % x are not the key", b[24:])
	}
	if Bytes32(1) == Bytes32(2) {
		t.Fatal("distinct keys, same bytes")
	}
}

// A request's life: miss, store, release (cached, idle), hit, eviction in
// LRU order with BlockRemoved before the BlockStored that caused it.
func TestCacheLifecycle(t *testing.T) {
	h := NewHasher(1)
	c := New(4)
	a := toks(1, 32)
	ha := h.Extend(nil, a)
	if c.Match(ha) != 0 {
		t.Fatal("hit in an empty cache")
	}
	ids, ok := c.Allocate(2, nil)
	if !ok {
		t.Fatal("allocate failed")
	}
	c.Store(ids, ha, 0, false, a)
	ev := c.TakeEvents()
	if len(ev) != 1 || ev[0].Kind != Stored || len(ev[0].Hashes) != 2 || len(ev[0].Tokens) != 32 || ev[0].HasParent {
		t.Fatalf("events %+v, want one BlockStored of 2 blocks", ev)
	}
	if c.Used() != 2 || c.Resident() != 2 {
		t.Fatalf("used %d resident %d", c.Used(), c.Resident())
	}
	c.Release(ids)
	if c.Used() != 0 || c.Free() != 4 || c.Resident() != 2 {
		t.Fatalf("after release: used %d free %d resident %d; want 0, 4, 2 (idle blocks stay cached)", c.Used(), c.Free(), c.Resident())
	}
	if c.Match(ha) != 2 || c.Idle(ha, 2) != 2 {
		t.Fatal("released blocks do not serve hits")
	}
	got := c.Acquire(ha, 2, nil)
	if c.Used() != 2 || got[0] != ids[0] {
		t.Fatal("acquire did not reference the cached blocks")
	}
	c.Release(got)

	// Fill the cache with b: the 2 empty blocks go first, then a's blocks
	// are evicted, tail block (a[1]) first.
	b := toks(2, 64)
	hb := h.Extend(nil, b)
	idb, ok := c.Allocate(4, nil)
	if !ok {
		t.Fatal("allocate 4 failed")
	}
	c.Store(idb, hb, 0, false, b)
	ev = c.TakeEvents()
	if len(ev) != 3 || ev[0].Kind != Removed || ev[0].Hashes[0] != ha[1] || ev[1].Hashes[0] != ha[0] || ev[2].Kind != Stored {
		t.Fatalf("events %+v, want removal of a's tail then head, then the store", ev)
	}
	if c.Match(ha) != 0 || c.Resident() != 4 {
		t.Fatal("evicted blocks still match")
	}
	if _, ok := c.Allocate(1, nil); ok {
		t.Fatal("allocated from a cache whose blocks are all referenced")
	}
}

// Two copies of one hash (computed concurrently) are stored and removed on
// their own, as vLLM does.
func TestDuplicateCopies(t *testing.T) {
	h := NewHasher(1)
	c := New(3)
	a := toks(1, 16)
	ha := h.Extend(nil, a)
	x, _ := c.Allocate(1, nil)
	y, _ := c.Allocate(1, nil)
	c.Store(x, ha, 0, false, a)
	c.Store(y, ha, 0, false, a)
	if c.Resident() != 2 || len(c.TakeEvents()) != 2 {
		t.Fatal("second copy not stored")
	}
	c.Release(x)
	c.Release(y)
	z, _ := c.Allocate(3, nil) // empty block, then both copies
	ev := c.TakeEvents()
	if len(z) != 3 || len(ev) != 2 || ev[0].Hashes[0] != ha[0] || ev[1].Hashes[0] != ha[0] || c.Resident() != 0 {
		t.Fatalf("events %+v resident %d, want two removals of the same hash", ev, c.Resident())
	}
}

func TestClear(t *testing.T) {
	c := New(2)
	a := toks(1, 16)
	ids, _ := c.Allocate(1, nil)
	c.Store(ids, NewHasher(1).Extend(nil, a), 0, false, a)
	c.TakeEvents()
	c.Clear()
	ev := c.TakeEvents()
	if len(ev) != 1 || ev[0].Kind != Cleared || c.Resident() != 0 || c.Match(NewHasher(1).Extend(nil, a)) != 0 {
		t.Fatalf("clear: events %+v resident %d", ev, c.Resident())
	}
}

// TestEventsTrackResidency drives the cache at random and replays its own
// events as a subscriber would: the subscriber's view (stored minus removed,
// per hash) always equals the cache, never exceeds its capacity, and every
// hit is a block the events say is resident.
func TestEventsTrackResidency(t *testing.T) {
	h := NewHasher(3)
	c := New(64)
	r := rand.New(rand.NewPCG(9, 9))
	docs := make([][]uint32, 12)
	for i := range docs {
		docs[i] = toks(uint64(i), 16*(2+r.IntN(20)))
	}
	view := map[uint64]int{}
	total := 0
	var held [][]int32
	for step := 0; step < 3000; step++ {
		if len(held) > 0 && (r.IntN(3) == 0 || c.Free() < 24) {
			i := r.IntN(len(held))
			c.Release(held[i])
			held = append(held[:i], held[i+1:]...)
		} else {
			d := docs[r.IntN(len(docs))]
			hs := h.Extend(nil, d)
			m := c.Match(hs)
			for _, x := range hs[:m] {
				if view[x] == 0 {
					t.Fatalf("step %d: hit on %x, which the events say is not resident", step, x)
				}
			}
			if len(hs)-m+c.Idle(hs, m) > c.Free() {
				continue
			}
			ids := c.Acquire(hs, m, nil)
			ids, _ = c.Allocate(len(hs)-m, ids)
			var parent uint64
			if m > 0 {
				parent = hs[m-1]
			}
			c.Store(ids[m:], hs[m:], parent, m > 0, d[m*BlockSize:])
			held = append(held, ids)
		}
		for _, e := range c.TakeEvents() {
			for _, x := range e.Hashes {
				switch e.Kind {
				case Stored:
					view[x]++
					total++
				case Removed:
					if view[x] == 0 {
						t.Fatalf("removed %x which was never stored", x)
					}
					view[x]--
					total--
				}
			}
		}
		if total != c.Resident() || total > c.NumBlocks() {
			t.Fatalf("step %d: events say %d resident, cache %d, capacity %d", step, total, c.Resident(), c.NumBlocks())
		}
	}
}

// BenchmarkBlockEvents is the cache's hot path under churn: hash 8 blocks,
// miss, allocate (evicting 8 idle blocks), store, release. Each iteration
// makes 16 block events (8 stored, 8 removed).
func BenchmarkBlockEvents(b *testing.B) {
	h := NewHasher(1)
	c := New(4096)
	tk := toks(1, 128)
	var ids []int32
	var hs []uint64
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tk[0] = uint32(i) // a new prompt every time
		hs = h.Extend(hs[:0], tk)
		m := c.Match(hs)
		ids = c.Acquire(hs, m, ids[:0])
		ids, _ = c.Allocate(len(hs)-m, ids)
		c.Store(ids[m:], hs[m:], 0, false, tk)
		c.Release(ids)
		c.TakeEvents()
	}
	b.ReportMetric(16*float64(b.N)/b.Elapsed().Seconds(), "block-events/s")
}

// A second KV cache group shares the cache's blocks and free queue, keeps
// its own hashes, and its events carry its tag; a removal drops the kind.
func TestGroupsShareBlocks(t *testing.T) {
	h := NewHasher(1)
	c := New(4)
	c.SetTag(Tag{Grouped: true, Spec: "full_attention"})
	g1 := c.AddGroup(Tag{Grouped: true, Group: 1, Spec: "sliding_window", Window: 32})
	a := toks(1, 32)
	ha := h.Extend(nil, a)
	x, _ := c.Allocate(2, nil)
	y, _ := c.Allocate(2, nil)
	c.Store(x, ha, 0, false, a)
	g1.Store(y[:1], ha[1:], ha[0], true, a[16:])
	ev := c.TakeEvents()
	if len(ev) != 2 || ev[0].Group != 0 || ev[0].Spec != "full_attention" || ev[1].Group != 1 || ev[1].Window != 32 || !ev[1].HasParent {
		t.Fatalf("events %+v", ev)
	}
	if c.Distinct() != 2 || g1.Distinct() != 1 || g1.Holds(ha[0]) || !g1.Holds(ha[1]) || c.Free() != 0 {
		t.Fatalf("group 0 %d, group 1 %d, free %d", c.Distinct(), g1.Distinct(), c.Free())
	}
	c.Release(y) // group 1's block first in line: evicted before group 0's
	c.Release(x)
	z, _ := c.Allocate(3, nil)
	ev = c.TakeEvents()
	if len(z) != 3 || len(ev) != 2 || ev[0].Kind != Removed || ev[0].Group != 1 || ev[0].Spec != "" || ev[0].Window != 0 ||
		ev[1].Group != 0 || g1.Distinct() != 0 || c.Distinct() != 1 {
		t.Fatalf("evictions %+v; group 0 holds %d, group 1 %d", ev, c.Distinct(), g1.Distinct())
	}
	c.Clear() // one AllBlocksCleared for every group
	if ev = c.TakeEvents(); len(ev) != 1 || ev[0].Kind != Cleared || c.Distinct() != 0 {
		t.Fatalf("clear: %+v", ev)
	}
}
