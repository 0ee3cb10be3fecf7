package decisions

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
		pos     int64 // next byte to read from f (gzip: the next member's start)
		sp      = splitter{max: s.maxLine}
		buf     = make([]byte, 64<<10)
		first   = true
		lastErr string // the last open/read problem reported: say it once
		// wait is the next pause at the file's end: Poll after a read that
		// found bytes, doubling up to IdlePoll while none come (an idle
		// router's log costs one wake a second, not five).
		wait = s.poll
		// gz reads the open file as gzip members (a name ending in .gz).
		gz *gzTail
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
		if gz != nil {
			var ok bool
			pos, ok = gz.drain(ctx, s, f, pos, &sp, emit)
			return ok
		}
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
			gz = nil
			if isGzipName(f.Name()) {
				// Compressed offsets say nothing of lines: read from the
				// first member, with the start-up window applied to whole
				// members (gzTail).
				gz = newGzTail(end, start)
				pos, s.backfillEnd = 0, 0
				sp.reset(0, true, false)
			} else {
				sp.reset(start, start == 0, start > 0 && !afterNewline(f, start))
			}
		}
		from := pos
		if !drain() {
			return
		}
		st, err := f.Stat()
		if err == nil && st.Size() < pos {
			// Truncated in place (copytruncate): everything is new again.
			s.backfillEnd = 0 // everything in it now was written since
			if gz != nil {
				gz.restart()
			}
			if _, err := f.Seek(0, io.SeekStart); err == nil {
				pos = 0
				sp.reset(0, true, false)
				continue
			}
		}
		path := s.Path
		if s.series != "" {
			// A series of Dynamo segments: the open one until it stops
			// growing, then the newest.
			path = f.Name()
			if pos == from {
				path = s.resolve()
			}
		}
		if cur, err := os.Stat(path); err == nil && (st == nil || !os.SameFile(st, cur)) {
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
	f, err = os.Open(s.resolve())
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

// Dynamo's gzip trace sink writes segments <prefix>.<index, 6 digits>.jsonl.gz
// (prefix: the configured path without .jsonl.gz or .jsonl) and moves to the
// next index when one fills up or a new writer starts.
var segmentRe = regexp.MustCompile(`^(.+)\.[0-9]{6,}\.jsonl\.gz$`)

// seriesPrefix is the segment prefix a source follows, or "" when it
// follows its one path: a Dynamo trace source (format dynamo-trace, or a
// path ending in .jsonl.gz) may name the sink's path or any segment.
func seriesPrefix(path, format string) string {
	if m := segmentRe.FindStringSubmatch(path); m != nil {
		return m[1]
	}
	if format != FormatDynamoTrace && !strings.HasSuffix(path, ".jsonl.gz") {
		return ""
	}
	for _, ext := range []string{".jsonl.gz", ".jsonl"} {
		if p, ok := strings.CutSuffix(path, ext); ok {
			return p
		}
	}
	return path
}

// resolve is the file to follow now: the configured path, or for a series
// the file there when it is not a segment name, else the newest segment
// (the path itself when there is none, so the source waits for it).
func (s *source) resolve() string {
	if s.series == "" {
		return s.Path
	}
	if !segmentRe.MatchString(s.Path) {
		if _, err := os.Stat(s.Path); err == nil {
			return s.Path
		}
	}
	dir, base := filepath.Split(s.series)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return s.Path
	}
	best, bestN := "", ""
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, base+".")
		if !ok {
			continue
		}
		n, ok := strings.CutSuffix(rest, ".jsonl.gz")
		if !ok || len(n) < 6 || strings.Trim(n, "0123456789") != "" {
			continue
		}
		if len(n) > len(bestN) || len(n) == len(bestN) && n > bestN {
			best, bestN = name, n
		}
	}
	if best == "" {
		return s.Path
	}
	return filepath.Join(dir, best)
}

func isGzipName(path string) bool { return strings.HasSuffix(path, ".gz") }

// gzTail reads a growing gzip file member by member. Dynamo's gzip sink
// appends one whole gzip member per flush (write, finish, flush), so every
// member that is complete on disk holds whole lines and will not change:
// those are read; a member still being written (its end not on disk yet)
// is left for the next poll and read again from its start. A gzip file
// written as one stream that grows (gzip -c of a live pipe) is therefore
// read only once it is finished. Members are inflated in memory, at most
// maxGzipMember bytes each.
type gzTail struct {
	startEnd int64 // size at start-up (members before it are history); 0 later
	from     int64 // members starting before this are read but not handed out (backfill window)
	zr       *gzip.Reader
	buf      bytes.Buffer
	reported int64 // the corrupt member last reported
}

// maxGzipMember bounds one member's inflated size (Dynamo flushes at 1 MiB).
const maxGzipMember = 64 << 20

func newGzTail(end, start int64) *gzTail {
	return &gzTail{startEnd: end, from: start, reported: -1}
}

// restart: the file was truncated; all it holds now is new.
func (g *gzTail) restart() { g.startEnd, g.from = 0, 0 }

// drain reads every complete member from pos to the file's end and hands
// their lines to sp; it returns the offset after the last complete member,
// and false when ctx is done.
func (g *gzTail) drain(ctx context.Context, s *source, f *os.File, pos int64, sp *splitter, emit func(lineRef) bool) (int64, bool) {
	st, err := f.Stat()
	if err != nil || st.Size() <= pos {
		return pos, ctx.Err() == nil
	}
	base := pos
	cr := &countingReader{r: io.NewSectionReader(f, pos, st.Size()-pos)}
	br := bufio.NewReaderSize(cr, 64<<10)
	quiet := func(lineRef) bool { return true }
	for {
		start := pos
		err := g.member(br)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return pos, ctx.Err() == nil // nothing more, or a member not whole yet
			}
			// Corrupt: say where, once, and go on from the file's end
			// (the writer appends whole members after it).
			if g.reported != start {
				g.reported = start
				s.sourceError(ctx, "decode", "gzip member at byte "+itoa(start)+" cannot be read ("+gzipReason(err)+"); skipped to the end of the file")
			}
			sp.reset(0, false, false)
			return st.Size(), ctx.Err() == nil
		}
		pos = base + cr.n - int64(br.Buffered()) // gzip reads a bufio.Reader no further than its member
		data := g.buf.Bytes()
		fn := emit
		if start < g.from {
			fn = quiet // before the start-up window: counted as lines, not handed out
		}
		s.backfillAll = start < g.startEnd
		ok := sp.feed(data, fn)
		s.backfillAll = false
		if !ok {
			return pos, false
		}
	}
}

// member inflates one member from br into g.buf.
func (g *gzTail) member(br *bufio.Reader) error {
	var err error
	if g.zr == nil {
		g.zr, err = gzip.NewReader(br)
	} else {
		err = g.zr.Reset(br)
	}
	if err != nil {
		return err
	}
	g.zr.Multistream(false)
	g.buf.Reset()
	n, err := g.buf.ReadFrom(io.LimitReader(g.zr, maxGzipMember+1))
	if err != nil {
		return err
	}
	if n > maxGzipMember {
		return errors.New("a member inflates to more than " + itoa(maxGzipMember) + " bytes")
	}
	return nil
}

func gzipReason(err error) string {
	switch {
	case errors.Is(err, gzip.ErrHeader):
		return "not gzip"
	case errors.Is(err, gzip.ErrChecksum):
		return "checksum mismatch"
	}
	var ce flate.CorruptInputError
	if errors.As(err, &ce) {
		return "corrupt deflate data"
	}
	return err.Error()
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
