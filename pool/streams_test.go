package pool

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func alertOf(snap *snapshot.Snapshot, kind snapshot.AlertKind) *snapshot.Alert {
	for i := range snap.Alerts {
		if snap.Alerts[i].Kind == kind {
			return &snap.Alerts[i]
		}
	}
	return nil
}

// A disconnected stream freezes the index (the PUB drops everything while
// no SUB listens): the worker is stale and an alert says since when. A
// stream still connecting is stale too once past its grace.
func TestDisconnectedAndConnectingStreamsAreStale(t *testing.T) {
	s := newTestState("w3", "w4", "w5")
	for _, w := range []string{"w3", "w4", "w5"} {
		s.Apply(scrape(w, at(0), counters("", 1, 0, 0)))
	}
	s.Apply(batch("w3", 0, 0, at(1), stored(0, false, 1, 2)))
	disc := status("w3", 0, snapshot.StreamDisconnected, at(5),
		collectors.StreamIncident{Kind: "disconnected", FromSeq: 0, Start: at(5)})
	s.Apply(disc)
	s.Apply(status("w4", 0, snapshot.StreamConnecting, at(0)))
	s.Apply(status("w5", 0, snapshot.StreamConnecting, at(0)))
	s.Apply(status("w5", 0, snapshot.StreamLive, at(0.5)))

	// Within the grace a connecting stream is no alarm (the worker is ok),
	// but nothing of it is known: the index is not complete.
	early := s.Snapshot(at(1))
	if w4 := row(t, early, "w4"); w4.IndexComplete || w4.State != "ok" || alertOf(early, "not_connected") != nil {
		t.Fatalf("connecting for 1 s: complete %v state %q alerts %+v", w4.IndexComplete, w4.State, early.Alerts)
	}

	snap := s.Snapshot(at(10))
	w3 := row(t, snap, "w3")
	if w3.IndexComplete || w3.State != "stale" || snap.Pool.IndexComplete || blocksOf(w3.Blocks) != 2 {
		t.Fatalf("disconnected: complete %v state %q pool complete %v blocks %d", w3.IndexComplete, w3.State, snap.Pool.IndexComplete, blocksOf(w3.Blocks))
	}
	a := alertOf(snap, "disconnected")
	if a == nil || a.Text != "w3 events: disconnected since 14:00:05 — index frozen" || a.Subject != "w3" || !a.Since.Equal(at(5)) {
		t.Fatalf("disconnected alert = %+v", a)
	}
	w4 := row(t, snap, "w4")
	if w4.IndexComplete || w4.State != "stale" || w4.Blocks != nil {
		t.Fatalf("connecting for 10 s: complete %v state %q blocks %v", w4.IndexComplete, w4.State, w4.Blocks)
	}
	a = alertOf(snap, "not_connected")
	if a == nil || a.Text != "w4 events: not connected to tcp://127.0.0.1:5557 since 14:00:00 — nothing indexed for w4" {
		t.Fatalf("not connected alert = %+v", a)
	}
	// Connected but idle since: no alarm, but what it holds is unknown
	// (it may have stored blocks before kvtop joined), not a measured 0.
	if w5 := row(t, snap, "w5"); w5.IndexComplete || w5.State != "ok" || w5.Blocks != nil {
		t.Fatalf("connected, idle: complete %v state %q blocks %v", w5.IndexComplete, w5.State, w5.Blocks)
	}
}

// Blocks is unknown (nil), not 0, for a worker without an event stream or
// whose stream has not connected; the pool's too while no worker knows.
func TestBlocksUnknownWithoutAStream(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(scrape("w0", at(0), counters("", 1, 0, 0)))
	s.Apply(status("w1", 0, snapshot.StreamConnecting, at(0)))
	snap := s.Snapshot(at(1))
	if b := row(t, snap, "w0").Blocks; b != nil {
		t.Fatalf("no stream: blocks %d, want unknown", *b)
	}
	if b := row(t, snap, "w1").Blocks; b != nil {
		t.Fatalf("stream connecting: blocks %d, want unknown", *b)
	}
	if snap.Pool.Blocks != nil {
		t.Fatalf("pool blocks %d while no stream delivered, want unknown", *snap.Pool.Blocks)
	}
	s.Apply(batch("w1", 0, 0, at(2), stored(0, false, 7, 8, 9)))
	snap = s.Snapshot(at(2))
	if blocksOf(row(t, snap, "w1").Blocks) != 3 || blocksOf(snap.Pool.Blocks) != 3 || row(t, snap, "w0").Blocks != nil {
		t.Fatalf("after a batch: w1 %d pool %d w0 %v", blocksOf(row(t, snap, "w1").Blocks), blocksOf(snap.Pool.Blocks), row(t, snap, "w0").Blocks)
	}
}

