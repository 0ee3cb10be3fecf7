package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/kvtop/kvtop/views"
)

// key applies one key press.
func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	if m.input.Focused() {
		return m.filterKey(msg)
	}
	k := &m.keys
	m.st.Message = "" // any key dismisses the last message
	switch {
	case key.Matches(msg, k.Quit):
		return tea.Quit
	case key.Matches(msg, k.Help):
		m.toggleHelp()
	case key.Matches(msg, k.NextTab):
		m.stepTab(+1)
	case key.Matches(msg, k.PrevTab):
		m.stepTab(-1)
	case key.Matches(msg, k.Screens):
		m.gotoScreen(views.Tabs[int(msg.Runes[0]-'1')])
	case key.Matches(msg, k.Up):
		m.move(-1)
	case key.Matches(msg, k.Down):
		m.move(+1)
	case key.Matches(msg, k.PageUp):
		m.move(-max(1, m.visible()))
	case key.Matches(msg, k.PageDown):
		m.move(max(1, m.visible()))
	case key.Matches(msg, k.Top):
		m.move(-1 << 30)
	case key.Matches(msg, k.Bottom):
		m.move(1 << 30)
	case key.Matches(msg, k.Enter):
		m.enter()
	case key.Matches(msg, k.Back):
		m.escape()
	case key.Matches(msg, k.Filter):
		m.input.SetValue(m.list().Filter)
		m.input.CursorEnd()
		return m.input.Focus()
	case key.Matches(msg, k.Sort):
		m.cycleSort()
	case key.Matches(msg, k.Reverse):
		a := m.anchor()
		m.list().Desc = !m.list().Desc
		m.relocate(a)
	case key.Matches(msg, k.Follow):
		m.st.Follow = !m.st.Follow
		if m.st.Follow {
			m.st.Message = "following the newest decision"
		} else {
			m.st.Decisions.Cursor = m.decisionCursor()
			m.st.Message = "follow paused (F resumes)"
		}
	case key.Matches(msg, k.Engines):
		a := m.anchor()
		m.st.Engines = !m.st.Engines
		m.relocate(a)
	case key.Matches(msg, k.Freeze):
		m.toggleFreeze()
	case key.Matches(msg, k.Slower):
		m.stepRefresh(+1)
	case key.Matches(msg, k.Faster):
		m.stepRefresh(-1)
	case key.Matches(msg, k.Theme):
		m.theme = (m.theme + 1) % len(m.themes)
		th := m.th()
		m.st.Message = "theme " + th.Name
		if th.NoColor {
			m.st.Message += " (NO_COLOR is set: colours stay off)"
		}
	}
	m.fixCursor()
	return nil
}

