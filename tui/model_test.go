package tui

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
	"github.com/muesli/termenv"
)

// chanSource is the smallest Source: a channel and a record of the refresh
// rates asked for.
type chanSource struct {
	ch chan *snapshot.Snapshot
	mu sync.Mutex
	rs []time.Duration
}

func newSource() *chanSource { return &chanSource{ch: make(chan *snapshot.Snapshot, 16)} }

func (c *chanSource) Snapshots() <-chan *snapshot.Snapshot { return c.ch }
func (c *chanSource) SetRefresh(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rs = append(c.rs, d)
}
func (c *chanSource) refreshes() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.rs...)
}

// harness drives a Model the way Bubble Tea does: Update, then View.
type harness struct {
	t   *testing.T
	src *chanSource
	m   tea.Model
}

func start(t *testing.T, w, h int) *harness {
	t.Helper()
	lipgloss.SetColorProfile(termenv.Ascii)
	t.Setenv("NO_COLOR", "")
	src := newSource()
	m, err := New(src, Options{Refresh: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hs := &harness{t: t, src: src, m: m}
	hs.send(tea.WindowSizeMsg{Width: w, Height: h})
	hs.send(snapshotMsg{fixture.Snapshot()})
	return hs
}

func (h *harness) send(msg tea.Msg) tea.Cmd {
	h.t.Helper()
	var cmd tea.Cmd
	h.m, cmd = h.m.Update(msg)
	return cmd
}

// keys sends key presses: single characters, or names like "tab", "enter".
func (h *harness) keys(ks ...string) {
	h.t.Helper()
	named := map[string]tea.KeyType{
		"tab": tea.KeyTab, "shift+tab": tea.KeyShiftTab, "enter": tea.KeyEnter, "esc": tea.KeyEsc,
		"up": tea.KeyUp, "down": tea.KeyDown, "pgdown": tea.KeyPgDown, "pgup": tea.KeyPgUp,
		"home": tea.KeyHome, "end": tea.KeyEnd, "left": tea.KeyLeft, "ctrl+c": tea.KeyCtrlC, "backspace": tea.KeyBackspace,
	}
	for _, k := range ks {
		if t, ok := named[k]; ok {
			h.send(tea.KeyMsg{Type: t})
			continue
		}
		for _, r := range k {
			h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
		}
	}
}

func (h *harness) model() Model { return h.m.(Model) }

// bound reports whether the current screen takes the key of that ID.
func (h *harness) bound(id string) bool {
	m := h.model()
	for _, b := range views.Keys(m.shown, &m.st) {
		if b.ID == id {
			return true
		}
	}
	return false
}
func (h *harness) view() string   { return h.m.View() }
func (h *harness) header() string { return strings.Split(h.view(), "\n")[0] }

// cursorRow is the line carrying the ▶ cursor.
func (h *harness) cursorRow() string {
	h.t.Helper()
	for _, l := range strings.Split(h.view(), "\n") {
		if strings.HasPrefix(l, " ▶") {
			return l
		}
	}
	h.t.Fatalf("no cursor on screen:\n%s", h.view())
	return ""
}

func (h *harness) contains(want ...string) {
	h.t.Helper()
	v := h.view()
	for _, w := range want {
		if !strings.Contains(v, w) {
			h.t.Errorf("screen lacks %q:\n%s", w, v)
		}
	}
}

func TestSnapshotsArriveThroughARearmedCommand(t *testing.T) {
	lipgloss.SetColorProfile(termenv.Ascii)
	src := newSource()
	m, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	if !strings.Contains(tm.View(), "waiting for the first snapshot") {
		t.Fatalf("before any snapshot:\n%s", tm.View())
	}
	// Init waits on the channel (in a command, never in Update).
	cmd := tm.Init()
	src.ch <- fixture.Snapshot()
	msg := runCmd(t, cmd)
	tm, cmd = tm.Update(msg)
	if !strings.Contains(tm.View(), "pool prod-qwen3") {
		t.Fatalf("snapshot not shown:\n%s", tm.View())
	}
	if cmd == nil {
		t.Fatal("no command re-armed after a snapshot")
	}
	// The re-armed command delivers the next one.
	src.ch <- fixture.Later(2)
	tm, _ = tm.Update(runCmd(t, cmd))
	if !strings.Contains(tm.View(), "14:02:13") {
		t.Fatalf("second snapshot not shown:\n%s", tm.View())
	}
	// A closed source is said, not silently frozen.
	close(src.ch)
	tm, _ = tm.Update(runCmd(t, waitSnapshot(src.ch)))
	if !strings.Contains(tm.View(), "snapshot source closed") {
		t.Errorf("closed source not reported:\n%s", tm.View())
	}
}

// runCmd runs a command with a generous deadline.
func runCmd(t *testing.T, cmd tea.Cmd) tea.Msg {
	t.Helper()
	done := make(chan tea.Msg, 1)
	go func() { done <- cmd() }()
	select {
	case msg := <-done:
		return msg
	case <-time.After(10 * time.Second):
		t.Fatal("command did not deliver within 10 s")
		return nil
	}
}

func TestTabsAndNumberKeysNavigate(t *testing.T) {
	h := start(t, 80, 24)
	want := []*views.Screen{views.Worker, views.Streams, views.Prefixes, views.Decisions, views.Routers, views.Pool}
	for _, sc := range want {
		h.keys("tab")
		if got := h.model().st.Screen; got != sc {
			t.Fatalf("tab: on %s, want %s", got, sc)
		}
	}
	h.keys("shift+tab")
	if got := h.model().st.Screen; got != views.Routers {
		t.Fatalf("shift+tab from pool: %s, want routers (wraps)", got)
	}
	for k, sc := range map[string]*views.Screen{"1": views.Pool, "2": views.Worker, "3": views.Streams,
		"4": views.Prefixes, "5": views.Decisions, "6": views.Routers} {
		h.keys(k)
		if got := h.model().st.Screen; got != sc {
			t.Errorf("key %s: on %s, want %s", k, got, sc)
		}
		if footer := lastLine(h.view()); !strings.Contains(footer, "["+k+" ") {
			t.Errorf("key %s: footer %q does not mark the tab", k, footer)
		}
	}
}

func lastLine(s string) string {
	ls := strings.Split(s, "\n")
	return ls[len(ls)-1]
}

func TestEnterOpensWorkerAndEscReturns(t *testing.T) {
	h := start(t, 80, 24)
	h.keys("j", "j", "j") // w3
	if !strings.Contains(h.cursorRow(), "w3") {
		t.Fatalf("cursor not on w3: %q", h.cursorRow())
	}
	h.keys("enter")
	if h.model().st.Screen != views.Worker {
		t.Fatalf("enter: on %s", h.model().st.Screen)
	}
	h.contains("WORKER w3", "OVERHEATING")
	h.keys("j") // next worker, in table order
	h.contains("WORKER w4")
	h.keys("esc")
	if h.model().st.Screen != views.Pool {
		t.Fatalf("esc: on %s", h.model().st.Screen)
	}
	if !strings.Contains(h.cursorRow(), "w4") {
		t.Errorf("back on pool, cursor should be on the worker last shown: %q", h.cursorRow())
	}
	// From streams, enter opens the publisher's worker and esc goes back there.
	h.keys("3", "G", "enter")
	h.contains("WORKER w8")
	h.keys("esc")
	if h.model().st.Screen != views.Streams {
		t.Errorf("esc from a worker opened on streams: on %s", h.model().st.Screen)
	}
}

func TestEnterOpensDecisionRecord(t *testing.T) {
	h := start(t, 120, 40)
	h.keys("5")
	if !strings.Contains(h.cursorRow(), "r-8830") || !strings.Contains(h.cursorRow(), "pending") {
		t.Fatalf("follow: cursor should be on the newest record, still pending: %q", h.cursorRow())
	}
	h.keys("k", "k", "enter") // r-8812
	if h.model().st.Screen != views.DecisionDetail {
		t.Fatalf("enter: on %s", h.model().st.Screen)
	}
	h.contains("request r-8812", "the prediction was for w2; the request went to w1", "HTTP 200 but the stream never finished")
	// New records arrive while reading: the detail stays on its record.
	h.send(snapshotMsg{fixture.Later(3)})
	h.contains("request r-8812")
	h.keys("esc")
	if h.model().st.Screen != views.Decisions {
		t.Fatalf("esc: on %s", h.model().st.Screen)
	}
	if !strings.Contains(h.cursorRow(), "r-8812") {
		t.Errorf("back on the list, cursor should still be on r-8812: %q", h.cursorRow())
	}
}

func TestFilterNarrowsPoolRows(t *testing.T) {
	h := start(t, 80, 24)
	h.keys("/", "d", "o", "w", "n")
	if !h.model().input.Focused() {
		t.Fatal("the filter prompt should be open while typing")
	}
	v := h.view()
	if !strings.Contains(firstRow(v), "w6") || strings.Contains(v, "w3      OVERHEATING") {
		t.Fatalf("filter 'down' should leave only w6:\n%s", v)
	}
	if !strings.Contains(lastLines(v, 2), "/ down▏") {
		t.Errorf("the prompt should show what is typed:\n%s", lastLines(v, 2))
	}
	h.keys("enter")
	h.contains("WORKERS 1 of 9", "filter down")
	// q types into the prompt only while it is open; now it would quit, so
	// reopen the prompt and clear with esc.
	h.keys("/", "esc")
	h.contains("WORKERS 9")
	// esc on a filtered list clears it too.
	h.keys("/", "s", "t", "a", "l", "e", "enter")
	h.contains("WORKERS 2 of 9")
	h.keys("esc")
	h.contains("WORKERS 9")
}

func lastLines(s string, n int) string {
	ls := strings.Split(s, "\n")
	return strings.Join(ls[len(ls)-n:], "\n")
}

func TestFilterDecisions(t *testing.T) {
	h := start(t, 120, 40)
	h.keys("5")
	count := func() int {
		return len(regexp.MustCompile(`(?m)^ [▶ ][✖! ] \d\d:\d\d:\d\d  r-`).FindAllString(h.view(), -1))
	}
	all := count()
	cases := map[string][]string{
		"flag:truncated": {"r-8806", "r-8812"},
		"w1":             {"r-8803", "r-8812"},
		"r-8808":         {"r-8808", "r-8808 #2"},
	}
	for f, want := range cases {
		h.keys("/", f, "enter")
		if got := count(); got != len(want) {
			t.Errorf("filter %q: %d rows, want %d:\n%s", f, got, len(want), h.view())
		}
		h.contains(want...)
		h.keys("esc")
		if got := count(); got != all {
			t.Errorf("after clearing %q: %d rows, want %d", f, got, all)
		}
	}
}

func TestSortCyclesAndKeepsTheCursorOnItsWorker(t *testing.T) {
	h := start(t, 160, 48)
	h.keys("j") // w1
	h.keys("s") // wait
	h.contains("WAIT▼", "sorted by wait ▼")
	if !strings.Contains(h.cursorRow(), "w1") {
		t.Errorf("cursor left w1 when sorting: %q", h.cursorRow())
	}
	first := firstRow(h.view())
	if !strings.Contains(first, "w3") {
		t.Errorf("largest queue first: first row %q", first)
	}
	h.keys("S")
	h.contains("WAIT▲")
	if first := firstRow(h.view()); !strings.Contains(first, "w1") {
		t.Errorf("reversed: smallest known queue first, got %q", first)
	}
	h.keys("s")
	h.contains("KV USE▼")
	// Sorting is offered where it means something only.
	h.keys("4")
	if h.bound(views.KeySort) {
		t.Error("s enabled on the prefixes screen")
	}
}

func firstRow(v string) string {
	for _, l := range strings.Split(v, "\n") {
		if regexp.MustCompile(`^ [▶ ][⚠✖! ] w\d `).MatchString(l) {
			return l
		}
	}
	return ""
}

func TestFreezeKeepsTheScreenWhileSnapshotsArrive(t *testing.T) {
	h := start(t, 80, 24)
	h.keys("f")
	if !strings.Contains(h.header(), "FROZEN 14:02:11") {
		t.Fatalf("header after f: %q", h.header())
	}
	before := h.view()
	version := h.model().version
	h.send(snapshotMsg{fixture.Later(5)})
	if got := h.view(); got != before {
		t.Errorf("screen changed while frozen:\n%s", got)
	}
	if h.model().version != version {
		t.Error("a frozen arrival invalidated the render cache")
	}
	if h.model().latest.Seq != fixture.Later(5).Seq {
		t.Error("the newer snapshot was not stored while frozen")
	}
	h.keys("f")
	if !strings.Contains(h.header(), "LIVE 14:02:16") {
		t.Errorf("unfreezing should show the newest snapshot: %q", h.header())
	}
}

func TestFollowAndScrollPausesIt(t *testing.T) {
	h := start(t, 120, 40)
	h.keys("5")
	h.contains("● FOLLOW")
	h.send(snapshotMsg{fixture.Later(2)}) // two newer records
	if !strings.Contains(h.cursorRow(), "r-8815") {
		t.Fatalf("follow should sit on the newest: %q", h.cursorRow())
	}
	h.keys("k")
	h.contains("PAUSED")
	if !strings.Contains(h.cursorRow(), "r-8814") {
		t.Fatalf("k moves up one: %q", h.cursorRow())
	}
	h.send(snapshotMsg{fixture.Later(4)})
	if !strings.Contains(h.cursorRow(), "r-8814") {
		t.Errorf("paused: the cursor must stay on its record as new ones arrive: %q", h.cursorRow())
	}
	h.keys("F")
	h.contains("● FOLLOW")
	if !strings.Contains(h.cursorRow(), "r-8817") {
		t.Errorf("F resumes at the newest: %q", h.cursorRow())
	}
	for _, k := range []string{"pgup", "home", "up"} {
		h.keys("F")
		if !h.model().st.Follow {
			h.keys("F")
		}
		h.keys(k)
		if h.model().st.Follow {
			t.Errorf("%s did not pause follow", k)
		}
	}
}

func TestRefreshStepsHaveAFloorAndShow(t *testing.T) {
	h := start(t, 80, 24)
	h.keys("-")
	if !strings.Contains(h.header(), "refresh 500ms") {
		t.Errorf("header after -: %q", h.header())
	}
	h.keys("-", "-")
	if !strings.Contains(h.header(), "refresh 250ms") {
		t.Errorf("header at the floor: %q", h.header())
	}
	h.contains("refresh 250ms is the floor")
	h.keys("+")
	if got := h.src.refreshes(); len(got) != 3 || got[0] != 500*time.Millisecond || got[1] != 250*time.Millisecond || got[2] != 500*time.Millisecond {
		t.Errorf("SetRefresh calls = %v, want [500ms 250ms 500ms] (none below the floor)", got)
	}
	for i := 0; i < 10; i++ {
		h.keys("+")
	}
	if h.model().refresh != 30*time.Second {
		t.Errorf("slowest step = %v", h.model().refresh)
	}
	// A configured rate between steps moves to the neighbouring step.
	src := newSource()
	m, _ := New(src, Options{Refresh: 1500 * time.Millisecond})
	mm, _ := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'-'}})
	if mm.(Model).refresh != time.Second {
		t.Errorf("1.5s then -: %v, want 1s", mm.(Model).refresh)
	}
	if m2, _ := New(src, Options{Refresh: 10 * time.Millisecond}); m2.refresh != pool.MinRefresh {
		t.Errorf("a configured rate below the floor starts at %v", m2.refresh)
	}
}

