package tui

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/views"
)

// screen is the screen on display.
func (m *Model) screen() *views.Screen {
	if m.st.Screen == nil {
		return views.Screens[0]
	}
	return m.st.Screen
}

func (m *Model) toggleHelp() {
	if m.st.Screen == views.Help {
		views.Help.Back(&m.st)
		return
	}
	m.st.From, m.st.Screen = m.screen(), views.Help
	m.st.Help.Offset = 0
}

// stepTab moves to the next or previous tab (from help: of the screen it
// was opened from).
func (m *Model) stepTab(d int) {
	cur := m.screen()
	if cur == views.Help && m.st.From != nil {
		cur = m.st.From
	}
	tabs := views.Tabs()
	t := 0
	for i, sc := range tabs {
		if sc == cur.TabScreen() {
			t = i
		}
	}
	n := len(tabs)
	m.gotoScreen(tabs[((t+d)%n+n)%n])
}

// gotoScreen shows a tab. A tab with a way back (the worker) goes back to
// the tab it was reached from.
func (m *Model) gotoScreen(sc *views.Screen) {
	cur := m.screen()
	if sc == cur {
		return
	}
	if sc.Back != nil {
		m.st.Back = cur
		if cur.Back != nil { // help, a detail, another opened screen
			m.st.Back = views.Tabs()[0]
		}
	}
	if sc.Arrive != nil {
		sc.Arrive(&m.st)
	}
	m.st.Screen = sc
}

// move moves in the current screen by d rows.
func (m *Model) move(d int) {
	total, visible := m.rows()
	if sc := m.screen(); sc.Move != nil {
		sc.Move(m.shown, &m.st, d, total, visible)
		return
	}
	views.MoveCursor(m.list(), d, total)
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// rows is the current list's length and visible rows, as the view lays
// them out.
func (m *Model) rows() (total, visible int) {
	return views.Rows(m.shown, m.st, m.w, m.h, m.th())
}

func (m *Model) visible() int {
	_, v := m.rows()
	return v
}

// fixCursor keeps the cursor on a row and in view. Screens without a
// cursor of their own (worker, detail, help) leave the cursors behind them
// as they are.
func (m *Model) fixCursor() {
	if m.screen().Items == nil || m.shown == nil {
		return
	}
	total, visible := m.rows()
	l := m.list()
	l.Cursor = clamp(l.Cursor, 0, max(0, total-1))
	if visible <= 0 {
		return
	}
	if l.Cursor < l.Offset {
		l.Offset = l.Cursor
	}
	if l.Cursor >= l.Offset+visible {
		l.Offset = l.Cursor - visible + 1
	}
	l.Offset = clamp(l.Offset, 0, max(0, total-visible))
}

// keepCursor runs a change that reorders the current list (a sort, an
// unfold) and puts the cursor back on the item it was on.
func (m *Model) keepCursor(change func()) {
	sc := m.screen()
	a := views.Anchor(m.shown, &m.st, sc)
	change()
	views.Relocate(m.shown, &m.st, sc, a)
}

// anchors name the item under every list's cursor, so a new snapshot can
// put each back on its item (restore).
func (m *Model) anchors() []string {
	out := make([]string, len(views.Screens))
	for i, sc := range views.Screens {
		out[i] = views.Anchor(m.shown, &m.st, sc)
	}
	return out
}

func (m *Model) restore(anchors []string) {
	for i, sc := range views.Screens {
		views.Relocate(m.shown, &m.st, sc, anchors[i])
	}
}

func (m *Model) cycleSort() {
	sorts := m.screen().Sorts
	l := m.list()
	i := 0
	for k, s := range sorts {
		if s == l.Sort {
			i = k
		}
	}
	m.keepCursor(func() { l.Sort, l.Desc = sorts[(i+1)%len(sorts)], false })
	if l.Sort == "" {
		m.st.Message = "sorted in configured order (s: next column, S: reverse)"
	} else {
		m.st.Message = "sorted by " + l.Sort + ", largest first (s: next column, S: reverse)"
	}
}

// toggleFreeze freezes the display, not the collection: snapshots keep
// arriving and are stored; unfreezing shows the newest.
func (m *Model) toggleFreeze() {
	if m.st.Frozen {
		m.st.Frozen = false
		if m.latest != m.shown {
			m.show(m.latest, m.beforeLatest)
		}
		m.st.Message = "live again"
		return
	}
	m.st.Frozen = true
	at := "–"
	if m.shown != nil {
		at = m.shown.At.Format("15:04:05")
	}
	m.st.Message = "display frozen at " + at + "; collection goes on (f resumes)"
}

// sourceRefresh is the refresh of a source the console cannot change (a
// collector's stream: its own, from its last snapshot) and whose it is;
// 0 when +/- set it.
func (m *Model) sourceRefresh() (time.Duration, string) {
	if m.remote == nil {
		return 0, ""
	}
	d := time.Duration(0)
	if r := m.st.Remote; r != nil {
		d = r.Refresh
	}
	if d <= 0 && m.latest != nil {
		d = time.Duration(m.latest.RefreshS * float64(time.Second))
	}
	if d <= 0 {
		d = m.refresh
	}
	return d, "the collector"
}

// stepRefresh moves the refresh rate one step (+1 slower, -1 faster),
// never below the floor, and tells the source. A source with a refresh of
// its own (a collector) keeps it, and the header with it: the key says so.
func (m *Model) stepRefresh(d int) {
	if fixed, whose := m.sourceRefresh(); fixed > 0 {
		m.st.Message = "refresh is set by " + whose + " (" + words(fixed) + ")"
		return
	}
	cur := m.refresh
	next := cur
	if d > 0 {
		for _, s := range refreshSteps {
			if s > cur {
				next = s
				break
			}
		}
	} else {
		for i := len(refreshSteps) - 1; i >= 0; i-- {
			if refreshSteps[i] < cur {
				next = refreshSteps[i]
				break
			}
		}
	}
	next = max(next, pool.MinRefresh)
	if next == cur {
		if d < 0 {
			m.st.Message = "refresh " + short(cur) + " is the floor"
		} else {
			m.st.Message = "refresh " + short(cur) + " is the slowest step"
		}
		return
	}
	m.refresh = next
	m.src.SetRefresh(next)
	m.st.Message = "refresh " + short(next)
}

// words says a refresh as messages do: "250 ms", "1 s", "2.5 s".
func words(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

func short(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.String()
}
