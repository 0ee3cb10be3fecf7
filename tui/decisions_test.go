package tui

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// busy is a pool's stream of snapshots at 35 decisions a second whose
// Recent is a window of the newest records, as a pool with a fixed
// limits.recent_decisions lists them: records q-00000, q-00001, … one
// every 1/35 s, every seventh recomputed on w1 what w3 held.
type busy struct {
	window int // rows in Recent
	next   int // the next record's number
	step   int // snapshots so far
}

func record(i int) snapshot.DecisionRow {
	at := fixture.At.Add(time.Duration(i) * time.Second / 35)
	cached, prompt, out := 512, 3120, 180
	done := true
	r := snapshot.DecisionRow{
		At: at, RequestID: fmt.Sprintf("q-%05d", i), AttemptID: "1",
		Chosen: fmt.Sprintf("w%d", i%4), Owner: fmt.Sprintf("w%d", i%4), Units: "tokens",
		Matched: fp(512), Total: fp(3120), CachedTokens: &cached, PromptTokens: &prompt,
		QueueMS: fp(40), TTFTMS: fp(210), Done: &done, Flags: []string{},
		Router: "r0", Model: "qwen3-8b", Endpoint: "/v1/chat/completions", Reason: "best-match", Format: "kvtop",
		Prediction: &snapshot.PredictionInfo{Source: "kv-events", Input: "tokens", Units: "tokens", Matched: fp(512), Total: fp(3120), Owner: fmt.Sprintf("w%d", i%4)},
		Outcome:    &snapshot.OutcomeInfo{At: at, Worker: fmt.Sprintf("w%d", i%4), HTTPStatus: 200, E2EMS: fp(2400), FinishReason: "stop", OutputTokens: &out},
	}
	if i%7 == 3 {
		r.Chosen, r.Outcome.Worker = "w1", "w1"
		tok, held := 2048, 2560
		r.Flags = []string{"recompute"}
		r.Recompute = &snapshot.RecomputeInfo{Tokens: &tok, ElsewhereTokens: &held, Worker: "w3", Source: "prediction"}
	}
	return r
}

func fp(v float64) *float64 { return &v }

// snapshot adds n newer records and returns the snapshot listing the
// window.
func (b *busy) snapshot(n int) *snapshot.Snapshot {
	b.step++
	b.next += n
	s := fixture.Later(b.step)
	first := max(0, b.next-b.window)
	s.Decisions.Recent = make([]snapshot.DecisionRow, 0, b.next-first)
	for i := first; i < b.next; i++ {
		s.Decisions.Recent = append(s.Decisions.Recent, record(i))
	}
	s.Decisions.Records = b.next
	return s
}

// push sends snapshots until total newer records have arrived, 35 a
// snapshot (a second each).
func (h *harness) push(b *busy, total int) {
	h.t.Helper()
	for sent := 0; sent < total; sent += 35 {
		h.send(snapshotMsg{b.snapshot(35)})
	}
}

// TestPausedFilteredListHoldsItsRecords: issue 25's paused list
// (/flag:recompute, the pool listing its newest 500 records): after 2 000
// newer records the top row is still there, under the cursor, and enter
// opens it with its full record; esc comes back to it.
func TestPausedFilteredListHoldsItsRecords(t *testing.T) {
	h := start(t, 120, 40)
	b := &busy{window: 500}
	h.send(snapshotMsg{b.snapshot(500)})
	h.keys("5", "/", "flag:recompute", "enter", "F", "g")
	h.contains("‖ PAUSED")
	top := h.cursorRow()
	if !strings.Contains(top, "q-00003") {
		t.Fatalf("g: the cursor should be on the oldest recompute, q-00003: %q", top)
	}
	h.push(b, 2000)
	if got := h.cursorRow(); !strings.Contains(got, "q-00003") {
		t.Fatalf("after 2 000 newer records the cursor left its row:\nwas %q\nnow %q\n%s", top, got, h.view())
	}
	if first := firstDecisionRow(h.view()); !strings.Contains(first, "q-00003") {
		t.Errorf("the view scrolled: first row %q", first)
	}
	h.contains("held")
	h.keys("enter")
	if h.model().st.Screen != views.DecisionDetail {
		t.Fatalf("enter: on %s", h.model().st.Screen)
	}
	h.contains("request q-00003", "chosen w1", "cached 512 of 3 120 prompt tokens", "w3 held 2 560 tokens of it",
		"recomputed 2 048 tokens", "TTFT 210 ms", "as last listed")
	if strings.Contains(h.view(), "no longer in memory") {
		t.Errorf("the record under the cursor did not open:\n%s", h.view())
	}
	// Still more records while reading: the record stays open.
	h.push(b, 700)
	h.contains("request q-00003", "recomputed 2 048 tokens")
	h.keys("esc")
	if got := h.cursorRow(); !strings.Contains(got, "q-00003") {
		t.Errorf("back on the list, the cursor should be on q-00003: %q", got)
	}
	// Clearing the filter and following again lets the held records go.
	h.keys("esc", "F")
	h.send(snapshotMsg{b.snapshot(35)})
	if n := len(h.model().st.Held); n != 0 {
		t.Errorf("following unfiltered, %d records still held", n)
	}
}