func TestThemeCycles(t *testing.T) {
	h := start(t, 80, 24)
	var seen []string
	for i := 0; i < 5; i++ {
		h.keys("t")
		mm := h.model()
		seen = append(seen, mm.th().Name)
	}
	if got := strings.Join(seen, ","); got != "dark,light,high-contrast,mono,default" {
		t.Errorf("t cycles %s", got)
	}
	h.contains("theme default")
	t.Setenv("NO_COLOR", "1")
	m, err := New(newSource(), Options{Theme: "dark"})
	if err != nil {
		t.Fatal(err)
	}
	mm, _ := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'t'}})
	if !strings.Contains(mm.(Model).st.Message, "NO_COLOR is set") {
		t.Errorf("under NO_COLOR the theme message should say colours stay off: %q", mm.(Model).st.Message)
	}
}

func TestOptionsErrorsNameTheCulprit(t *testing.T) {
	if _, err := New(newSource(), Options{Theme: "solarized"}); err == nil || !strings.Contains(err.Error(), "solarized") {
		t.Errorf("unknown theme: %v", err)
	}
	if _, err := New(newSource(), Options{Colors: map[string]string{"warn": "orangeish"}}); err == nil || !strings.Contains(err.Error(), "orangeish") {
		t.Errorf("bad colour: %v", err)
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil source accepted")
	}
}

