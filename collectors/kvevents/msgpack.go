package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// reader is a minimal msgpack cursor over one payload. It exists because the
// event stream can carry 10^5+ block events/s: walking the bytes directly
// (no reflection, no interface boxing, token ids skipped without decoding)
// keeps the decoder far below the pool's indexing cost. Every length is
// checked against the bytes left, so hostile input can neither over-allocate
// nor loop.
type reader struct {
	b []byte
	i int
	// scratch collects a batch's hashes while its events are decoded
	// (decoder.hs, lent for one payload).
	scratch []uint64
}

// errTruncated means the payload ended inside a value.
var errTruncated = errors.New("msgpack: truncated")

// typeError says what was found where something else was expected.
func (r *reader) typeError(want string, code byte) error {
	return fmt.Errorf("msgpack: want %s, found %s at byte %d", want, codeName(code), r.i)
}

func (r *reader) left() int { return len(r.b) - r.i }

func (r *reader) peek() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.i], nil
}

// isMapCode reports a msgpack map header (fixmap, map16, map32).
func isMapCode(c byte) bool { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }

// take returns the next n bytes.
func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, errTruncated
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, nil
}

func (r *reader) u8() (uint64, error) {
	s, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return uint64(s[0]), nil
}

func (r *reader) u16() (uint64, error) {
	s, err := r.take(2)
	if err != nil {
		return 0, err
	}
	return uint64(binary.BigEndian.Uint16(s)), nil
}

func (r *reader) u32() (uint64, error) {
	s, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.BigEndian.Uint32(s)), nil
}

func (r *reader) u64() (uint64, error) {
	s, err := r.take(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(s), nil
}

// tryNil consumes a nil and reports whether there was one.
func (r *reader) tryNil() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// containerLen reads an array (isMap false) or map header. Each element
// takes at least one byte, so a length beyond the bytes left is rejected
// here, before anyone allocates for it.
func (r *reader) containerLen(isMap bool) (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case !isMap && c >= 0x90 && c <= 0x9f:
		r.i++
		n = uint64(c & 0x0f)
	case isMap && c >= 0x80 && c <= 0x8f:
		r.i++
		n = uint64(c & 0x0f)
	case !isMap && c == 0xdc, isMap && c == 0xde:
		r.i++
		n, err = r.u16()
	case !isMap && c == 0xdd, isMap && c == 0xdf:
		r.i++
		n, err = r.u32()
	default:
		if isMap {
			return 0, r.typeError("map", c)
		}
		return 0, r.typeError("array", c)
	}
	if err != nil {
		return 0, err
	}
	per := uint64(1)
	if isMap {
		per = 2
	}
	if n*per > uint64(r.left()) {
		return 0, errTruncated
	}
	return int(n), nil
}

func (r *reader) arrayLen() (int, error) { return r.containerLen(false) }
func (r *reader) mapLen() (int, error)   { return r.containerLen(true) }

// strOrBin reads a str or bin value and returns its bytes (aliasing the
// payload: copy before keeping).
func (r *reader) strOrBin() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.i++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		r.i++
		n, err = r.u8()
	case c == 0xda || c == 0xc5:
		r.i++
		n, err = r.u16()
	case c == 0xdb || c == 0xc6:
		r.i++
		n, err = r.u32()
	default:
		return nil, r.typeError("string", c)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(r.left()) {
		return nil, errTruncated
	}
	return r.take(int(n))
}

// integer reads any msgpack integer as its 64-bit pattern: unsigned values
// as is, negative ones as two's complement (SGLang's signed int64 hashes
// keep their bits). neg reports a negative encoding.
func (r *reader) integer() (v uint64, neg bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		r.i++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.i++
		return uint64(int64(int8(c))), true, nil
	}
	r.i++
	switch c {
	case 0xcc:
		v, err = r.u8()
	case 0xcd:
		v, err = r.u16()
	case 0xce:
		v, err = r.u32()
	case 0xcf:
		v, err = r.u64()
	case 0xd0:
		v, err = r.u8()
		v, neg = uint64(int64(int8(v))), int8(v) < 0
	case 0xd1:
		v, err = r.u16()
		v, neg = uint64(int64(int16(v))), int16(v) < 0
	case 0xd2:
		v, err = r.u32()
		v, neg = uint64(int64(int32(v))), int32(v) < 0
	case 0xd3:
		v, err = r.u64()
		neg = int64(v) < 0
	default:
		r.i--
		return 0, false, r.typeError("integer", c)
	}
	return v, neg, err
}

// number reads an integer or float as float64.
func (r *reader) number() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.i++
		v, err := r.u32()
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		r.i++
		v, err := r.u64()
		return math.Float64frombits(v), err
	}
	v, neg, err := r.integer()
	if neg {
		return float64(int64(v)), err
	}
	return float64(v), err
}

// smallInt reads an integer that must fit an int (ranks, block sizes).
func (r *reader) smallInt() (int, error) {
	at := r.i
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if (neg && int64(v) < math.MinInt32) || (!neg && v > math.MaxInt32) {
		r.i = at
		return 0, fmt.Errorf("msgpack: integer %d out of range at byte %d", int64(v), at)
	}
	return int(int64(v)), nil
}

