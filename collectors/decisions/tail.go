package decisions

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"
)

// testHookPause, when set (tests only, before Run), is told each pause of
// a followed file.
var testHookPause func(time.Duration)

// follow tails one file like `tail -F`, polling: it starts with the last
// Backfill bytes of a file that exists when it starts (a file that appears
// later, or replaces a rotated one, is read from its start), waits for
// partial lines to end, reopens the path when another file takes its place
// (after draining the old one), and restarts from byte 0 when the file
// shrinks (copytruncate). It returns when ctx is done.
func (s *source) follow(ctx context.Context) {
	var (
		f       *os.File
		pos     int64 // next byte to read from f
		sp      = splitter{max: s.maxLine}
		buf     = make([]byte, 64<<10)
		first   = true
		lastErr string // the last open/read problem reported: say it once
		// wait is the next pause at the file's end: Poll after a read that
		// found bytes, doubling up to IdlePoll while none come (an idle
		// router's log costs one wake a second, not five).
		wait = s.poll
	)
	pause := func(grew bool) bool {
		if grew {
			wait = s.poll
		} else {
			wait = min(2*wait, s.idlePoll)
		}
		if testHookPause != nil {
			testHookPause(wait)
		}
		return s.flush(ctx) && sleep(ctx, wait)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	emit := func(l lineRef) bool { return s.handle(ctx, l) }
	// drain reads f to its current end; false when ctx is done.
	drain := func() bool {
		for {
			n, err := f.Read(buf)
			if n > 0 {
				pos += int64(n)
				if !sp.feed(buf[:n], emit) {
					return false
				}
				continue
			}
			if err != nil && !errors.Is(err, io.EOF) {
				if msg := "read failed: " + osReason(err); msg != lastErr {
					lastErr = msg
					s.sourceError(ctx, "config", msg)
				}
			}
			return ctx.Err() == nil
		}
	}
	for ctx.Err() == nil {
		if f == nil {
			opened, start, end, err := s.open(first)
			first = false
			if err != nil {
				s.setWaiting(true)
				if msg := "cannot open (" + osReason(err) + "); waiting for it"; msg != lastErr {
					lastErr = msg
					s.sourceError(ctx, "config", msg)
				}
				if !pause(false) {
					return
				}
				continue
			}
			lastErr = ""
			f, pos = opened, start
			s.backfillEnd = end
			s.setWaiting(false)
			if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
				// A FIFO or device has no size or rotation: read it as a stream.
				s.readStream(ctx, f)
				return
			}
			sp.reset(start, start == 0, start > 0 && !afterNewline(f, start))
		}
		from := pos
		if !drain() {
			return
		}
		st, err := f.Stat()
		if err == nil && st.Size() < pos {
			// Truncated in place (copytruncate): everything is new again.
			s.backfillEnd = 0 // everything in it now was written since
			if _, err := f.Seek(0, io.SeekStart); err == nil {
				pos = 0
				sp.reset(0, true, false)
				continue
			}
		}
		if cur, err := os.Stat(s.Path); err == nil && (st == nil || !os.SameFile(st, cur)) {
			// Another file is at the path now: finish the old one (its
			// writer has moved on, so a last unterminated line is whole),
			// then read the new one from its start.
			if !drain() || !sp.flush(emit) {
				return
			}
			f.Close()
			f = nil
			s.backfillEnd = 0
			continue
		}
		// A missing path keeps the old file followed: its writer may still
		// be appending until it reopens.
		if !pause(pos != from) {
			return
		}
	}
}

// open opens the path. At start-up the read begins Backfill bytes before
// the end, and end is the size found (what lies before it is history);
// otherwise both are 0.
func (s *source) open(startup bool) (f *os.File, start, end int64, err error) {
	f, err = os.Open(s.Path)
	if err != nil {
		return nil, 0, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	if startup && st.Mode().IsRegular() {
		end = st.Size()
		start = max(0, end-s.backfill)
		if s.backfill < 0 {
			start = end
		}
	}
	if start > 0 {
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			f.Close()
			return nil, 0, 0, err
		}
	}
	return f, start, end, nil
}

// afterNewline reports whether byte start-1 of f is a newline, i.e. the
// backfill window begins on a whole line. The file offset is unchanged.
func afterNewline(f *os.File, start int64) bool {
	var b [1]byte
	n, err := f.ReadAt(b[:], start-1)
	return n == 1 && err == nil && b[0] == '\n'
}

// readStream reads a stream (stdin) to its end. Reads happen in a helper
// goroutine so that a blocked read never outlives ctx for the sender: only
// this goroutine sends observations.
func (s *source) readStream(ctx context.Context, r io.Reader) {
	type chunk struct {
		b   []byte
		err error
	}
	chunks := make(chan chunk, 4)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 64<<10)
			n, err := r.Read(buf)
			if n == 0 && err == nil {
				continue
			}
			select {
			case chunks <- chunk{buf[:n], err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	sp := splitter{max: s.maxLine, absolute: true}
	emit := func(l lineRef) bool { return s.handle(ctx, l) }
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	if !s.flush(ctx) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !s.flush(ctx) {
				return
			}
		case c, ok := <-chunks:
			if !ok {
				return // only after ctx is done
			}
			if len(c.b) > 0 && !sp.feed(c.b, emit) {
				return
			}
			if c.err == nil {
				continue
			}
			if !errors.Is(c.err, io.EOF) {
				s.sourceError(ctx, "config", "read failed: "+osReason(c.err))
			}
			sp.flush(emit) // the stream ended: its last line is whole
			s.report(ctx, time.Now(), true)
			<-ctx.Done()
			return
		}
	}
}

// osReason is an OS error without the path (the source already names it).
func osReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
