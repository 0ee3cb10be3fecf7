// Package tui is kvtop's console: a Bubble Tea model that waits for pool
// snapshots on a channel, keeps the UI state (screen, cursors, filters,
// follow, freeze, theme, refresh) and asks views to render. A key does what
// the current screen's bindings say (views.Keys, the same ones its footer
// and help show), dispatched through the views.Screen on display: nothing
// here is particular to one screen. Collection never runs in Update;
// rendering happens only when something on screen changed.
package tui

import (
	"fmt"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
)

// Source delivers snapshots and takes refresh-rate changes. *pool.Pool
// satisfies it. SetRefresh is called from the UI goroutine and must not
// block.
type Source interface {
	Snapshots() <-chan *snapshot.Snapshot
	SetRefresh(d time.Duration)
}

// Replayer is a Source that plays a journal (kvtop replay): the console
// binds the replay's time controls and the header says REPLAY. ReplayKey
// applies one of the views.KeyReplay… controls and must not block;
// ReplayState is where the replay is now.
type Replayer interface {
	Source
	ReplayKey(id string)
	ReplayState() views.Replay
}

// Remoter is a Source that reads a collector's stream (kvtop --remote):
// the header says REMOTE, the collector's host and the data's age, and
// LOST while the stream is gone. RemoteState must not block.
type Remoter interface {
	Source
	RemoteState() views.Remote
}

// Options configure the console.
type Options struct {
	Theme   string            // built-in theme name ("" = default)
	Colors  map[string]string // colour overrides by role (config `colors:`)
	Refresh time.Duration     // the refresh rate the source starts with
	// Banner, if set, is asked at each snapshot for a line of context shown
	// in the status line (kvtop demo: the simulator's current phase).
	Banner func() string
}

// refreshSteps are the rates +/- step through.
var refreshSteps = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}

type (
	snapshotMsg struct{ s *snapshot.Snapshot }
	closedMsg   struct{}
	// messageTick comes when the status message set last is due to go.
	messageTick struct{}
)

// messageFor is how long a status message stays on the status line: long
// enough to read, short enough that it never stands for how things are
// now. A key dismisses it sooner, and so does an error it would hide.
const messageFor = 4 * time.Second

// message is the status message on show: when it goes, and the errors the
// status line named when it came (a new one takes its place at once).
type message struct {
	text   string
	until  time.Time // zero: it stays (the source closed)
	shown  map[string]bool
	sticky bool
}

// Model is the console's Bubble Tea model.
type Model struct {
	src    Source
	replay Replayer // src, when it plays a journal
	remote Remoter  // src, when it reads a collector
	themes []*themes.Theme
	theme  int

	w, h int

	// latest is the newest snapshot, shown the one on screen (older than
	// latest while frozen), prev the one before shown, for ↑/↓ marks.
	latest, beforeLatest, shown, prev *snapshot.Snapshot

	st      views.State
	input   textinput.Model
	refresh time.Duration
	closed  bool
	banner  func() string
	now     func() time.Time // the console's clock: status messages expire by it
	msg     message          // the status message in st.Message, when set

	// version counts changes to what is on screen; the render cache is
	// keyed on it, so an Update that changes nothing costs no render.
	version uint64
	cache   *renderCache
}

type renderCache struct {
	shown   *snapshot.Snapshot
	w, h    int
	version uint64
	out     string
}

// New builds the console model. It loads every built-in theme with the
// colour overrides up front, so a bad override fails here, not on `t`.
func New(src Source, o Options) (Model, error) {
	if src == nil {
		return Model{}, fmt.Errorf("tui: no snapshot source")
	}
	m := Model{src: src, cache: &renderCache{}, now: time.Now}
	name := o.Theme
	if name == "" {
		name = "default"
	}
	found := false
	for i, n := range themes.Names() {
		th, err := themes.Load(n, o.Colors)
		if err != nil {
			return Model{}, err
		}
		m.themes = append(m.themes, th)
		if n == name {
			m.theme, found = i, true
		}
	}
	if !found {
		_, err := themes.Load(name, nil) // its error names the valid themes
		return Model{}, err
	}
	m.banner = o.Banner
	m.refresh = max(o.Refresh, pool.MinRefresh)
	if o.Refresh == 0 {
		m.refresh = time.Second
	}
	m.input = textinput.New()
	m.input.Prompt = ""
	m.input.CharLimit = 80
	m.input.Cursor.SetMode(cursor.CursorStatic) // no blink ticks while idle
	m.st = views.State{Screen: views.Pool, Follow: true}
	if r, ok := src.(Replayer); ok {
		m.replay = r
		m.replayState()
	}
	if r, ok := src.(Remoter); ok {
		m.remote = r
		m.remoteState()
	}
	return m, nil
}

// waitSnapshot blocks (in a command, never in Update) for the next
// snapshot; Update re-arms it after each one, so at most one wait is ever
// pending and a slow UI just skips nothing but renders less.
func waitSnapshot(ch <-chan *snapshot.Snapshot) tea.Cmd {
	return func() tea.Msg {
		s, ok := <-ch
		if !ok {
			return closedMsg{}
		}
		return snapshotMsg{s}
	}
}

// Init starts waiting for snapshots.
func (m Model) Init() tea.Cmd { return waitSnapshot(m.src.Snapshots()) }

