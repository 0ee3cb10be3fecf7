package pool

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// TestTableMatchesMap drives the open-addressing table and a Go map with
// the same random inserts and deletes (small key space: long probe runs,
// many backward shifts) and compares them after every step.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tb := newTable(1, true)
	ref := map[uint64]uint64{}
	for step := 0; step < 200000; step++ {
		k := slotKey(uint64(rng.IntN(5000)))
		if step%50000 < 25000 || rng.IntN(2) == 0 {
			if i := tb.lookup(k); i < 0 {
				i = tb.insert(k)
				tb.parents[i] = k ^ 0xff
				tb.cols[0][i] = 1
				ref[k] = k ^ 0xff
			}
		} else if i := tb.lookup(k); i >= 0 {
			tb.remove(i)
			delete(ref, k)
		}
		if step%997 == 0 {
			if tb.count != len(ref) {
				t.Fatalf("step %d: count %d, map %d", step, tb.count, len(ref))
			}
			for k, p := range ref {
				i := tb.lookup(k)
				if i < 0 || tb.parents[i] != p || tb.cols[0][i] != 1 {
					t.Fatalf("step %d: key %x lost or moved without its values", step, k)
				}
			}
		}
	}
	n := 0
	for _, k := range tb.keys {
		if k != 0 {
			n++
		}
	}
	if n != len(ref) {
		t.Fatalf("%d occupied slots, %d keys", n, len(ref))
	}
}

func streamOf(t *testing.T, w *snapshot.Worker, rank int) *snapshot.Stream {
	t.Helper()
	for i := range w.Streams {
		if w.Streams[i].Rank == rank {
			return &w.Streams[i]
		}
	}
	t.Fatalf("worker %s has no stream rank %d", w.Name, rank)
	return nil
}

func newCopy(e collectors.KVEvent) collectors.KVEvent { e.Origin = collectors.OriginNew; return e }

func TestBlockIndexRefcounts(t *testing.T) {
	gpu := func(e collectors.KVEvent) collectors.KVEvent { e.Medium = "GPU"; return e }
	cpu := func(e collectors.KVEvent) collectors.KVEvent { e.Medium = "CPU"; return e }
	cases := []struct {
		name        string
		events      []collectors.KVEvent
		wantBlocks  int
		wantUnknown uint64
	}{
		// vLLM's kv_cache_report_mode="full" stores reused blocks again:
		// a touch, which one removal ends.
		{"stored twice is a re-announce, removed once goes", []collectors.KVEvent{stored(0, false, 7), stored(0, false, 7), removed(7)}, 0, 0},
		{"a re-announce adds no reference", []collectors.KVEvent{stored(0, false, 7), stored(0, false, 7), removed(7), removed(7)}, 0, 1},
		// A producer that says a store is a new copy (origin NEW) is
		// believed: two physical copies, two removals.
		{"a new copy stays until both are removed", []collectors.KVEvent{stored(0, false, 7), newCopy(stored(0, false, 7)), removed(7)}, 1, 0},
		{"both copies removed", []collectors.KVEvent{stored(0, false, 7), newCopy(stored(0, false, 7)), removed(7), removed(7)}, 0, 0},
		// An offload tier refcounts (chunks re-announce shared hashes and
		// remove each reference); only the GPU's blocks are counted.
		{"offload chunks refcount", []collectors.KVEvent{gpu(stored(0, false, 7)), cpu(stored(0, false, 7)), cpu(stored(0, false, 7)), cpu(removed(7)), gpu(removed(7))}, 0, 0},
		{"never below zero", []collectors.KVEvent{stored(0, false, 7), removed(7), removed(7), stored(0, false, 7)}, 1, 1},
		{"unknown hash counted, not an error", []collectors.KVEvent{stored(0, false, 1, 2), removed(99)}, 2, 1},
		{"hash 0 is a hash", []collectors.KVEvent{stored(0, false, 0), stored(0, true, 5)}, 2, 0},
		{"two media count once", []collectors.KVEvent{gpu(stored(0, false, 7)), cpu(stored(0, false, 7))}, 1, 0},
		{"removed from one medium, resident in the other", []collectors.KVEvent{gpu(stored(0, false, 7)), cpu(stored(0, false, 7)), cpu(removed(7))}, 1, 0},
		{"removed from a medium it never was in", []collectors.KVEvent{gpu(stored(0, false, 7)), collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: []uint64{7}, Medium: "DISK"}}, 1, 1},
		{"clear drops all media", []collectors.KVEvent{gpu(stored(0, false, 7, 8)), cpu(stored(0, false, 9)), {Kind: collectors.AllBlocksCleared}, stored(0, false, 10)}, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			s.Apply(batch("w0", 0, 0, at(0), c.events...))
			snap := s.Snapshot(at(1))
			w := row(t, snap, "w0")
			st := streamOf(t, w, 0)
			if blocksOf(w.Blocks) != c.wantBlocks || st.Blocks != c.wantBlocks || blocksOf(snap.Pool.Blocks) != c.wantBlocks || st.UnknownRemovals != c.wantUnknown {
				t.Fatalf("blocks worker %d stream %d pool %d unknown removals %d; want %d and %d",
					blocksOf(w.Blocks), st.Blocks, blocksOf(snap.Pool.Blocks), st.UnknownRemovals, c.wantBlocks, c.wantUnknown)
			}
		})
	}
}