func TestHelpListsEveryEnabledKey(t *testing.T) {
	for _, from := range []string{"1", "2", "3", "4", "5", "6"} {
		h := start(t, 200, 60)
		h.keys(from)
		mm := h.model()
		enabled := views.Keys(mm.shown, &mm.st)
		h.keys("?")
		if h.model().st.Screen != views.Help {
			t.Fatalf("? did not open help")
		}
		v := h.view()
		for _, b := range enabled {
			if !strings.Contains(v, b.Key) || !strings.Contains(v, b.Desc) {
				t.Errorf("from screen %s: help lacks %q %q", from, b.Key, b.Desc)
			}
		}
		for _, w := range []string{"THRESHOLDS IN FORCE", "≥ 60% of a hot prefix's traffic", "KV usage ≥ 90%", "COLOURS & GLYPHS", "crit"} {
			if !strings.Contains(v, w) {
				t.Errorf("help lacks %q", w)
			}
		}
		h.keys("esc")
		if h.model().st.Screen != views.Tabs()[from[0]-'1'] {
			t.Errorf("esc from help went to %s, want screen %s", h.model().st.Screen, from)
		}
	}
	// Keys that do nothing vanish from the footer: no filter on routers.
	h := start(t, 200, 60)
	h.keys("6")
	if f := lastLine(h.view()); strings.Contains(f, "/ filter") || !strings.Contains(f, "? help") {
		t.Errorf("routers footer %q: want help, no filter", f)
	}
	h.keys("1")
	if f := lastLine(h.view()); !strings.Contains(f, "/ filter") || !strings.Contains(f, "s sort") {
		t.Errorf("pool footer %q: want filter and sort", f)
	}
}