// filterKey edits the filter prompt; the list narrows as you type.
func (m *Model) filterKey(msg tea.KeyMsg) tea.Cmd {
	switch msg.String() {
	case "ctrl+c":
		return tea.Quit
	case "enter":
		m.input.Blur()
		return nil
	case "esc":
		m.input.Blur()
		m.input.SetValue("")
		m.setFilter("")
		return nil
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	m.setFilter(m.input.Value())
	return cmd
}

func (m *Model) setFilter(v string) {
	l := m.list()
	if l.Filter == v {
		return
	}
	l.Filter = v
	l.Cursor, l.Offset = 0, 0
	m.fixCursor()
}

func (m *Model) toggleHelp() {
	if m.st.Screen == views.ScreenHelp {
		m.st.Screen = m.back
		return
	}
	m.back = m.st.Screen
	m.st.Screen = views.ScreenHelp
	m.st.Help.Offset = 0
}

func (m *Model) stepTab(d int) {
	t := m.st.Screen.Tab()
	if t < 0 {
		t = m.back.Tab()
	}
	n := len(views.Tabs)
	m.gotoScreen(views.Tabs[((t+d)%n+n)%n])
}

func (m *Model) gotoScreen(sc views.Screen) {
	if sc == m.st.Screen {
		return
	}
	if sc == views.ScreenWorker {
		m.st.Worker = m.poolCursorWorker()
	}
	if sc == views.ScreenWorker || sc == views.ScreenHelp {
		m.back = m.st.Screen
		if m.back == views.ScreenHelp || m.back == views.ScreenDecisionDetail {
			m.back = views.ScreenPool
		}
	}
	m.st.Screen = sc
}

// enter opens the row under the cursor.
func (m *Model) enter() {
	s := m.shown
	if s == nil {
		return
	}
	switch m.st.Screen {
	case views.ScreenPool:
		rows := views.PoolRows(s, m.st)
		if c := m.st.Pool.Cursor; c >= 0 && c < len(rows) {
			m.st.Worker = s.Workers[rows[c].Worker].Name
			m.back, m.st.Screen = views.ScreenPool, views.ScreenWorker
		}
	case views.ScreenStreams:
		rows := views.StreamRows(s, m.st)
		if c := m.st.Streams.Cursor; c >= 0 && c < len(rows) {
			m.st.Worker = s.Workers[rows[c].Worker].Name
			m.back, m.st.Screen = views.ScreenStreams, views.ScreenWorker
		}
	case views.ScreenDecisions:
		rows := views.DecisionRows(s, m.st)
		c := m.decisionCursor()
		if c >= 0 && c < len(rows) {
			r := s.Decisions.Recent[rows[c]]
			m.st.Decision = views.DecisionKey{RequestID: r.RequestID, AttemptID: r.AttemptID}
			// Opening a record pauses follow, so esc comes back to it.
			m.st.Follow, m.st.Decisions.Cursor = false, c
			m.back, m.st.Screen = views.ScreenDecisions, views.ScreenDecisionDetail
		}
	}
}

func (m *Model) escape() {
	switch m.st.Screen {
	case views.ScreenWorker, views.ScreenDecisionDetail, views.ScreenHelp:
		if m.st.Screen == views.ScreenDecisionDetail {
			m.st.Screen = views.ScreenDecisions
		} else {
			m.st.Screen = m.back
		}
	default:
		m.input.SetValue("")
		m.setFilter("")
	}
}

// move scrolls the current list by d rows (any scroll pauses follow).
func (m *Model) move(d int) {
	switch m.st.Screen {
	case views.ScreenHelp:
		total, visible := m.rows()
		m.st.Help.Offset = clamp(m.st.Help.Offset+d, 0, max(0, total-visible))
		return
	case views.ScreenWorker:
		// Step through workers in the Pool table's order.
		rows := views.PoolRows(m.shown, m.st)
		cur := -1
		for i, r := range rows {
			if r.Engine < 0 && m.shown.Workers[r.Worker].Name == m.st.Worker {
				cur = i
			}
		}
		for i := cur + sign(d); i >= 0 && i < len(rows); i += sign(d) {
			if rows[i].Engine < 0 {
				m.st.Pool.Cursor = i
				m.st.Worker = m.shown.Workers[rows[i].Worker].Name
				break
			}
		}
		return
	case views.ScreenDecisions:
		if m.st.Follow {
			m.st.Decisions.Cursor = m.decisionCursor()
			m.st.Follow = false
			m.st.Message = "follow paused (F resumes)"
		}
	}
	l := m.list()
	total, _ := m.rows()
	l.Cursor = clamp(l.Cursor+d, 0, max(0, total-1))
}

func sign(d int) int {
	if d < 0 {
		return -1
	}
	return 1
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

// fixCursor keeps the cursor on a row and in view.
func (m *Model) fixCursor() {
	switch m.st.Screen {
	case views.ScreenHelp, views.ScreenWorker, views.ScreenDecisionDetail:
		return // no list of their own; the cursors behind them must survive
	}
	if m.shown == nil {
		return
	}
	total, visible := m.rows()
	l := m.list()
	if m.st.Screen == views.ScreenDecisions && m.st.Follow {
		l.Cursor = total - 1
	}
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

func (m *Model) decisionCursor() int {
	rows := views.DecisionRows(m.shown, m.st)
	if m.st.Follow {
		return len(rows) - 1
	}
	return clamp(m.st.Decisions.Cursor, 0, max(0, len(rows)-1))
}

// poolCursorWorker is the worker under the Pool cursor (or the first).
func (m *Model) poolCursorWorker() string {
	if m.shown == nil || len(m.shown.Workers) == 0 {
		return m.st.Worker
	}
	rows := views.PoolRows(m.shown, m.st)
	if c := m.st.Pool.Cursor; c >= 0 && c < len(rows) {
		return m.shown.Workers[rows[c].Worker].Name
	}
	return m.shown.Workers[0].Name
}

// anchor names the item under the cursor of the current list, so the
// cursor can stay on it when rows reorder (new snapshot, sort, unfold).
func (m *Model) anchor() string {
	s := m.shown
	if s == nil {
		return ""
	}
	switch m.st.Screen {
	case views.ScreenPool, views.ScreenWorker:
		rows := views.PoolRows(s, m.st)
		if c := m.st.Pool.Cursor; c >= 0 && c < len(rows) {
			return fmt.Sprintf("%s/%d", s.Workers[rows[c].Worker].Name, rows[c].Engine)
		}
	case views.ScreenStreams:
		rows := views.StreamRows(s, m.st)
		if c := m.st.Streams.Cursor; c >= 0 && c < len(rows) {
			w := &s.Workers[rows[c].Worker]
			return fmt.Sprintf("%s/%d", w.Name, w.Streams[rows[c].Stream].Rank)
		}
	case views.ScreenDecisions, views.ScreenDecisionDetail:
		if m.st.Follow {
			return ""
		}
		rows := views.DecisionRows(s, m.st)
		if c := m.st.Decisions.Cursor; c >= 0 && c < len(rows) {
			r := &s.Decisions.Recent[rows[c]]
			return r.RequestID + "\x00" + r.AttemptID
		}
	case views.ScreenPrefixes:
		if c := m.st.Prefixes.Cursor; c >= 0 && c < len(s.Prefixes) {
			return s.Prefixes[c].ID
		}
	case views.ScreenRouters:
		if c := m.st.Routers.Cursor; c >= 0 && c < len(s.Routers) {
			return s.Routers[c].Name
		}
	}
	return ""
}

// relocate puts the cursor back on the anchored item if it is still there.
func (m *Model) relocate(a string) {
	s := m.shown
	if a == "" || s == nil {
		return
	}
	l := m.list()
	switch m.st.Screen {
	case views.ScreenPool, views.ScreenWorker:
		for i, r := range views.PoolRows(s, m.st) {
			if fmt.Sprintf("%s/%d", s.Workers[r.Worker].Name, r.Engine) == a {
				l.Cursor = i
				return
			}
		}
		// An engine row folded away: land on its worker.
		name, _, _ := strings.Cut(a, "/")
		for i, r := range views.PoolRows(s, m.st) {
			if r.Engine < 0 && s.Workers[r.Worker].Name == name {
				l.Cursor = i
				return
			}
		}
	case views.ScreenStreams:
		for i, r := range views.StreamRows(s, m.st) {
			w := &s.Workers[r.Worker]
			if fmt.Sprintf("%s/%d", w.Name, w.Streams[r.Stream].Rank) == a {
				l.Cursor = i
				return
			}
		}
	case views.ScreenDecisions, views.ScreenDecisionDetail:
		for i, idx := range views.DecisionRows(s, m.st) {
			r := &s.Decisions.Recent[idx]
			if r.RequestID+"\x00"+r.AttemptID == a {
				l.Cursor = i
				return
			}
		}
	case views.ScreenPrefixes:
		for i := range s.Prefixes {
			if s.Prefixes[i].ID == a {
				l.Cursor = i
				return
			}
		}
	case views.ScreenRouters:
		for i := range s.Routers {
			if s.Routers[i].Name == a {
				l.Cursor = i
				return
			}
		}
	}
}

func (m *Model) cycleSort() {
	sorts := views.PoolSorts
	if m.st.Screen == views.ScreenStreams {
		sorts = views.StreamSorts
	}
	l := m.list()
	i := 0
	for k, s := range sorts {
		if s == l.Sort {
			i = k
		}
	}
	a := m.anchor()
	l.Sort, l.Desc = sorts[(i+1)%len(sorts)], false
	m.relocate(a)
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

// stepRefresh moves the refresh rate one step (+1 slower, -1 faster),
// never below the floor, and tells the source.
func (m *Model) stepRefresh(d int) {
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
	next = max(next, MinRefresh)
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

func short(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.String()
}
