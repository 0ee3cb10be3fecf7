package views_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// What the pool rejects or cannot hold is on screen where the operator
// looks, at 80×24: the index-full alert on the pool screen; the worker's
// reason (index full first, then what was invalid); a restart the pool
// concluded from metrics in the worker's history, in its own words.
func TestIndexFullInvalidAndMetricsRestartOnScreen(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	s.Alerts = append([]snapshot.Alert{{Severity: "warning", Kind: "index_full", Subject: "pool", Since: s.At,
		Text: "index full: w1, w3 not fully indexed since 14:02:11 (limits.index_blocks 16 777 216)"}}, s.Alerts...)
	s.Pool.IndexFull, s.Pool.IndexComplete = true, false
	w3 := &s.Workers[3]
	w3.State, w3.IndexFull, w3.IndexComplete = "stale", true, false
	note := `vllm:num_requests_waiting{engine="0"} = -3: a queue cannot be negative`
	w3.Reason = "index full: 16 777 216 blocks (limits.index_blocks); invalid: " + note
	w3.Invalid = []snapshot.Invalid{{Engine: "0", Field: "queue", Note: note}}
	w3.Queue = nil
	end := s.At.Add(-20 * time.Second)
	w3.Streams[0].History = append(w3.Streams[0].History, snapshot.Incident{Kind: "restart", Origin: "metrics", Start: end, End: &end,
		Note: "engine restarted while its metrics were down (counters reset): 60 200 indexed blocks dropped"})

	out := views.Render(s, state(views.Pool), 80, 24, th)
	checkFits(t, out, 80, 24)
	if !strings.Contains(out, "⚠ index full: w1, w3 not fully indexed since 14:02:11") {
		t.Errorf("pool screen at 80×24 lacks the index-full alert:\n%s", out)
	}
	out = views.Render(s, state(views.Worker), 80, 24, th)
	checkFits(t, out, 80, 24)
	for _, want := range []string{"stale", "index full: 16 777 216 blocks (limits.index_blocks)", "engine restart seen in metrics"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker screen at 80×24 lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "publisher restart: seq back to 0") {
		t.Errorf("a restart seen in metrics reads as a publisher's seq restart:\n%s", out)
	}
	wide := views.Render(s, state(views.Worker), 160, 48, th)
	for _, want := range []string{"invalid: " + note, "engine restart seen in metrics · its blocks dropped — engine restarted while its metrics were down"} {
		if !strings.Contains(wide, want) {
			t.Errorf("worker screen at 160×48 lacks %q:\n%s", want, wide)
		}
	}
}
