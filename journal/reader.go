package journal

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadStats is what a Reader found, and where and why it stopped.
type ReadStats struct {
	Frames       uint64 // frames read whole with a good checksum
	Observations uint64
	Ticks        uint64
	Bytes        int64  // bytes of good frames, headers and magic included
	Unknown      uint64 // frames of a kind this kvtop does not know (a newer recorder): skipped
	Lost         uint64 // observations the recorder could not write (the disk fell behind)
	Unencoded    uint64 // observations of a type the recorder could not encode
	// Ended: the last segment read ends with the recorder's end marker
	// (it closed the file). A file without one was still being written or
	// its recorder did not stop cleanly; either way what it holds is good.
	Ended bool
	// Stop says why reading stopped before the end of a file: a torn or
	// corrupt frame, with the file and byte offset, and how many bytes
	// were skipped. "" when every file was read to its end.
	Stop string
}

// Reader reads one recording's records in order: one segment file, or
// several consecutive segments of the same run. It stops cleanly at the
// first frame that is torn (a crash while writing) or corrupt, and says
// where in Stats; the records before it are all good.
type Reader struct {
	paths []string
	hdrs  []Header
	seg   int // index of the open segment
	open  opener
	f     io.ReadCloser
	br    *bufio.Reader
	off   int64 // offset of the next frame in the open file
	size  int64 // the open file's size when opened
	dec   *decoder
	body  []byte
	// skipObs leaves observation payloads undecoded (an index pass).
	skipObs bool
	stats   ReadStats
	done    bool
}

// Open opens the segments paths (oldest first) of one recording. Their
// headers must name the same run with consecutive segment numbers. The
// first file's problems (missing, not a journal, a later format) are
// errors; so are a chain's mismatches.
func Open(paths ...string) (*Reader, error) { return openWith(openFile, paths...) }

// opener opens a segment: its bytes and its size.
type opener func(path string) (io.ReadCloser, int64, error)

func openFile(path string) (io.ReadCloser, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

func openWith(open opener, paths ...string) (*Reader, error) {
	if len(paths) == 0 {
		return nil, errors.New("no journal file")
	}
	r := &Reader{paths: paths, open: open}
	for i, p := range paths {
		h, err := readHeaderWith(open, p)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			prev := r.hdrs[i-1]
			if h.Run != prev.Run || h.Segment != prev.Segment+1 {
				return nil, fmt.Errorf("%s (run %s, segment %d) does not follow %s (run %s, segment %d)",
					p, h.Run, h.Segment, paths[i-1], prev.Run, prev.Segment)
			}
		}
		r.hdrs = append(r.hdrs, h)
	}
	if err := r.openSegment(0); err != nil {
		return nil, err
	}
	return r, nil
}

// Header is the first segment's header.
func (r *Reader) Header() Header { return r.hdrs[0] }

// Headers are every segment's, in order.
func (r *Reader) Headers() []Header { return r.hdrs }

// Paths are the segments read, oldest first.
func (r *Reader) Paths() []string { return r.paths }

// Stats is what was read so far.
func (r *Reader) Stats() ReadStats { return r.stats }

