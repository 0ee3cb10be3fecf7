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