func TestBlockIndexRanksAndWorkers(t *testing.T) {
	s := newTestState("w0", "w1")
	// w0 runs two DP ranks that share a system prompt (1, 2) and each hold
	// their own suffix; w1 holds the shared prompt too.
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 1, 2, 3)))
	s.Apply(batch("w0", 1, 0, at(0), stored(0, false, 1, 2, 4, 5)))
	s.Apply(batch("w1", 0, 0, at(0), stored(0, false, 1, 2, 6)))
	snap := s.Snapshot(at(1))
	w0, w1 := row(t, snap, "w0"), row(t, snap, "w1")
	if blocksOf(w0.Blocks) != 5 || streamOf(t, w0, 0).Blocks != 3 || streamOf(t, w0, 1).Blocks != 4 || blocksOf(w1.Blocks) != 3 {
		t.Fatalf("w0 %d (ranks %d, %d) w1 %d; want 5 (3, 4) and 3", blocksOf(w0.Blocks), w0.Streams[0].Blocks, w0.Streams[1].Blocks, blocksOf(w1.Blocks))
	}
	if blocksOf(snap.Pool.Blocks) != 6 {
		t.Fatalf("pool distinct blocks = %d, want 6", blocksOf(snap.Pool.Blocks))
	}
	if r := s.index.replicas(slotKey(1)); r != 2 {
		t.Fatalf("replicas of a hash held by both workers (twice on w0) = %d, want 2", r)
	}
	// Rank 1 clears: w0 keeps rank 0's blocks; the shared prompt is still on w0.
	s.Apply(batch("w0", 1, 1, at(2), collectors.KVEvent{Kind: collectors.AllBlocksCleared}))
	snap = s.Snapshot(at(3))
	if w0 := row(t, snap, "w0"); blocksOf(w0.Blocks) != 3 || streamOf(t, w0, 1).Blocks != 0 || blocksOf(snap.Pool.Blocks) != 4 {
		t.Fatalf("after rank 1 cleared: w0 %d, rank 1 %d, pool %d; want 3, 0, 4", blocksOf(w0.Blocks), streamOf(t, w0, 1).Blocks, blocksOf(snap.Pool.Blocks))
	}
	if r := s.index.replicas(slotKey(1)); r != 2 {
		t.Fatalf("replicas after one rank cleared = %d, want 2", r)
	}
	// w1 restarts: a StreamReset drops its blocks.
	s.Apply(&collectors.StreamReset{Worker: "w1", Rank: 0, Reason: "restart", At: at(4)})
	snap = s.Snapshot(at(5))
	if w1 := row(t, snap, "w1"); blocksOf(w1.Blocks) != 0 || streamOf(t, w1, 0).Restarts != 1 || blocksOf(snap.Pool.Blocks) != 3 {
		t.Fatalf("after reset: w1 %d blocks, restarts %d, pool %d", blocksOf(w1.Blocks), streamOf(t, w1, 0).Restarts, blocksOf(snap.Pool.Blocks))
	}
	if r := s.index.replicas(slotKey(1)); r != 1 {
		t.Fatalf("replicas after w1 reset = %d, want 1", r)
	}
}