// hash reads a block hash: an unsigned or (SGLang) signed integer kept as
// its 64-bit pattern, or a byte/str string keyed by its last 8 bytes
// big-endian (shorter strings right-aligned).
func (r *reader) hash() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c == 0xcf { // the common case: a full-width uint64
		r.i++
		return r.u64()
	}
	if (c >= 0xa0 && c <= 0xbf) || (c >= 0xc4 && c <= 0xc6) || (c >= 0xd9 && c <= 0xdb) {
		s, err := r.strOrBin()
		if err != nil {
			return 0, err
		}
		return bytesKey(s), nil
	}
	v, _, err := r.integer()
	if err != nil {
		return 0, fmt.Errorf("block hash: %w", err)
	}
	return v, nil
}

// bytesKey is the last 8 bytes of s, big-endian; shorter s right-aligned.
func bytesKey(s []byte) uint64 {
	if len(s) >= 8 {
		return binary.BigEndian.Uint64(s[len(s)-8:])
	}
	var v uint64
	for _, b := range s {
		v = v<<8 | uint64(b)
	}
	return v
}

// skip passes over one complete value of any type. It is iterative (no
// recursion depth to exhaust) and every pending count is bounded by the bytes
// left, so it always terminates in O(len(payload)).
func (r *reader) skip() error {
	pending := 1
	for pending > 0 {
		pending--
		if pending+1 > r.left() { // every pending value takes at least a byte
			return errTruncated
		}
		c, err := r.peek()
		if err != nil {
			return err
		}
		r.i++
		var n uint64 // bytes to skip after the code
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			pending += 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			pending += int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			n = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			n, err = r.u8()
		case c == 0xc5 || c == 0xda:
			n, err = r.u16()
		case c == 0xc6 || c == 0xdb:
			n, err = r.u32()
		case c == 0xc7:
			n, err = r.u8()
			n++ // ext type byte
		case c == 0xc8:
			n, err = r.u16()
			n++
		case c == 0xc9:
			n, err = r.u32()
			n++
		case c == 0xca:
			n = 4
		case c == 0xcb:
			n = 8
		case c == 0xcc || c == 0xd0:
			n = 1
		case c == 0xcd || c == 0xd1:
			n = 2
		case c == 0xce || c == 0xd2:
			n = 4
		case c == 0xcf || c == 0xd3:
			n = 8
		case c >= 0xd4 && c <= 0xd8: // fixext 1,2,4,8,16 plus the type byte
			n = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf:
			r.i--
			isMap := c >= 0xde
			l, err := r.containerLen(isMap)
			if err != nil {
				return err
			}
			if isMap {
				l *= 2
			}
			pending += l
			continue
		default: // 0xc1 is never used
			r.i--
			return r.typeError("a value", c)
		}
		if err != nil {
			return err
		}
		if n > uint64(r.left()) {
			return errTruncated
		}
		r.i += int(n)
	}
	return nil
}

// countInts counts the elements of an array of integers without decoding
// them (token ids: kvtop keeps only how many there were). Any other element
// type falls back to a generic skip.
func (r *reader) countInts() (int, error) {
	n, err := r.arrayLen()
	if err != nil {
		return 0, err
	}
	return n, r.skipInts(n)
}

// skipInts steps over n array elements, integers without decoding them.
// Token ids of a large vocabulary alternate between 3- and 5-byte
// encodings at random, so their width is computed from the type byte
// (uint8..uint64 are 0xcc..0xcf, 1+2^k bytes) rather than picked by a
// chain of branches the CPU would mispredict on every other id: 2.6 ns
// an id instead of 5 on 64 arrays of random ids (BenchmarkSkipInts).
func (r *reader) skipInts(n int) error {
	b, i := r.b, r.i
	prev := i // the last integer's start: where a truncation is reported
	for k := 0; k < n; k++ {
		if i >= len(b) {
			if i > len(b) {
				i = prev
			}
			r.i = i
			return errTruncated
		}
		c := b[i]
		if d := c - 0xcc; d < 4 { // uint8..uint64: the token ids past 127
			prev, i = i, i+1+1<<d
			continue
		}
		w := int(intWidth[c])
		if w == 0 { // not an integer: the generic skip
			r.i = i
			if err := r.skip(); err != nil {
				return err
			}
			i = r.i
			continue
		}
		prev, i = i, i+w
	}
	if i > len(b) {
		r.i = prev
		return errTruncated // the last integer's bytes run past the end
	}
	r.i = i
	return nil
}

// intWidth is the encoded size of a msgpack integer by its first byte,
// 0 for any other type.
var intWidth = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c <= 0x7f || c >= 0xe0:
			t[c] = 1
		case c == 0xcc || c == 0xd0:
			t[c] = 2
		case c == 0xcd || c == 0xd1:
			t[c] = 3
		case c == 0xce || c == 0xd2:
			t[c] = 5
		case c == 0xcf || c == 0xd3:
			t[c] = 9
		}
	}
	return t
}()

// codeName names a msgpack type code for error messages.
func codeName(c byte) string {
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		return "integer"
	case c <= 0x8f || c == 0xde || c == 0xdf:
		return "map"
	case c <= 0x9f || c == 0xdc || c == 0xdd:
		return "array"
	case c <= 0xbf || (c >= 0xd9 && c <= 0xdb):
		return "string"
	case c == 0xc0:
		return "nil"
	case c == 0xc2 || c == 0xc3:
		return "bool"
	case c >= 0xc4 && c <= 0xc6:
		return "bytes"
	case c == 0xca || c == 0xcb:
		return "float"
	case c == 0xc1:
		return "invalid code 0xc1"
	}
	return "ext"
}
