package journal

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// encoder turns observations, ticks and refresh changes into frames. It
// keeps what later frames refer to (the symbol table, the time of the
// last frame, each publisher's last seq and ts), so it belongs to one
// goroutine and one segment: reset starts a new segment's state.
type encoder struct {
	out []byte // finished frames, oldest first
	w   wbuf   // the frame being built: tag, time delta, payload

	last int64 // unix ns of the last frame written
	at   int64 // unix ns of the frame being built

	syms     map[string]uint32
	symBytes int
	pubs     pubTable
	layout   []byte // scratch: a histogram's bucket bounds
}

func newEncoder() *encoder {
	e := &encoder{}
	e.w.enc = e
	e.reset()
	return e
}

// reset forgets the segment's state (a new file starts from nothing).
func (e *encoder) reset() {
	e.last, e.at = 0, 0
	e.syms = map[string]uint32{}
	e.symBytes = 0
	e.pubs = newPubTable()
}

// begin starts a frame at time t. The frame's time is t when it has one
// UnixNano can hold, else the last frame's, and the payload says which.
func (e *encoder) begin(tag byte, t time.Time) *wbuf {
	e.at = e.last
	if !t.IsZero() {
		if s := t.Unix(); s >= -maxNanoSec && s <= maxNanoSec {
			e.at = t.UnixNano()
		}
	}
	w := &e.w
	w.b = append(w.b[:0], tag)
	w.iv(e.at - e.last)
	return w
}

// beginAt starts a frame whose payload opens with t itself (an
// observation's time, a tick's): its zone, and its value only when the
// frame's time could not carry it.
func (e *encoder) beginAt(tag byte, t time.Time) *wbuf {
	w := e.begin(tag, t)
	w.tmFrame(t)
	return w
}

// end finishes the frame begun last, after the symbol frames its
// payload defined.
func (e *encoder) end() {
	e.out = appendFrame(e.out, e.w.b)
	e.last = e.at
}

// sym writes s as a symbol reference, defining it in a frame of its own
// (before the frame being built) the first time.
func (e *encoder) sym(w *wbuf, s string) {
	if id, ok := e.syms[s]; ok {
		w.uv(uint64(id) + 1)
		return
	}
	if len(s) > maxSymLen || len(e.syms) >= maxSyms || e.symBytes+len(s) > maxSymBytes {
		w.uv(0)
		w.str(s)
		return
	}
	id := uint32(len(e.syms))
	e.syms[s] = id
	e.symBytes += len(s)
	body := make([]byte, 0, 2+len(s))
	body = append(body, tagSymbol, 0) // time delta 0
	e.out = appendFrame(e.out, append(body, s...))
	w.uv(uint64(id) + 1)
}

// header writes the segment's first frame (after Magic).
func (e *encoder) header(h Header) error {
	js, err := json.Marshal(h)
	if err != nil {
		return err
	}
	w := e.begin(tagHeader, h.Start)
	w.b = append(w.b, js...)
	e.end()
	return nil
}

func (e *encoder) tick(at time.Time, seq uint64) {
	w := e.beginAt(tagTick, at)
	w.uv(seq)
	e.end()
}

func (e *encoder) refresh(d time.Duration) {
	w := e.begin(tagRefresh, time.Time{})
	w.dur(d)
	e.end()
}

func (e *encoder) lost(n uint64) {
	w := e.begin(tagLost, time.Time{})
	w.uv(n)
	e.end()
}

func (e *encoder) endFrame(reason uint64) {
	w := e.begin(tagEnd, time.Time{})
	w.uv(reason)
	e.end()
}

// observation appends o's frame, by the coding its type registered
// (codec.go). It says false for a type without one.
func (e *encoder) observation(o collectors.Observation) bool {
	if c := codingOf(o); c != nil && c.encode(e, o) {
		return true
	}
	if rv := reflect.ValueOf(o); o == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return true // the pool does nothing with it: nothing to write
	}
	// A type this journal does not know is named, so a replay can say
	// what it lacks.
	w := e.begin(tagUnknown, o.ObservedAt())
	w.sym(reflect.TypeOf(o).String())
	e.end()
	return false
}