// TestFollowUpThenEnterOpensTheRowUnderTheCursor: in FOLLOW, k pauses on
// the record above the newest; however many records arrive (the pool
// lets that one go), the cursor stays on it and enter opens it.
func TestFollowUpThenEnterOpensTheRowUnderTheCursor(t *testing.T) {
	h := start(t, 120, 40)
	b := &busy{window: 500}
	h.send(snapshotMsg{b.snapshot(500)})
	h.keys("5")
	h.contains("● FOLLOW")
	h.push(b, 70)
	if !strings.Contains(h.cursorRow(), "q-00569") {
		t.Fatalf("follow should sit on the newest, q-00569: %q", h.cursorRow())
	}
	h.keys("k")
	under := h.cursorRow()
	if !strings.Contains(under, "q-00568") {
		t.Fatalf("k: %q", under)
	}
	h.push(b, 1000) // q-00568 leaves the pool's 500
	if got := h.cursorRow(); got != under {
		t.Fatalf("the row under the cursor changed as records arrived:\nwas %q\nnow %q", under, got)
	}
	h.keys("enter")
	h.contains("request q-00568")
	// Each way of opening lands on the row under the cursor.
	h.keys("esc", "k", "k")
	under = h.cursorRow()
	h.push(b, 350)
	h.keys("enter")
	h.contains("request " + strings.Fields(under)[2])
}

// TestHeldRecordsAreBounded: a list paused for long holds at most
// views.MaxHeld records; the oldest go first, never the rows on screen
// or the one under the cursor.
func TestHeldRecordsAreBounded(t *testing.T) {
	h := start(t, 120, 40)
	b := &busy{window: 500}
	h.send(snapshotMsg{b.snapshot(500)})
	h.keys("5", "k", "pgup", "pgup") // paused, some rows above the newest
	under := h.cursorRow()
	h.push(b, views.MaxHeld+2000)
	if n := len(h.model().st.Held); n != views.MaxHeld {
		t.Errorf("%d records held, want the bound %d", n, views.MaxHeld)
	}
	if got := h.cursorRow(); got != under {
		t.Errorf("past the bound the row under the cursor went:\nwas %q\nnow %q", under, got)
	}
	h.keys("enter")
	h.contains("request " + strings.Fields(under)[2])
}

// firstDecisionRow is the first row of the decisions table.
func firstDecisionRow(v string) string {
	for _, l := range strings.Split(v, "\n") {
		if strings.Contains(l, " q-") {
			return l
		}
	}
	return ""
}

// TestHeldRecordsGoWhenTimeGoesBack: a snapshot from before the one shown
// (a replay seeking back, a collector restarted) is another stretch of
// time: the list lets what it held go instead of listing later records
// above earlier ones.
func TestHeldRecordsGoWhenTimeGoesBack(t *testing.T) {
	h := start(t, 120, 40)
	b := &busy{window: 500}
	h.send(snapshotMsg{b.snapshot(500)})
	h.keys("5", "k")
	h.push(b, 700)
	if len(h.model().st.Held) == 0 {
		t.Fatal("paused, nothing held")
	}
	back := &busy{window: 500}
	h.send(snapshotMsg{back.snapshot(300)}) // seq of the first step again
	if n := len(h.model().st.Held); n != 0 {
		t.Errorf("back in time, %d records still held", n)
	}
	if v := h.view(); regexp.MustCompile(`q-(00[3-9]|0[1-9])`).MatchString(v) || !strings.Contains(v, "q-00299") {
		t.Errorf("the list should be the earlier snapshot's q-00000…q-00299:\n%s", v)
	}
}