func TestResizeToTooSmallAndBack(t *testing.T) {
	h := start(t, 80, 24)
	h.send(tea.WindowSizeMsg{Width: 50, Height: 12})
	v := h.view()
	if len(strings.Split(v, "\n")) != 12 || !strings.Contains(v, "need 60×15") {
		t.Fatalf("50×12:\n%s", v)
	}
	h.keys("j") // keys still work while too small
	h.send(tea.WindowSizeMsg{Width: 80, Height: 24})
	h.contains("WORKERS 9")
	if !strings.Contains(h.cursorRow(), "w1") {
		t.Errorf("state kept through the resize: %q", h.cursorRow())
	}
	h.send(tea.WindowSizeMsg{Width: 200, Height: 50})
	if lines := strings.Split(h.view(), "\n"); len(lines) != 50 {
		t.Errorf("200×50: %d lines", len(lines))
	}
}

func TestHeldKeyArrivingAsOneMessage(t *testing.T) {
	h := start(t, 80, 24)
	h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("jjj")})
	if !strings.Contains(h.cursorRow(), "w3") {
		t.Errorf("three j's in one message should move three rows: %q", h.cursorRow())
	}
}

func TestPageKeysAndBigPool(t *testing.T) {
	h := start(t, 80, 24)
	h.send(snapshotMsg{fixture.Large(256)})
	h.keys("pgdown")
	mm := h.model()
	_, visible := mm.rows()
	if !strings.Contains(h.cursorRow(), fmt.Sprintf("w%03d", visible)) {
		t.Errorf("pgdown should move a page (%d rows): %q", visible, h.cursorRow())
	}
	h.keys("end")
	if !strings.Contains(h.cursorRow(), "w255") {
		t.Errorf("end: %q", h.cursorRow())
	}
	h.keys("home")
	if !strings.Contains(h.cursorRow(), "w000") {
		t.Errorf("home: %q", h.cursorRow())
	}
}

