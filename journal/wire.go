package journal

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

// The payload primitives. Integers are varints (signed ones zigzag), so
// small counts and deltas take a byte; floats that hold an integer (queue
// depths, token counters) are varints too, others their 8 raw bytes; times
// are deltas from the frame's time. A count n of a slice or map is written
// n+1, 0 meaning nil, so what was nil stays nil.

// wbuf builds one frame's payload.
type wbuf struct {
	b   []byte
	enc *encoder // for symbols and the frame's time
}

func (w *wbuf) byte1(v byte)    { w.b = append(w.b, v) }
func (w *wbuf) uv(v uint64)     { w.b = binary.AppendUvarint(w.b, v) }
func (w *wbuf) iv(v int64)      { w.b = binary.AppendVarint(w.b, v) }
func (w *wbuf) u64raw(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *wbuf) str(s string)    { w.uv(uint64(len(s))); w.b = append(w.b, s...) }

func (w *wbuf) flag(v bool) {
	if v {
		w.byte1(1)
	} else {
		w.byte1(0)
	}
}

// count writes a slice or map length, 0 for nil.
func (w *wbuf) count(n int, isNil bool) {
	if isNil {
		w.uv(0)
		return
	}
	w.uv(uint64(n) + 1)
}

// Float tags: 0 nil, 1 raw 8 bytes follow, t ≥ 2 the integer zigzag(t-2).
const (
	fNil = 0
	fRaw = 1
)

// maxExact is the largest magnitude a float64 holds every integer up to.
const maxExact = 1 << 53

// f writes v exactly: the integer form when it is one (never -0, whose
// sign JSON keeps), else the raw bits (NaN and ±Inf included).
func (w *wbuf) f(v float64) {
	if v == math.Trunc(v) && math.Abs(v) < maxExact && !(v == 0 && math.Signbit(v)) {
		w.uv(zigzag(int64(v)) + 2)
		return
	}
	w.uv(fRaw)
	w.u64raw(math.Float64bits(v))
}

func (w *wbuf) fp(v *float64) {
	if v == nil {
		w.uv(fNil)
		return
	}
	w.f(*v)
}

// ip writes a *int: a presence byte, then the value.
func (w *wbuf) ip(v *int) {
	if v == nil {
		w.byte1(0)
		return
	}
	w.byte1(1)
	w.iv(int64(*v))
}

// bp writes a *bool: 0 nil, 1 false, 2 true.
func (w *wbuf) bp(v *bool) {
	switch {
	case v == nil:
		w.byte1(0)
	case *v:
		w.byte1(2)
	default:
		w.byte1(1)
	}
}

// Time zone tags. A zone's name is not kept: JSON and the console show
// the offset. Local is the reading machine's (kvtop's own clock reads in
// Local, so a replay shows it in the operator's zone). The wide forms
// carry times UnixNano cannot hold (decision logs may say year 9999).
const (
	tzZero = iota
	tzLocal
	tzUTC
	tzFixed
	tzWide = 4 // added to the zone tag
)

// maxNanoSec is a bound on unix seconds within UnixNano's range.
const maxNanoSec = 9_000_000_000

// tm writes t as its zone and its offset from the frame's time.
func (w *wbuf) tm(t time.Time) {
	if t.IsZero() {
		w.uv(tzZero)
		return
	}
	tag, off := zoneOf(t)
	sec := t.Unix()
	wide := sec < -maxNanoSec || sec > maxNanoSec
	if wide {
		tag += tzWide
	}
	w.uv(uint64(tag))
	if tag%tzWide == tzFixed {
		w.iv(int64(off))
	}
	if wide {
		w.iv(sec)
		w.uv(uint64(t.Nanosecond()))
		return
	}
	w.iv(t.UnixNano() - w.enc.at)
}

// tmFrame writes t where the frame's time carries it (beginAt): only its
// zone, unless it is zero or wide (then it is written whole).
func (w *wbuf) tmFrame(t time.Time) {
	if t.IsZero() {
		w.uv(tzZero)
		return
	}
	if s := t.Unix(); s < -maxNanoSec || s > maxNanoSec {
		w.tm(t)
		return
	}
	tag, off := zoneOf(t)
	w.uv(uint64(tag))
	if tag == tzFixed {
		w.iv(int64(off))
	}
}

func zoneOf(t time.Time) (tag, offset int) {
	switch t.Location() {
	case time.Local:
		return tzLocal, 0
	case time.UTC:
		return tzUTC, 0
	}
	_, off := t.Zone()
	return tzFixed, off
}

