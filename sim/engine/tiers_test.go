package engine

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/offload"
)

// A hybrid hit is the longest group 0 holds whose window group 1 holds
// too (a run of blocks from the start counts, shorter than a window).
func TestWindowHit(t *testing.T) {
	e := New(Config{NumBlocks: 32, MaxRunning: 4, MaxWaiting: 4, TokenBudget: 256, Tiers: Tiers{Window: 64}}) // 4 blocks
	hs := make([]uint64, 10)
	for i := range hs {
		hs[i] = uint64(100 + i)
	}
	hold := func(idx ...int) {
		for _, i := range idx {
			ids, _ := e.cache.Allocate(1, nil)
			e.sw.Store(ids, hs[i:i+1], 0, false, make([]uint32, 16))
		}
	}
	hold(5, 6, 7, 8, 9)
	if m, lo := e.windowHit(hs, 10); m != 10 || lo != 6 {
		t.Fatalf("window [6,10) held: hit %d from %d, want 10 from 6", m, lo)
	}
	if m, _ := e.windowHit(hs, 8); m != 0 {
		t.Fatalf("group 0 holds 8 blocks, group 1 only [5,8): hit %d, want 0", m)
	}
	hold(0, 1, 2)
	if m, lo := e.windowHit(hs, 5); m != 3 || lo != 0 {
		t.Fatalf("[0,3) held, fewer than a window: hit %d from %d, want 3 from 0", m, lo)
	}
}

// A hybrid engine stores every new block in both groups, frees its
// window's leftovers while it runs, and with a full report stores the
// reused prefix again: group 0 all of it, group 1 its window's blocks
// with the prefix's tokens.
func TestHybridGroupsAndReports(t *testing.T) {
	e := New(Config{NumBlocks: 256, MaxRunning: 4, MaxWaiting: 4, TokenBudget: 64, StepBase: time.Millisecond, Tiers: Tiers{Window: 64}})
	sys := tokens(160, 1) // 10 blocks
	var evs []kvcache.Event
	collect := func(_ time.Duration, ev []kvcache.Event) { evs = append(evs, ev...) }
	e.Submit(request("a", sys, 20, 2, 0, 1))
	for now := time.Duration(0); e.busy() || now == 0; now += time.Millisecond {
		e.Run(now, collect)
	}
	stores := map[int32]int{}
	for _, ev := range evs {
		if ev.Kind == kvcache.Stored {
			stores[ev.Group] += len(ev.Hashes)
			if ev.Group == 1 && (ev.Spec != "sliding_window" || ev.Window != 64) {
				t.Fatalf("group 1 store %+v", ev)
			}
		}
	}
	if stores[0] != 11 || stores[1] != 11 || e.Truth().Stored != 11 {
		t.Fatalf("stores by group %v, truth %+v; want 11 blocks in each", stores, e.Truth())
	}
	evs = nil
	r := request("b", sys, 20, 2, 0, 2)
	r.ReportFull = true
	e.Submit(r)
	for now := time.Duration(0); e.busy() || now == 0; now += time.Millisecond {
		e.Run(now+time.Second, collect)
	}
	var rep []kvcache.Event
	for _, ev := range evs {
		if ev.Reused {
			rep = append(rep, ev)
		}
	}
	if len(rep) != 2 || len(rep[0].Hashes) != 10 || rep[0].HasParent || len(rep[1].Hashes) != 4 || len(rep[1].Tokens) != 160 ||
		rep[1].Hashes[0] != r.Hashes[6] || e.Truth().Reported != 14 {
		t.Fatalf("reports %+v, truth %+v: want group 0's 10 blocks, group 1's window of 4 over 160 tokens", rep, e.Truth())
	}
}

// An offloading engine stores what it computes to CPU; once the GPU has
// evicted a prefix, a request that needs it loads it back from CPU
// (counted as external hits and loads), and a request that finds nothing
// anywhere counts a query and no hit.
func TestOffloadLoadsBack(t *testing.T) {
	e := New(Config{NumBlocks: 30, MaxRunning: 2, MaxWaiting: 8, TokenBudget: 512, StepBase: time.Millisecond,
		Tiers: Tiers{Main: true, Offload: offload.Config{Mode: offload.Chunks, ChunkBlocks: 2, Blocks: 256}}})
	doc := tokens(320, 3) // 20 blocks
	var evs []kvcache.Event
	run := func(r *Request) {
		e.Submit(r)
		for now := r.Arrival; e.busy() || now == r.Arrival; now += time.Millisecond {
			e.Run(now, func(_ time.Duration, ev []kvcache.Event) { evs = append(evs, ev...) })
		}
		e.TakeResults()
	}
	run(request("a", doc, 0, 1, 0, 1))
	run(request("other", tokens(480, 4), 0, 1, time.Second, 2)) // 30 blocks: evicts a's from the GPU
	if e.cache.Match(request("a2", doc, 0, 1, 0, 1).Hashes) != 0 {
		t.Fatal("the GPU still holds the document")
	}
	before := len(evs)
	run(request("a2", doc, 16, 1, 2*time.Second, 3))
	// The GPU stores the loaded blocks as it stores computed ones (the
	// wire cannot tell them apart); the sim's own bookkeeping can.
	loaded, gpu := 0, 0
	for _, ev := range evs[before:] {
		if ev.Kind == kvcache.Stored && ev.GPU() {
			loaded += ev.Loaded
			gpu += len(ev.Hashes)
		}
	}
	if loaded != 20 || gpu != 21 {
		t.Fatalf("a2 stored %d GPU blocks, %d of them loaded: want 21 (the document and the question), 20 loaded", gpu, loaded)
	}
	st := e.Snapshot()
	if st.OffloadLoadBlocks != 20 || st.ExtHits != 320 || e.host.Loaded != 20 || st.PromptBySource[SourceExternal] != 320 || st.ExtQueries == 0 {
		t.Fatalf("loads %g blocks, external hits %g tokens, prompt by source %v", st.OffloadLoadBlocks, st.ExtHits, st.PromptBySource)
	}
	if sum := st.PromptBySource[0] + st.PromptBySource[1] + st.PromptBySource[2]; sum != st.PromptTokens {
		t.Fatalf("prompt tokens by source add up to %g, prompt tokens %g", sum, st.PromptTokens)
	}
	cpu := 0
	for _, ev := range evs {
		if ev.Medium == "CPU" && ev.Kind == kvcache.Stored {
			cpu += len(ev.Hashes)
		}
	}
	if uint64(cpu) != e.host.Stored || float64(cpu) != st.OffloadStoreBlocks {
		t.Fatalf("%d CPU blocks published, %d stored, %g counted", cpu, e.host.Stored, st.OffloadStoreBlocks)
	}
}
