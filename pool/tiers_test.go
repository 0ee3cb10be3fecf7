package pool

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Hand-built streams with scripted truth for the six ways engines in
// service break "every BlockStored is a new GPU block of one prefix tree"
// (issue 23): hybrid groups, tiers, offload placeholders, re-announces,
// store-only publishers (and unknown event types, in the collector).

func inGroup(e collectors.KVEvent, g int32, kind string, window int32) collectors.KVEvent {
	e.Group, e.GroupKind, e.Window = g, kind, window
	return e
}

func onMedium(e collectors.KVEvent, medium string) collectors.KVEvent { e.Medium = medium; return e }

func groupOf(t *testing.T, w *snapshot.Worker, g int) snapshot.Group {
	t.Helper()
	for _, x := range w.Groups {
		if x.Group == g {
			return x
		}
	}
	t.Fatalf("%s has no group %d: %+v", w.Name, g, w.Groups)
	return snapshot.Group{}
}

func tierOf(t *testing.T, tiers []snapshot.Tier, medium string) snapshot.Tier {
	t.Helper()
	for _, x := range tiers {
		if x.Medium == medium {
			return x
		}
	}
	t.Fatalf("no tier %s in %+v", medium, tiers)
	return snapshot.Tier{}
}

// TestHybridGroupsKeptApart: a hybrid model publishes a full-attention
// group and a sliding-window group under the same block hashes (vLLM mixes
// no group id into them), the sliding-window events spanning the whole
// prompt but naming only the blocks inside the window. Only group 0 counts
// in blocks, replicas, resident tokens and stores; group 1 is shown as such.
func TestHybridGroupsKeptApart(t *testing.T) {
	s := newTestState("w0", "w1")
	full := inGroup(stored(0, false, 1, 2, 3, 4), 0, "full_attention", 0)
	// Group 1: tokens of the whole span (64), two hashes: fails the token
	// rule on purpose, as llm-d says sliding-window events do.
	sw := inGroup(stored(0, false, 3, 4), 1, "sliding_window", 32)
	sw.NumTokens = 64
	s.Apply(batch("w0", 0, 0, at(1), full, sw))
	s.Apply(batch("w1", 0, 0, at(1), inGroup(stored(0, false, 1, 2), 0, "full_attention", 0)))
	// The window slides: group 1 drops block 3, which group 0 still holds.
	s.Apply(batch("w0", 0, 1, at(2), inGroup(removed(3), 1, "", 0)))
	snap := s.Snapshot(at(3))
	w0 := row(t, snap, "w0")
	if blocksOf(w0.Blocks) != 4 || blocksOf(w0.Cache.ResidentTokens) != 64 {
		t.Fatalf("w0 blocks %d resident tokens %d; want group 0's 4 blocks, 64 tokens", blocksOf(w0.Blocks), blocksOf(w0.Cache.ResidentTokens))
	}
	g0, g1 := groupOf(t, w0, 0), groupOf(t, w0, 1)
	if g0.Kind != "full_attention" || !g0.Prefix || g0.Blocks != 4 || blocksOf(g0.BlockSize) != 16 {
		t.Fatalf("group 0 %+v", g0)
	}
	if g1.Kind != "sliding_window" || g1.Prefix || g1.Blocks != 1 || blocksOf(g1.SlidingWindow) != 32 {
		t.Fatalf("group 1 %+v: want sliding_window, not prefix, 1 block, window 32", g1)
	}
	if st := w0.Streams[0]; st.Inconsistent != 0 || st.Blocks != 4 {
		t.Fatalf("stream %+v: a sliding-window event is not held to the full-attention token rule", st)
	}
	if r := s.index.replicas(slotKey(3)); r != 1 {
		t.Fatalf("replicas of block 3 = %d, want 1 (w0's group 0)", r)
	}
	if r := s.index.replicas(slotKey(1)); r != 2 {
		t.Fatalf("replicas of block 1 = %d, want 2", r)
	}
	if st := w0.Cache.StoredPerS; st == nil || !near(*st*w0Covered(snap, w0), 4) {
		t.Fatalf("stored/s %v: want the 4 group-0 stores over the window", st)
	}
	// A full-attention event whose tokens do not fill its blocks: counted,
	// never indexed or guessed at.
	bad := inGroup(stored(4, true, 9), 0, "full_attention", 0)
	bad.NumTokens = 20
	s.Apply(batch("w0", 0, 2, at(4), bad))
	snap = s.Snapshot(at(5))
	if w0 := row(t, snap, "w0"); w0.Streams[0].Inconsistent != 1 || blocksOf(w0.Blocks) != 4 || s.index.replicas(slotKey(9)) != 0 {
		t.Fatalf("inconsistent %d blocks %d: want 1 and 4", w0.Streams[0].Inconsistent, blocksOf(w0.Blocks))
	}
}

