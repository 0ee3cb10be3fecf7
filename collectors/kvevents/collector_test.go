package kvevents

import (
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

const (
	live     = snapshot.StreamLive
	lost     = snapshot.StreamHistoryLost
	late     = snapshot.StreamJoinedLate
	replayng = snapshot.StreamReplaying
)

// connectOne starts a collector connected to one publisher and waits until
// the subscription is in place.
func connectOne(t *testing.T, p *testPub, o Options) *harness {
	t.Helper()
	o.Endpoints = []Endpoint{{Worker: "w0", Events: p.Events, Replay: p.Replay, Topic: p.o.topic}}
	h := runCollector(t, o)
	p.waitSubscribed()
	h.waitState("w0", 0, live)
	return h
}

// A gap is repaired by a DEALER replay, in both reply layouts and both event
// encodings: replaying → live, replayed == missing, batches in seq order.
func TestGapRepairedByReplay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		legacy bool
		event  func(seq int) any
	}{
		{"vLLM 0.26 layout, map events", false, func(seq int) any { return storedMap(nil, uint64(seq)|1<<63) }},
		{"legacy layout, array events", true, func(seq int) any { return storedArray(uint64(0), uint64(seq)|1<<63) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPub(t, pubOpts{topic: "kv-events", replay: true, legacy: tc.legacy})
			h := connectOne(t, p, Options{})
			pl := func(seq int) []byte { return batchSeq(0, seq, tc.event(seq)) }
			p.publish(pl(0))
			p.publish(pl(1))
			p.drop(pl(2))
			p.drop(pl(3))
			p.drop(pl(4))
			p.publish(pl(5))
			p.publish(pl(6))
			st := h.waitStatus("w0", 0, "seq 6 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 6 })
			if st.State != live || st.Gaps != 1 || st.Missing != 3 || st.Replayed != 3 || st.Lost != 0 {
				t.Errorf("status %s gaps=%d missing=%d replayed=%d lost=%d; want live 1/3/3/0", st.State, st.Gaps, st.Missing, st.Replayed, st.Lost)
			}
			bs := h.batches("w0", 0)
			if got := seqsOf(bs); !reflect.DeepEqual(got, []uint64{0, 1, 2, 3, 4, 5, 6}) {
				t.Errorf("batches arrived as %v, want 0..6 in order", got)
			}
			if got := replayedOf(bs); !reflect.DeepEqual(got, []uint64{2, 3, 4}) {
				t.Errorf("replayed batches %v, want [2 3 4]", got)
			}
			for _, b := range bs {
				if len(b.Events) != 1 || b.Events[0].Hashes[0] != uint64(b.Seq)|1<<63 || b.Topic != "kv-events" {
					t.Errorf("batch %d: events %+v topic %q", b.Seq, b.Events, b.Topic)
				}
			}
			if !slices.Contains(h.states("w0", 0), replayng) {
				t.Errorf("states %v never showed replaying", h.states("w0", 0))
			}
			gaps := h.incidents("w0", 0, "gap")
			if len(gaps) != 1 || gaps[0].FromSeq != 2 || gaps[0].ToSeq != 4 || gaps[0].Replayed != 3 || gaps[0].Lost != 0 || gaps[0].End.IsZero() {
				t.Errorf("gap incidents %+v, want one closed 2..4 with 3 replayed", gaps)
			}
		})
	}
}