// Update handles snapshots, keys and resizes.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case snapshotMsg:
		m.receive(msg.s)
		m.expireMessage()
		return m, waitSnapshot(m.src.Snapshots())
	case closedMsg:
		m.closed = true
		m.st.Message = "snapshot source closed: the display is no longer updated"
		m.msg = message{text: m.st.Message, sticky: true}
		m.changed()
		return m, nil
	case messageTick:
		m.expireMessage()
		return m, nil
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		m.input.Width = max(10, m.w-30)
		m.fixCursor()
		m.changed()
		return m, nil
	case tea.KeyMsg:
		// Keys typed faster than the terminal is read (a held j) arrive
		// as one message with several runes: apply them one by one.
		var cmds []tea.Cmd
		for _, k := range splitRunes(msg) {
			cmds = append(cmds, m.key(k))
		}
		cmds = append(cmds, m.stampMessage())
		m.changed()
		return m, tea.Batch(cmds...)
	}
	return m, nil
}

// receive stores a snapshot; the screen moves to it unless frozen, keeping
// the cursor on the same item (rows reorder when sorted).
func (m *Model) receive(s *snapshot.Snapshot) {
	if s == nil {
		return
	}
	m.beforeLatest, m.latest = m.latest, s
	if m.banner != nil {
		m.st.Banner = m.banner()
	}
	m.replayState()
	m.remoteState()
	if m.st.Frozen {
		return // stored, not shown: the screen (and its cache) stay as they are
	}
	m.show(m.latest, m.beforeLatest)
}

func (m *Model) show(s, prev *snapshot.Snapshot) {
	a := m.anchors()
	views.Carry(m.shown, s, &m.st) // what the screens hold beyond s
	m.shown, m.prev = s, prev
	m.restore(a)
	m.fixCursor()
	m.changed()
}

func (m *Model) changed() { m.version++ }

// stampMessage starts the clock of a status message a key just set (key
// clears msg when it dismisses the last one), and asks for a tick when it
// is due.
func (m *Model) stampMessage() tea.Cmd {
	if m.st.Message == "" || m.msg.text != "" {
		return nil
	}
	m.msg = message{text: m.st.Message, until: m.now().Add(messageFor), shown: map[string]bool{}}
	for _, e := range views.StatusErrors(m.latest, &m.st) {
		m.msg.shown[e] = true
	}
	return tea.Tick(messageFor, func(time.Time) tea.Msg { return messageTick{} })
}

// expireMessage lets the status message go when its time is up, or when
// an error it would hide has come since it was set. A tick of an earlier
// message finds a later one not yet due, and leaves it.
func (m *Model) expireMessage() {
	if m.st.Message == "" || m.msg.sticky || m.st.Message != m.msg.text {
		return
	}
	due := !m.now().Before(m.msg.until)
	if !due {
		for _, e := range views.StatusErrors(m.latest, &m.st) {
			if !m.msg.shown[e] {
				due = true // a newer error: the status line shows it
				break
			}
		}
	}
	if due {
		m.st.Message, m.msg = "", message{}
		m.changed()
	}
}

// replayState takes the replay's state for the header and keys.
func (m *Model) replayState() {
	if m.replay != nil {
		r := m.replay.ReplayState()
		m.st.Replay = &r
	}
}

// remoteState takes the collector's connection for the header. A frozen
// screen keeps updating it: the age and LOST are about now, not the
// snapshot shown.
func (m *Model) remoteState() {
	if m.remote != nil {
		r := m.remote.RemoteState()
		m.st.Remote = &r
		m.changed()
	}
}

func (m *Model) list() *views.List { return m.st.List() }

func (m *Model) th() *themes.Theme { return m.themes[m.theme] }

// viewState is the state handed to views: the model's plus what only the
// model knows (refresh, theme, the filter prompt).
func (m *Model) viewState() views.State {
	st := m.st
	st.Refresh = m.refresh
	if d, _ := m.sourceRefresh(); d > 0 {
		st.Refresh = d
	}
	st.Theme = m.th().Name
	st.Prev = m.prev
	st.Filtering = m.input.Focused()
	st.Input, st.InputPos = m.input.Value(), m.input.Position()
	return st
}

// View renders the current screen, from cache unless something changed.
func (m Model) View() string {
	c := m.cache
	if c.out != "" && c.shown == m.shown && c.w == m.w && c.h == m.h && c.version == m.version {
		return c.out
	}
	out := ""
	if m.w > 0 && m.h > 0 {
		out = views.Render(m.shown, m.viewState(), m.w, m.h, m.th())
	}
	*c = renderCache{shown: m.shown, w: m.w, h: m.h, version: m.version, out: out}
	return out
}

// splitRunes breaks a multi-rune key message into single keys, unless it
// is a paste (which only the filter prompt takes, whole).
func splitRunes(msg tea.KeyMsg) []tea.KeyMsg {
	if msg.Type != tea.KeyRunes || len(msg.Runes) <= 1 || msg.Paste {
		return []tea.KeyMsg{msg}
	}
	out := make([]tea.KeyMsg, len(msg.Runes))
	for i, r := range msg.Runes {
		out[i] = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt}
	}
	return out
}
