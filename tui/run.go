package tui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/kvtop/kvtop/tui/paint"
)

// Run shows the console in the alternate screen until the operator quits
// or ctx is done; either way it returns nil. Errors are a bad option (an
// unknown theme or colour) or a terminal that cannot be driven.
//
// Bubble Tea runs the model and reads the keys; kvtop paints the frames
// (package paint), only when one changed: v1's renderer has no way to
// stop its ticker, whose wakes were a third of an idle console's CPU.
func Run(ctx context.Context, src Source, o Options) error {
	m, err := New(src, o)
	if err != nil {
		return err
	}
	t, err := paint.Open(os.Stdin, os.Stdout)
	if err != nil {
		return err
	}
	p := paint.New(os.Stdout)
	v := painted{m: m, p: p, crash: new(string)}
	err = run(ctx, v, func(prog *tea.Program, ctx context.Context) {
		t.WatchSize(ctx, func(w, h int) { prog.Send(tea.WindowSizeMsg{Width: w, Height: h}) })
	}, tea.WithInput(os.Stdin), tea.WithoutRenderer())
	p.Close() // before the screen is given back: nothing paints on the shell's
	err = errors.Join(err, t.Close())
	if *v.crash != "" {
		// Bubble Tea printed the panic on the alternate screen, now gone.
		fmt.Fprintf(os.Stderr, "kvtop: the console crashed: %s\n", *v.crash)
	}
	return err
}

// run runs model m until it quits or ctx is done. watch, if set, runs
// beside the program until it ends (the terminal's size). Tests give the
// program a pipe for a terminal.
func run(ctx context.Context, m tea.Model, watch func(*tea.Program, context.Context), opts ...tea.ProgramOption) error {
	// ctx ends the program by a Quit, not by bubbletea's WithContext: the
	// latter kills the program, closing the terminal while its input
	// reader still reads it (a data race in bubbletea's teardown, seen
	// under -race); Quit takes the same orderly path as the q key.
	//
	// Signals are the caller's, through ctx: Bubble Tea's own handler
	// would catch SIGINT and SIGTERM too, and when kvtop's Quit won the
	// race the handler's send blocked for ever and the program's shutdown
	// waited for it: kvtop hung with the terminal in raw mode on the
	// alternate screen (2 kill -TERM of 6 in tmux).
	opts = append(opts, tea.WithoutSignalHandler())
	p := tea.NewProgram(m, opts...)
	stop := context.AfterFunc(ctx, p.Quit)
	defer stop()
	if watch != nil {
		wctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); watch(p, wctx) }()
		defer func() { cancel(); <-done }()
	}
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// painted is a model whose frames go to a Painter: Bubble Tea asks for the
// view after every message and gets nothing to render itself. A panic in
// the model is kept in crash, with its stack, to be shown on the shell's
// screen.
type painted struct {
	m     tea.Model
	p     *paint.Painter
	crash *string
}

func (v painted) Init() tea.Cmd {
	defer v.keep()
	return v.m.Init()
}

// keep records a panic on its way to Bubble Tea, which ends the program.
func (v painted) keep() {
	if r := recover(); r != nil {
		*v.crash = fmt.Sprintf("%v\n%s", r, debug.Stack())
		panic(r)
	}
}

func (v painted) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	defer v.keep()
	if s, ok := msg.(tea.WindowSizeMsg); ok {
		v.p.Resize(s.Width, s.Height) // before the frame drawn for the new size
	}
	var cmd tea.Cmd
	v.m, cmd = v.m.Update(msg)
	return v, cmd
}

func (v painted) View() string {
	defer v.keep()
	v.p.Offer(v.m.View())
	return ""
}