func TestQuitKeys(t *testing.T) {
	h := start(t, 80, 24)
	for _, k := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune{'q'}}, {Type: tea.KeyCtrlC}} {
		cmd := h.send(k)
		if cmd == nil || !quits(cmd) {
			t.Errorf("%s does not quit", k)
		}
	}
	// While typing a filter, q is a letter and ctrl+c still quits.
	h.keys("/", "q")
	if h.model().st.Pool.Filter != "q" {
		t.Errorf("q in the filter prompt: filter %q", h.model().st.Pool.Filter)
	}
	if cmd := h.send(tea.KeyMsg{Type: tea.KeyCtrlC}); cmd == nil || !quits(cmd) {
		t.Error("ctrl+c in the filter prompt does not quit")
	}
}

// quits runs a (possibly batched) command and reports a tea.QuitMsg.
func quits(cmd tea.Cmd) bool {
	switch msg := cmd().(type) {
	case tea.QuitMsg:
		return true
	case tea.BatchMsg:
		for _, c := range msg {
			if c != nil && quits(c) {
				return true
			}
		}
	}
	return false
}

func TestRunReturnsOnContextAndOnQuit(t *testing.T) {
	lipgloss.SetColorProfile(termenv.Ascii)
	src := newSource()
	src.ch <- fixture.Snapshot()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, mustNew(t, src), nil, tea.WithInput(nil), tea.WithOutput(io.Discard))
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("cancelled: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}

	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		done <- run(context.Background(), mustNew(t, newSource()), nil, tea.WithInput(pr), tea.WithOutput(io.Discard))
	}()
	go pw.Write([]byte("q")) // blocks until the program reads it
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("quit: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after q")
	}
}

