package tui

import (
	"context"
	"errors"
	"io"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/kvtop/kvtop/tui/paint"
)

// panicky is a model with a bug: the key x makes it panic.
type panicky struct{}

func (panicky) Init() tea.Cmd { return nil }
func (panicky) View() string  { return "a frame" }
func (p panicky) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	if k, ok := msg.(tea.KeyMsg); ok && k.String() == "x" {
		var m map[string]int
		m["boom"]++ // a nil map: the kind of bug a console ships with
	}
	return p, nil
}

// TestPanicIsKeptForTheShell: a panic in the console, at start (Init) or
// later (Update), ends it with Bubble Tea's ErrProgramPanic, and the
// panic's message and stack are kept, to be printed after the alternate
// screen is gone (Bubble Tea prints them on the alternate screen, which
// the operator never sees again).
func TestPanicIsKeptForTheShell(t *testing.T) {
	for _, c := range []struct {
		m          tea.Model
		keys       string
		what, from string
	}{
		{panicky{}, "x", "assignment to entry in nil map", "panicky.Update"},
		{badStart{}, "", "index out of range", "badStart.Init"},
	} {
		t.Run(c.from, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			p := paint.New(io.Discard)
			defer p.Close()
			v := painted{m: c.m, p: p, crash: new(string)}
			done := make(chan error, 1)
			go func() {
				done <- run(context.Background(), v, nil, tea.WithInput(pr), tea.WithOutput(io.Discard), tea.WithoutRenderer())
			}()
			if c.keys != "" {
				go pw.Write([]byte(c.keys))
			}
			select {
			case err := <-done:
				if !errors.Is(err, tea.ErrProgramPanic) {
					t.Errorf("run returned %v, want a panic", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the program did not end on the panic")
			}
			if !strings.Contains(*v.crash, c.what) || !strings.Contains(*v.crash, c.from) {
				t.Errorf("the crash kept for the shell does not say what and where:\n%s", *v.crash)
			}
		})
	}
}

// badStart is a model whose Init has a bug.
type badStart struct{ panicky }

func (badStart) Init() tea.Cmd {
	var s []int
	_ = s[3] // an index out of range at start
	return nil
}

// shown is a model that says when it was first drawn: the program runs.
type shown struct {
	once *sync.Once
	up   chan struct{}
}

func (shown) Init() tea.Cmd                         { return nil }
func (m shown) Update(tea.Msg) (tea.Model, tea.Cmd) { return m, nil }
func (m shown) View() string {
	m.once.Do(func() { close(m.up) })
	return "a frame"
}

// TestSignalEndsTheConsole: SIGTERM or SIGINT to a running console ends it
// at once and cleanly, every time. kvtop stops the program through ctx (a
// signal.NotifyContext, as cmd/kvtop's signalContext); Bubble Tea's own
// signal handler caught the same signal, and when kvtop's Quit ended the
// loop first, that handler's send blocked for ever and so did the
// program's shutdown: the console hung with the terminal still raw (about
// two runs in five), and a SIGINT that Bubble Tea took first made run
// return "program was interrupted".
func TestSignalEndsTheConsole(t *testing.T) {
	for i := 0; i < 24; i++ {
		sig := syscall.SIGTERM
		if i%2 == 1 {
			sig = syscall.SIGINT
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		pr, pw := io.Pipe()
		m := shown{once: new(sync.Once), up: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, m, nil, tea.WithInput(pr), tea.WithOutput(io.Discard), tea.WithoutRenderer())
		}()
		select {
		case <-m.up:
		case err := <-done:
			t.Fatalf("run %d ended before a signal: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: the program did not start", i)
		}
		// The process survives the signal: ctx's handler is registered
		// until stop.
		if err := syscall.Kill(syscall.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run %d: %v ended the console with %v, want nil", i, sig, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: the console did not end on %v (it hangs, holding the terminal)", i, sig)
		}
		stop()
		pw.Close()
	}
}