// Without a replay endpoint a gap is history lost, and stays so until the
// publisher clears all blocks.
func TestGapWithoutReplayEndpoint(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0))
	p.drop(batchSeq(0, 1))
	p.drop(batchSeq(0, 2))
	p.publish(batchSeq(0, 3))
	p.publish(batchSeq(0, 4))
	st := h.waitStatus("w0", 0, "seq 4 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 4 })
	if st.State != lost || st.Missing != 2 || st.Lost != 2 || st.Replayed != 0 {
		t.Errorf("status %s missing=%d lost=%d replayed=%d; want history_lost 2/2/0", st.State, st.Missing, st.Lost, st.Replayed)
	}
	if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, []uint64{0, 3, 4}) {
		t.Errorf("batches %v, want [0 3 4]", got)
	}
	// Blocks known so far stay: no reset was sent.
	for _, o := range h.all() {
		if _, ok := o.(*collectors.StreamReset); ok {
			t.Fatal("a lost history must not drop the blocks kvtop knows")
		}
	}
	p.publish(batchSeq(0, 5, []any{"AllBlocksCleared"}))
	st = h.waitState("w0", 0, live)
	if hl := h.incidents("w0", 0, "history_lost"); len(hl) != 1 || hl[0].End.IsZero() || hl[0].Lost != 2 {
		t.Errorf("history_lost incidents %+v, want one with 2 lost, closed by AllBlocksCleared", hl)
	}
	if st.Lost != 2 {
		t.Errorf("lost %d after the clear, want the count kept at 2", st.Lost)
	}
}

// The replay buffer no longer holds the start of the gap: what it still
// holds is applied, the rest is lost.
func TestReplayOverflow(t *testing.T) {
	p := newTestPub(t, pubOpts{replay: true, legacy: true, ring: 3})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0))
	for seq := 1; seq <= 5; seq++ {
		p.drop(batchSeq(0, seq))
	}
	p.publish(batchSeq(0, 6)) // the ring now holds 4, 5, 6
	st := h.waitStatus("w0", 0, "seq 6 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 6 && s.State != replayng })
	if st.State != lost || st.Missing != 5 || st.Replayed != 2 || st.Lost != 3 {
		t.Errorf("status %s missing=%d replayed=%d lost=%d; want history_lost 5/2/3", st.State, st.Missing, st.Replayed, st.Lost)
	}
	bs := h.batches("w0", 0)
	if got := seqsOf(bs); !reflect.DeepEqual(got, []uint64{0, 4, 5, 6}) {
		t.Errorf("batches %v, want [0 4 5 6]", got)
	}
	if got := replayedOf(bs); !reflect.DeepEqual(got, []uint64{4, 5}) {
		t.Errorf("replayed %v, want [4 5]", got)
	}
	hl := h.incidents("w0", 0, "history_lost")
	if len(hl) != 1 || hl[0].FromSeq != 1 || hl[0].ToSeq != 3 || !hl[0].End.IsZero() {
		t.Errorf("history_lost incidents %+v, want one open for seqs 1..3", hl)
	}
}

// seq going backwards is a restart: StreamReset before the new run's batches.
func TestRestart(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	sglang := func(run, seq int) []byte { // SGLang: signed hashes, array events, 2-element batch
		return mpEncode([]any{1.8e9 + float64(run) + float64(seq)*0.001, []any{
			[]any{"BlockStored", []any{int64(-1 - seq - 10*run)}, nil, tokens(16), 16, nil}}})
	}
	for seq := 0; seq < 3; seq++ {
		p.publish(sglang(0, seq))
	}
	p.sendAt(0, sglang(1, 0))
	p.publish(sglang(1, 1))
	st := h.waitStatus("w0", 0, "restart seen", func(s *collectors.StreamStatus) bool { return s.Restarts == 1 && s.LastSeq == 1 })
	if st.State != live || st.Duplicates != 0 || st.Gaps != 0 {
		t.Errorf("status %s dups=%d gaps=%d, want live 0 0", st.State, st.Duplicates, st.Gaps)
	}
	var order []string
	for _, o := range h.all() {
		switch o := o.(type) {
		case *collectors.EventBatch:
			order = append(order, "batch "+string(rune('0'+o.Seq)))
			if o.Events[0].Hashes[0] < 1<<63 {
				t.Errorf("negative SGLang hash lost its sign bits: %#x", o.Events[0].Hashes[0])
			}
		case *collectors.StreamReset:
			order = append(order, "reset")
		}
	}
	want := []string{"batch 0", "batch 1", "batch 2", "reset", "batch 0", "batch 1"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("apply order %v, want %v", order, want)
	}
	if r := h.incidents("w0", 0, "restart"); len(r) != 1 || !strings.Contains(r[0].Note, "from 2 to 0") {
		t.Errorf("restart incidents %+v", r)
	}
}