func TestFilterPromptInColour(t *testing.T) {
	h := start(t, 100, 30)
	lipgloss.SetColorProfile(termenv.TrueColor)
	defer lipgloss.SetColorProfile(termenv.Ascii)
	m, err := New(h.src, Options{Theme: "dark"})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	h.send(tea.WindowSizeMsg{Width: 100, Height: 30})
	h.send(snapshotMsg{fixture.Snapshot()})
	h.keys("/", "w", "3", "left")
	status := ansi.Strip(lastLines(h.view(), 2))
	if !strings.Contains(status, "/ w▏3") || strings.Contains(status, "?[") {
		t.Errorf("prompt should show the text and cursor, no escape debris: %q", status)
	}
}

// TestBannerFollowsEachSnapshot: kvtop demo's phase line is asked anew at
// every snapshot and shown in the status line, beside the error summary.
func TestBannerFollowsEachSnapshot(t *testing.T) {
	lipgloss.SetColorProfile(termenv.Ascii)
	t.Setenv("NO_COLOR", "")
	phase := "steady: the pool warms up"
	m, err := New(newSource(), Options{Refresh: time.Second, Banner: func() string { return "demo tour: " + phase }})
	if err != nil {
		t.Fatal(err)
	}
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
	tm, _ = tm.Update(snapshotMsg{fixture.Snapshot()})
	status := func() string {
		lines := strings.Split(tm.View(), "\n")
		return lines[len(lines)-2]
	}
	if s := status(); !strings.Contains(s, "▸ demo tour: steady: the pool warms up") {
		t.Fatalf("status line %q lacks the banner", s)
	}
	phase = "event-loss: a gap in w0's stream, repaired by replay"
	tm, _ = tm.Update(snapshotMsg{fixture.Later(1)})
	if s := status(); !strings.Contains(s, "event-loss: a gap in w0") || strings.Contains(s, "warms up") {
		t.Fatalf("status line %q did not follow the new phase", s)
	}
}