// Close closes the open file.
func (r *Reader) Close() error {
	r.done = true
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// ReadHeader reads a journal file's magic and header.
func ReadHeader(path string) (Header, error) { return readHeaderWith(openFile, path) }

func readHeaderWith(open opener, path string) (Header, error) {
	f, _, err := open(path)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	h, _, err := readHead(bufio.NewReader(f), path)
	return h, err
}

// readHead reads the magic and the header frame; n is the bytes read.
func readHead(br *bufio.Reader, path string) (h Header, n int64, err error) {
	magic := make([]byte, len(Magic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != Magic {
		return h, 0, formatError("%s does not start with %q", path, Magic)
	}
	body, fn, err := readFrame(br, nil, 1<<20)
	if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
		return h, 0, formatError("%s: the header is cut short", path)
	}
	if err != nil {
		return h, 0, formatError("%s: header: %v", path, err)
	}
	if len(body) < 2 || body[0] != tagHeader {
		return h, 0, formatError("%s: the first frame is not a header", path)
	}
	_, vn := binary.Varint(body[1:])
	if vn <= 0 {
		return h, 0, formatError("%s: header: bad time", path)
	}
	if err := json.Unmarshal(body[1+vn:], &h); err != nil {
		return h, 0, formatError("%s: header: %v", path, err)
	}
	if h.Format > FormatVersion || h.Format < 1 {
		return h, 0, formatError("%s is journal format %d; this kvtop reads format %d (upgrade kvtop)", path, h.Format, FormatVersion)
	}
	return h, int64(len(Magic)) + fn, nil
}

// readFrame reads one frame into buf (grown as needed); n is its size on
// disk. A frame longer than left (what the file holds past its start) is
// torn; one longer than maxFrame corrupt. io.EOF: none started;
// io.ErrUnexpectedEOF: torn.
func readFrame(br *bufio.Reader, buf []byte, left int64) (body []byte, n int64, err error) {
	var sz uint64
	var shift uint
	for i := 0; ; i++ {
		b, err := br.ReadByte()
		if err != nil {
			if i == 0 && err == io.EOF {
				return nil, 0, io.EOF
			}
			return nil, int64(i), io.ErrUnexpectedEOF
		}
		if i == binary.MaxVarintLen64 {
			return nil, int64(i), errors.New("frame length is not a varint")
		}
		sz |= uint64(b&0x7f) << shift
		shift += 7
		if b < 0x80 {
			n = int64(i + 1)
			break
		}
	}
	switch {
	case sz > maxFrame:
		return nil, n, fmt.Errorf("frame of %d bytes claimed (at most %d)", sz, maxFrame)
	case int64(sz) > left-n-4:
		return nil, n, io.ErrUnexpectedEOF
	}
	crcb, err := br.Peek(4)
	if err != nil {
		return nil, n + int64(len(crcb)), io.ErrUnexpectedEOF
	}
	crc := binary.LittleEndian.Uint32(crcb)
	_, _ = br.Discard(4)
	n += 4
	if uint64(cap(buf)) < sz {
		buf = make([]byte, sz)
	}
	body = buf[:sz]
	if k, err := io.ReadFull(br, body); err != nil {
		return nil, n + int64(k), io.ErrUnexpectedEOF
	}
	n += int64(sz)
	if crc32.Checksum(body, castagnoli) != crc {
		return nil, n, errChecksum
	}
	return body, n, nil
}

var errChecksum = errors.New("checksum mismatch")

func (r *Reader) openSegment(i int) error {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	f, size, err := r.open(r.paths[i])
	if err != nil {
		return err
	}
	br := bufio.NewReaderSize(f, 256<<10)
	h, n, err := readHead(br, r.paths[i])
	if err != nil {
		f.Close()
		return err
	}
	r.hdrs[i] = h
	r.seg, r.f, r.br, r.off, r.size = i, f, br, n, size
	r.dec = newDecoder()
	r.dec.last = h.Start.UnixNano()
	if h.Start.IsZero() {
		r.dec.last = 0
	}
	r.stats.Bytes += n
	r.stats.Frames++
	r.stats.Ended = false
	return nil
}

// Next returns the next record, or io.EOF once there are none: at the end
// of the last segment, or at a torn or corrupt frame (Stats says which).
func (r *Reader) Next() (Record, error) {
	for !r.done {
		body, n, err := readFrame(r.br, r.body, r.size-r.off)
		if cap(body) > cap(r.body) && cap(body) <= 1<<20 {
			r.body = body // reused: decoding copies what it keeps
		}
		switch {
		case err == io.EOF:
			if r.stats.Ended && r.seg+1 < len(r.paths) {
				if err := r.openSegment(r.seg + 1); err != nil {
					r.stop(fmt.Sprintf("%s: %v", r.paths[r.seg+1], err), 0)
					return Record{}, io.EOF
				}
				continue
			}
			if r.seg+1 < len(r.paths) {
				r.stop(fmt.Sprintf("%s ends without the recorder's rotation marker: the segments after it do not continue it", r.paths[r.seg]), 0)
				return Record{}, io.EOF
			}
			r.done = true
			return Record{}, io.EOF
		case errors.Is(err, io.ErrUnexpectedEOF):
			r.stop(fmt.Sprintf("%s: torn frame at byte %d (the recorder stopped while writing it)", r.paths[r.seg], r.off), r.size-r.off)
			return Record{}, io.EOF
		case err != nil:
			r.stop(fmt.Sprintf("%s: %v at byte %d", r.paths[r.seg], err, r.off), r.size-r.off)
			return Record{}, io.EOF
		}
		rec, unknown, derr := r.decode(body)
		var end errEnd
		switch {
		case errors.As(derr, &end):
			r.advance(n)
			r.stats.Ended = true
			if end.reason == endClosed && r.seg+1 < len(r.paths) {
				r.stop(fmt.Sprintf("%s was closed, not rotated: the segments after it do not continue it", r.paths[r.seg]), 0)
				return Record{}, io.EOF
			}
			continue
		case errors.Is(derr, errSkip):
			r.advance(n)
			if unknown {
				r.stats.Unknown++
			}
			continue
		case derr != nil:
			r.stop(fmt.Sprintf("%s: frame at byte %d cannot be decoded: %v", r.paths[r.seg], r.off, derr), r.size-r.off)
			return Record{}, io.EOF
		}
		r.advance(n)
		switch rec.Kind {
		case KindObservation:
			r.stats.Observations++
		case KindTick:
			r.stats.Ticks++
		case KindLost:
			r.stats.Lost += rec.Lost
		case KindUnencoded:
			r.stats.Unencoded++
		}
		return rec, nil
	}
	return Record{}, io.EOF
}

func (r *Reader) decode(body []byte) (Record, bool, error) {
	if r.skipObs && len(body) > 0 && isObservation(body[0]) {
		// Keep the frame clock right; the payload is not needed.
		if dt, n := binary.Varint(body[1:]); n > 0 {
			r.dec.last += dt
			return Record{Kind: KindObservation}, false, nil
		}
	}
	return r.dec.frame(body)
}

func (r *Reader) advance(n int64) {
	r.off += n
	r.stats.Bytes += n
	r.stats.Frames++
}

func (r *Reader) stop(why string, skipped int64) {
	if skipped > 0 {
		why += fmt.Sprintf("; %d bytes after it skipped", skipped)
	}
	r.stats.Stop = why
	r.stats.Ended = false
	r.done = true
}

// Chain finds the recording path belongs to: path itself and, before it,
// the rotated segments of the same run still on disk (path.1, path.2, …
// for the live file; name.k+1, … for name.k), oldest first. It stops at
// the run's first segment or the first one missing.
func Chain(path string) ([]string, error) {
	h, err := ReadHeader(path)
	if err != nil {
		return nil, err
	}
	base, k := path, 0
	if i := strings.LastIndexByte(path, '.'); i > 0 {
		if n, err := strconv.Atoi(path[i+1:]); err == nil && n > 0 && !strings.ContainsRune(path[i+1:], filepath.Separator) {
			base, k = path[:i], n
		}
	}
	out := []string{path}
	for seg := h.Segment; seg > 1; seg-- {
		k++
		p := base + "." + strconv.Itoa(k)
		ph, err := ReadHeader(p)
		if err != nil || ph.Run != h.Run || ph.Segment != seg-1 {
			break
		}
		out = append(out, p)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