// A redelivered batch is ignored and counted, not taken for a restart.
func TestDuplicateSeq(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	sha := func(seq int) []byte { // 32-byte hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)
		b := make([]byte, 32)
		b[31] = byte(seq + 1)
		return batchSeq(0, seq, om{{"type", "BlockStored"}, {"block_hashes", []any{b}}, {"parent_block_hash", nil},
			{"token_ids", tokens(16)}, {"block_size", 16}, {"medium", "GPU"}})
	}
	p.publish(sha(0))
	p.publish(sha(1))
	p.resend(1)
	p.publish(sha(2))
	st := h.waitStatus("w0", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	if st.Duplicates != 1 || st.Restarts != 0 || st.State != live || st.Batches != 3 {
		t.Errorf("dups=%d restarts=%d state=%s batches=%d; want 1 0 live 3", st.Duplicates, st.Restarts, st.State, st.Batches)
	}
	bs := h.batches("w0", 0)
	if got := seqsOf(bs); !reflect.DeepEqual(got, []uint64{0, 1, 2}) {
		t.Errorf("batches %v, want [0 1 2]", got)
	}
	if bs[2].Events[0].Hashes[0] != 3 {
		t.Errorf("bytes hash keyed %#x, want 3 (last 8 bytes big-endian)", bs[2].Events[0].Hashes[0])
	}
}

// Joining a running publisher: a replay from 0 fills the history when the
// buffer still has it (from 0, or from 1 when nothing before it can exist);
// otherwise the stream is joined_late, which is not counted as lost.
func TestJoinedLate(t *testing.T) {
	seqs := func(from, to uint64) []uint64 {
		var out []uint64
		for s := from; s <= to; s++ {
			out = append(out, s)
		}
		return out
	}
	tests := []struct {
		name      string
		opts      pubOpts
		from1     bool   // the publisher counts from 1 (llm-d-inference-sim)
		firstSeq  uint64 // Endpoint.FirstSeq (config first_seq)
		before    int    // batches published before kvtop listens
		wantState snapshot.StreamState
		wantSeqs  []uint64
		wantNote  string // in the joined_late incident
	}{
		{"no replay endpoint", pubOpts{}, false, 0, 5, late, []uint64{5}, "no replay endpoint"},
		{"replay buffer starts later", pubOpts{replay: true, ring: 3}, false, 0, 5, late, []uint64{3, 4, 5}, "buffer starts at seq 3"},
		{"replay from 0 fills it", pubOpts{replay: true}, false, 0, 3, live, []uint64{0, 1, 2, 3}, ""},
		{"publisher counting from 1", pubOpts{replay: true}, true, 0, 0, live, []uint64{1}, ""},
		// Its whole buffer from 1, fewer batches than a full vLLM ring:
		// nothing before seq 1 can exist.
		{"counting from 1, joined late", pubOpts{replay: true}, true, 0, 4, live, seqs(1, 5), ""},
		// vLLM counts from 0: a full ring (10 000) starting at 1 lost seq 0.
		// (Paced like vLLM's loop: an unpaced Go ROUTER drops replies itself.)
		{"vLLM ring full, starts at 1", pubOpts{replay: true, ring: vllmRing, replayPace: 10}, false, 0, vllmRing, late, seqs(1, vllmRing), "seq 0 was evicted"},
		// The same buffer (1..10 000) from a publisher configured to count
		// from 1.
		{"first_seq 1, ring full from 1", pubOpts{replay: true, ring: vllmRing, replayPace: 10}, true, 1, vllmRing - 1, live, seqs(1, vllmRing), ""},
		{"first_seq 1, first live seq 1, no replay", pubOpts{}, true, 1, 0, live, []uint64{1}, ""},
		{"first_seq 1, joined late, no replay", pubOpts{}, true, 1, 3, late, []uint64{4}, "no replay endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &replayTracker{}
			tt.opts.tracker = tr
			p := newTestPub(t, tt.opts)
			if tt.from1 {
				p.seq = 1
			}
			for k := 0; k < tt.before; k++ {
				p.drop(batchSeq(0, int(p.seq)))
			}
			o := Options{Endpoints: []Endpoint{{Worker: "w0", Events: p.Events, Replay: p.Replay, FirstSeq: tt.firstSeq}}}
			h := runCollector(t, o)
			p.waitSubscribed()
			h.waitState("w0", 0, live)
			first := p.publish(batchSeq(0, int(p.seq)))
			h.waitStatus("w0", 0, "join settled", func(s *collectors.StreamStatus) bool {
				return s.HasSeq && s.LastSeq == first && s.State != replayng
			})
			p.publish(batchSeq(0, int(p.seq)))
			st := h.waitStatus("w0", 0, "next seq applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == first+1 })
			if st.State != tt.wantState || st.Missing != 0 || st.Lost != 0 || st.FirstSeq != first {
				t.Errorf("state %s missing=%d lost=%d first=%d; want %s 0 0 %d", st.State, st.Missing, st.Lost, st.FirstSeq, tt.wantState, first)
			}
			if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, append(tt.wantSeqs, first+1)) {
				t.Errorf("%d batches %v…, want %d: %v…", len(got), got[:min(len(got), 6)], len(tt.wantSeqs)+1, tt.wantSeqs[:min(len(tt.wantSeqs), 6)])
			}
			if jl := h.incidents("w0", 0, "joined_late"); (tt.wantState == late) != (len(jl) == 1) ||
				len(jl) == 1 && !strings.Contains(jl[0].Note, tt.wantNote) {
				t.Errorf("joined_late incidents %+v, want one saying %q", jl, tt.wantNote)
			}
			if asked := tr.asked(); tt.firstSeq == 1 && len(asked) > 0 && asked[0] != 1 {
				t.Errorf("replay asked from %v, want from first_seq 1", asked)
			}
			if tt.wantState == late {
				p.publish(batchSeq(0, int(p.seq), []any{"AllBlocksCleared"}))
				h.waitState("w0", 0, live)
			}
		})
	}
}