// TestAFakeScreenIsOneValueAndOneLine adds a screen the way a new one is
// added (a Screen value and a line in the registry) and drives it through
// the model: its tab, its list, enter, esc, its own key and its help.
func TestAFakeScreenIsOneValueAndOneLine(t *testing.T) {
	fruits := []string{"apple", "banana", "cherry", "damson"}
	fake := &views.Screen{
		Name: "fruit", Short: "frt", Tab: true,
		Body: func(_ *snapshot.Snapshot, st *views.State, _, _ int, _ *themes.Theme) []string {
			return []string{" FRUIT " + fruits[st.List().Cursor]}
		},
		Rows: func(*snapshot.Snapshot, *views.State, int, int, *themes.Theme) (int, int) {
			return len(fruits), len(fruits)
		},
		Items: func(*snapshot.Snapshot, views.State) []string { return fruits },
		Enter: func(s *snapshot.Snapshot, st *views.State) {
			st.Worker = "w" + fmt.Sprint(st.List().Cursor)
			st.Back, st.Screen = st.Screen, views.Worker
		},
		Keys: func(*snapshot.Snapshot, *views.State) views.ScreenKeys {
			return views.ScreenKeys{Up: "previous fruit", Down: "next fruit", Enter: "open its worker",
				Own: []views.Binding{{ID: "peel", Keys: []string{"p"}, Key: "p", Desc: "peel the fruit", Hint: "peel", Rank: 65,
					Do: func(_ *snapshot.Snapshot, st *views.State) { st.Message = "peeled" }}}}
		},
		Help: []string{"fruit: one row per fruit, for the test"},
	}
	// The one line: register it.
	saved := views.Screens
	views.Screens = append(append([]*views.Screen(nil), saved...), fake)
	t.Cleanup(func() { views.Screens = saved })

	h := start(t, 200, 60)
	h.keys("7")
	if h.model().st.Screen != fake {
		t.Fatalf("7 did not open the fake screen: on %s", h.model().st.Screen)
	}
	if f := lastLine(h.view()); !strings.Contains(f, "[7 fruit]") || !strings.Contains(f, "p peel") {
		t.Errorf("footer %q: want the fruit tab lit and its own key", f)
	}
	h.keys("j", "j")
	h.contains("FRUIT cherry")
	h.keys("p")
	h.contains("peeled")
	h.keys("enter")
	if h.model().st.Screen != views.Worker {
		t.Fatalf("enter: on %s, want worker", h.model().st.Screen)
	}
	h.contains("WORKER w2")
	h.keys("esc")
	if h.model().st.Screen != fake {
		t.Fatalf("esc from the worker: on %s, want fruit", h.model().st.Screen)
	}
	h.contains("FRUIT cherry") // its cursor survived the trip
	h.keys("?")
	h.contains("on the fruit screen", "previous fruit", "next fruit", "open its worker", "peel the fruit",
		"fruit: one row per fruit, for the test", "1-7           pool worker streams prefixes decisions routers fruit")
	h.keys("esc", "tab")
	if h.model().st.Screen != views.Pool {
		t.Errorf("tab from the last tab: on %s, want pool (wraps)", h.model().st.Screen)
	}
	// Elsewhere its keys are gone, and help says where they work.
	if h.bound("peel") {
		t.Error("the fruit's own key is bound on the pool screen")
	}
	h.keys("?")
	h.contains("peel the fruit (fruit)")
}

// TestHelpFromTheWorkerKeepsItsWayBack: esc from help returns to the worker
// and esc again to the screen the worker was opened from.
func TestHelpFromTheWorkerKeepsItsWayBack(t *testing.T) {
	h := start(t, 120, 40)
	h.keys("3", "enter", "?")
	if h.model().st.Screen != views.Help {
		t.Fatalf("? on the worker: on %s", h.model().st.Screen)
	}
	h.contains("on the worker screen", "previous worker")
	h.keys("esc")
	if h.model().st.Screen != views.Worker {
		t.Fatalf("esc from help: on %s, want worker", h.model().st.Screen)
	}
	h.keys("esc")
	if h.model().st.Screen != views.Streams {
		t.Errorf("esc from the worker: on %s, want streams, where it was opened", h.model().st.Screen)
	}
}

func mustNew(t *testing.T, src Source) Model {
	t.Helper()
	m, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// In a prefill/decode pool the table says each worker's role; r groups
// the rows by role (prefill first) and says so, r again ungroups them.
func TestRoleKeyGroupsTheTable(t *testing.T) {
	h := start(t, 120, 34)
	h.send(snapshotMsg{fixture.Disaggregated()})
	h.contains("ROLE", "prefill median 1", "decode median 7.5")
	h.keys("s") // sorted by wait: decode's w3 first, prefill's near the end
	if r := firstRow(h.view()); !strings.Contains(r, "w3") {
		t.Fatalf("sorted by wait, first row %q", r)
	}
	h.keys("r")
	h.contains("by role")
	if r := firstRow(h.view()); !strings.Contains(r, "w0") || !strings.Contains(r, "prefill") {
		t.Fatalf("grouped by role, the first row is %q, want prefill's busiest, w0", r)
	}
	h.keys("r")
	if strings.Contains(h.view(), "by role") {
		t.Fatal("r again should ungroup")
	}
}

// A pool of two models shows MODEL; m groups the rows by model (name
// order: Llama before Qwen) and says so.
func TestModelKeyGroupsTheTable(t *testing.T) {
	h := start(t, 120, 34)
	h.send(snapshotMsg{fixture.MultiModel()})
	h.contains("MODEL", "Llama-3.1-70B-Instruct: hit 69%")
	h.keys("m")
	h.contains("by model")
	if r := firstRow(h.view()); !strings.Contains(r, "w5") || !strings.Contains(r, "Llama") {
		t.Fatalf("grouped by model, the first row is %q, want Llama's first worker, w5", r)
	}
	h.keys("m")
	if strings.Contains(h.view(), "by model") {
		t.Fatal("m again should ungroup")
	}
}
