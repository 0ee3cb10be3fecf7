package tui

import (
	"context"
	"errors"
	"io"
	"strings"
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

// TestPanicIsKeptForTheShell: a panic in the console ends it with Bubble
// Tea's ErrProgramPanic, and the panic's message and stack are kept, to be
// printed after the alternate screen is gone (Bubble Tea prints them on
// the alternate screen, which the operator never sees again).
func TestPanicIsKeptForTheShell(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	p := paint.New(io.Discard)
	defer p.Close()
	v := painted{m: panicky{}, p: p, crash: new(string)}
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), v, nil, tea.WithInput(pr), tea.WithOutput(io.Discard), tea.WithoutRenderer())
	}()
	go pw.Write([]byte("x"))
	select {
	case err := <-done:
		if !errors.Is(err, tea.ErrProgramPanic) {
			t.Errorf("run returned %v, want a panic", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not end on the panic")
	}
	if !strings.Contains(*v.crash, "assignment to entry in nil map") || !strings.Contains(*v.crash, "panicky.Update") {
		t.Errorf("the crash kept for the shell does not say what and where:\n%s", *v.crash)
	}
}