// Unknown event types and fields are skipped and counted apart (a newer
// producer: harmless, the stream stays live); the known events of the same
// batch arrive.
func TestUnknownEventsAndFields(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0,
		storedMap(nil, h1),
		[]any{"BlockPinned", hashList(h1)},
		om{{"type", "BlockMigrated"}, {"block_hashes", hashList(h2)}},
		append(removedMap(h1), kv{"reason", "evicted"}),
		append(removedArray(h2), 0, nil, nil, "future"), // group_idx, locality, ownership, then a new position
	))
	// One new field on every event of a batch: counted once per event.
	p.publish(batchSeq(0, 1, append(removedMap(h2), kv{"tier", 1}), append(removedMap(h3), kv{"tier", 1})))
	st := h.waitStatus("w0", 0, "seq 1 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 1 })
	if st.UnknownEvents != 2 || st.UnknownFields != 4 || st.Malformed != 0 || st.Events != 5 || st.DecodeErrors != 0 || st.State != live {
		t.Errorf("unknown events=%d fields=%d malformed=%d events=%d decode errors=%d state=%s; want 2 4 0 5 0 live",
			st.UnknownEvents, st.UnknownFields, st.Malformed, st.Events, st.DecodeErrors, st.State)
	}
	if want := map[string]uint64{"BlockPinned": 1, "BlockMigrated": 1}; !reflect.DeepEqual(st.UnknownByType, want) {
		t.Errorf("unknown events by type %v, want %v", st.UnknownByType, want)
	}
	b := h.batches("w0", 0)[0]
	var kinds []collectors.EventKind
	for _, ev := range b.Events {
		kinds = append(kinds, ev.Kind)
	}
	if !reflect.DeepEqual(kinds, []collectors.EventKind{collectors.BlockStored, collectors.BlockRemoved, collectors.BlockRemoved}) {
		t.Errorf("kinds %v", kinds)
	}
	errs := h.sourceErrors("decode")
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "BlockPinned") || errs[0].Source != "w0 events rank 0" {
		t.Errorf("decode errors %+v, want one naming BlockPinned for w0 events rank 0", errs)
	}
}

