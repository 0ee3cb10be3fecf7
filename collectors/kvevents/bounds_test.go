package kvevents

import (
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/sim/hostile"
)

// trickleRouter is a hostile replay endpoint: it answers every request with
// one reply every `every`, forever, and never the end marker. reply gives
// the seq of the k-th reply to a request from `from`.
func trickleRouter(t *testing.T, every time.Duration, reply func(from uint64, k int) uint64) string {
	t.Helper()
	tr, err := hostile.NewTrickler(nil, every, func(from uint64, k int) (uint64, []byte) {
		seq := reply(from, k)
		return seq, batchSeq(0, int(seq))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr.Endpoint
}

// bigBatch is a hash-heavy batch of about 27 kB, decoded about as big.
func bigBatch(seq int) []byte {
	hs := make([]uint64, 3000)
	for i := range hs {
		hs[i] = uint64(seq)<<20 | uint64(i) | 1<<63
	}
	return batchSeq(0, seq, removedMap(hs...))
}

// peak records the highest value a test hook reports.
type peak struct {
	mu  sync.Mutex
	max int64
}

func (p *peak) see(v int64) {
	p.mu.Lock()
	p.max = max(p.max, v)
	p.mu.Unlock()
}

func (p *peak) get() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max
}

// A replay endpoint that trickles replies which make no progress (below
// the seq asked for), or in-range replies too slowly, cannot keep the
// stream replaying: the idle timer counts only progress and the exchange
// has a deadline. Past it the gap is lost, the stream is history_lost, and
// the live batches held meanwhile are applied in order. A flood of live
// batches behind such a replay gives it up once what it holds would pass
// the budget.
func TestReplayTrickle(t *testing.T) {
	stale := func(from uint64, k int) uint64 { return from - 1 }
	slow := func(from uint64, k int) uint64 { return from + uint64(k) }
	for _, tc := range []struct {
		name      string
		reply     func(from uint64, k int) uint64
		gap       int // seqs dropped after seq 0
		live      int // live batches published while the replay runs
		opts      Options
		big       bool   // live batches of ~27 kB
		wantError string // in the SourceError that ends the replay
	}{
		{"stale replies, idle", stale, 1, 20, Options{ReplayTimeout: 300 * time.Millisecond, ReplayDeadline: time.Minute}, false, "no progress"},
		{"stale replies, deadline", stale, 1, 20, Options{ReplayTimeout: time.Minute, ReplayDeadline: 600 * time.Millisecond}, false, "deadline"},
		{"in-range replies too slowly", slow, 100, 20, Options{ReplayTimeout: time.Minute, ReplayDeadline: 800 * time.Millisecond}, false, "deadline"},
		{"stale replies, live flood over the budget", stale, 1, 60,
			Options{ReplayTimeout: time.Minute, ReplayDeadline: time.Minute, QueueBytes: 1 << 20}, true, "replays would hold over 768 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var held peak
			testHookHeld = held.see
			t.Cleanup(func() { testHookHeld = nil })
			p := newTestPub(t, pubOpts{})
			o := tc.opts
			o.Endpoints = []Endpoint{{Worker: "w0", Events: p.Events, Replay: trickleRouter(t, 50*time.Millisecond, tc.reply)}}
			h := runCollector(t, o)
			p.waitSubscribed()
			h.waitState("w0", 0, live)
			payload := func(seq int) []byte {
				if tc.big {
					return bigBatch(seq)
				}
				return batchSeq(0, seq)
			}
			p.publish(payload(0))
			for k := 0; k < tc.gap; k++ {
				p.drop(payload(int(p.seq)))
			}
			start := time.Now()
			p.publish(payload(int(p.seq))) // the gap: a replay the trickler holds
			h.waitState("w0", 0, replayng)
			var last uint64
			for k := 0; k < tc.live; k++ {
				last = p.publish(payload(int(p.seq)))
				if tc.big {
					time.Sleep(2 * time.Millisecond) // within what the hand-off takes: the held budget is tested
				}
			}
			if tc.gap > 1 { // what trickles in is applied as it comes, not at the end
				h.waitStatus("w0", 0, "replayed batches applied while replaying", func(s *collectors.StreamStatus) bool {
					return s.State == replayng && s.Replayed >= 2
				})
			}
			st := h.waitStatus("w0", 0, "the replay ended", func(s *collectors.StreamStatus) bool {
				return s.LastSeq == last && s.State != replayng
			})
			took := time.Since(start)
			if st.State != lost || st.Missing != uint64(tc.gap) || st.Lost+st.Replayed != uint64(tc.gap) || st.Lost == 0 {
				t.Errorf("state %s missing=%d replayed=%d lost=%d; want history_lost, %d missing, some lost", st.State, st.Missing, st.Replayed, st.Lost, tc.gap)
			}
			// Every live batch arrived, in order, after what the replay brought.
			var want []uint64
			want = append(want, 0)
			for s := uint64(1); s <= st.Replayed; s++ {
				want = append(want, s)
			}
			for s := uint64(tc.gap + 1); s <= last; s++ {
				want = append(want, s)
			}
			if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, want) {
				t.Errorf("batches %v, want %v", got, want)
			}
			var said bool
			for _, e := range h.sourceErrors("") {
				said = said || strings.Contains(e.Message, tc.wantError)
			}
			if !said {
				t.Errorf("no error saying %q\n%s", tc.wantError, h.dump())
			}
			if budget := o.QueueBytes - o.QueueBytes/4; tc.big && held.get() > budget {
				t.Errorf("replays held up to %d bytes, want at most %d", held.get(), budget)
			}
			t.Logf("left replaying after %v", took.Round(time.Millisecond))
		})
	}
}

