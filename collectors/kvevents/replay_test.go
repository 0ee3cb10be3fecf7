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
// burst, as vLLM does, while kvtop's replay reader is briefly stalled (a
// loaded machine, a slow pool). The publisher's ROUTER drops whatever its
// pipe cannot take, silently, so kvtop must keep receiving: every seq is
// recovered. And the replay never holds the burst: replies are decoded and
// handed over in small chunks as they arrive.
func TestReplayBurstLosesNothing(t *testing.T) {
	const n = 9999 // missing; with the live batch after them, the ring's 10 000
	var once sync.Once
	sent := make(chan struct{})
	var mu sync.Mutex
	most, stalled := 0, false
	testHookReplayReply = func(pending int) {
		mu.Lock()
		most = max(most, pending)
		first := !stalled
		stalled = true
		mu.Unlock()
		if first { // hold the reader until the publisher has sent everything
			select {
			case <-sent:
			case <-time.After(10 * time.Second):
			}
		}
	}
	t.Cleanup(func() { testHookReplayReply = nil })

	p := newTestPub(t, pubOpts{replay: true, replayPace: 10, onReplayed: func() { once.Do(func() { close(sent) }) }})
	h := connectOne(t, p, Options{ReplayTimeout: 10 * time.Second})
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
	if st.State != live || st.Missing != n || st.Replayed != n || st.Lost != 0 {
		t.Errorf("state %s missing=%d replayed=%d lost=%d; want live %d %d 0", st.State, st.Missing, st.Replayed, st.Lost, n, n)
	}
	bs := h.batches("w0", 0)
	ok := len(bs) == n+2
	for i := 0; ok && i < len(bs); i++ {
		ok = bs[i].Seq == uint64(i) && bs[i].Events[0].Hashes[0] == uint64(i)<<8|1<<63
	}
	if !ok {
		t.Errorf("%d batches applied, want seqs 0..%d in order with their own blocks", len(bs), n+1)
	}
	mu.Lock()
	defer mu.Unlock()
	if !stalled || most > replayChunkBatches {
		t.Errorf("replay held up to %d decoded batches before handing them over, want at most %d (stalled: %v)", most, replayChunkBatches, stalled)
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
