package tui

import (
	"context"
	"errors"

	tea "github.com/charmbracelet/bubbletea"
)

// Run shows the console in the alternate screen until the operator quits
// or ctx is done; either way it returns nil. Errors are a bad option (an
// unknown theme or colour) or a terminal that cannot be driven.
func Run(ctx context.Context, src Source, o Options) error {
	// 30 frames a second is plenty for a display that changes at most
	// every 250 ms, and halves the renderer's idle ticking.
	return run(ctx, src, o, tea.WithAltScreen(), tea.WithFPS(30))
}

// run is Run with program options (tests give it a pipe for a terminal).
func run(ctx context.Context, src Source, o Options, opts ...tea.ProgramOption) error {
	m, err := New(src, o)
	if err != nil {
		return err
	}
	// ctx ends the program by a Quit, not by bubbletea's WithContext: the
	// latter kills the program, closing the terminal while its input
	// reader still reads it (a data race in bubbletea's teardown, seen
	// under -race); Quit takes the same orderly path as the q key.
	p := tea.NewProgram(m, opts...)
	stop := context.AfterFunc(ctx, p.Quit)
	defer stop()
	_, err = p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}