// w0Covered is the seconds the worker's cache window covers (its rates ×
// this = counts).
func w0Covered(snap *snapshot.Snapshot, w *snapshot.Worker) float64 {
	return snap.At.Sub(t0).Seconds() - 1 // the first live batch came at at(1)
}

// TestTiersNeverFoldIntoGPU: every medium is a tier of its own under the
// name it was published with; only GPU blocks are the worker's blocks and
// resident tokens; the pool sums each medium.
func TestTiersNeverFoldIntoGPU(t *testing.T) {
	s := newTestState("w0", "w1")
	remote := onMedium(stored(0, false, 30), "STORAGE")
	remote.Locality = collectors.LocalityRemote
	s.Apply(batch("w0", 0, 0, at(1),
		stored(0, false, 1, 2),
		onMedium(stored(0, false, 1, 2, 10, 11, 12, 13, 14, 15), "CPU"),
		remote,
		onMedium(stored(0, false, 40, 41), "CPU_TIER2")))
	s.Apply(batch("w1", 0, 0, at(1), stored(0, false, 1), onMedium(stored(0, false, 1, 20), "CPU")))
	s.Apply(batch("w0", 0, 1, at(2), onMedium(removed(10, 11), "CPU")))
	snap := s.Snapshot(at(3))
	w0 := row(t, snap, "w0")
	if blocksOf(w0.Blocks) != 2 || blocksOf(w0.Cache.ResidentTokens) != 32 {
		t.Fatalf("w0 blocks %d resident %d: the GPU's only (2, 32)", blocksOf(w0.Blocks), blocksOf(w0.Cache.ResidentTokens))
	}
	if len(w0.Tiers) != 4 || w0.Tiers[0].Medium != "GPU" {
		t.Fatalf("tiers %+v: want GPU first, then CPU, CPU_TIER2, STORAGE", w0.Tiers)
	}
	cpu := tierOf(t, w0.Tiers, "CPU")
	if blocksOf(cpu.Blocks) != 6 || blocksOf(cpu.Tokens) != 96 || cpu.StoreOnly {
		t.Fatalf("CPU tier %+v: want 6 blocks, 96 tokens", cpu)
	}
	if st := tierOf(t, w0.Tiers, "STORAGE"); st.Locality != "REMOTE" || blocksOf(st.Blocks) != 1 {
		t.Fatalf("STORAGE tier %+v", st)
	}
	if u := tierOf(t, w0.Tiers, "CPU_TIER2"); blocksOf(u.Blocks) != 2 {
		t.Fatalf("a medium kvtop does not know is kept under its name: %+v", u)
	}
	if c := tierOf(t, w0.Tiers, "CPU"); c.RemovedPerS == nil || !near(*c.RemovedPerS*2, 2) || !near(*c.StoredPerS*2, 8) {
		t.Fatalf("CPU rates %+v: 8 stored, 2 removed over 2 s", c)
	}
	if p := tierOf(t, snap.Pool.Tiers, "CPU"); blocksOf(p.Blocks) != 8 {
		t.Fatalf("pool CPU tier %+v: want w0's 6 + w1's 2", p)
	}
	if p := tierOf(t, snap.Pool.Tiers, "GPU"); blocksOf(p.Blocks) != 3 || blocksOf(snap.Pool.Blocks) != 2 {
		t.Fatalf("pool GPU tier %+v (blocks per worker summed: 3), pool distinct %d (2)", p, blocksOf(snap.Pool.Blocks))
	}
	raw, _ := json.Marshal(snap)
	for _, k := range []string{`"tiers":[{"medium":"GPU"`, `"medium":"CPU_TIER2","blocks":2,"tokens":32`, `"locality":"REMOTE"`, `"groups":[{"group":0,"kind":"full_attention"`} {
		if !strings.Contains(string(raw), k) {
			t.Fatalf("snapshot JSON lacks %s", k)
		}
	}
}

