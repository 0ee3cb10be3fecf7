package paint

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// screen is a terminal as far as a Painter drives one: cursor moves, erase
// to the end of the line and of the display, text without autowrap (the
// console turns it off). It fails the test on any other sequence, so a
// sequence added to the Painter must be added here, knowingly.
type screen struct {
	t      *testing.T
	w, h   int
	rows   [][]rune
	cy, cx int
}

func newScreen(t *testing.T, w, h int) *screen {
	s := &screen{t: t, w: w, h: h}
	s.rows = make([][]rune, h)
	for i := range s.rows {
		s.rows[i] = []rune(strings.Repeat(" ", w))
	}
	return s
}

var seq = regexp.MustCompile(`^\x1b\[(\d*)(?:;(\d+))?([HKJm])`)

func (s *screen) Write(b []byte) (int, error) {
	for rest := string(b); rest != ""; {
		if m := seq.FindStringSubmatch(rest); m != nil {
			rest = rest[len(m[0]):]
			switch m[3] {
			case "H":
				r, _ := strconv.Atoi(m[1])
				c, _ := strconv.Atoi(m[2])
				s.cy, s.cx = min(max(r, 1), s.h)-1, min(max(c, 1), s.w)-1
			case "K":
				s.erase(s.cy, min(s.cx, s.w-1))
			case "J":
				s.erase(s.cy, min(s.cx, s.w-1))
				for r := s.cy + 1; r < s.h; r++ {
					s.erase(r, 0)
				}
			case "m": // colours do not move anything
			}
			continue
		}
		if rest[0] == 0x1b || rest[0] == '\n' || rest[0] == '\r' {
			s.t.Fatalf("the painter wrote %q, which the test screen does not know", rest[:min(len(rest), 8)])
		}
		r := []rune(rest[:min(len(rest), 4)])[0]
		rest = rest[len(string(r)):]
		// Without autowrap, text past the edge overwrites the last column,
		// and the cursor stays there (so erasing takes that column too).
		s.rows[s.cy][min(s.cx, s.w-1)] = r
		s.cx = min(s.cx+1, s.w)
	}
	return len(b), nil
}

func (s *screen) erase(r, from int) {
	for c := from; c < s.w; c++ {
		s.rows[r][c] = ' '
	}
}

func (s *screen) String() string {
	out := make([]string, s.h)
	for i, r := range s.rows {
		out[i] = strings.TrimRight(string(r), " ")
	}
	return strings.TrimRight(strings.Join(out, "\n"), "\n")
}

