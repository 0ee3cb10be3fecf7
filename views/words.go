package views

import (
	"fmt"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Words for states, so every screen reads without colour: attention states
// are upper case, calm ones lower case.

func workerState(w *snapshot.Worker) (string, themes.Role) {
	switch w.State {
	case snapshot.WorkerOK:
		return "ok", themes.OK
	case snapshot.WorkerOverheating:
		return "OVERHEATING", themes.Crit
	case snapshot.WorkerSaturated:
		return "SATURATED", themes.Warn
	case snapshot.WorkerStale:
		return "stale", themes.Warn
	case snapshot.WorkerDown:
		return "down", themes.Crit
	case snapshot.WorkerNoMetrics:
		// Scrapes fail but its events still arrive: serving, figures unknown.
		return "no metrics", themes.Warn
	case snapshot.WorkerUnknown, "":
		return "unknown", themes.Dim
	case snapshot.WorkerLeft:
		// Gone from the set (pod deleted): its row is last-known, dim.
		return "left", themes.Dim
	}
	return string(w.State), themes.Text
}

// workerMark is the gutter glyph of a worker row.
func workerMark(w *snapshot.Worker) (string, themes.Role) {
	switch {
	case w.Overheating || w.State == snapshot.WorkerOverheating:
		return "⚠", themes.Crit
	case w.State == snapshot.WorkerDown:
		return "✖", themes.Crit
	case w.State == snapshot.WorkerStale || w.State == snapshot.WorkerSaturated || w.State == snapshot.WorkerNoMetrics:
		return "!", themes.Warn
	}
	return "", themes.Text
}

func streamState(state snapshot.StreamState) (string, themes.Role) {
	switch state {
	case snapshot.StreamLive:
		return "live", themes.OK
	case snapshot.StreamConnecting:
		return "connecting", themes.Dim
	case snapshot.StreamReplaying:
		return "REPLAYING", themes.Warn
	case snapshot.StreamHistoryLost:
		return "HISTORY LOST", themes.Crit
	case snapshot.StreamJoinedLate:
		return "joined late", themes.Warn
	case snapshot.StreamDisconnected:
		return "disconnected", themes.Crit
	case "":
		return dash, themes.Dim
	}
	return strings.ReplaceAll(string(state), "_", " "), themes.Text
}

// StreamSeverity ranks stream states, worst highest (0 for live and states
// it does not know): which state speaks for a worker's publishers.
func StreamSeverity(state snapshot.StreamState) int {
	switch state {
	case snapshot.StreamHistoryLost:
		return 5
	case snapshot.StreamDisconnected:
		return 4
	case snapshot.StreamReplaying:
		return 3
	case snapshot.StreamJoinedLate:
		return 2
	case snapshot.StreamConnecting:
		return 1
	}
	return 0
}

// streamSummary folds a worker's publishers into one cell of w cells: the
// worst state, gaps seen, and how many publishers share that state when
// there are several ("HISTORY LOST 1/2"). The gap count goes first when
// the cell is too narrow: the state matters more.
func streamSummary(ss []snapshot.Stream, w int) (string, themes.Role) {
	if len(ss) == 0 {
		return "none", themes.Dim
	}
	worst := 0
	var gaps uint64
	for i := range ss {
		if StreamSeverity(ss[i].State) > StreamSeverity(ss[worst].State) {
			worst = i
		}
		gaps += ss[i].Gaps
	}
	text, role := streamState(ss[worst].State)
	if len(ss) > 1 {
		same := 0
		for i := range ss {
			if ss[i].State == ss[worst].State {
				same++
			}
		}
		if same < len(ss) {
			text += fmt.Sprintf(" %d/%d", same, len(ss))
		}
	}
	if g := fmt.Sprintf(", %d %s", gaps, plural(int(gaps), "gap", "gaps")); gaps > 0 && width(text+g) <= w {
		text += g
	}
	return text, role
}

func routerState(r *snapshot.Router) (string, themes.Role) {
	if !r.Up {
		return "down", themes.Crit
	}
	return "up", themes.OK
}

func recoveryState(rc snapshot.Recovery) (string, themes.Role) {
	switch rc.State {
	case snapshot.RecoverySteady:
		return "steady", themes.OK
	case snapshot.RecoveryRecovering:
		return "RECOVERING", themes.Warn
	case snapshot.RecoveryRecovered:
		return "recovered", themes.OK
	case snapshot.RecoveryUnknown, "":
		return "unknown", themes.Dim
	}
	return string(rc.State), themes.Text
}

// flagWords are the short forms of decision flags for the table.
var flagWords = map[string]string{
	"owner_mismatch":   "≠owner",
	"prediction_error": "pred-miss",
	"truncated":        "truncated",
	"char_match":       "chars",
	"no_outcome":       "no-outcome",
	"no_decision":      "no-decision",
	"retry":            "retry",
	"error":            "error",
	"http_error":       "http-error",
	"recompute":        "recompute",
	"stream_break":     "break",
}

func flagWord(f string) string {
	if w, ok := flagWords[f]; ok {
		return w
	}
	return f
}

func flagRole(f string) themes.Role {
	switch f {
	case "prediction_error", "truncated", "error", "http_error":
		return themes.Crit
	case "owner_mismatch", "char_match", "no_outcome", "no_decision", "retry", "recompute", "stream_break":
		return themes.Warn
	}
	return themes.Text
}

// arrow marks a change against the previous snapshot beyond a threshold.
func arrow(cur, prev *float64, min float64) string {
	if cur == nil || prev == nil {
		return ""
	}
	switch d := *cur - *prev; {
	case d >= min:
		return "↑"
	case -d >= min:
		return "↓"
	}
	return ""
}