// A known event that cannot be read is data loss, not a schema change: it
// is counted in malformed, and its blocks are unknown, so the stream is
// history_lost until the publisher clears all blocks.
func TestMalformedEventIsLoss(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0, storedMap(nil, h1)))
	p.publish(batchSeq(0, 1, om{{"type", "BlockStored"}, {"block_hashes", "not-a-list"}}, removedMap(h1)))
	st := h.waitStatus("w0", 0, "seq 1 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 1 })
	if st.Malformed != 1 || st.UnknownEvents != 0 || st.UnknownFields != 0 || st.State != lost || st.Lost != 0 {
		t.Errorf("malformed=%d unknown=%d/%d state=%s lost=%d; want 1 0/0 history_lost 0 (no seq is missing)",
			st.Malformed, st.UnknownEvents, st.UnknownFields, st.State, st.Lost)
	}
	if b := h.batches("w0", 0); len(b) != 2 || len(b[1].Events) != 1 || b[1].Events[0].Kind != collectors.BlockRemoved {
		t.Errorf("the readable event of seq 1 did not arrive alone: %+v", b)
	}
	hl := h.incidents("w0", 0, "history_lost")
	if len(hl) != 1 || hl[0].FromSeq != 1 || !strings.Contains(hl[0].Note, "could not be read") {
		t.Errorf("history_lost incidents %+v, want one at seq 1 saying an event could not be read", hl)
	}
	if errs := h.sourceErrors("decode"); len(errs) != 1 || !strings.Contains(errs[0].Message, "block_hashes") {
		t.Errorf("decode errors %+v, want one naming the bad field", errs)
	}
	p.publish(batchSeq(0, 2, []any{"AllBlocksCleared"}))
	h.waitState("w0", 0, live)
}

// A batch that is not msgpack is counted and reported; its seq does not open
// a gap, but its events are unknown, so the history is incomplete.
func TestUndecodableBatch(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0))
	p.publish([]byte("this is not msgpack"))
	p.publish(batchSeq(0, 2))
	st := h.waitStatus("w0", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	if st.DecodeErrors != 1 || st.Gaps != 0 || st.State != lost || st.Batches != 2 {
		t.Errorf("decode errors=%d gaps=%d state=%s batches=%d; want 1 0 history_lost 2", st.DecodeErrors, st.Gaps, st.State, st.Batches)
	}
	if errs := h.sourceErrors("decode"); len(errs) != 1 || !strings.Contains(errs[0].Message, "seq 1") {
		t.Errorf("decode errors %+v", errs)
	}
}