// A batch over MaxMsgSize: libzmq closes the link without reading it (and
// would never redial); kvtop counts it, says so on the stream, connects
// again, and the next normal batches are applied. The gap it leaves is
// asked of the replay, whose DEALER refuses the same batch: counted again,
// and lost. Nothing of it is decoded.
func TestOversizedMessage(t *testing.T) {
	p := newTestPub(t, pubOpts{replay: true})
	h := connectOne(t, p, Options{MaxMsgSize: 16 << 10})
	p.publish(batchSeq(0, 0))
	p.publish(bigBatch(1)) // ~27 kB > 16 KiB
	st := h.waitStatus("w0", 0, "oversized counted", func(s *collectors.StreamStatus) bool { return s.Oversized == 1 })
	want := "message over 16 KiB from the publisher: libzmq closed the connection; counted in oversized"
	if d := h.incidents("w0", 0, "disconnected"); len(d) != 1 || !strings.Contains(d[0].Note, want) {
		t.Errorf("disconnected incidents %+v, want one saying %q", d, want)
	}
	if errs := h.sourceErrors("too_large"); len(errs) != 1 || !strings.Contains(errs[0].Message, want) {
		t.Errorf("too_large errors %+v, want one saying %q", errs, want)
	}
	p.waitSubscribed() // kvtop connected again
	h.waitState("w0", 0, live)
	for seq := 2; seq <= 4; seq++ {
		p.publish(batchSeq(0, seq))
	}
	st = h.waitStatus("w0", 0, "seq 4 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 4 && s.State != replayng })
	if st.State != lost || st.Oversized != 2 || st.Missing != 1 || st.Lost != 1 || st.DecodeErrors != 0 {
		t.Errorf("state %s oversized=%d missing=%d lost=%d decode_errors=%d; want history_lost 2 1 1 0",
			st.State, st.Oversized, st.Missing, st.Lost, st.DecodeErrors)
	}
	if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, []uint64{0, 2, 3, 4}) {
		t.Errorf("batches %v, want [0 2 3 4]", got)
	}
	if gaps := h.incidents("w0", 0, "gap"); len(gaps) != 1 || !strings.Contains(gaps[0].Note, "a reply over 16 KiB") {
		t.Errorf("gap incidents %+v, want one saying the reply was over 16 KiB", gaps)
	}
	if h.resets("w0") != 0 {
		t.Error("an oversized message was taken for a restart")
	}
}

