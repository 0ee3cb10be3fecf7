package kvevents

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// runOf tells which run of a test publisher a batch came from (batchSeq's
// default event encodes it in the hash).
func runOf(b *collectors.EventBatch) uint64 {
	return (b.Events[0].Hashes[0] &^ (1 << 63)) >> 40
}

// afterReset returns the batches applied after the last StreamReset.
func (h *harness) afterReset(worker string) []*collectors.EventBatch {
	var out []*collectors.EventBatch
	for _, o := range h.all() {
		switch o := o.(type) {
		case *collectors.StreamReset:
			if o.Worker == worker {
				out = nil
			}
		case *collectors.EventBatch:
			if o.Worker == worker {
				out = append(out, o)
			}
		}
	}
	return out
}

// A worker restarts while kvtop is disconnected, and its new run is already
// past kvtop's last seq when the link is back: the jump must not be taken
// for a gap (which would splice the new run onto the old blocks and show
// live). The replay from the last applied seq shows that batch changed, so
// the old blocks are dropped and the new run joins from seq 0.
func TestRestartWhileDisconnected(t *testing.T) {
	tr := &replayTracker{}
	p := newTestPub(t, pubOpts{replay: true, tracker: tr})
	h := connectOne(t, p, Options{ReplayCooldown: 50 * time.Millisecond})
	for seq := 0; seq < 3; seq++ {
		p.publish(batchSeq(0, seq))
	}
	h.waitStatus("w0", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	port, rport := portOf(t, p.Events), portOf(t, p.Replay)
	p.close()
	h.waitState("w0", 0, snapshot.StreamDisconnected)

	// The new process comes back on the same ports and runs ahead before
	// kvtop's SUB has reconnected.
	p2 := newTestPub(t, pubOpts{replay: true, port: port, replayPort: rport, tracker: tr})
	for seq := 0; seq < 6; seq++ {
		p2.drop(batchSeq(1, seq))
	}
	p2.waitSubscribed()
	p2.publish(batchSeq(1, 6))
	st := h.waitStatus("w0", 0, "new run joined", func(s *collectors.StreamStatus) bool { return s.LastSeq == 6 && s.State == live })

	if n := h.resets("w0"); n != 1 {
		t.Fatalf("%d StreamResets, want 1: the old run's blocks must be dropped\n%s", n, h.dump())
	}
	after := h.afterReset("w0")
	if got := seqsOf(after); !reflect.DeepEqual(got, []uint64{0, 1, 2, 3, 4, 5, 6}) {
		t.Errorf("after the reset: seqs %v, want the new run 0..6", got)
	}
	for _, b := range after {
		if runOf(b) != 1 {
			t.Errorf("seq %d after the reset is from run %d, want the new run", b.Seq, runOf(b))
		}
	}
	if st.Restarts != 1 || st.Gaps != 0 || st.Missing != 0 || st.Lost != 0 || st.FirstSeq != 6 {
		t.Errorf("restarts=%d gaps=%d missing=%d lost=%d first=%d; want 1 0 0 0 6", st.Restarts, st.Gaps, st.Missing, st.Lost, st.FirstSeq)
	}
	r := h.incidents("w0", 0, "restart")
	if len(r) != 1 || !strings.Contains(r[0].Note, "after a reconnect seq jumped from 2 to 6") || !strings.Contains(r[0].Note, "differs") {
		t.Errorf("restart incidents %+v", r)
	}
	if got := tr.asked(); !reflect.DeepEqual(got, []uint64{2, 0}) {
		t.Errorf("replays asked from %v, want [2 0]: check the last applied seq, then join the new run", got)
	}
}

// After a reconnect to the same process (a network blip), what the
// publisher did meanwhile is checked and then repaired as a gap; in order
// it is trusted without a replay. Without a replay endpoint a jump across a
// disconnect cannot be told from a restart: it is taken as one.
func TestReconnectSameRun(t *testing.T) {
	tests := []struct {
		name       string
		replay     bool
		skip       int // seqs the publisher sent while kvtop was away
		wantState  snapshot.StreamState
		wantResets int
		wantAsked  []uint64
		wantSeqs   []uint64 // applied after the last reset
		wantGaps   uint64
		wantRepl   uint64
	}{
		{"jump, replay holds the last applied batch", true, 3, live, 0, []uint64{2}, []uint64{0, 1, 2, 3, 4, 5, 6}, 1, 3},
		{"in order after the reconnect", true, 0, live, 0, nil, []uint64{0, 1, 2, 3}, 0, 0},
		{"jump without a replay endpoint", false, 3, late, 1, nil, []uint64{6}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &replayTracker{}
			p := newTestPub(t, pubOpts{replay: tt.replay, tracker: tr})
			h := connectOne(t, p, Options{})
			for seq := 0; seq < 3; seq++ {
				p.publish(batchSeq(0, seq))
			}
			h.waitStatus("w0", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
			p.relink(h, "w0")
			for k := 0; k < tt.skip; k++ {
				p.drop(batchSeq(0, int(p.seq)))
			}
			last := p.publish(batchSeq(0, int(p.seq)))
			st := h.waitStatus("w0", 0, "settled", func(s *collectors.StreamStatus) bool {
				return s.LastSeq == last && s.State != replayng
			})
			if st.State != tt.wantState || st.Gaps != tt.wantGaps || st.Replayed != tt.wantRepl || st.Lost != 0 {
				t.Errorf("state %s gaps=%d replayed=%d lost=%d; want %s %d %d 0", st.State, st.Gaps, st.Replayed, st.Lost, tt.wantState, tt.wantGaps, tt.wantRepl)
			}
			if n := h.resets("w0"); n != tt.wantResets {
				t.Errorf("%d resets, want %d", n, tt.wantResets)
			}
			if got := seqsOf(h.afterReset("w0")); !reflect.DeepEqual(got, tt.wantSeqs) {
				t.Errorf("applied %v, want %v", got, tt.wantSeqs)
			}
			if got := tr.asked(); !reflect.DeepEqual(got, tt.wantAsked) {
				t.Errorf("replays asked from %v, want %v", got, tt.wantAsked)
			}
			if tt.wantResets > 0 {
				r := h.incidents("w0", 0, "restart")
				if len(r) != 1 || !strings.Contains(r[0].Note, "no replay endpoint to tell a gap from a restart") {
					t.Errorf("restart incidents %+v", r)
				}
			}
		})
	}
}