// A worker that dies shows disconnected; when it comes back on the same port
// the stream is live again, and its seq restarting at 0 is a restart.
func TestWorkerDiesAndComesBack(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	for seq := 0; seq < 3; seq++ {
		p.publish(batchSeq(0, seq))
	}
	h.waitStatus("w0", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	port := portOf(t, p.Events)
	p.close()
	h.waitState("w0", 0, snapshot.StreamDisconnected)

	p2 := newTestPub(t, pubOpts{port: port})
	p2.waitSubscribed()
	h.waitState("w0", 0, live)
	if d := h.incidents("w0", 0, "disconnected"); len(d) != 1 || d[0].End.IsZero() {
		t.Errorf("disconnected incidents %+v, want one, closed on reconnect", d)
	}
	p2.publish(batchSeq(1, 0))
	p2.publish(batchSeq(1, 1))
	st := h.waitStatus("w0", 0, "restart seen", func(s *collectors.StreamStatus) bool { return s.Restarts == 1 && s.LastSeq == 1 })
	if st.State != live {
		t.Errorf("state %s, want live", st.State)
	}
	if !slices.Equal(h.states("w0", 0), []snapshot.StreamState{snapshot.StreamConnecting, live, snapshot.StreamDisconnected, live}) {
		t.Errorf("states %v, want connecting live disconnected live", h.states("w0", 0))
	}
	resets := 0
	for _, o := range h.all() {
		if r, ok := o.(*collectors.StreamReset); ok && r.Worker == "w0" {
			resets++
		}
	}
	if resets != 1 {
		t.Errorf("%d resets, want 1", resets)
	}
}

// Centralized layout: kvtop binds one SUB; two publishers dial it and are
// told apart by their kv@<id>@<model> topics.
func TestCentralizedBind(t *testing.T) {
	bind := freeTCP(t)
	var a, b *testPub
	h := runCollector(t, Options{Bind: bind, ResolveEndpoint: func(id string) Endpoint {
		switch id {
		case "127.0.0.1:8001":
			return Endpoint{Worker: "w-a", Replay: a.Replay}
		case "127.0.0.1:8002":
			return Endpoint{Worker: "w-b", Replay: b.Replay}
		}
		return Endpoint{}
	}})
	a = newTestPub(t, pubOpts{connect: bind, replay: true, topic: "kv@127.0.0.1:8001@sim-org/sim-model-1b"})
	b = newTestPub(t, pubOpts{connect: bind, replay: true, topic: "kv@127.0.0.1:8002@sim-org/sim-model-1b"})
	c := newTestPub(t, pubOpts{connect: bind, topic: "kv@10.9.9.9:8000@other"})
	for _, p := range []*testPub{a, b, c} {
		p.waitSubscribed()
	}
	// llm-d-inference-sim counts from 1; its replay from 0 starts at 1.
	for i, p := range []*testPub{a, b} {
		p.seq = 1
		for n := 0; n < 3; n++ {
			p.publish(batchSeq(i, n, storedMap(nil, uint64(i)<<32|uint64(n))))
		}
	}
	c.publish(batchSeq(9, 0))
	for _, w := range []string{"w-a", "w-b"} {
		st := h.waitStatus(w, 0, "seq 3 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 3 && s.State == live })
		if st.Endpoint != bind || !strings.HasPrefix(st.Topic, "kv@127.0.0.1:800") || st.Missing != 0 {
			t.Errorf("%s: endpoint %q topic %q missing %d", w, st.Endpoint, st.Topic, st.Missing)
		}
	}
	for i, w := range []string{"w-a", "w-b"} {
		bs := h.batches(w, 0)
		if got := seqsOf(bs); !reflect.DeepEqual(got, []uint64{1, 2, 3}) {
			t.Errorf("%s batches %v, want [1 2 3]", w, got)
		}
		for n, bt := range bs {
			if bt.Events[0].Hashes[0] != uint64(i)<<32|uint64(n) {
				t.Errorf("%s seq %d carries %#x: streams mixed up", w, bt.Seq, bt.Events[0].Hashes[0])
			}
		}
	}
	// Without a resolution the topic id names the worker; seq 0 is complete.
	st := h.waitStatus("10.9.9.9:8000", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.HasSeq })
	if st.State != live || st.Replay != "" {
		t.Errorf("unresolved publisher: state %s replay %q", st.State, st.Replay)
	}
}

// A replay endpoint that never answers: the replay times out and the gap is
// lost; the live batches held behind it are applied in order.
func TestReplayTimeout(t *testing.T) {
	p := newTestPub(t, pubOpts{replay: true, silentReplay: true})
	h := connectOne(t, p, Options{ReplayTimeout: 300 * time.Millisecond})
	p.publish(batchSeq(0, 0))
	p.drop(batchSeq(0, 1))
	p.publish(batchSeq(0, 2))
	p.publish(batchSeq(0, 3))
	st := h.waitStatus("w0", 0, "replay given up", func(s *collectors.StreamStatus) bool { return s.LastSeq == 3 })
	if st.State != lost || st.Lost != 1 || st.Missing != 1 {
		t.Errorf("state %s lost=%d missing=%d; want history_lost 1 1", st.State, st.Lost, st.Missing)
	}
	if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, []uint64{0, 2, 3}) {
		t.Errorf("batches %v, want [0 2 3]", got)
	}
	if errs := h.sourceErrors("timeout"); len(errs) != 1 || !strings.Contains(errs[0].Message, "replay from seq 1") {
		t.Errorf("timeout errors %+v", errs)
	}
}

