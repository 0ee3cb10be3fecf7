package streamhealth

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// TestHealth: incidents stay within the limit, oldest dropped; a loss and a
// late join make the state until a clear ends them; a status is due at
// once on a state change and else at most every interval, and what it
// holds is a copy.
func TestHealth(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	h := Health{Limit: 3}
	for i := range 5 {
		h.Incident("gap", uint64(i), uint64(i), t0)
	}
	if len(h.History) != 3 || h.History[0].FromSeq != 2 {
		t.Fatalf("history %d, first %d: want the latest 3", len(h.History), h.History[0].FromSeq)
	}
	if st := h.Due(h.State(false), t0, false, time.Second); st == nil || st.State != snapshot.StreamLive || len(st.History) != 3 {
		t.Fatalf("first status %+v", st)
	}
	h.OpenLost(7, 9, t0, "lost")
	h.OpenLost(7, 12, t0, "again")
	if h.State(false) != snapshot.StreamHistoryLost || h.LostInc.ToSeq != 12 || h.LostInc.Note != "lost" {
		t.Fatalf("loss %+v", h.LostInc)
	}
	st := h.Due(h.State(false), t0.Add(10*time.Millisecond), false, time.Second)
	if st == nil || st.State != snapshot.StreamHistoryLost {
		t.Fatal("a state change is due at once")
	}
	st.History[0].Note = "changed by the receiver"
	h.St.Batches++
	h.Dirty = true
	if h.Due(h.State(false), t0.Add(20*time.Millisecond), false, time.Second) != nil {
		t.Fatal("a change within the interval is held back")
	}
	if h.Due(h.State(false), t0.Add(20*time.Millisecond), true, time.Second) == nil {
		t.Fatal("a forced status goes")
	}
	h.ClearIncomplete(t0.Add(time.Second), "a restart")
	if h.State(true) != snapshot.StreamReplaying || h.State(false) != snapshot.StreamLive || h.History[2].Note == "changed by the receiver" {
		t.Fatalf("after the clear: %s; history %+v", h.State(false), h.History)
	}
}

// TestGapThenLoss: a gap counts its seqs missing on its incident; losing
// part of it counts them lost on the gap and in one history_lost incident,
// which a second loss extends; a loss without a gap counts only the loss.
func TestGapThenLoss(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	h := Health{Limit: 8}
	inc := h.OpenGap(10, 14, t0)
	if h.St.Gaps != 1 || h.St.Missing != 5 || inc.Kind != "gap" || inc.Missing != 5 || inc.FromSeq != 10 || inc.ToSeq != 14 {
		t.Fatalf("gap: %+v, status %+v", inc, h.St)
	}
	h.Lose(10, 11, inc, "evicted", t0)
	h.Lose(12, 14, inc, "incomplete", t0)
	if h.St.Lost != 5 || inc.Lost != 5 || h.LostInc == nil || h.LostInc.Lost != 5 || h.LostInc.ToSeq != 14 || h.LostInc.Note != "evicted" {
		t.Fatalf("loss: gap %+v, lost %+v, status %+v", inc, h.LostInc, h.St)
	}
	h.Lose(20, 20, nil, "no gap", t0)
	if h.St.Lost != 6 || h.St.Gaps != 1 || h.LostInc.ToSeq != 20 || len(h.History) != 2 {
		t.Fatalf("a loss alone: lost %+v, status %+v, %d incidents", h.LostInc, h.St, len(h.History))
	}
}