func TestHistoryLostKeepsBlocksUntilCleared(t *testing.T) {
	s := newTestState("w5")
	s.Apply(scrape("w5", at(0), counters("", 1, 0, 0)))
	s.Apply(batch("w5", 0, 100, at(1), stored(0, false, 1, 2, 3)))
	lost := collectors.StreamIncident{Kind: "history_lost", FromSeq: 88121, ToSeq: 89360, Missing: 1240, Lost: 1240, Start: at(2)}
	st := status("w5", 0, snapshot.StreamHistoryLost, at(2), lost)
	st.HasSeq, st.LastSeq, st.Batches = true, 89400, 101
	s.Apply(st)
	s.Apply(batch("w5", 0, 89361, at(3), stored(3, true, 4)))

	snap := s.Snapshot(at(4))
	w := row(t, snap, "w5")
	if blocksOf(w.Blocks) != 4 || w.IndexComplete || snap.Pool.IndexComplete || w.State != "stale" || w.Streams[0].State != "history_lost" {
		t.Fatalf("history lost: blocks %d complete %v/%v state %q stream %q; want 4 blocks kept, incomplete, stale",
			blocksOf(w.Blocks), w.IndexComplete, snap.Pool.IndexComplete, w.State, w.Streams[0].State)
	}
	want := "w5 events: history lost at seq 88121 (1 240 batches) — its index is incomplete since 14:00:02"
	if len(snap.Alerts) != 1 || snap.Alerts[0].Text != want || snap.Alerts[0].Severity != "critical" {
		t.Fatalf("alerts = %+v\nwant %q", snap.Alerts, want)
	}
	// The collector keeps saying history_lost; the publisher clears all
	// blocks: from then on the index is complete again.
	s.Apply(batch("w5", 0, 89362, at(5), collectors.KVEvent{Kind: collectors.AllBlocksCleared}, stored(0, false, 9)))
	st2 := *st
	st2.At = at(6)
	s.Apply(&st2)
	snap = s.Snapshot(at(6))
	w = row(t, snap, "w5")
	if blocksOf(w.Blocks) != 1 || !w.IndexComplete || w.State != "ok" || w.Streams[0].State != "live" || len(snap.Alerts) != 0 {
		t.Fatalf("after clear: blocks %d complete %v state %q stream %q alerts %v", blocksOf(w.Blocks), w.IndexComplete, w.State, w.Streams[0].State, snap.Alerts)
	}
	// A new loss after the clear is a new incident: stale again.
	lost2 := lost
	lost2.Start, lost2.FromSeq = at(7), 90000
	s.Apply(status("w5", 0, snapshot.StreamHistoryLost, at(7), lost, lost2))
	if w := row(t, s.Snapshot(at(8)), "w5"); w.IndexComplete || blocksOf(w.Blocks) != 1 {
		t.Fatalf("second loss: complete %v blocks %d", w.IndexComplete, blocksOf(w.Blocks))
	}
}

func TestStreamRows(t *testing.T) {
	s := newTestState("w0")
	for i := 0; i < 30; i++ {
		s.Apply(batch("w0", 0, uint64(i), at(float64(i)), stored(0, false, uint64(100+i)), removed(uint64(100+i))))
	}
	gap := collectors.StreamIncident{Kind: "gap", FromSeq: 10, ToSeq: 14, Missing: 5, Replayed: 5, Start: at(10), End: at(12)}
	open := collectors.StreamIncident{Kind: "gap", FromSeq: 25, ToSeq: 27, Missing: 3, Start: at(26)}
	st := status("w0", 0, snapshot.StreamReplaying, at(29), gap, open)
	st.HasSeq, st.LastSeq, st.Batches, st.Gaps, st.Missing, st.Replayed = true, 29, 30, 2, 8, 5
	st.LastMessage, st.LastTS, st.DecodeErrors = at(29), 1.7959e9, 0
	s.Apply(st)
	snap := s.Snapshot(at(30))
	w := row(t, snap, "w0")
	r := w.Streams[0]
	if r.State != "replaying" || r.LastSeq == nil || *r.LastSeq != 29 || r.Batches != 30 || r.Events != 60 ||
		r.Gaps != 2 || r.Missing != 8 || r.Replayed != 5 || r.Endpoint != "tcp://127.0.0.1:5557" {
		t.Fatalf("stream row = %+v", r)
	}
	// 30 batches over 30 s of coverage.
	if !eqp(r.BatchesPerS, f(1)) || !eqp(r.EventsPerS, f(2)) || !eqp(r.LastMessageAgeS, f(1)) || !eqp(r.LastTS, f(1.7959e9)) {
		t.Fatalf("rates %v %v age %v ts %v", show(r.BatchesPerS), show(r.EventsPerS), show(r.LastMessageAgeS), show(r.LastTS))
	}
	if len(r.History) != 2 || r.History[0].End == nil || !eqp(r.History[0].DurationS, f(2)) ||
		r.History[1].End != nil || !eqp(r.History[1].DurationS, f(4)) {
		t.Fatalf("history = %+v", r.History)
	}
	if w.IndexComplete || len(snap.Alerts) != 1 || !strings.Contains(snap.Alerts[0].Text, "gap at seq 25–27 (3 batches) being replayed since 14:00:26") {
		t.Fatalf("replaying: complete %v alerts %+v", w.IndexComplete, snap.Alerts)
	}
}

