// Package paint draws a console's frames on a terminal, and only when they
// change. Bubble Tea v1's renderer redraws from a ticker (30 Hz for kvtop)
// whether or not anything changed, and those wakes were a third of an idle
// console's CPU; its renderer cannot be replaced or paused. A Painter has
// no ticker: a new frame wakes one goroutine, which writes only the lines
// that differ from the frame on screen. Frames offered faster than the
// terminal takes them (a slow SSH link) are coalesced to the newest, so a
// slow terminal never holds up the model.
package paint

import (
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/charmbracelet/x/ansi"
)

// The escape sequences a Painter and a Terminal write (ECMA-48 / xterm).
const (
	clearScreen = "\x1b[H\x1b[2J" // home, erase the display (Terminal, on entering)
	eraseRight  = "\x1b[K"        // erase to the end of the line
	eraseBelow  = "\x1b[J"        // erase from the cursor to the end of the display
)

// Painter paints frames (lines separated by "\n") at the top left of a
// screen of the size last given to Resize. Offer, Resize and Close may be
// called from any goroutine.
type Painter struct {
	out io.Writer

	mu      sync.Mutex
	next    string // the newest frame offered
	w, h    int
	full    bool // the next paint rewrites every row (a resize)
	pending bool // next has not been painted
	closed  bool
	wake    chan struct{} // one token: there is something to paint
	done    chan struct{}

	// Owned by the painting goroutine.
	shown []string // the lines on screen, as offered (before truncation)
	buf   []byte
}

// New starts a Painter writing to out, a terminal whose screen is clear
// (the alternate screen just entered).
func New(out io.Writer) *Painter {
	p := &Painter{out: out, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.loop()
	return p
}

// Offer hands the Painter the frame to show. It never blocks: a frame
// equal to the last one offered costs a comparison (the console's cached
// frame is the same string, found equal at once), and one offered while
// the previous one is being written replaces it unpainted.
func (p *Painter) Offer(frame string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || (frame == p.next && !p.full) {
		return
	}
	p.next = frame
	p.signal()
}

// Resize tells the Painter the screen's new size. The next paint redraws
// everything: a terminal reflows or crops what it shows on a resize, so
// the lines on screen are no longer known.
func (p *Painter) Resize(w, h int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.w, p.h, p.full = w, h, true
	p.signal()
}

// signal marks work pending and wakes the painting goroutine; p.mu held.
func (p *Painter) signal() {
	p.pending = true
	select {
	case p.wake <- struct{}{}:
	default: // a wake is already queued; it will take the newest frame
	}
}

// Close paints the newest frame if it is not on screen yet, and stops.
// Nothing is written after Close returns.
func (p *Painter) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.wake)
	}
	p.mu.Unlock()
	<-p.done
}

func (p *Painter) loop() {
	defer close(p.done)
	for range p.wake {
		p.mu.Lock()
		if !p.pending {
			p.mu.Unlock()
			continue
		}
		frame, w, h, full := p.next, p.w, p.h, p.full
		p.pending, p.full = false, false
		p.mu.Unlock()
		p.paint(frame, w, h, full)
	}
}

// paint writes what differs between the lines on screen and frame, in one
// write. Lines are placed by absolute cursor position, so no newline is
// ever written and the screen cannot scroll.
func (p *Painter) paint(frame string, w, h int, full bool) {
	lines := strings.Split(frame, "\n")
	if h > 0 && len(lines) > h {
		lines = lines[len(lines)-h:] // as Bubble Tea does: the bottom stays
	}
	b := p.buf[:0]
	for i, l := range lines {
		if !full && i < len(p.shown) && p.shown[i] == l {
			continue
		}
		b = moveTo(b, i)
		if w > 0 {
			l = ansi.Truncate(l, w, "")
		}
		b = append(b, l...)
		// A line as wide as the screen leaves the cursor in the last
		// column, where erasing would take the line's last character.
		if w <= 0 || ansi.StringWidth(l) < w {
			b = append(b, eraseRight...)
		}
	}
	// Erase below the frame, unless it fills the screen: the cursor
	// cannot go below the last row, so that would erase the last line.
	if (full || len(lines) < len(p.shown)) && (h <= 0 || len(lines) < h) {
		b = moveTo(b, len(lines))
		b = append(b, eraseBelow...)
	}
	p.shown = lines
	if len(b) > 0 {
		// The cursor rests on the frame's last line, where Bubble Tea's
		// renderer leaves it. tmux (3.3) resizes the alternate screen
		// around the cursor: with it resting mid-screen, a resize and then
		// quitting left lines of the console on the shell's screen.
		b = moveTo(b, len(lines)-1)
		_, _ = p.out.Write(b) // a terminal gone away ends the program elsewhere
	}
	p.buf = b
}

// moveTo appends the cursor move to the start of row (0-based).
func moveTo(b []byte, row int) []byte {
	b = append(b, "\x1b["...)
	b = strconv.AppendInt(b, int64(row+1), 10)
	return append(b, ";1H"...)
}