// A flood of big live batches while the state goroutine is slow: the
// reader keeps draining libzmq and hands over only what fits the budget;
// the rest is dropped and counted, never more accounted than the budget.
// The drops are gaps, which replay repairs once the flood is over.
func TestHandoffFlood(t *testing.T) {
	var handoff peak
	var slow sync.Mutex
	slowed := true
	testHookHandoff = handoff.see
	testHookHandle = func(chunk bool) {
		slow.Lock()
		s := slowed
		slow.Unlock()
		if s && !chunk {
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookHandoff, testHookHandle = nil, nil })
	const n = 200 // ~5.4 MB of batches, in a burst
	p := newTestPub(t, pubOpts{replay: true, replayPace: 5})
	o := Options{QueueBytes: 4 << 20, ReplayTimeout: 10 * time.Second, ReplayCooldown: 50 * time.Millisecond}
	h := connectOne(t, p, o)
	for seq := 0; seq < n; seq++ {
		p.publish(bigBatch(seq))
	}
	h.waitStatus("w0", 0, "drops counted", func(s *collectors.StreamStatus) bool { return s.Dropped > 0 })
	slow.Lock()
	slowed = false // the pool catches up
	slow.Unlock()
	var lastSeq uint64
	var since time.Time
	h.waitFor("the queue drained", func() bool {
		st := h.status("w0", 0)
		if st.LastSeq != lastSeq || st.State == replayng {
			lastSeq, since = st.LastSeq, time.Now()
		}
		return time.Since(since) > 500*time.Millisecond
	})
	p.publish(bigBatch(n)) // a gap if the last ones were dropped
	st := h.waitStatus("w0", 0, "gaps repaired", func(s *collectors.StreamStatus) bool { return s.LastSeq == n && s.State == live })
	if st.Dropped == 0 || st.Missing != st.Dropped || st.Replayed != st.Missing || st.Lost != 0 {
		t.Errorf("dropped=%d missing=%d replayed=%d lost=%d; want drops, all of them missing and replayed", st.Dropped, st.Missing, st.Replayed, st.Lost)
	}
	bs := h.batches("w0", 0)
	ok := len(bs) == n+1
	for i := 0; ok && i < len(bs); i++ {
		ok = bs[i].Seq == uint64(i) && bs[i].Events[0].Hashes[0] == uint64(i)<<20|1<<63
	}
	if !ok {
		t.Errorf("%d batches applied, want seqs 0..%d in order with their own blocks", len(bs), n)
	}
	if got := handoff.get(); got == 0 || got > o.QueueBytes/4 {
		t.Errorf("hand-off held up to %d bytes, want at most the budget %d", got, o.QueueBytes/4)
	}
	if errs := h.sourceErrors("too_large"); len(errs) == 0 || !strings.Contains(errs[0].Message, "kvtop fell behind") {
		t.Errorf("too_large errors %+v, want one saying kvtop fell behind", errs)
	}
}

// TestFullHandoffWaits: a reader that finds the channel to the state
// goroutine full waits for a slot (up to WakeEvery a drain) instead of
// dropping at once. Readers on the shared grid hand over their drains at
// the same moment, so the channel fills in bursts the state goroutine
// clears within milliseconds; a drop there is a gap and a replay for
// nothing. Here the channel has 4 slots and the state goroutine takes 2 ms
// a batch: a burst of 40 must all arrive, none dropped.
func TestFullHandoffWaits(t *testing.T) {
	old := handoffMsgs
	handoffMsgs = 4
	testHookHandle = func(chunk bool) {
		if !chunk {
			time.Sleep(2 * time.Millisecond)
		}
	}
	t.Cleanup(func() { handoffMsgs, testHookHandle = old, nil })
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0))
	h.waitStatus("w0", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 0 })
	const n = 40
	for seq := 1; seq <= n; seq++ {
		p.publish(batchSeq(0, seq))
	}
	st := h.waitStatus("w0", 0, "the burst applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == n })
	if st.Dropped != 0 || st.Gaps != 0 {
		t.Errorf("dropped=%d gaps=%d, want a burst through a full channel to wait, not drop", st.Dropped, st.Gaps)
	}
	if got := len(h.batches("w0", 0)); got != n+1 {
		t.Errorf("%d batches applied, want %d", got, n+1)
	}
}