// TestOffloadPlaceholdersAndChunks: vLLM's CPU offload without
// self-describing events stores placeholders (no tokens, block size 0, no
// parent, one key each), refcounted per (engine, medium, hash); with them,
// chunk events re-announce shared hashes, each reference removed on its
// own. Neither is ever a root for the hash-boundary check.
func TestOffloadPlaceholdersAndChunks(t *testing.T) {
	s := newTestState("w0", "w1")
	ph := func(h uint64) collectors.KVEvent {
		return collectors.KVEvent{Kind: collectors.BlockStored, Hashes: []uint64{h}, Medium: "CPU"}
	}
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2), ph(0xc1), ph(0xc1), ph(0xc2)))
	s.Apply(batch("w0", 0, 1, at(2), onMedium(removed(0xc1), "CPU")))
	snap := s.Snapshot(at(3))
	w0 := row(t, snap, "w0")
	cpu := tierOf(t, w0.Tiers, "CPU")
	if blocksOf(cpu.Blocks) != 2 || cpu.Tokens != nil || !strings.Contains(cpu.Note, "block size") {
		t.Fatalf("CPU %+v: two keys resident (0xc1 held twice, removed once), tokens unknown", cpu)
	}
	if blocksOf(w0.Blocks) != 2 || s.index.replicas(slotKey(0xc2)) != 0 {
		t.Fatalf("placeholders joined the GPU's prefix blocks: blocks %d", blocksOf(w0.Blocks))
	}
	// Self-describing chunks: two chunks share block 5; the first block of
	// each carries a root fingerprint, and w1 holds the same content on its
	// GPU under other hashes. Offload events are not roots: no mismatch.
	c1 := onMedium(rootStore(77, 5, 6), "CPU")
	c2 := onMedium(rootStore(77, 5, 7), "CPU")
	s.Apply(batch("w0", 0, 2, at(4), c1, c2))
	s.Apply(batch("w1", 0, 0, at(4), rootStore(77, 0x99, 0x98)))
	s.Apply(batch("w0", 0, 3, at(5), onMedium(removed(5, 6), "CPU")))
	snap = s.Snapshot(at(6))
	if cpu := tierOf(t, row(t, snap, "w0").Tiers, "CPU"); blocksOf(cpu.Blocks) != 4 {
		t.Fatalf("CPU %+v: 0xc1, 0xc2, 5 (one reference left) and 7", cpu)
	}
	if hm := snap.Pool.HashMismatch; len(hm.Pairs) != 0 || alertOf(snap, snapshot.AlertHashMismatch) != nil {
		t.Fatalf("hash mismatch from offload events: %+v", hm)
	}
}

// TestReannouncesAreTouches: with kv_cache_report_mode="full" vLLM stores
// a reused prefix again from block 0 (parent none). Those are touches:
// counted as re-announced, not as stores, not as thrash, not a new
// residency; the new blocks after them read as a request under the reused
// prefix, as without the report mode.
func TestReannouncesAreTouches(t *testing.T) {
	run := func(full bool) (*State, *snapshot.Snapshot) {
		s := newTestState("w0")
		s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3)))
		s.Apply(batch("w0", 0, 1, at(1.5), removed(3))) // evicted: a later store of 3 is thrash
		seq := uint64(2)
		for i := 0; i < 5; i++ {
			h := uint64(100 + i)
			if full {
				// One event: the reused blocks re-announced, then the new one.
				s.Apply(batch("w0", 0, seq, at(2+float64(i)), stored(0, false, 1, 2, h)))
			} else {
				s.Apply(batch("w0", 0, seq, at(2+float64(i)), stored(2, true, h)))
			}
			seq++
		}
		return s, s.Snapshot(at(10))
	}
	_, plain := run(false)
	s, full := run(true)
	w, p := row(t, full, "w0"), row(t, plain, "w0")
	if w.Streams[0].Reannounced != 10 || p.Streams[0].Reannounced != 0 {
		t.Fatalf("reannounced %d (plain %d), want 10 and 0", w.Streams[0].Reannounced, p.Streams[0].Reannounced)
	}
	if blocksOf(w.Blocks) != blocksOf(p.Blocks) || *w.Cache.StoredPerS != *p.Cache.StoredPerS {
		t.Fatalf("blocks %d stored/s %v; without re-announces %d %v", blocksOf(w.Blocks), *w.Cache.StoredPerS, blocksOf(p.Blocks), *p.Cache.StoredPerS)
	}
	if *w.Cache.ThrashPerS != 0 {
		t.Fatalf("thrash %v from re-announces", *w.Cache.ThrashPerS)
	}
	if len(full.Prefixes) == 0 || len(plain.Prefixes) == 0 || full.Prefixes[0].ID != plain.Prefixes[0].ID ||
		!near(full.Prefixes[0].Requests, plain.Prefixes[0].Requests) {
		t.Fatalf("hot prefix with re-announces %+v, without %+v", full.Prefixes, plain.Prefixes)
	}
	// A store of an evicted block is still thrash, re-announces or not.
	s.Apply(batch("w0", 0, 20, at(11), stored(2, true, 3)))
	if w := row(t, s.Snapshot(at(12)), "w0"); *w.Cache.ThrashPerS == 0 {
		t.Fatal("a store of a block evicted moments before is thrash")
	}
	// origin REUSED is believed even for a block kvtop did not hold.
	reused := stored(0, false, 500)
	reused.Origin = collectors.OriginReused
	s.Apply(batch("w0", 0, 21, at(12), reused))
	if w := row(t, s.Snapshot(at(13)), "w0"); w.Streams[0].Reannounced != 11 || s.index.replicas(slotKey(500)) != 1 {
		t.Fatalf("origin REUSED: reannounced %d, replicas %d; want 11 and indexed", w.Streams[0].Reannounced, s.index.replicas(slotKey(500)))
	}
}