func (w *wbuf) dur(d time.Duration) { w.iv(int64(d)) }

// sym writes a string that recurs (names, endpoints, kinds, messages) as
// an index into the segment's symbol table, defining it first if new.
func (w *wbuf) sym(s string) { w.enc.sym(w, s) }

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// errShort is a payload that ends before its fields do, or says it holds
// more than it could: the frame is corrupt (its checksum passed, so the
// writer was wrong or the file was forged).
var errShort = errors.New("payload too short for its fields")

// rbuf reads one frame's payload. The first error sticks and every read
// after it returns zero values, so a decoder reads straight through and
// checks once.
type rbuf struct {
	b   []byte
	err error
	dec *decoder
}

func (r *rbuf) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *rbuf) byte1() byte {
	if len(r.b) < 1 {
		r.fail(errShort)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *rbuf) uv() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *rbuf) iv() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errShort)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *rbuf) int() int { return int(r.iv()) }

func (r *rbuf) u64raw() uint64 {
	if len(r.b) < 8 {
		r.fail(errShort)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *rbuf) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail(errShort)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *rbuf) str() string { return string(r.bytes(r.uv())) }

func (r *rbuf) flag() bool { return r.byte1() != 0 }

// count reads a length written by wbuf.count; nil says it was nil. Each
// element takes at least min bytes, so a count the payload cannot hold
// is an error, never an allocation.
func (r *rbuf) count(min int) (n int, isNil bool) {
	v := r.uv()
	if v == 0 {
		return 0, true
	}
	v--
	if v > uint64(len(r.b)/max(min, 1)) {
		r.fail(errShort)
		return 0, true
	}
	return int(v), false
}

func (r *rbuf) ftag(t uint64) float64 {
	if t == fRaw {
		return math.Float64frombits(r.u64raw())
	}
	return float64(unzigzag(t - 2))
}

func (r *rbuf) f() float64 {
	t := r.uv()
	if t == fNil {
		return 0 // a required float never writes nil; tolerate it
	}
	return r.ftag(t)
}

func (r *rbuf) fp() *float64 {
	t := r.uv()
	if t == fNil || r.err != nil {
		return nil
	}
	v := r.ftag(t)
	return &v
}

func (r *rbuf) ip() *int {
	if !r.flag() {
		return nil
	}
	v := r.int()
	return &v
}

func (r *rbuf) bp() *bool {
	switch r.byte1() {
	case 1:
		v := false
		return &v
	case 2:
		v := true
		return &v
	}
	return nil
}

func (r *rbuf) tm() time.Time { return r.tmTagged(r.uv()) }

// tmFrame reads what wbuf.tmFrame wrote.
func (r *rbuf) tmFrame() time.Time {
	tag := r.uv()
	if tag == tzZero || tag >= tzWide || r.err != nil {
		return r.tmTagged(tag)
	}
	loc := r.zone(tag)
	if loc == nil {
		return time.Time{}
	}
	return time.Unix(0, r.dec.at).In(loc)
}

func (r *rbuf) tmTagged(tag uint64) time.Time {
	if tag == tzZero || r.err != nil {
		return time.Time{}
	}
	wide := tag >= tzWide
	if wide {
		tag -= tzWide
	}
	loc := r.zone(tag)
	if loc == nil {
		return time.Time{}
	}
	if wide {
		sec := r.iv()
		ns := r.uv()
		if ns >= 1e9 {
			r.fail(errors.New("nanoseconds beyond a second"))
			return time.Time{}
		}
		return time.Unix(sec, int64(ns)).In(loc)
	}
	return time.Unix(0, r.iv()+r.dec.at).In(loc)
}

// zone reads a zone tag's location (and a fixed zone's offset).
func (r *rbuf) zone(tag uint64) *time.Location {
	switch tag {
	case tzLocal:
		return time.Local
	case tzUTC:
		return time.UTC
	case tzFixed:
		off := r.iv()
		if off < -86400 || off > 86400 {
			r.fail(errors.New("time zone offset beyond a day"))
			return nil
		}
		return time.FixedZone("", int(off))
	}
	r.fail(errors.New("unknown time zone tag"))
	return nil
}

func (r *rbuf) dur() time.Duration { return time.Duration(r.iv()) }

func (r *rbuf) sym() string { return r.dec.sym(r) }