// TestPoolBehindBoundedByBytes: when the pool stops applying, what kvtop
// has sent it and it has not applied stays within the hand-off budget in
// bytes (a publisher of big batches fills a channel's count with
// gigabytes); the readers drop meanwhile, and once the pool catches up
// the drops are gaps replay repairs, every batch in order.
func TestPoolBehindBoundedByBytes(t *testing.T) {
	const n = 200 // 3 000 hashes each: ~5 MB of batches
	p := newTestPub(t, pubOpts{replay: true, replayPace: 5})
	o := Options{QueueBytes: 4 << 20, ReplayTimeout: 10 * time.Second, ReplayCooldown: 50 * time.Millisecond}
	h := connectOne(t, p, o)
	h.hold()
	for seq := 0; seq < n; seq++ {
		p.publish(bigBatch(seq))
	}
	// Wait until nothing more arrives for a while.
	var last int
	since := time.Now()
	h.waitFor("the flow to stop while the pool holds", func() bool {
		k, _ := h.heldBatches()
		if k != last {
			last, since = k, time.Now()
		}
		return time.Since(since) > 700*time.Millisecond
	})
	k, bytes := h.heldBatches()
	one := (&collectors.EventBatch{Events: make([]collectors.KVEvent, 1)}).Cost() + 8*3000
	if budget := o.QueueBytes / 4; k == 0 || k >= n || bytes > budget+one {
		t.Errorf("the pool holds %d batches (%d bytes) it has not applied; want some, at most the budget %d bytes and one batch", k, bytes, budget)
	}
	h.release()
	var lastSeq uint64
	since = time.Now()
	h.waitFor("the queue drained", func() bool {
		st := h.status("w0", 0)
		if st.LastSeq != lastSeq || st.State == replayng {
			lastSeq, since = st.LastSeq, time.Now()
		}
		return time.Since(since) > 500*time.Millisecond
	})
	p.publish(bigBatch(n))
	st := h.waitStatus("w0", 0, "gaps repaired", func(s *collectors.StreamStatus) bool { return s.LastSeq == n && s.State == live })
	if st.Dropped == 0 || st.Lost != 0 {
		t.Errorf("dropped=%d lost=%d: want drops while the pool held, none lost", st.Dropped, st.Lost)
	}
	bs := h.batches("w0", 0)
	ok := len(bs) == n+1
	for i := 0; ok && i < len(bs); i++ {
		ok = bs[i].Seq == uint64(i)
	}
	if !ok {
		t.Errorf("%d batches applied, want seqs 0..%d in order", len(bs), n)
	}
}

// TestStalledReaderBacklog: a reader that lags (starved of CPU, decoding
// big batches) leaves its backlog to libzmq, which holds at most subHWM
// messages of it and then stops reading the socket: the TCP buffers and
// the publisher's queue, bounded, hold the rest, and what the publisher
// drops is a gap, counted. With 10 000 messages queued, a publisher of 1 MB
// batches took kvtop past 4 GiB in seconds (docs/PERFORMANCE.md, "Hostile
// inputs").
func TestStalledReaderBacklog(t *testing.T) {
	var stalled atomic.Bool
	testHookDrain = func() {
		for stalled.Load() {
			time.Sleep(time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookDrain = nil })
	p := newTestPub(t, pubOpts{sndhwm: 8})
	// A hand-off quarter of 16 MiB over 64 KiB: subHWM 256.
	o := Options{QueueBytes: 64 << 20}
	if o.defaults(); o.subHWM() != 256 {
		t.Fatalf("subHWM %d, want 256", o.subHWM())
	}
	h := connectOne(t, p, o)
	p.publish(batchSeq(0, 0))
	h.waitStatus("w0", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 0 })
	hs := make([]uint64, 8000)
	for i := range hs {
		hs[i] = uint64(i) | 1<<63
	}
	const n = 1000 // of 72 kB: 72 MB, paced so that a reading subscriber misses none
	stalled.Store(true)
	for seq := 1; seq <= n; seq++ {
		p.publish(batchSeq(0, seq, removedMap(hs...)))
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stalled.Store(false)
	var lastSeq uint64
	var since time.Time
	h.waitFor("the backlog drained", func() bool {
		if st := h.status("w0", 0); st.LastSeq != lastSeq || since.IsZero() {
			lastSeq, since = st.LastSeq, time.Now()
		}
		return time.Since(since) > 500*time.Millisecond
	})
	p.publish(batchSeq(0, n+1))
	st := h.waitStatus("w0", 0, "the last seq applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == n+1 })
	got := len(h.batches("w0", 0)) - 2 // of the stall
	reached := got + int(st.Dropped)
	t.Logf("of %d batches sent during the stall: %d reached kvtop (%d applied, %d dropped), lost %d", n, reached, got, st.Dropped, st.Lost)
	if reached > 256+200 { // the high-water mark, plus what TCP's buffers held
		t.Errorf("%d of %d batches (%d MB) reached kvtop while its reader was stalled: libzmq queued them", reached, n, reached*72/1000)
	}
	if reached == 0 {
		t.Error("no batch of the stall reached kvtop: the queues hold nothing")
	}
	if st.Lost == 0 {
		t.Errorf("state %s, lost %d; want the batches the publisher dropped lost (it has no replay)", st.State, st.Lost)
	}
}
