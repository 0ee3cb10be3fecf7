// Package views renders kvtop's screens. Every view is a pure function of a
// snapshot, the UI state, the terminal size and the theme, and returns
// exactly height lines, none wider than width. The clock shown is the
// snapshot's, so the same inputs always give the same screen.
package views

import (
	"time"

	"github.com/kvtop/kvtop/pool"
)

// Screen is one of the console's screens.
type Screen int

// Screens; the first six are tabs reachable with 1–6.
const (
	ScreenPool Screen = iota
	ScreenWorker
	ScreenStreams
	ScreenPrefixes
	ScreenDecisions
	ScreenRouters
	ScreenDecisionDetail
	ScreenHelp
)

// Tabs are the screens on number keys 1–6, in order.
var Tabs = []Screen{ScreenPool, ScreenWorker, ScreenStreams, ScreenPrefixes, ScreenDecisions, ScreenRouters}

var screenNames = map[Screen]string{
	ScreenPool: "pool", ScreenWorker: "worker", ScreenStreams: "streams", ScreenPrefixes: "prefixes",
	ScreenDecisions: "decisions", ScreenRouters: "routers", ScreenDecisionDetail: "decision", ScreenHelp: "help",
}

func (s Screen) String() string { return screenNames[s] }

// Tab is the tab a screen belongs to (the detail belongs to decisions);
// -1 for help.
func (s Screen) Tab() int {
	switch s {
	case ScreenDecisionDetail:
		return int(ScreenDecisions)
	case ScreenHelp:
		return -1
	}
	return int(s)
}

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

// KeyHelp is one key binding as the help shows it.
type KeyHelp struct{ Key, Desc string }

// KeyGroup is a titled group of key bindings.
type KeyGroup struct {
	Title string
	Keys  []KeyHelp
}

// State is everything the views need besides the snapshot.
type State struct {
	Screen  Screen
	Refresh time.Duration // shown in the header; may differ from the snapshot's while it takes effect
	Frozen  bool          // the display is frozen; collection goes on
	Theme   string        // theme name, for the help screen

	Pool, Streams, Prefixes, Decisions, Routers, Help List

	Engines  bool        // unfold DP engines under their workers on Pool
	Follow   bool        // Decisions: keep the cursor on the newest record
	Worker   string      // worker shown on the Worker screen
	Decision DecisionKey // record shown on the decision detail screen

	// Prev is the snapshot before the shown one, for ↑/↓ change marks.
	Prev *pool.Snapshot

	Filtering bool   // the filter prompt is open
	Input     string // the text in the filter prompt
	InputPos  int    // the prompt's cursor, in runes
	Message   string // a transient status message (set by the model)
	Banner    string // context for the status line (kvtop demo: the simulator's phase)

	Hints []KeyHelp  // footer key hints, enabled keys only
	Keys  []KeyGroup // the help screen's keys: those of the screen it was opened from
	From  Screen     // the screen help was opened from
}

// List returns the list state of the current screen.
func (st *State) List() *List {
	switch st.Screen {
	case ScreenPool, ScreenWorker:
		return &st.Pool
	case ScreenStreams:
		return &st.Streams
	case ScreenPrefixes:
		return &st.Prefixes
	case ScreenDecisions, ScreenDecisionDetail:
		return &st.Decisions
	case ScreenRouters:
		return &st.Routers
	default:
		return &st.Help
	}
}

// Minimum terminal size; below it only the "too small" screen shows.
const (
	MinWidth  = 60
	MinHeight = 15
)
