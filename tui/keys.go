package tui

import (
	tea "github.com/charmbracelet/bubbletea"
	"github.com/kvtop/kvtop/views"
)

// key applies one key press. The bindings of the current screen in its
// state (views.Keys, the same ones the footer and help show) decide what
// it does: a key the screen does not take does nothing.
func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	if m.input.Focused() {
		return m.filterKey(msg)
	}
	m.st.Message, m.msg = "", message{} // any key dismisses the last message
	b, ok := views.Match(views.Keys(m.shown, &m.st), msg.String())
	if !ok {
		return nil
	}
	sc := m.screen()
	switch b.ID {
	case views.KeyQuit:
		return tea.Quit
	case views.KeyHelp:
		m.toggleHelp()
	case views.KeyNextTab:
		m.stepTab(+1)
	case views.KeyPrevTab:
		m.stepTab(-1)
	case views.KeyScreens:
		if i := int(msg.Runes[0] - '1'); i >= 0 && i < len(views.Tabs()) {
			m.gotoScreen(views.Tabs()[i])
		}
	case views.KeyUp:
		m.move(-1)
	case views.KeyDown:
		m.move(+1)
	case views.KeyPageUp:
		m.move(-max(1, m.visible()))
	case views.KeyPageDown:
		m.move(max(1, m.visible()))
	case views.KeyTop:
		m.move(-1 << 30)
	case views.KeyBottom:
		m.move(1 << 30)
	case views.KeyEnter:
		if m.shown != nil {
			sc.Enter(m.shown, &m.st)
		}
	case views.KeyBack:
		if sc.Back != nil {
			sc.Back(&m.st)
		} else {
			m.input.SetValue("")
			m.setFilter("")
		}
	case views.KeyFilter:
		m.input.SetValue(m.list().Filter)
		m.input.CursorEnd()
		return m.input.Focus()
	case views.KeySort:
		m.cycleSort()
	case views.KeyReverse:
		m.keepCursor(func() { m.list().Desc = !m.list().Desc })
	case views.KeyFreeze:
		m.toggleFreeze()
	case views.KeySlower:
		m.stepRefresh(+1)
	case views.KeyFaster:
		m.stepRefresh(-1)
	case views.KeyTheme:
		m.theme = (m.theme + 1) % len(m.themes)
		th := m.th()
		m.st.Message = "theme " + th.Name
		if th.NoColor {
			m.st.Message += " (NO_COLOR is set: colours stay off)"
		}
	case views.KeyReplayPause, views.KeyReplayBack, views.KeyReplayForward, views.KeyReplaySlower,
		views.KeyReplayFaster, views.KeyReplayStart, views.KeyReplayEnd:
		if m.replay != nil {
			m.replay.ReplayKey(b.ID)
			m.replayState()
			if m.banner != nil {
				m.st.Banner = m.banner()
			}
		}
	default: // a screen's own key
		if b.Do != nil {
			m.keepCursor(func() { b.Do(m.shown, &m.st) })
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
	if !m.screen().Filter {
		return
	}
	l := m.list()
	if l.Filter == v {
		return
	}
	l.Filter = v
	l.Cursor, l.Offset = 0, 0
	m.fixCursor()
}