// TestStoreOnlyTier: a publisher that stores CPU blocks and never removes
// one (LMCache's multi-process connector) is store-only past its bound: its
// stores are not residency, are dropped from the index and said so; a
// removal after all ends it.
func TestStoreOnlyTier(t *testing.T) {
	s := newTestState("w0")
	s.storeOnlyAfter = 8
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1)))
	for i := 0; i < 4; i++ {
		h := uint64(1000 + 2*i)
		s.Apply(batch("w0", 0, uint64(1+i), at(1+float64(i)/10), onMedium(stored(0, false, h, h+1), "CPU")))
	}
	snap := s.Snapshot(at(2))
	cpu := tierOf(t, row(t, snap, "w0").Tiers, "CPU")
	if !cpu.StoreOnly || cpu.Blocks != nil || cpu.Note != "stored, no removals published" || cpu.StoredPerS == nil {
		t.Fatalf("CPU %+v: want store_only, blocks null, its store rate kept", cpu)
	}
	if s.index.entries != 1 {
		t.Fatalf("index entries %d: the store-only tier's blocks stay in memory", s.index.entries)
	}
	if p := tierOf(t, snap.Pool.Tiers, "CPU"); !p.StoreOnly || p.Blocks != nil {
		t.Fatalf("pool CPU %+v", p)
	}
	// A tier that removes is no store-only tier: its residency restarts.
	s.Apply(batch("w0", 0, 9, at(3), onMedium(removed(1000), "CPU"), onMedium(stored(0, false, 7), "CPU")))
	cpu = tierOf(t, row(t, s.Snapshot(at(4)), "w0").Tiers, "CPU")
	if cpu.StoreOnly || blocksOf(cpu.Blocks) != 1 || !strings.Contains(cpu.Note, "not counted") {
		t.Fatalf("CPU after a removal %+v", cpu)
	}
	// The GPU is never store-only, whatever it stores.
	for i := 0; i < 10; i++ {
		s.Apply(batch("w0", 0, uint64(10+i), at(5), stored(0, false, uint64(5000+i))))
	}
	if g := tierOf(t, row(t, s.Snapshot(at(6)), "w0").Tiers, "GPU"); g.StoreOnly || blocksOf(g.Blocks) != 11 {
		t.Fatalf("GPU %+v", g)
	}
}

// TestUnknownEventsByTypeInTheSnapshot: the collector's counts by type
// reach the stream row.
func TestUnknownEventsByTypeInTheSnapshot(t *testing.T) {
	s := newTestState("w0")
	st := status("w0", 0, snapshot.StreamLive, at(1))
	st.UnknownEvents, st.UnknownByType = 3, map[string]uint64{"BlockInactive": 3}
	s.Apply(st)
	raw, _ := json.Marshal(s.Snapshot(at(2)))
	if !strings.Contains(string(raw), `"unknown_events_by_type":{"BlockInactive":3}`) {
		t.Fatalf("no unknown_events_by_type in %s", raw)
	}
}

// TestStoreOnlyPastCapacity: where the page says what the tier holds
// (SGLang's host pool), a tier that has stored more than that and never
// removed a block is store-only, long before the blind bound.
func TestStoreOnlyPastCapacity(t *testing.T) {
	s := newTestState("w0")
	page := counters("", 0, 0, 0)
	page.Offload = &collectors.Offload{HostUsedTokens: f(64), HostTotalTokens: f(64)} // 4 blocks of 16
	s.Apply(scrape("w0", at(0), page))
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1), onMedium(stored(0, false, 10, 11, 12, 13), "CPU_PINNED")))
	if c := tierOf(t, row(t, s.Snapshot(at(1)), "w0").Tiers, "CPU_PINNED"); c.StoreOnly || blocksOf(c.Blocks) != 4 {
		t.Fatalf("%+v: 4 blocks fit in 4", c)
	}
	s.Apply(batch("w0", 0, 1, at(2), onMedium(stored(0, false, 14), "CPU_PINNED")))
	if c := tierOf(t, row(t, s.Snapshot(at(2)), "w0").Tiers, "CPU_PINNED"); !c.StoreOnly || c.Blocks != nil {
		t.Fatalf("%+v: a fifth block in a tier of 4, none removed", c)
	}
}