// noStartOf is worker w's page at t without process_start_time, its
// counters at q (a restart shows as q lower after failed scrapes).
func noStartOf(w string, t, q float64) *collectors.MetricsScrape {
	e := counters("", 0, q, q/2)
	e.PromptTokens = f(q)
	return scrape(w, at(t), e)
}

// A publisher that stored blocks before kvtop started and has been idle
// since sends nothing after kvtop subscribes: its resident blocks are not
// known. Its worker (connected: w0; in the centralized layout, not even a
// stream yet: w1) must not read index_complete with its blocks as 0 or a
// blank; the pool's index is not complete either. They read complete
// before. A worker without an event source (w2) stays as it was: nothing
// to complete. Its first batch (or a replay of its history, or a restart
// that empties its cache: w3) makes the blocks known again.
func TestIdlePublisherBlocksNotKnown(t *testing.T) {
	s := NewState(Options{Window: time.Minute, Workers: []WorkerSpec{
		{Name: "w0", Events: true}, {Name: "w1", Events: true}, {Name: "w2"}, {Name: "w3", Events: true}}})
	for _, w := range []string{"w0", "w1", "w2", "w3"} {
		s.Apply(noStartOf(w, 0, 1000))
	}
	for _, w := range []string{"w0", "w3"} {
		s.Apply(status(w, 0, snapshot.StreamConnecting, at(0)))
		s.Apply(status(w, 0, snapshot.StreamLive, at(0.1)))
	}
	snap := s.Snapshot(at(10))
	if snap.Pool.IndexComplete {
		t.Errorf("pool index complete while w0's and w1's blocks are unknown")
	}
	for _, name := range []string{"w0", "w1", "w3"} {
		w := row(t, snap, name)
		if w.IndexComplete || w.Blocks != nil || !strings.Contains(w.Reason, "no KV events yet: resident blocks unknown") || w.State != snapshot.WorkerOK {
			t.Errorf("%s (events configured, nothing delivered): complete %v blocks %v state %q reason %q; want not complete, blocks unknown, said, ok",
				name, w.IndexComplete, w.Blocks, w.State, w.Reason)
		}
	}
	if w := row(t, snap, "w2"); !w.IndexComplete || w.Blocks != nil || strings.Contains(w.Reason, "KV events") || len(w.Streams) != 0 {
		t.Errorf("w2 (no event source): complete %v blocks %v reason %q; want complete, no blocks, as before", w.IndexComplete, w.Blocks, w.Reason)
	}

	s.Apply(batch("w0", 0, 0, at(11), stored(0, false, 1, 2)))
	rb := batch("w1", 0, 0, at(11), stored(0, false, 3)) // the replay of a late join
	rb.Replayed = true
	s.Apply(rb)
	s.Apply(failedScrape("w3", at(11), "connection refused"))
	s.Apply(noStartOf("w3", 12, 10)) // restarted: its cache is empty
	snap = s.Snapshot(at(12))
	for name, want := range map[string]int{"w0": 2, "w1": 1, "w3": 0} {
		if w := row(t, snap, name); !w.IndexComplete || blocksOf(w.Blocks) != want || strings.Contains(w.Reason, "KV events") {
			t.Errorf("%s known again: complete %v blocks %d reason %q; want complete, %d", name, w.IndexComplete, blocksOf(w.Blocks), w.Reason, want)
		}
	}
	if !snap.Pool.IndexComplete {
		t.Errorf("pool index not complete once every worker's blocks are known")
	}
}

