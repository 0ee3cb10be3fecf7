package views

import (
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// A Screen is everything the console knows about one screen: how to draw
// it, the list it moves in, what enter opens and esc goes back to, and the
// keys it takes with their words. The console dispatches every key through
// the current screen, so adding a screen is a file that defines one and a
// line in the registry (Screens).
//
// Every function is pure: it reads the snapshot (nil before the first one)
// and the state, and the state changes it makes are the whole effect.
//
// A list screen needs Name, Short, Tab, Body, Rows, Items and Keys (often
// listKeys); List when its list lives in a State field rather than in
// State.Lists; Enter and Filter or Sorts when it opens, filters or sorts.
// A screen opened from another (a detail) needs Under, Body, Back
// (backToOpener) and Keys with a Back word. Its own keys go in
// ScreenKeys.Own, each with a Do.
type Screen struct {
	Name  string // as the footer's tabs, the help and messages name it: "pool"
	Short string // the tab's name in a narrow footer: "wkr"
	// Tab puts the screen on a number key and in the footer's tabs, in
	// registry order.
	Tab bool
	// Under names the tab a screen reached from another lights up (the
	// decision detail lights "decisions"); "" for tabs and help.
	Under string

	// Body draws the screen between the shared header and alerts above
	// and the status line and footer below: n lines at most, none wider
	// than w. It is called with a snapshot (before the first one the
	// frame says it is waiting).
	Body func(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string
	// Rows is the length of the screen's list and how many rows of it
	// show in a body of n lines at width w, so the console pages and
	// scrolls in step with what Body draws. nil: no list.
	Rows func(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) (total, visible int)
	// List is the cursor, scroll, filter and sort of the screen's list in
	// st; nil keeps one of its own in st.Lists, under its name.
	List func(st *State) *List
	// Items names the rows of the list in display order, so the cursor
	// stays on its item when rows reorder (a new snapshot, a sort). An
	// item "parent\x00child" falls back to its parent's row when it goes
	// (a folded DP engine lands on its worker). nil: the screen has no
	// cursor of its own (the worker, the detail, help).
	Items func(s *snapshot.Snapshot, st State) []string
	// AnchorOf and Find, when set, stand in for Items when the cursor is
	// kept on its item across snapshots, for a list too long to name every
	// row each refresh (the decisions): AnchorOf names the item under the
	// cursor ("" when the cursor is not on one that matters), Find is the
	// row of a named item, -1 when it is gone.
	AnchorOf func(s *snapshot.Snapshot, st State) string
	Find     func(s *snapshot.Snapshot, st State, anchor string) int

	// Move moves by d rows (±1, a page, or ±1<<30 for the first and last
	// row) given what Rows says; nil moves the list's cursor.
	Move func(s *snapshot.Snapshot, st *State, d, total, visible int)
	// Enter opens what is under the cursor: it sets st.Screen, st.Back and
	// what the next screen shows. nil: enter does nothing.
	Enter func(s *snapshot.Snapshot, st *State)
	// Back is esc; nil clears the filter of a filterable screen.
	Back func(st *State)
	// Arrive prepares the screen when its tab is chosen (the worker screen
	// shows the worker under the pool cursor).
	Arrive func(st *State)
	// Carry is called when a newer snapshot s replaces old (nil at first)
	// on screen, before the cursors go back to their items: the screen
	// keeps in st what it must go on showing (the decisions list holds the
	// records it lists that s no longer has). nil: nothing to keep.
	Carry func(old, s *snapshot.Snapshot, st *State)

	Filter bool     // / filters the list (the screen's Items honour List().Filter)
	Sorts  []string // the sort keys s cycles, "" (natural order) first; nil: no sorting

	// Keys are the words of the keys the screen takes in this state.
	Keys func(s *snapshot.Snapshot, st *State) ScreenKeys
	// Help is what the help screen says about this screen, above its keys.
	Help []string
}

// ScreenKeys are the words for the keys a screen takes; a key without a
// word does nothing there, and neither the footer nor the help shows it.
// The keys every screen shares (tabs, help, freeze, refresh, theme, quit)
// are not listed: they always work.
type ScreenKeys struct {
	Up, Down string // ↑/k and ↓/j: "up", "previous worker", "scroll up"
	Pages    bool   // pgup/pgdn move a page
	Ends     bool   // g/G go to the first and last row
	Enter    string // what enter opens: "open worker"
	Back     string // what esc does: "back" (filterable screens without it clear their filter)
	Help     string // what ? does, when not "help: keys, colours, thresholds" (on help: "close help")
	Own      []Binding
}

// listKeys are the keys of a screen that is a list: move, page, jump, and
// enter when it opens something.
func listKeys(enter string) ScreenKeys {
	return ScreenKeys{Up: "up", Down: "down", Pages: true, Ends: true, Enter: enter}
}

// Screens is the registry: every screen, tabs in the order of their
// number keys. It is filled in init because screens refer to each other
// (pool opens the worker, which goes back to pool) and help to all of them.
var Screens []*Screen

func init() {
	Screens = []*Screen{Pool, Worker, Streams, Prefixes, Decisions, Routers, DecisionDetail, Help}
}

// Tabs are the screens on number keys, in order.
func Tabs() []*Screen {
	var out []*Screen
	for _, sc := range Screens {
		if sc.Tab {
			out = append(out, sc)
		}
	}
	return out
}

// screenNamed returns the registered screen of that name, or nil.
func screenNamed(name string) *Screen {
	for _, sc := range Screens {
		if sc.Name == name {
			return sc
		}
	}
	return nil
}

func (sc *Screen) String() string { return sc.Name }

// TabScreen is the tab a screen lights up: itself, the one it is Under,
// or nil (help).
func (sc *Screen) TabScreen() *Screen {
	if sc.Tab {
		return sc
	}
	if sc.Under != "" {
		return screenNamed(sc.Under)
	}
	return nil
}

// screen is the screen on display; the first registered (pool) until one
// is chosen.
func (st *State) screen() *Screen {
	if st.Screen == nil {
		return Screens[0]
	}
	return st.Screen
}

// List returns the list state of the screen on display.
func (st *State) List() *List { return st.listOf(st.screen()) }

// listOf returns a screen's list state: the one it names, or its own in
// st.Lists (created on first use).
func (st *State) listOf(sc *Screen) *List {
	if sc.List != nil {
		return sc.List(st)
	}
	if st.Lists == nil {
		st.Lists = map[string]*List{}
	}
	l := st.Lists[sc.Name]
	if l == nil {
		l = &List{}
		st.Lists[sc.Name] = l
	}
	return l
}

// helpFrom is the screen help was opened from (the first until it was).
func (st *State) helpFrom() *Screen {
	if st.From == nil {
		return Screens[0]
	}
	return st.From
}

// backToOpener is esc on a screen opened from another: back to it.
func backToOpener(st *State) {
	st.Screen = st.Back
	if st.Screen == nil {
		st.Screen = Screens[0]
	}
}

// Rows returns the length of the current screen's list and how many of its
// rows are visible at w×h. Screens without a list return 0, 0; a terminal
// too small to draw shows no rows of any list.
func Rows(s *snapshot.Snapshot, st State, w, h int, th *themes.Theme) (total, visible int) {
	sc := st.screen()
	if s == nil || sc.Rows == nil {
		return 0, 0
	}
	small := w < MinWidth || h < MinHeight
	n := 0
	if !small {
		_, _, n = chrome(s, &st, w, h, th)
	}
	total, visible = sc.Rows(s, &st, w, n, th)
	if small {
		visible = 0
	}
	return total, max(visible, 0)
}

// Anchor names the item under the cursor of a screen's list ("" when it
// has none), so Relocate can put the cursor back on it after rows reorder.
func Anchor(s *snapshot.Snapshot, st *State, sc *Screen) string {
	if s == nil || sc.Items == nil {
		return ""
	}
	if sc.AnchorOf != nil {
		return sc.AnchorOf(s, *st)
	}
	items := sc.Items(s, *st)
	if c := st.listOf(sc).Cursor; c >= 0 && c < len(items) {
		return items[c]
	}
	return ""
}

// Relocate puts a screen's cursor back on the anchored item if it is still
// listed, else on its parent's row; otherwise the cursor stays where it is.
// The view moves with the cursor, so rows added or let go above it do not
// scroll what is on screen.
func Relocate(s *snapshot.Snapshot, st *State, sc *Screen, anchor string) {
	if anchor == "" || s == nil || sc.Items == nil {
		return
	}
	l := st.listOf(sc)
	to := func(i int) {
		l.Offset = max(0, l.Offset+i-l.Cursor)
		l.Cursor = i
	}
	if sc.Find != nil {
		if i := sc.Find(s, *st, anchor); i >= 0 {
			to(i)
		}
		return
	}
	items := sc.Items(s, *st)
	for i, it := range items {
		if it == anchor {
			to(i)
			return
		}
	}
	if parent, _, ok := strings.Cut(anchor, "\x00"); ok {
		for i, it := range items {
			if it == parent {
				to(i)
				return
			}
		}
	}
}

// Carry lets every screen keep what it shows when snapshot s replaces old
// on screen (Screen.Carry).
func Carry(old, s *snapshot.Snapshot, st *State) {
	for _, sc := range Screens {
		if sc.Carry != nil {
			sc.Carry(old, s, st)
		}
	}
}

// MoveCursor moves a list's cursor by d rows within total.
func MoveCursor(l *List, d, total int) {
	l.Cursor = max(0, min(l.Cursor+d, total-1))
}
