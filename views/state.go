// Package views renders kvtop's screens. Every view is a pure function of a
// snapshot, the UI state, the terminal size and the theme, and returns
// exactly height lines, none wider than width. The clock shown is the
// snapshot's, so the same inputs always give the same screen.
//
// Each screen is one Screen value (screen.go) in the registry Screens: its
// body, its list, what enter opens and esc goes back to, and its keys. The
// frame around every body (header, alerts, status line, footer) is shared
// (frame.go), and the footer and help are generated from the same bindings
// the console matches keys against (keys.go).
package views

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// List is the state of one scrollable list.
type List struct {
	Cursor int
	Offset int    // first visible row (a hint; views keep the cursor visible)
	Filter string // applied filter text
	Sort   string // sort key ("" = natural order)
	Desc   bool   // reverse the sort's natural direction
}

// DecisionKey names one decision record.
type DecisionKey struct{ RequestID, AttemptID string }

// State is everything the views need besides the snapshot.
type State struct {
	Screen  *Screen       // the screen on display (nil: the first, pool)
	Back    *Screen       // where esc goes from a screen opened from another (worker, detail)
	From    *Screen       // the screen help was opened from
	Refresh time.Duration // shown in the header; may differ from the snapshot's while it takes effect
	Frozen  bool          // the display is frozen; collection goes on
	Theme   string        // theme name, for the help screen

	Pool, Streams, Prefixes, Decisions, Routers, Help List
	Lists                                             map[string]*List // the lists of screens that keep their own (Screen.List nil), by name

	Engines  bool        // unfold DP engines under their workers on Pool
	ByNode   bool        // group the Pool table by Kubernetes node (n)
	ByRole   bool        // group the Pool table by role: prefill, decode, aggregated (r)
	ByModel  bool        // group the Pool table by the model its workers serve (m)
	Follow   bool        // Decisions: keep the cursor on the newest record
	Worker   string      // worker shown on the Worker screen ("": the one under the pool cursor)
	Decision DecisionKey // record shown on the decision detail screen
	// Held are the records the decisions list holds after the pool let
	// them go (paused or filtered: what is listed stays listed), oldest
	// first, before the snapshot's; at most MaxHeld (Decisions.Carry).
	Held []snapshot.DecisionRow
	// Opened is the record the detail shows as it was when opened, for
	// when neither the snapshot nor the list has it any more.
	Opened *snapshot.DecisionRow

	// Prev is the snapshot before the shown one, for ↑/↓ change marks.
	Prev *snapshot.Snapshot

	Filtering bool   // the filter prompt is open
	Input     string // the text in the filter prompt
	InputPos  int    // the prompt's cursor, in runes
	Message   string // a transient status message (set by the model)
	Banner    string // context for the status line (kvtop demo: the simulator's phase)

	// Replay is set when the console plays a journal (kvtop replay): the
	// header says REPLAY and the journal's date, and the replay keys are
	// bound. nil: live.
	Replay *Replay
	// Remote is set when the console shows a collector's stream (kvtop
	// --remote): the header says REMOTE, the collector's host and the
	// data's age, and LOST while it reconnects. nil: a local pool.
	Remote *Remote
}

// Remote is what the header shows of the collector a console reads.
type Remote struct {
	Host string        // host:port of the collector
	Lost bool          // the stream ended; reconnecting
	Age  time.Duration // since the last snapshot arrived (this machine's clock)
	// Refresh is the collector's, from its last snapshot (0: none yet):
	// the console's +/- cannot change it.
	Refresh time.Duration
}

// Replay is what the console shows of a journal being replayed.
type Replay struct {
	Paused  bool
	AtEnd   bool   // the journal's last snapshot is shown
	Seeking bool   // snapshots are being rebuilt to reach a time
	Speed   string // as shown: ×1, ×60, ×½
}

// Minimum terminal size; below it only the "too small" screen shows.
const (
	MinWidth  = 60
	MinHeight = 15
)
