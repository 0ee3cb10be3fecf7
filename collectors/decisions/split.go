package decisions

import "bytes"

// lineRef is one line cut from a stream.
type lineRef struct {
	data     []byte // without the newline; nil when tooLong
	no       int64  // 1-based line number since the splitter's start
	off      int64  // byte offset of the line's first byte
	absolute bool   // no counts from the start of the file
	tooLong  bool   // longer than the cap: dropped up to its newline
}

// where names the line for an error message without quoting it.
func (l lineRef) where() string {
	if l.absolute {
		return "line " + itoa(l.no)
	}
	return "byte " + itoa(l.off)
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// splitter cuts a byte stream into lines. A partial last line waits in buf
// for its newline; a line longer than max is reported once (tooLong) and
// then skipped up to its newline without holding it in memory.
type splitter struct {
	buf        []byte
	max        int
	discarding bool // inside a too-long (or backfill's cut-off first) line
	no         int64
	off        int64 // offset of buf[0] (or of the discarded bytes' end)
	absolute   bool
}

// reset starts over at byte off of a stream. skipFirst drops everything up
// to the first newline silently: the backfill window cut that line.
func (s *splitter) reset(off int64, absolute, skipFirst bool) {
	s.buf = s.buf[:0]
	s.no = 0
	s.off = off
	s.absolute = absolute
	s.discarding = skipFirst
}

// feed consumes p and calls fn for every complete line; it stops early and
// returns false when fn does.
func (s *splitter) feed(p []byte, fn func(lineRef) bool) bool {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if s.discarding {
			if i < 0 {
				s.off += int64(len(p))
				return true
			}
			s.off += int64(i + 1)
			p = p[i+1:]
			s.discarding = false
			continue
		}
		if i < 0 {
			if len(s.buf)+len(p) > s.max {
				s.no++
				ref := lineRef{no: s.no, off: s.off, absolute: s.absolute, tooLong: true}
				s.off += int64(len(s.buf) + len(p))
				s.buf = s.buf[:0]
				s.discarding = true
				return fn(ref)
			}
			s.buf = append(s.buf, p...)
			return true
		}
		line := p[:i]
		if len(s.buf) > 0 {
			s.buf = append(s.buf, line...)
			line = s.buf
		}
		p = p[i+1:]
		if !s.emit(line, fn) {
			return false
		}
	}
	return true
}

// flush hands out a final line that has no newline (end of stdin, or a
// rotated file the writer has left).
func (s *splitter) flush(fn func(lineRef) bool) bool {
	if s.discarding || len(s.buf) == 0 {
		s.discarding = false
		return true
	}
	return s.emit(s.buf, fn)
}

func (s *splitter) emit(line []byte, fn func(lineRef) bool) bool {
	s.no++
	ref := lineRef{data: line, no: s.no, off: s.off, absolute: s.absolute}
	if len(line) > s.max {
		ref.data, ref.tooLong = nil, true
	}
	s.off += int64(len(line) + 1)
	ok := fn(ref)
	if cap(s.buf) > 64<<10 {
		s.buf = nil // don't pin a long line's memory
	} else {
		s.buf = s.buf[:0]
	}
	return ok
}