// More live batches than HoldBack arrive behind a stuck replay: the replay
// is given up rather than holding (or dropping) live data.
func TestHoldBackOverflow(t *testing.T) {
	p := newTestPub(t, pubOpts{replay: true, silentReplay: true})
	h := connectOne(t, p, Options{ReplayTimeout: time.Minute, HoldBack: 3})
	p.publish(batchSeq(0, 0))
	p.drop(batchSeq(0, 1))
	for seq := 2; seq <= 6; seq++ {
		p.publish(batchSeq(0, seq))
	}
	st := h.waitStatus("w0", 0, "seq 6 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 6 })
	if st.State != lost || st.Lost != 1 {
		t.Errorf("state %s lost=%d; want history_lost 1", st.State, st.Lost)
	}
	if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, []uint64{0, 2, 3, 4, 5, 6}) {
		t.Errorf("batches %v, want [0 2 3 4 5 6]", got)
	}
	if errs := h.sourceErrors("replay"); len(errs) != 1 || !strings.Contains(errs[0].Message, "3 live batches held") {
		t.Errorf("replay errors %+v", errs)
	}
}

// Replays run beside the live path: a slow replay for one publisher neither
// delays another publisher's live batches nor runs beyond MaxReplays at once.
func TestReplaysBoundedAndOffTheLivePath(t *testing.T) {
	tr := &replayTracker{}
	slow := []*testPub{
		newTestPub(t, pubOpts{replay: true, replayDelay: 2 * time.Second, tracker: tr}),
		newTestPub(t, pubOpts{replay: true, replayDelay: 2 * time.Second, tracker: tr}),
	}
	quiet := newTestPub(t, pubOpts{})
	h := runCollector(t, Options{MaxReplays: 1, ReplayTimeout: 10 * time.Second, Endpoints: []Endpoint{
		{Worker: "s0", Events: slow[0].Events, Replay: slow[0].Replay},
		{Worker: "s1", Events: slow[1].Events, Replay: slow[1].Replay},
		{Worker: "q", Events: quiet.Events},
	}})
	for _, p := range append(slow, quiet) {
		p.waitSubscribed()
	}
	for _, w := range []string{"s0", "s1", "q"} {
		h.waitState(w, 0, live)
	}
	for _, p := range slow {
		p.publish(batchSeq(0, 0))
		p.drop(batchSeq(0, 1))
		p.publish(batchSeq(0, 2))
	}
	h.waitState("s0", 0, replayng)
	quiet.publish(batchSeq(0, 0))
	h.waitFor("the quiet worker's batch", func() bool { return len(h.batches("q", 0)) == 1 })
	if r0, r1 := h.batches("s0", 0), h.batches("s1", 0); len(replayedOf(r0))+len(replayedOf(r1)) != 0 {
		t.Errorf("a replay finished before the other worker's live batch was delivered: it waited on the replay")
	}
	for _, w := range []string{"s0", "s1"} {
		st := h.waitStatus(w, 0, "gap repaired", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 && s.State == live })
		if st.Replayed != 1 || st.Lost != 0 {
			t.Errorf("%s replayed=%d lost=%d, want 1 0", w, st.Replayed, st.Lost)
		}
	}
	if most, reqs := tr.snapshot(); most != 1 || len(reqs) != 2 {
		t.Errorf("%d replays at once over %d requests; want MaxReplays=1 respected over 2", most, len(reqs))
	}
}

