package paint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/charmbracelet/x/term"
)

// The terminal a console paints on, set up as Bubble Tea's renderer did
// (the alternate screen, cleared, the cursor hidden, bracketed paste on)
// and with autowrap off.
//   - Bracketed paste marks pasted text, so a paste (a worker name copied
//     from a log) is not taken for keys: a "q" in it would quit.
//   - Without autowrap a line painted for a wider screen than the terminal
//     has become (a frame painted between a resize and its SIGWINCH) is
//     cut at the edge instead of wrapping, and the screen never scrolls.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l\x1b[?2004h\x1b[?7l" + clearScreen
	leaveScreen = "\x1b[?7h\x1b[?2004l\x1b[?25h\x1b[?1049l"
)

// Terminal holds a terminal for a full-screen console: input in raw mode
// (keys arrive one by one, unechoed), the alternate screen, a hidden
// cursor. Close gives all of it back.
type Terminal struct {
	in, out *os.File
	state   *term.State // in's mode before, nil if in is not a terminal
}

// Open takes over the terminal on in and out. out must be a terminal; in
// is put in raw mode if it is one.
func Open(in, out *os.File) (*Terminal, error) {
	if !term.IsTerminal(out.Fd()) {
		return nil, errors.New("the console's output is not a terminal")
	}
	t := &Terminal{in: in, out: out}
	if term.IsTerminal(in.Fd()) {
		st, err := term.MakeRaw(in.Fd())
		if err != nil {
			return nil, fmt.Errorf("terminal raw mode: %w", err)
		}
		t.state = st
	}
	if _, err := out.WriteString(enterScreen); err != nil {
		_ = t.restore()
		return nil, fmt.Errorf("terminal: %w", err)
	}
	return t, nil
}

// Size is the terminal's size in cells.
func (t *Terminal) Size() (w, h int, err error) { return term.GetSize(t.out.Fd()) }

// WatchSize calls f with the terminal's size now and after each resize
// (SIGWINCH) until ctx is done.
func (t *Terminal) WatchSize(ctx context.Context, f func(w, h int)) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	defer signal.Stop(ch)
	for {
		if w, h, err := t.Size(); err == nil {
			f(w, h)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// Close shows the cursor, leaves the alternate screen (the shell's screen
// comes back as it was) and restores the input's mode.
func (t *Terminal) Close() error {
	_, err := t.out.WriteString(leaveScreen)
	return errors.Join(err, t.restore())
}

func (t *Terminal) restore() error {
	if t.state == nil {
		return nil
	}
	return term.Restore(t.in.Fd(), t.state)
}