func TestDepthThroughParents(t *testing.T) {
	s := newTestState("w0", "w1")
	// w0: a root block 1 and chain 1→2→3; w1 holds 4 whose parent 3 it
	// never stored (joined late) — resolved through w0.
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 1, 2), stored(2, true, 3)))
	s.Apply(batch("w1", 0, 0, at(0), stored(3, true, 4)))
	memo := map[uint64]depthInfo{}
	cases := []struct {
		hash uint64
		want depthInfo
	}{{1, depthInfo{1, false}}, {3, depthInfo{3, false}}, {4, depthInfo{4, false}}, {77, depthInfo{0, true}}}
	for _, c := range cases {
		if got := s.index.depth(slotKey(c.hash), memo); got != c.want {
			t.Errorf("depth(%d) = %+v, want %+v", c.hash, got, c.want)
		}
	}
	// Evict the root: the chain becomes orphan, counted up to the gap.
	s.Apply(batch("w0", 0, 1, at(1), removed(1)))
	memo = map[uint64]depthInfo{}
	if got := s.index.depth(slotKey(4), memo); got != (depthInfo{3, true}) {
		t.Fatalf("depth after the root left = %+v, want 3 blocks, orphan", got)
	}
	// A parent cycle from corrupt input ends as an orphan, not a hang.
	s.Apply(batch("w1", 0, 1, at(2), stored(11, true, 10), stored(10, true, 11)))
	if got := s.index.depth(slotKey(10), map[uint64]depthInfo{}); !got.orphan {
		t.Fatalf("cycle depth = %+v, want orphan", got)
	}
}

// TestPrefetchRemovalsRun checks where a prefetch of vLLM's one-block
// removals stops: at another kind, a removal of several blocks, another
// medium, or removalRun events; the apply prefetches again from there, so
// a wrong end would leave removals waiting on cold cache lines or touch
// lines for events of another medium's column.
func TestPrefetchRemovalsRun(t *testing.T) {
	x, p := newPoolIndex(0), newPubIndex()
	m := p.column("GPU", 0, true)
	rm := func(medium string, hs ...uint64) collectors.KVEvent {
		return collectors.KVEvent{Kind: collectors.BlockRemoved, Medium: medium, Hashes: hs}
	}
	evs := []collectors.KVEvent{
		{Kind: collectors.BlockStored, Hashes: []uint64{1, 2}},
		rm("GPU", 3), rm("GPU", 4), rm("GPU", 5),
		rm("GPU", 6, 7),
		rm("GPU", 8), rm("CPU", 9),
	}
	for _, c := range []struct{ from, want int }{{1, 4}, {2, 4}, {5, 6}} {
		if got := x.prefetchRemovals(p, m, evs, c.from); got != c.want {
			t.Errorf("run from event %d ends at %d, want %d", c.from, got, c.want)
		}
	}
	long := make([]collectors.KVEvent, 3*removalRun)
	for i := range long {
		long[i] = rm("GPU", uint64(i+1))
	}
	if got := x.prefetchRemovals(p, m, long, 10); got != 10+removalRun {
		t.Errorf("a long run is prefetched to %d, want %d (removalRun at a time)", got, 10+removalRun)
	}
}
