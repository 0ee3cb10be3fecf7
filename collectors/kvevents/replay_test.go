package kvevents

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// A publisher answers a replay of its whole 10 000-batch buffer in one
// burst, as vLLM does, while kvtop's state goroutine is stalled (a slow
// pool). The publisher's ROUTER drops whatever its pipe cannot take,
// silently, so kvtop's replay reader keeps draining its DEALER into kvtop's
// own queue: every seq is recovered. With a budget smaller than the burst
// the reader waits at the budget for the pool; when the pool stays stuck
// longer than the replay timeout the replay stops, saying so, within the
// budget; the rest is lost and live batches flow again.
func TestReplayBurstLosesNothing(t *testing.T) {
	const n = 9999 // missing; with the live batch after them, the ring's 10 000
	for _, tc := range []struct {
		name       string
		queueBytes int64
		stall      time.Duration // the pool stalls at least this long
		lossless   bool
	}{
		{"within the budget", 0, 0, true},
		{"over the budget, pool stuck", 4 << 20, 3 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var once sync.Once
			sent := make(chan struct{})
			var mu sync.Mutex
			var most int64
			stalled := false
			testHookReplayReply = func(held int64) {
				mu.Lock()
				most = max(most, held)
				mu.Unlock()
			}
			testHookHandle = func(chunk bool) {
				mu.Lock()
				first := chunk && !stalled
				stalled = stalled || chunk
				mu.Unlock()
				if first { // hold the pool until the publisher has sent everything
					stall := time.After(tc.stall)
					select {
					case <-sent:
					case <-time.After(10 * time.Second):
					}
					<-stall
				}
			}
			t.Cleanup(func() { testHookReplayReply, testHookHandle = nil, nil })

			p := newTestPub(t, pubOpts{replay: true, replayPace: 10, onReplayed: func() { once.Do(func() { close(sent) }) }})
			o := Options{ReplayTimeout: 10 * time.Second, QueueBytes: tc.queueBytes}
			if tc.stall > 0 {
				o.ReplayTimeout = time.Second // shorter than the stall
			}
			h := connectOne(t, p, o)
			// ~1.4 kB per batch (16 blocks of 16 token ids): 14 MB in one burst.
			payload := func(seq int) []byte {
				hs := make([]uint64, 16)
				for i := range hs {
					hs[i] = uint64(seq)<<8 | uint64(i) | 1<<63
				}
				return batchSeq(0, seq, storedMap(nil, hs...))
			}
			p.publish(payload(0))
			for seq := 1; seq <= n; seq++ {
				p.drop(payload(seq))
			}
			p.publish(payload(n + 1))
			st := h.waitStatus("w0", 0, "the burst applied", func(s *collectors.StreamStatus) bool {
				return s.LastSeq == n+1 && s.State != replayng
			})
			bs := h.batches("w0", 0)
			ok := len(bs) >= 2 && bs[0].Seq == 0 && bs[len(bs)-1].Seq == n+1
			for i := 1; ok && i < len(bs); i++ {
				ok = bs[i].Seq > bs[i-1].Seq && bs[i].Events[0].Hashes[0] == bs[i].Seq<<8|1<<63
			}
			if !ok {
				t.Errorf("%d batches applied, want seqs from 0 to %d in order with their own blocks", len(bs), n+1)
			}
			o.defaults()
			mu.Lock()
			defer mu.Unlock()
			if !stalled || most > o.heldBudget() {
				t.Errorf("replays held up to %d bytes, want at most the budget %d (stalled: %v)", most, o.heldBudget(), stalled)
			}
			if tc.lossless {
				if st.State != live || st.Missing != n || st.Replayed != n || st.Lost != 0 || len(bs) != n+2 {
					t.Errorf("state %s missing=%d replayed=%d lost=%d batches=%d; want live %d %d 0 %d",
						st.State, st.Missing, st.Replayed, st.Lost, len(bs), n, n, n+2)
				}
				return
			}
			if st.State != lost || st.Replayed == 0 || st.Lost == 0 || st.Replayed+st.Lost != n {
				t.Errorf("state %s replayed=%d lost=%d; want history_lost with some of the %d replayed, the rest lost", st.State, st.Replayed, st.Lost, n)
			}
			if errs := h.sourceErrors("too_large"); len(errs) != 1 || !strings.Contains(errs[0].Message, "replay queue is full") {
				t.Errorf("too_large errors %+v, want one saying the replay queue is full", errs)
			}
		})
	}
}

