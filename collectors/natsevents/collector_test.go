package natsevents

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func publish(t *testing.T, nc interface {
	Publish(string, []byte) error
	Flush() error
}, subject string, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		if err := nc.Publish(subject, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// waitLive waits until the collector has subscribed: a message it sees
// proves it (core NATS delivers nothing published before).
func waitSubscribed(t *testing.T, s interface{ NumSubscriptions() uint32 }, n uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.NumSubscriptions() < n {
		if time.Now().After(deadline) {
			t.Fatal("the collector did not subscribe within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Core NATS: Dynamo's events become the pool's batches, in order, with
// their blocks; the worker id is named by Resolve (a config alias).
func TestCoreEventsBecomeBatches(t *testing.T) {
	s := startNATS(t, 0)
	nc := dial(t, s)
	base := s.NumSubscriptions()
	rec, _ := record(t, Options{URL: s.ClientURL(), Resolve: func(id uint64) string {
		if id == 7587889926375407000 {
			return "w0"
		}
		return ""
	}})
	waitSubscribed(t, s, base+1)
	publish(t, nc, testSubject,
		stored(7587889926375407000, 1, 0, "null", 11, 12),
		stored(7587889926375407000, 2, 0, "12", 13),
		removed(7587889926375407000, 3, 0, 11),
		stored(42, 1, 1, "null", 99), // an unresolved worker, rank 1
		cleared(7587889926375407000, 4, 0))
	rec.wait(t, "four batches of w0 and one of worker_42", func(obs []collectors.Observation) bool {
		return len(batches(obs, "w0")) == 4 && len(batches(obs, "worker_42")) == 1
	})
	rec.mu.Lock()
	w0 := batches(rec.obs, "w0")
	other := batches(rec.obs, "worker_42")[0]
	rec.mu.Unlock()
	if got := seqs(w0); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4}) {
		t.Errorf("w0 batch seqs %v", got)
	}
	e := w0[1].Events[0]
	if e.Kind != collectors.BlockStored || !e.HasParent || e.Parent != 12 || !reflect.DeepEqual(e.Hashes, []uint64{13}) || e.Medium != "GPU" {
		t.Errorf("second event: %+v", e)
	}
	if w0[3].Events[0].Kind != collectors.AllBlocksCleared || w0[0].Topic != testSubject || w0[0].Replayed {
		t.Errorf("batches: %+v / %+v", w0[3], w0[0])
	}
	if other.Rank != 1 || other.Events[0].Hashes[0] != 99 {
		t.Errorf("worker_42: %+v", other)
	}
	rec.wait(t, "w0 live", func([]collectors.Observation) bool {
		st := rec.stat(pubKey{"w0", 0})
		return st != nil && st.State == snapshot.StreamLive && st.LastSeq == 4 && st.Batches == 4 && st.Events == 4
	})
}

// Core NATS has no history: a jump in the event ids is a gap that stays
// lost (history_lost) until the worker clears its cache; a first id past
// 1 is a late join.
func TestCoreGapsAndLateJoins(t *testing.T) {
	s := startNATS(t, 0)
	nc := dial(t, s)
	base := s.NumSubscriptions()
	rec, _ := record(t, Options{URL: s.ClientURL()})
	waitSubscribed(t, s, base+1)
	publish(t, nc, testSubject, stored(1, 1, 0, "null", 1), stored(1, 2, 0, "1", 2), stored(1, 5, 0, "2", 5), stored(2, 9, 0, "null", 9))
	k1, k2 := pubKey{"worker_1", 0}, pubKey{"worker_2", 0}
	rec.wait(t, "worker_1 history lost, worker_2 joined late", func([]collectors.Observation) bool {
		a, b := rec.stat(k1), rec.stat(k2)
		return a != nil && a.State == snapshot.StreamHistoryLost && b != nil && b.State == snapshot.StreamJoinedLate
	})
	a, b := rec.stat(k1), rec.stat(k2)
	if a.Gaps != 1 || a.Missing != 2 || a.Lost != 2 || a.LastSeq != 5 {
		t.Errorf("worker_1: gaps %d missing %d lost %d last %d", a.Gaps, a.Missing, a.Lost, a.LastSeq)
	}
	gap := a.History[0]
	if gap.Kind != "gap" || gap.FromSeq != 3 || gap.ToSeq != 4 || !strings.Contains(gap.Note, "core NATS keeps no history") {
		t.Errorf("gap incident: %+v", gap)
	}
	if b.FirstSeq != 9 || !strings.Contains(b.History[0].Note, "first event id 9: kvtop joined while the worker was publishing") {
		t.Errorf("late join: %+v", b.History)
	}
	publish(t, nc, testSubject, cleared(1, 6, 0))
	rec.wait(t, "worker_1 live again after it cleared", func([]collectors.Observation) bool {
		return rec.stat(k1).State == snapshot.StreamLive
	})
}

// The same event twice (a redelivery) is a duplicate; an id going back
// with other content, or another worker id for the same worker and rank,
// is a restart: the pool drops the old blocks first.
func TestDuplicatesAndRestarts(t *testing.T) {
	s := startNATS(t, 0)
	nc := dial(t, s)
	base := s.NumSubscriptions()
	rec, _ := record(t, Options{URL: s.ClientURL(), Resolve: func(id uint64) string {
		if id == 100 || id == 200 {
			return "w0"
		}
		return ""
	}})
	waitSubscribed(t, s, base+1)
	one := stored(100, 1, 0, "null", 1)
	publish(t, nc, testSubject, one, stored(100, 2, 0, "1", 2), one, stored(100, 1, 0, "null", 77), stored(200, 1, 0, "null", 5))
	k := pubKey{"w0", 0}
	rec.wait(t, "a duplicate and two restarts", func([]collectors.Observation) bool {
		st := rec.stat(k)
		return st != nil && st.Duplicates == 1 && st.Restarts == 2
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var order []string
	for _, o := range rec.obs {
		switch v := o.(type) {
		case *collectors.EventBatch:
			order = append(order, "batch")
		case *collectors.StreamReset:
			if v.Worker == "w0" {
				order = append(order, "reset")
			}
		}
	}
	if want := []string{"batch", "batch", "reset", "batch", "reset", "batch"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	var notes []string
	for _, inc := range rec.status[k].History {
		notes = append(notes, inc.Note)
	}
	joined := strings.Join(notes, " | ")
	if !strings.Contains(joined, "event id went back from 2 to 1 with other content") || !strings.Contains(joined, "worker id changed from 100 to 200") {
		t.Errorf("restart notes: %s", joined)
	}
}

// Hostile input: bad JSON, an unknown event kind, a message over the size
// limit, one over the server's max_payload. Each is counted and said, the
// stream goes on, nothing grows.
func TestHostileMessages(t *testing.T) {
	s := startNATS(t, 256<<10)
	nc := dial(t, s)
	base := s.NumSubscriptions()
	rec, _ := record(t, Options{URL: s.ClientURL(), MaxMessageBytes: 64 << 10})
	waitSubscribed(t, s, base+1)
	huge := stored(3, 3, 0, "2", make([]uint64, 4000)...) // ~200 KB: past kvtop's limit, under max_payload
	if len(huge) < 64<<10 || len(huge) > 256<<10 {
		t.Fatalf("huge message is %d bytes", len(huge))
	}
	publish(t, nc, testSubject,
		stored(3, 1, 0, "null", 1),
		[]byte(`{"worker_id":3,"event":{"event_id":`), // truncated JSON
		[]byte("\xde\xff\xff"),                        // msgpack that claims 65535 entries
		[]byte(`{"worker_id":3,"event":{"event_id":2,"data":{"accessed":{"num_cached":1}},"dp_rank":0}}`),
		huge,
		stored(3, 4, 0, "2", 4))
	// Over max_payload: the server refuses it; the publisher is told.
	if err := nc.Publish(testSubject, make([]byte, 300<<10)); err == nil {
		if err := nc.Flush(); err == nil && nc.LastError() == nil {
			t.Log("server accepted a message over max_payload")
		}
	}
	k := pubKey{"worker_3", 0}
	rec.wait(t, "worker_3 past the hostile messages", func([]collectors.Observation) bool {
		st := rec.stat(k)
		return st != nil && st.LastSeq == 4
	})
	st := rec.stat(k)
	if st.UnknownEvents != 1 || st.Lost != 1 || st.Gaps != 1 {
		t.Errorf("worker_3: unknown events %d, lost %d, gaps %d (the oversized id 3)", st.UnknownEvents, st.Lost, st.Gaps)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var kinds []string
	for _, o := range rec.obs {
		if e, ok := o.(*collectors.SourceError); ok {
			kinds = append(kinds, e.Kind+": "+e.Message)
		}
	}
	all := strings.Join(kinds, "\n")
	for _, want := range []string{"not a Dynamo RouterEvent", "over 65536 bytes (max_message_bytes): not decoded", `an event of kind "accessed"`} {
		if !strings.Contains(all, want) {
			t.Errorf("no error saying %q in:\n%s", want, all)
		}
	}
}

// JetStream: the history in the stream is read at start (a worker whose
// ids start at 1 is complete, not joined late); a gap at kvtop's end
// (events dropped at the subscriber) is replayed from the stream, and the
// held live events follow in order.
func TestJetStreamReplayAfterForcedGap(t *testing.T) {
	s := startNATS(t, 0)
	nc := dial(t, s)
	js := dynamoStream(t, nc)
	ctx := context.Background()
	pub := func(msgs ...[]byte) {
		for _, m := range msgs {
			if _, err := js.Publish(ctx, testStream+".queue", m); err != nil {
				t.Fatal(err)
			}
		}
	}
	pub(stored(5, 1, 0, "null", 1), stored(5, 2, 0, "1", 2), stored(6, 1, 0, "null", 60))
	drop := map[uint64]bool{4: true, 5: true}
	testHookDrop = func(ev *Event) bool { return ev.WorkerID == 5 && drop[ev.ID] }
	defer func() { testHookDrop = nil }()
	rec, _ := record(t, Options{URL: s.ClientURL(), JetStream: &JetStream{Stream: testStream}})
	k := pubKey{"worker_5", 0}
	rec.wait(t, "the stream's history", func(obs []collectors.Observation) bool { return len(batches(obs, "worker_5")) == 2 })
	// Live: 3, then 4 and 5 are lost on the way, then 6 shows the gap.
	pub(stored(5, 3, 0, "2", 3), stored(6, 2, 0, "60", 61), stored(5, 4, 0, "3", 4), stored(5, 5, 0, "4", 5),
		stored(6, 3, 0, "61", 62), stored(5, 6, 0, "5", 6), stored(5, 7, 0, "6", 7))
	rec.wait(t, "worker_5 repaired by replay", func(obs []collectors.Observation) bool {
		st := rec.stat(k)
		return len(batches(obs, "worker_5")) == 7 && st != nil && st.State == snapshot.StreamLive && st.Replayed == 2
	})
	rec.mu.Lock()
	bs := batches(rec.obs, "worker_5")
	rec.mu.Unlock()
	if got := seqs(bs); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("worker_5 applied %v", got)
	}
	for _, b := range bs {
		if b.Replayed != (b.Seq == 4 || b.Seq == 5) {
			t.Errorf("seq %d replayed=%v", b.Seq, b.Replayed)
		}
	}
	st := rec.stat(k)
	if st.Gaps != 1 || st.Missing != 2 || st.Lost != 0 || st.FirstSeq != 1 || st.Replay != "jetstream "+testStream {
		t.Errorf("worker_5 status: %+v", st)
	}
	if inc := st.History[len(st.History)-1]; inc.Kind != "gap" || inc.Replayed != 2 || inc.End.IsZero() {
		t.Errorf("gap incident: %+v", inc)
	}
	for _, h := range st.History {
		if h.Kind == "joined_late" {
			t.Errorf("a worker whose ids start at 1 in the stream joined late: %+v", h)
		}
	}
}

// The NATS server goes away and comes back: every stream says it was
// disconnected (core NATS loses what was published meanwhile, so the next
// event shows a gap), and flows again after nats.go reconnects.
func TestNATSRestartIsDisconnected(t *testing.T) {
	s := startNATS(t, 0)
	port := s.Addr().(interface{ String() string }).String()
	nc := dial(t, s)
	base := s.NumSubscriptions()
	rec, _ := record(t, Options{URL: s.ClientURL()})
	waitSubscribed(t, s, base+1)
	publish(t, nc, testSubject, stored(8, 1, 0, "null", 1), stored(8, 2, 0, "1", 2))
	k := pubKey{"worker_8", 0}
	rec.wait(t, "worker_8 live", func([]collectors.Observation) bool {
		st := rec.stat(k)
		return st != nil && st.State == snapshot.StreamLive && st.LastSeq == 2
	})
	s.Shutdown()
	rec.wait(t, "worker_8 disconnected", func([]collectors.Observation) bool {
		return rec.stat(k).State == snapshot.StreamDisconnected
	})
	_, p, _ := strings.Cut(port, ":")
	s2 := startNATSAt(t, p)
	nc2 := dial(t, s2)
	rec.wait(t, "worker_8 reconnected", func([]collectors.Observation) bool {
		return rec.stat(k).State == snapshot.StreamLive
	})
	// nats.go resubscribes right after it reconnects: a probe from
	// another worker, repeated until it arrives, says when.
	for id := uint64(1); ; id++ {
		publish(t, nc2, testSubject, stored(99, id, 0, "null", id))
		if st := rec.stat(pubKey{"worker_99", 0}); st != nil {
			break
		}
		if id > 500 {
			t.Fatal("kvtop did not resubscribe after the server came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	publish(t, nc2, testSubject, stored(8, 5, 0, "2", 5))
	rec.wait(t, "worker_8 back, with the events of the outage lost", func([]collectors.Observation) bool {
		st := rec.stat(k)
		return st.LastSeq == 5 && st.State == snapshot.StreamHistoryLost && st.Lost == 2
	})
	var disc *collectors.StreamIncident
	for _, inc := range rec.stat(k).History {
		if inc.Kind == "disconnected" {
			disc = &inc
		}
	}
	if disc == nil || disc.End.IsZero() || !strings.Contains(disc.Note, "core NATS: events published meanwhile are lost") {
		t.Errorf("disconnect incident: %+v", disc)
	}
}

// A durable consumer named in the config is created on the stream and
// resumed; start as a duration reads the history from that long ago.
func TestJetStreamDurableFromStartTime(t *testing.T) {
	s := startNATS(t, 0)
	nc := dial(t, s)
	js := dynamoStream(t, nc)
	ctx := context.Background()
	for i := uint64(1); i <= 3; i++ {
		if _, err := js.Publish(ctx, testStream+".queue", stored(9, i, 0, "null", i)); err != nil {
			t.Fatal(err)
		}
	}
	rec, stop := record(t, Options{URL: s.ClientURL(), JetStream: &JetStream{Stream: testStream, Consumer: "kvtop-test", Start: "10m"}})
	rec.wait(t, "the three events of the last ten minutes", func(obs []collectors.Observation) bool {
		return len(batches(obs, "worker_9")) == 3
	})
	st, err := js.Stream(ctx, testStream)
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Consumer(ctx, "kvtop-test")
	if err != nil {
		t.Fatalf("no durable consumer kvtop-test on the stream: %v", err)
	}
	if info, err := c.Info(ctx); err != nil || info.Config.AckPolicy != jetstream.AckNonePolicy || info.Config.InactiveThreshold != time.Hour {
		t.Errorf("consumer %+v %v", info, err)
	}
	stop()
	// No pull request of the stopped kvtop is left on the server: it would
	// take the next event (unacked, gone) from the kvtop that comes back.
	if info, err := c.Info(ctx); err != nil {
		t.Error(err)
	} else if info.NumWaiting != 0 {
		t.Errorf("after kvtop stopped, the consumer still has %d pull request(s) waiting", info.NumWaiting)
	}
	// kvtop comes back: the durable consumer resumes after what it read.
	if _, err := js.Publish(ctx, testStream+".queue", stored(9, 4, 0, "3", 4)); err != nil {
		t.Fatal(err)
	}
	rec2, _ := record(t, Options{URL: s.ClientURL(), JetStream: &JetStream{Stream: testStream, Consumer: "kvtop-test"}})
	rec2.wait(t, "the event published while kvtop was away, alone", func(obs []collectors.Observation) bool {
		bs := batches(obs, "worker_9")
		return len(bs) == 1 && bs[0].Seq == 4
	})
}

// TestPoolBehindBoundedByBytes: when the pool stops applying, the batches
// kvtop has sent it and it has not applied stay within PendingBytes (a
// count alone lets big events fill the pool's input with gigabytes);
// what comes meanwhile waits in nats.go's bounded queue or is dropped as a
// slow consumer, and once the pool catches up the stream goes on.
func TestPoolBehindBoundedByBytes(t *testing.T) {
	s := startNATS(t, 0)
	nc := dial(t, s)
	base := s.NumSubscriptions()
	const budget = 256 << 10
	rec, _ := record(t, Options{URL: s.ClientURL(), PendingBytes: budget, Resolve: func(id uint64) string {
		if id == 7 {
			return "w0"
		}
		return ""
	}})
	waitSubscribed(t, s, base+1)
	rec.hold()
	hs := make([]uint64, 2000) // 16 kB of hashes an event
	for i := range hs {
		hs[i] = uint64(i + 100)
	}
	const n = 100
	for id := 1; id <= n; id++ {
		publish(t, nc, testSubject, stored(7, uint64(id), 0, "null", hs...))
	}
	var last int
	since := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if k, _ := rec.heldBatches(); k != last {
			last, since = k, time.Now()
		}
		if last > 0 && time.Since(since) > 700*time.Millisecond {
			break
		}
	}
	k, bytes := rec.heldBatches()
	one := (&collectors.EventBatch{Events: make([]collectors.KVEvent, 1)}).Cost() + 8*int64(len(hs))
	if k == 0 || k >= n || bytes > budget+one {
		t.Errorf("the pool holds %d batches (%d bytes) it has not applied; want some, at most %d bytes and one batch", k, bytes, budget)
	}
	rec.release()
	publish(t, nc, testSubject, stored(7, n+1, 0, "null", 1))
	rec.wait(t, "the event after the pool caught up", func(obs []collectors.Observation) bool {
		bs := batches(obs, "w0")
		return len(bs) > 0 && bs[len(bs)-1].Seq == n+1
	})
}