// want is what a frame looks like on a w-wide screen: lines cut at the
// edge, trailing blanks not shown.
func want(frame string, w, h int) string {
	lines := strings.Split(ansi.Strip(frame), "\n")
	if len(lines) > h {
		lines = lines[len(lines)-h:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(ansi.Truncate(l, w, ""), " ")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// recorder keeps what was written to the screen, write by write.
type recorder struct {
	mu     sync.Mutex
	s      *screen
	writes []string
	wrote  chan struct{}
}

func newRecorder(t *testing.T, w, h int) *recorder {
	return &recorder{s: newScreen(t, w, h), wrote: make(chan struct{}, 1000)}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(b))
	r.wrote <- struct{}{}
	return r.s.Write(b)
}

func (r *recorder) last() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes[len(r.writes)-1], len(r.writes)
}

func (r *recorder) waitWrite(t *testing.T) {
	t.Helper()
	select {
	case <-r.wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing was painted")
	}
}

func frame(rows ...string) string { return strings.Join(rows, "\n") }

// TestPaintsWhatChanged: a frame in which only the clock moved costs one
// line on the wire, an unchanged frame nothing, and the screen shows the
// frame after each (what an operator over a slow SSH link pays for).
func TestPaintsWhatChanged(t *testing.T) {
	const w, h = 40, 6
	r := newRecorder(t, w, h)
	p := New(r)
	defer p.Close()
	p.Resize(w, h)
	f1 := frame("kvtop  pool  12:00:01", "WORKER  QUEUE", "w0      3", "w1      0", "", "q quit")
	p.Offer(f1)
	p.Close() // paints what is pending
	if got := r.s.String(); got != want(f1, w, h) {
		t.Fatalf("first frame on screen:\n%s\nwant:\n%s", got, want(f1, w, h))
	}

	// Again, with a fresh Painter, watching each write.
	r = newRecorder(t, w, h)
	p = New(r)
	defer p.Close()
	p.Resize(w, h)
	p.Offer(f1)
	r.waitWrite(t)
	_, n := r.last()
	f2 := strings.Replace(f1, "12:00:01", "12:00:02", 1)
	p.Offer(f2)
	r.waitWrite(t)
	wr, n2 := r.last()
	if n2 != n+1 {
		t.Fatalf("%d writes for one changed frame, want 1", n2-n)
	}
	if strings.Contains(wr, "WORKER") || !strings.Contains(wr, "12:00:02") || len(wr) > len("kvtop  pool  12:00:02")+24 {
		t.Errorf("a changed clock wrote %d bytes %q: want only the header line", len(wr), wr)
	}
	p.Offer(f2) // the cached frame, offered after the next message
	p.Offer(strings.Clone(f2))
	time.Sleep(50 * time.Millisecond)
	if _, n3 := r.last(); n3 != n2 {
		t.Errorf("an unchanged frame was painted again (%d writes)", n3-n2)
	}
	p.Close()
	if got := r.s.String(); got != want(f2, w, h) {
		t.Errorf("screen:\n%s\nwant:\n%s", got, want(f2, w, h))
	}
}

// TestPaintShrinkGrowResize: lines a shorter frame no longer has are
// erased, a resize redraws all (the terminal has reflowed what it shows),
// and lines wider than the screen are cut, never wrapped.
func TestPaintShrinkGrowResize(t *testing.T) {
	r := newRecorder(t, 30, 8)
	p := New(r)
	p.Resize(30, 8)
	steps := []string{
		frame("header", "a", "b", "c", "d", "footer"),
		frame("header", "a", "footer"), // fewer rows: b, c, d must go
		frame("header", "a", "b", "c", "d", "e", "f", "footer"),
		frame("header \x1b[1mbold\x1b[0m", strings.Repeat("abcdefghij", 5)+"Z", "footer"), // too wide
	}
	for _, f := range steps {
		p.Offer(f)
		r.waitWrite(t)
		for len(r.wrote) > 0 {
			<-r.wrote
		}
		time.Sleep(20 * time.Millisecond) // let a coalesced paint land
		r.mu.Lock()
		got := r.s.String()
		r.mu.Unlock()
		if got != want(f, 30, 8) {
			t.Fatalf("after %q the screen is\n%s\nwant:\n%s", f, got, want(f, 30, 8))
		}
	}

	// The terminal is now 20x4 and shows something else (its reflow): a
	// resize repaints every row, though the frame did not change.
	r.mu.Lock()
	r.s = newScreen(t, 20, 4)
	for i := range r.s.rows {
		copy(r.s.rows[i], []rune("reflowed garbage !!!"))
	}
	r.mu.Unlock()
	last := steps[len(steps)-1]
	p.Resize(20, 4)
	p.Offer(last)
	r.waitWrite(t)
	p.Close()
	if got := r.s.String(); got != want(last, 20, 4) {
		t.Errorf("after the resize:\n%s\nwant:\n%s", got, want(last, 20, 4))
	}
	// A frame taller than the screen keeps its bottom, as Bubble Tea does.
	r = newRecorder(t, 20, 3)
	p = New(r)
	p.Resize(20, 3)
	p.Offer(frame("1", "2", "3", "4", "5"))
	p.Close()
	if got := r.s.String(); got != "3\n4\n5" {
		t.Errorf("a 5-line frame on 3 rows shows\n%s\nwant 3, 4, 5", got)
	}
}

// blockedWriter is a terminal that stops reading (a stalled SSH link)
// until released.
type blockedWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
}

func (b *blockedWriter) Write(p []byte) (int, error) {
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes++
	return b.buf.Write(p)
}

// TestSlowTerminalCoalesces: while the terminal does not read, Offer does
// not block the model, and once it reads again only the newest frame is
// painted, not the backlog.
func TestSlowTerminalCoalesces(t *testing.T) {
	bw := &blockedWriter{release: make(chan struct{})}
	p := New(bw)
	p.Resize(40, 5)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			p.Offer(fmt.Sprintf("frame %d", i))
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Offer blocked on a terminal that does not read")
	}
	close(bw.release)
	p.Close()
	bw.mu.Lock()
	defer bw.mu.Unlock()
	if bw.writes > 2 {
		t.Errorf("%d paints for 1000 frames offered to a stalled terminal, want at most 2", bw.writes)
	}
	if !strings.Contains(bw.buf.String(), "frame 999") {
		t.Errorf("the newest frame was not painted: %q", bw.buf.String())
	}
	p.Offer("after close") // must not panic or write
}

// TestCursorRestsOnLastLine: after every paint the cursor is at the start
// of the frame's last line, whichever lines changed. tmux (3.3) resizes
// the alternate screen around the cursor; with the cursor left after a
// changed row mid-screen, growing the terminal and then quitting left
// those rows of the console on the shell's screen.
func TestCursorRestsOnLastLine(t *testing.T) {
	r := newRecorder(t, 30, 10)
	p := New(r)
	defer p.Close()
	p.Resize(30, 10)
	for i, f := range []string{
		frame("h", "a", "b", "c", "footer"),
		frame("h", "a", "B", "c", "footer"),  // only row 3 changes
		frame("h2", "a", "B", "c", "footer"), // only the header
		frame("h2", "a"),                     // shorter
	} {
		p.Offer(f)
		r.waitWrite(t)
		r.mu.Lock()
		cy, cx := r.s.cy, r.s.cx
		r.mu.Unlock()
		if last := strings.Count(f, "\n"); cy != last || cx != 0 {
			t.Errorf("frame %d: cursor at row %d col %d, want row %d col 0", i, cy+1, cx+1, last+1)
		}
	}
}