// Seqs the publisher's buffer still holds but that did not arrive are a
// replay incomplete, not history evicted from the buffer: the note says so.
func TestReplayIncomplete(t *testing.T) {
	tests := []struct {
		name     string
		opts     pubOpts
		wantNote string
		notNote  string
	}{
		{"replies lost in transit", pubOpts{replay: true, replaySkip: map[uint64]bool{2: true, 3: true}},
			"replay incomplete: 2 of 4 seqs the publisher holds did not arrive", "no longer in the publisher's replay buffer"},
		{"evicted from the buffer", pubOpts{replay: true, ring: 3},
			"2 of 4 seqs no longer in the publisher's replay buffer", "replay incomplete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newTestPub(t, tt.opts)
			h := connectOne(t, p, Options{})
			p.publish(batchSeq(0, 0))
			for seq := 1; seq <= 4; seq++ {
				p.drop(batchSeq(0, seq))
			}
			p.publish(batchSeq(0, 5))
			st := h.waitStatus("w0", 0, "gap settled", func(s *collectors.StreamStatus) bool { return s.LastSeq == 5 && s.State != replayng })
			if st.State != lost || st.Missing != 4 || st.Replayed != 2 || st.Lost != 2 {
				t.Errorf("state %s missing=%d replayed=%d lost=%d; want history_lost 4 2 2", st.State, st.Missing, st.Replayed, st.Lost)
			}
			gaps := h.incidents("w0", 0, "gap")
			if len(gaps) != 1 || !strings.Contains(gaps[0].Note, tt.wantNote) || strings.Contains(gaps[0].Note, tt.notNote) {
				t.Errorf("gap incidents %+v, want a note saying %q", gaps, tt.wantNote)
			}
		})
	}
}

// A gap among the live batches held behind a running replay is filled by
// that same replay (it answers past its range), not by a second request
// after the cooldown.
func TestHeldGapFilledBySameReplay(t *testing.T) {
	tr := &replayTracker{}
	p := newTestPub(t, pubOpts{replay: true, replayDelay: 300 * time.Millisecond, tracker: tr})
	h := connectOne(t, p, Options{})
	p.publish(batchSeq(0, 0))
	p.drop(batchSeq(0, 1))
	p.publish(batchSeq(0, 2)) // gap 1: replay, answered after the delay
	h.waitState("w0", 0, replayng)
	p.drop(batchSeq(0, 3))
	p.publish(batchSeq(0, 4)) // held behind the replay, gap 3
	st := h.waitStatus("w0", 0, "both gaps repaired", func(s *collectors.StreamStatus) bool { return s.LastSeq == 4 && s.State == live })
	if st.Gaps != 2 || st.Replayed != 2 || st.Lost != 0 {
		t.Errorf("gaps=%d replayed=%d lost=%d; want 2 2 0", st.Gaps, st.Replayed, st.Lost)
	}
	bs := h.batches("w0", 0)
	if got := seqsOf(bs); !reflect.DeepEqual(got, []uint64{0, 1, 2, 3, 4}) {
		t.Errorf("batches %v, want 0..4 in order", got)
	}
	if got := replayedOf(bs); !reflect.DeepEqual(got, []uint64{1, 3}) {
		t.Errorf("replayed %v, want [1 3]", got)
	}
	if got := tr.asked(); !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("replays asked from %v, want one, from 1", got)
	}
}
