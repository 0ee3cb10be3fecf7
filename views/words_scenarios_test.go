package views_test

import (
	"strings"
	"testing"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// Words found wrong on screen while running the simulator's scenarios.

// A prediction counted in KV blocks (Dynamo, llm-d, a kv-events index) is
// not a character match: only characters get that warning.
func TestBlockPredictionIsNotACharacterMatch(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	var row *snapshot.DecisionRow
	for i := range s.Decisions.Recent {
		if s.Decisions.Recent[i].RequestID == "r-8801" {
			row = &s.Decisions.Recent[i]
		}
	}
	if row == nil || row.Prediction == nil {
		t.Fatal("fixture lacks r-8801 with a prediction")
	}
	row.Units, row.Prediction.Units, row.Prediction.Source = "blocks", "blocks", "kv-events"
	st := state(views.DecisionDetail)
	st.Decision = views.DecisionKey{RequestID: "r-8801", AttemptID: "1"}
	out := views.Render(s, st, 200, 50, th)
	flat := strings.Join(strings.Fields(out), " ")
	if !strings.Contains(flat, "matched 1.5k of 2.0k blocks") {
		t.Errorf("the prediction's unit is not shown:\n%s", out)
	}
	if strings.Contains(flat, "character match") {
		t.Errorf("a block prediction is called a character match:\n%s", out)
	}
	// Characters still are.
	st.Decision = views.DecisionKey{RequestID: "r-8812", AttemptID: "1"}
	if out := views.Render(s, st, 200, 50, th); !strings.Contains(strings.Join(strings.Fields(out), " "), "character match") {
		t.Errorf("a character prediction lost its warning:\n%s", out)
	}
}

// A publisher restart says where seq went back to, not "from 0 to 0"; a
// late join names the first seq seen.
func TestIncidentWordsForRestartAndLateJoin(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	var w *snapshot.Worker
	for i := range s.Workers {
		if s.Workers[i].Name == "w0" {
			w = &s.Workers[i]
		}
	}
	st0 := &w.Streams[0]
	at := s.At.Add(-5e9)
	st0.History = append(st0.History, snapshot.Incident{Kind: "restart", FromSeq: 0, ToSeq: 0, Start: at, End: &at,
		Note: "seq went back from 769 to 0: publisher restarted, its blocks dropped"})
	st := state(views.Worker)
	st.Worker = "w0"
	flat := strings.Join(strings.Fields(views.Render(s, st, 200, 60, th)), " ")
	if strings.Contains(flat, "from 0 to 0") || !strings.Contains(flat, "publisher restart: seq back to 0") ||
		!strings.Contains(flat, "seq went back from 769 to 0") {
		t.Errorf("restart incident in words:\n%s", flat)
	}
	flat = strings.Join(strings.Fields(views.Render(s, state(views.Streams), 200, 60, th)), " ")
	if !strings.Contains(flat, "joined late at seq 1203 · 1 203 earlier batches never seen — first message had seq 1203") {
		t.Errorf("late join does not name the first seq seen:\n%s", flat)
	}
}

// A down worker's error is said once: the pool's reason already quotes it.
func TestDownWorkerErrorSaidOnce(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	msg := "GET http://127.0.0.1:46009/metrics: no answer within 2s"
	for i := range s.Workers {
		if w := &s.Workers[i]; w.Name == "w6" {
			w.Error, w.Reason = &msg, "down: "+msg
		}
	}
	st := state(views.Worker)
	st.Worker = "w6"
	out := views.Render(s, st, 200, 60, th)
	if n := strings.Count(out, msg); n != 1 {
		t.Errorf("the error appears %d times:\n%s", n, out)
	}
}