// Two gaps in a row on one publisher: the second replay waits for the
// cooldown after the first.
func TestReplayCooldown(t *testing.T) {
	tr := &replayTracker{}
	p := newTestPub(t, pubOpts{replay: true, tracker: tr})
	cooldown := 700 * time.Millisecond
	h := connectOne(t, p, Options{ReplayCooldown: cooldown})
	p.publish(batchSeq(0, 0))
	p.drop(batchSeq(0, 1))
	p.publish(batchSeq(0, 2))
	h.waitStatus("w0", 0, "first gap repaired", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 && s.State == live })
	p.drop(batchSeq(0, 3))
	p.publish(batchSeq(0, 4))
	st := h.waitStatus("w0", 0, "second gap repaired", func(s *collectors.StreamStatus) bool { return s.LastSeq == 4 && s.State == live })
	if st.Gaps != 2 || st.Replayed != 2 {
		t.Errorf("gaps=%d replayed=%d, want 2 2", st.Gaps, st.Replayed)
	}
	_, reqs := tr.snapshot()
	if len(reqs) != 2 {
		t.Fatalf("%d replay requests, want 2", len(reqs))
	}
	if d := reqs[1].Sub(reqs[0]); d < cooldown-50*time.Millisecond {
		t.Errorf("second replay %v after the first, want at least the %v cooldown", d, cooldown)
	}
}

// The centralized address is still held by someone else at start: the
// collector says so and binds as soon as it is free.
func TestBindRetriesWhileAddressBusy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bind := "tcp://" + l.Addr().String()
	h := runCollector(t, Options{Bind: bind})
	h.waitFor("a bind error", func() bool { return len(h.sourceErrors("bind")) > 0 })
	if e := h.sourceErrors("bind")[0]; !strings.Contains(e.Message, "bind "+bind) || e.Source != "events bind "+bind {
		t.Errorf("bind error %+v", e)
	}
	l.Close()
	p := newTestPub(t, pubOpts{connect: bind, topic: "kv@10.0.0.9:8000@m"})
	p.waitSubscribed()
	p.publish(batchSeq(0, 0))
	h.waitStatus("10.0.0.9:8000", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.HasSeq && s.State == live })
}

// Only the most recent Incidents incidents are kept, oldest first.
func TestIncidentsBounded(t *testing.T) {
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{Incidents: 2})
	p.publish(batchSeq(0, 0))
	p.publish(batchSeq(0, 1))
	for run := 1; run <= 3; run++ {
		p.sendAt(0, batchSeq(run, 0))
	}
	st := h.waitStatus("w0", 0, "3 restarts", func(s *collectors.StreamStatus) bool { return s.Restarts == 3 })
	// The first restart (seq 1 → 0) was dropped; the 2nd and 3rd (0 → 0) stay.
	if len(st.History) != 2 || !strings.Contains(st.History[0].Note, "from 0 to 0") ||
		!strings.Contains(st.History[1].Note, "from 0 to 0") || st.History[1].Start.Before(st.History[0].Start) {
		t.Errorf("history %+v, want the last 2 restarts, oldest first", st.History)
	}
}