// The startup replay (up to 10 000 batches per worker) is history: it is
// indexed but must not set the first window's hot prefixes.
func TestReplayedBatchesIndexedNotTraffic(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 0xa, 0xb)))
	for i := 0; i < 20; i++ {
		b := batch("w0", 0, uint64(i+1), at(10), stored(0xb, true, uint64(0x100+i)))
		b.Replayed = true
		s.Apply(b)
	}
	// Live traffic: 3 requests under another prefix on w1.
	s.Apply(batch("w1", 0, 0, at(0), stored(0, false, 0xc)))
	for i := 0; i < 3; i++ {
		s.Apply(batch("w1", 0, uint64(i+1), at(10), stored(0xc, true, uint64(0x200+i))))
	}
	snap := s.Snapshot(at(10))
	if blocksOf(row(t, snap, "w0").Blocks) != 22 {
		t.Fatalf("replayed blocks not indexed: w0 holds %d, want 22", blocksOf(row(t, snap, "w0").Blocks))
	}
	if len(snap.Prefixes) != 1 || snap.Prefixes[0].ID != "000000000000000c" || !near(snap.Prefixes[0].Requests, 3) {
		t.Fatalf("hot prefixes = %+v, want only 0xc with 3 live requests", snap.Prefixes)
	}
}

// vLLM stores decode-filled blocks and chunked-prefill chunks with the
// request's own previous block as parent. Those continue one request; they
// must not count as more requests under that prefix (the estimate would
// follow output length). Another request under the same block still counts.
func TestDecodeBlocksAreNotNewRequests(t *testing.T) {
	s := newTestState("w0", "w1")
	// A shared system prompt stored long ago on both workers.
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 0x5a, 0x5b)))
	s.Apply(batch("w1", 0, 0, at(0), stored(0, false, 0x5a, 0x5b)))
	seq := map[string]uint64{"w0": 1, "w1": 1}
	store := func(w string, t float64, ev collectors.KVEvent) {
		s.Apply(batch(w, 0, seq[w], at(t), ev))
		seq[w]++
	}
	// w0: one request with a long answer: its prompt blocks, then 30
	// decode blocks each continuing the last, 0.2 s apart.
	store("w0", 20, stored(0x5b, true, 0x1000, 0x1001))
	prev := uint64(0x1001)
	for i := 0; i < 30; i++ {
		h := uint64(0x2000 + i)
		store("w0", 20.2+0.2*float64(i), stored(prev, true, h))
		prev = h
	}
	// w1: three short requests under the same prompt, no decode blocks.
	for i := 0; i < 3; i++ {
		store("w1", 21+float64(i), stored(0x5b, true, uint64(0x3000+i)))
	}
	snap := s.Snapshot(at(30))
	w := func(t float64) float64 { return math.Exp(-(30 - t) / 60) } // decay to the snapshot
	requests, onW0 := w(20)+w(21)+w(22)+w(23), w(20)
	var p *snapshot.Prefix
	for i := range snap.Prefixes {
		if snap.Prefixes[i].ID == "000000000000005b" {
			p = &snap.Prefixes[i]
		}
	}
	// 4 requests under the prompt: 1 on w0, 3 on w1 (decayed a little).
	if p == nil || !near(p.Requests, requests) || !near(p.Workers["w0"], onW0/requests) {
		t.Fatalf("prompt prefix = %+v, want %.3f requests, w0 %.3f", p, requests, onW0/requests)
	}
	for _, q := range snap.Prefixes {
		if strings.HasPrefix(q.ID, "00000000000020") || q.ID == "0000000000001001" {
			t.Fatalf("a decode block counted as a prefix of new requests: %+v", q)
		}
	}
	if blocksOf(row(t, snap, "w0").Blocks) != 34 {
		t.Fatalf("decode blocks must still be indexed: w0 holds %d, want 34", blocksOf(row(t, snap, "w0").Blocks))
	}
}

// A prefix's depth uses the block size of the publisher holding it:
// workers may differ (16 on vLLM, 1 on SGLang). Unknown stays unknown.
func TestPrefixTokensUseTheHoldersBlockSize(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	// w0 (block 16) and w1 (page 1) each hold their own 3-block chain.
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 0xa1, 0xa2, 0xa3)))
	s.Apply(batch("w1", 0, 0, at(0), collectors.KVEvent{Kind: collectors.BlockStored, Hashes: []uint64{0xb1, 0xb2, 0xb3}, BlockSize: 1, NumTokens: 3}))
	// w2 gives no block size and no token count.
	s.Apply(batch("w2", 0, 0, at(0), collectors.KVEvent{Kind: collectors.BlockStored, Hashes: []uint64{0xc1, 0xc2, 0xc3}}))
	for i := 0; i < 4; i++ {
		for _, w := range []struct {
			name   string
			parent uint64
			bs     int
		}{{"w0", 0xa3, 16}, {"w1", 0xb3, 1}, {"w2", 0xc3, 0}} {
			ev := collectors.KVEvent{Kind: collectors.BlockStored, Hashes: []uint64{uint64(0x100*(i+1)) + w.parent},
				Parent: w.parent, HasParent: true, BlockSize: w.bs, NumTokens: w.bs}
			s.Apply(batch(w.name, 0, uint64(i+1), at(10), ev))
		}
	}
	snap := s.Snapshot(at(10))
	want := map[string]int{"00000000000000a3": 48, "00000000000000b3": 3, "00000000000000c3": -1}
	for _, p := range snap.Prefixes {
		if w, ok := want[p.ID]; ok && blocksOf(p.Tokens) != w {
			t.Errorf("prefix %s: %d tokens, want %d", p.ID, blocksOf(p.Tokens), w)
		}
		delete(want, p.ID)
	}
	if len(want) > 0 {
		t.Fatalf("prefixes missing: %v (got %+v)", want, snap.Prefixes)
	}
}

