package tui

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/kvtop/kvtop/remote"
	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views/fixture"
	"github.com/muesli/termenv"
)

// clock is the console's clock in a test: it moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// withClock gives the model a clock the test moves.
func (h *harness) withClock() *clock {
	c := &clock{t: time.Date(2026, 12, 4, 14, 2, 11, 0, time.UTC)}
	m := h.model()
	m.now = c.now
	h.m = m
	return c
}

func (h *harness) status() string { return lastLines(h.view(), 2) }

// TestStatusMessageExpires: a message goes after messageFor on the
// console's clock (its tick, or the next snapshot after that time),
// not before; a tick left over from an earlier message does not cut a
// later one short.
func TestStatusMessageExpires(t *testing.T) {
	h := start(t, 120, 40)
	c := h.withClock()
	h.keys("t")
	if !strings.Contains(h.status(), "theme ") {
		t.Fatalf("t: no message:\n%s", h.status())
	}
	c.advance(messageFor - time.Millisecond)
	h.send(messageTick{})
	h.send(snapshotMsg{fixture.Later(1)})
	if !strings.Contains(h.status(), "theme ") {
		t.Fatalf("the message went before its time:\n%s", h.status())
	}
	c.advance(time.Millisecond)
	h.send(messageTick{})
	if strings.Contains(h.status(), "theme ") {
		t.Errorf("the message stayed past its time:\n%s", h.status())
	}
	h.contains("✖ w6 scrape") // what it hid is back

	// A snapshot after its time takes it away too (a tick may be late).
	h.keys("s")
	c.advance(messageFor + time.Second)
	h.send(snapshotMsg{fixture.Later(2)})
	if strings.Contains(h.status(), "sorted by") {
		t.Errorf("a snapshot after its time left the message:\n%s", h.status())
	}

	// The first message's tick comes while a later one is up: it stays.
	h.keys("t")
	c.advance(2 * time.Second)
	h.keys("s")
	c.advance(messageFor - time.Second)
	h.send(messageTick{}) // the theme message's
	if !strings.Contains(h.status(), "sorted by") {
		t.Errorf("an earlier message's tick took the later one:\n%s", h.status())
	}
	// Setting a message asks for its tick.
	m, cmd := h.m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'t'}})
	h.m = m
	if cmd == nil {
		t.Error("a message without a tick to take it away")
	}
}

// TestNewerErrorReplacesStatusMessage: an error that comes after a message
// takes its place at once; errors the status line showed already do not.
func TestNewerErrorReplacesStatusMessage(t *testing.T) {
	h := start(t, 120, 40)
	h.withClock()
	h.keys("t")
	s := fixture.Later(1) // the same errors as before, counted again
	h.send(snapshotMsg{s})
	if !strings.Contains(h.status(), "theme ") {
		t.Fatalf("an error already shown took the message:\n%s", h.status())
	}
	s = fixture.Later(2)
	s.Errors = append([]snapshot.ErrorCount{{Source: "w2 metrics", Kind: "timeout", Count: 1, Last: "context deadline exceeded", At: s.At}}, s.Errors...)
	h.send(snapshotMsg{s})
	if st := h.status(); strings.Contains(st, "theme ") || !strings.Contains(st, "w2 metrics timeout") {
		t.Errorf("a newer error stays hidden behind the message:\n%s", st)
	}
}

// collector is a real `kvtop serve` on 127.0.0.1 whose latest snapshot
// the test sets.
type collector struct {
	addr   string
	latest atomic.Pointer[snapshot.Snapshot]
	stop   func()
}

func (c *collector) Latest() *snapshot.Snapshot { return c.latest.Load() }

func startCollector(t *testing.T, s *snapshot.Snapshot) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: ln.Addr().String()}
	c.latest.Store(s)
	srv, err := serve.New(serve.Options{Source: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Run(ctx, make(chan *snapshot.Snapshot))
	hs := &http.Server{Handler: srv.Handler()}
	go func() { _ = hs.Serve(ln) }()
	c.stop = func() { cancel(); _ = hs.Close() }
	t.Cleanup(c.stop)
	return c
}

// TestRemoteRefreshIsTheCollectors: on a console reading a kvtop serve,
// +/- never change the header's refresh, which is the collector's, and
// say so; when the collector dies, the status line says that, not the
// last message.
func TestRemoteRefreshIsTheCollectors(t *testing.T) {
	lipgloss.SetColorProfile(termenv.Ascii)
	t.Setenv("NO_COLOR", "")
	snap := fixture.Snapshot() // refresh_s 1
	snap.Errors = nil          // the status line's banner in full
	col := startCollector(t, snap)
	src, err := remote.New(remote.Options{URL: "http://" + col.addr, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Idle: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	go src.Run(ctx)
	// The console starts at another rate than the collector's.
	m, err := New(src, Options{Refresh: 250 * time.Millisecond, Banner: src.Banner})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, m: m}
	h.withClock()
	h.send(tea.WindowSizeMsg{Width: 120, Height: 40})
	h.send(runCmd(t, h.m.Init()))
	if !strings.Contains(h.header(), "refresh 1s") || !strings.Contains(h.header(), "REMOTE "+col.addr) {
		t.Fatalf("header: %q, want the collector's refresh 1s", h.header())
	}
	for _, k := range []string{"+", "-", "-", "+", "+"} {
		h.keys(k)
		if !strings.Contains(h.header(), "refresh 1s") {
			t.Errorf("%s changed the header: %q", k, h.header())
		}
		if !strings.Contains(h.status(), "refresh is set by the collector (1 s)") {
			t.Errorf("%s: status line\n%s", k, h.status())
		}
	}
	h.keys("?")
	h.contains("refresh: set by the collector")
	h.keys("esc", "-")

	// The collector dies: the status line says so at once.
	col.stop()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(h.status(), "collector lost") {
		select {
		case s := <-src.Snapshots():
			h.send(snapshotMsg{s})
		case <-deadline:
			t.Fatalf("the lost collector never showed:\n%s", h.view())
		}
	}
	if strings.Contains(h.status(), "refresh is set") {
		t.Errorf("the message hides the lost collector:\n%s", h.status())
	}
	if !strings.Contains(h.header(), "LOST") || !strings.Contains(h.header(), "refresh 1s") {
		t.Errorf("header while lost: %q", h.header())
	}
}