// A restarted vLLM has an empty cache. An idle restarted worker sends no
// event, so only its metrics tell: its old blocks are dropped, and the row
// and an alert say so. A publisher the stream collector already reset
// after the previous scrape keeps what it stored since.
func TestProcessRestartDropsOldBlocks(t *testing.T) {
	s := newTestState("w0", "w1")
	pg := func(w string, t, start float64) *collectors.MetricsScrape {
		m := scrape(w, at(t), counters("", 0, 100, 50))
		m.ProcessStart = f(start)
		return m
	}
	s.Apply(pg("w0", 0, 1000))
	s.Apply(pg("w1", 0, 1000))
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3)))
	s.Apply(batch("w1", 0, 0, at(1), stored(0, false, 4, 5)))
	s.Apply(pg("w0", 5, 1000))
	s.Apply(pg("w1", 5, 1000))
	// w1 restarted and stored again: the stream collector saw seq go back.
	s.Apply(&collectors.StreamReset{Worker: "w1", Rank: 0, Reason: "restart", At: at(7)})
	s.Apply(batch("w1", 0, 0, at(7), stored(0, false, 6)))
	// Both report a new process start at the next scrape; w0 was idle.
	s.Apply(pg("w0", 10, 1009))
	s.Apply(pg("w1", 10, 1006))
	snap := s.Snapshot(at(10))
	w0, w1 := row(t, snap, "w0"), row(t, snap, "w1")
	if blocksOf(w0.Blocks) != 0 || blocksOf(w1.Blocks) != 1 || blocksOf(snap.Pool.Blocks) != 1 {
		t.Fatalf("after the restarts: w0 %d blocks (want 0), w1 %d (want 1), pool %d", blocksOf(w0.Blocks), blocksOf(w1.Blocks), blocksOf(snap.Pool.Blocks))
	}
	if !strings.Contains(w0.Reason, "restarted 14:00:10: 3 indexed blocks dropped") || w0.Restarts != 1 {
		t.Fatalf("w0 reason %q restarts %d", w0.Reason, w0.Restarts)
	}
	var texts []string
	for _, a := range snap.Alerts {
		if a.Kind == "worker_restart" {
			texts = append(texts, a.Text)
		}
	}
	want := "w0 restarted 14:00:10: 3 indexed blocks dropped (a restarted engine's cache is empty) — process_start_time changed"
	if len(texts) != 2 || texts[0] != want || texts[1] != "w1 restarted 14:00:10 — process_start_time changed" {
		t.Fatalf("restart alerts = %q", texts)
	}
	if a := alertOf(s.Snapshot(at(80)), "worker_restart"); a != nil {
		t.Fatalf("the restart alert outlives the window: %+v", a)
	}
}

// The event hot path allocates nothing per BlockStored once tables are
// warm.
func TestStoreEventDoesNotAllocate(t *testing.T) {
	s := newTestState("w0")
	evs := []collectors.KVEvent{stored(0x5b, true, 0x100, 0x101), stored(0x101, true, 0x102), removed(0x100, 0x101, 0x102)}
	b := batch("w0", 0, 0, at(0), evs...)
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 0x5a, 0x5b)))
	s.hot.set([]uint64{slotKey(0x5b), slotKey(0x101), slotKey(0x102), slotKey(0x7), slotKey(0x8)})
	s.Apply(b)
	n := testing.AllocsPerRun(200, func() {
		b.At = b.At.Add(time.Second)
		s.Apply(b)
	})
	if n != 0 {
		t.Fatalf("%v allocations per batch of stores", n)
	}
}
