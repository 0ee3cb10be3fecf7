// Package msgpack is the one MessagePack reader of kvtop's event
// collectors: a Cursor that walks one encoded payload in place. vLLM's and
// SGLang's ZMQ batches (kvevents) and Dynamo's RouterEvents on NATS and on
// its ZMQ event plane (natsevents) are read with it.
//
// It exists because the event streams carry 10^5+ block events a second:
// walking the bytes directly (no reflection, no interface boxing, token ids
// stepped over without decoding) keeps decoding far below the cost of
// indexing. Every length is checked against the bytes left before it is
// used, so hostile input can neither over-allocate nor loop, and every
// error names what was wanted, the type code found and its offset.
package msgpack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Cursor reads one msgpack payload from the front. The zero value reads
// nothing; New, At and Reset point it at bytes. Values it returns for
// strings and binaries alias the payload: copy before keeping.
type Cursor struct {
	b []byte
	i int
}

// New returns a cursor at the start of b.
func New(b []byte) Cursor { return Cursor{b: b} }

// At returns a cursor at offset i of b (a value read before, again).
func At(b []byte, i int) Cursor { return Cursor{b: b, i: min(max(i, 0), len(b))} }

// Reset points c at the start of b.
func (c *Cursor) Reset(b []byte) { c.b, c.i = b, 0 }

// Pos is the offset of the next value.
func (c *Cursor) Pos() int { return c.i }

// Seek moves the cursor back to an offset it returned from Pos.
func (c *Cursor) Seek(i int) { c.i = min(max(i, 0), len(c.b)) }

// Bytes is the whole payload (for the span of a value between two Pos).
func (c *Cursor) Bytes() []byte { return c.b }

// Left is how many bytes are not read yet.
func (c *Cursor) Left() int { return len(c.b) - c.i }

// ErrTruncated means the payload ends inside a value, or a container
// claims more items than the bytes left could hold. Errors that say so
// wrap it.
var ErrTruncated = errors.New("msgpack: truncated")

// truncated says where a value was cut.
func (c *Cursor) truncated(at int) error {
	return fmt.Errorf("%w: the value at byte %d runs past the end (%d bytes)", ErrTruncated, at, len(c.b))
}

// TypeError says what was wanted where a value of another type stands.
type TypeError struct {
	Want string // with its article: "an integer", "a map"
	Code byte   // the type code found
	At   int    // its offset
}

func (e *TypeError) Error() string {
	t := TypeOf(e.Code)
	return fmt.Sprintf("msgpack: want %s, found %s %s (0x%02x) at byte %d", e.Want, article(t), t, e.Code, e.At)
}

func (c *Cursor) typeError(want string, code byte) error {
	return &TypeError{Want: want, Code: code, At: c.i}
}

// Peek is the type code of the next value, not consumed.
func (c *Cursor) Peek() (byte, error) {
	if c.i >= len(c.b) {
		return 0, c.truncated(c.i)
	}
	return c.b[c.i], nil
}

// TryNil consumes a nil and reports whether there was one.
func (c *Cursor) TryNil() bool {
	if c.i < len(c.b) && c.b[c.i] == 0xc0 {
		c.i++
		return true
	}
	return false
}

// be reads a big-endian unsigned number of w bytes (1, 2, 4 or 8) at the
// cursor; at is the offset of the value it belongs to, for the error.
func (c *Cursor) be(w, at int) (uint64, error) {
	if w > len(c.b)-c.i {
		return 0, c.truncated(at)
	}
	p := c.b[c.i : c.i+w]
	c.i += w
	switch w {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

// ArrayLen reads an array header.
func (c *Cursor) ArrayLen() (int, error) {
	if i := c.i; i < len(c.b) && c.b[i]&0xf0 == 0x90 { // fixarray: inlined
		if n := int(c.b[i] & 0x0f); n < len(c.b)-i {
			c.i++
			return n, nil
		}
	}
	return c.containerLen(false)
}

// MapLen reads a map header: the number of key-value pairs.
func (c *Cursor) MapLen() (int, error) {
	if i := c.i; i < len(c.b) && c.b[i]&0xf0 == 0x80 { // fixmap: inlined
		if n := int(c.b[i] & 0x0f); 2*n < len(c.b)-i {
			c.i++
			return n, nil
		}
	}
	return c.containerLen(true)
}

// containerLen reads an array or map header. Each item takes at least a
// byte (a pair two), so a count beyond the bytes left is refused here,
// before anyone reserves room for it.
func (c *Cursor) containerLen(isMap bool) (int, error) {
	if c.i >= len(c.b) {
		return 0, c.truncated(c.i)
	}
	at, code := c.i, c.b[c.i]
	var n uint64
	var err error
	switch {
	case !isMap && code >= 0x90 && code <= 0x9f, isMap && code >= 0x80 && code <= 0x8f:
		c.i++
		n = uint64(code & 0x0f)
	case !isMap && code == 0xdc, isMap && code == 0xde:
		c.i++
		n, err = c.be(2, at)
	case !isMap && code == 0xdd, isMap && code == 0xdf:
		c.i++
		n, err = c.be(4, at)
	default:
		if isMap {
			return 0, c.typeError("a map", code)
		}
		return 0, c.typeError("an array", code)
	}
	if err != nil {
		c.i = at
		return 0, err
	}
	per := uint64(1)
	if isMap {
		per = 2
	}
	if n*per > uint64(c.Left()) {
		c.i = at
		return 0, fmt.Errorf("%w: %s at byte %d claims %d items, %d bytes left", ErrTruncated, TypeOf(code), at, n, len(c.b)-at-1)
	}
	return int(n), nil
}

// Str reads a str or a bin and returns its bytes (aliasing the payload).
func (c *Cursor) Str() ([]byte, error) {
	if i := c.i; i < len(c.b) { // fixstr (map keys): inlined
		if n := int(c.b[i]) - 0xa0; n >= 0 && n < 32 && n < len(c.b)-i {
			c.i = i + 1 + n
			return c.b[i+1 : c.i], nil
		}
	}
	return c.str()
}

func (c *Cursor) str() ([]byte, error) {
	if c.i >= len(c.b) {
		return nil, c.truncated(c.i)
	}
	at, code := c.i, c.b[c.i]
	var n uint64
	var err error
	switch {
	case code >= 0xa0 && code <= 0xbf:
		c.i++
		n = uint64(code & 0x1f)
	case code == 0xd9 || code == 0xc4:
		c.i++
		n, err = c.be(1, at)
	case code == 0xda || code == 0xc5:
		c.i++
		n, err = c.be(2, at)
	case code == 0xdb || code == 0xc6:
		c.i++
		n, err = c.be(4, at)
	default:
		return nil, c.typeError("a string", code)
	}
	if err != nil {
		c.i = at
		return nil, err
	}
	if n > uint64(c.Left()) {
		c.i = at
		return nil, c.truncated(at)
	}
	s := c.b[c.i : c.i+int(n)]
	c.i += int(n)
	return s, nil
}

// Integer reads any msgpack integer as its 64-bit pattern: unsigned values
// as they are, negative ones as two's complement (signed int64 hashes keep
// their bits). neg reports a negative value.
func (c *Cursor) Integer() (v uint64, neg bool, err error) {
	if c.i >= len(c.b) {
		return 0, false, c.truncated(c.i)
	}
	at, code := c.i, c.b[c.i]
	switch {
	case code <= 0x7f:
		c.i++
		return uint64(code), false, nil
	case code >= 0xe0:
		c.i++
		return uint64(int64(int8(code))), true, nil
	case code < 0xcc || code > 0xd3:
		return 0, false, c.typeError("an integer", code)
	}
	// 0xcc..0xcf uint8..64, 0xd0..0xd3 int8..64: 1 << (code&3) bytes.
	c.i++
	v, err = c.be(1<<(code&3), at)
	if err != nil {
		c.i = at
		return 0, false, err
	}
	switch code {
	case 0xd0:
		v = uint64(int64(int8(v)))
	case 0xd1:
		v = uint64(int64(int16(v)))
	case 0xd2:
		v = uint64(int64(int32(v)))
	}
	return v, code >= 0xd0 && int64(v) < 0, nil
}

// Bits reads any integer as its 64-bit pattern (Integer without the sign).
func (c *Cursor) Bits() (uint64, error) {
	// The common cases inlined: a full-width uint64 (hashes), a fixint.
	if i := c.i; i+9 <= len(c.b) && c.b[i] == 0xcf {
		c.i = i + 9
		return binary.BigEndian.Uint64(c.b[i+1:]), nil
	} else if i < len(c.b) && c.b[i] <= 0x7f {
		c.i++
		return uint64(c.b[i]), nil
	}
	return c.bits()
}

func (c *Cursor) bits() (uint64, error) {
	v, _, err := c.Integer()
	return v, err
}

// Number reads an integer or a float as a float64.
func (c *Cursor) Number() (float64, error) {
	if c.i >= len(c.b) {
		return 0, c.truncated(c.i)
	}
	at, code := c.i, c.b[c.i]
	if code == 0xca || code == 0xcb {
		c.i++
		if code == 0xca {
			v, err := c.be(4, at)
			if err != nil {
				c.i = at
			}
			return float64(math.Float32frombits(uint32(v))), err
		}
		v, err := c.be(8, at)
		if err != nil {
			c.i = at
		}
		return math.Float64frombits(v), err
	}
	v, neg, err := c.Integer()
	if err != nil {
		if te, ok := err.(*TypeError); ok {
			te.Want = "a number"
		}
		return 0, err
	}
	if neg {
		return float64(int64(v)), nil
	}
	return float64(v), nil
}

// SmallInt reads an integer that must fit an int32 (ranks, block sizes,
// positions). Out of range, the cursor stays before it.
func (c *Cursor) SmallInt() (int, error) {
	at := c.i
	v, neg, err := c.Integer()
	if err != nil {
		return 0, err
	}
	if (neg && int64(v) < math.MinInt32) || (!neg && v > math.MaxInt32) {
		c.i = at
		if neg {
			return 0, fmt.Errorf("msgpack: integer %d out of range at byte %d", int64(v), at)
		}
		return 0, fmt.Errorf("msgpack: integer %d out of range at byte %d", v, at)
	}
	return int(int64(v)), nil
}

// Skip passes over one complete value of any type. It is iterative (no
// recursion depth to exhaust) and every pending count is bounded by the
// bytes left, so it ends in O(len(payload)) whatever the input.
func (c *Cursor) Skip() error {
	pending := 1
	for pending > 0 {
		pending--
		if pending+1 > c.Left() { // every pending value takes at least a byte
			return c.truncated(c.i)
		}
		at, code := c.i, c.b[c.i]
		c.i++
		var n uint64 // bytes to skip after the code
		var err error
		switch {
		case code <= 0x7f || code >= 0xe0 || code == 0xc0 || code == 0xc2 || code == 0xc3:
		case code >= 0x80 && code <= 0x8f:
			pending += 2 * int(code&0x0f)
		case code >= 0x90 && code <= 0x9f:
			pending += int(code & 0x0f)
		case code >= 0xa0 && code <= 0xbf:
			n = uint64(code & 0x1f)
		case code == 0xc4 || code == 0xd9:
			n, err = c.be(1, at)
		case code == 0xc5 || code == 0xda:
			n, err = c.be(2, at)
		case code == 0xc6 || code == 0xdb:
			n, err = c.be(4, at)
		case code >= 0xc7 && code <= 0xc9: // ext 8/16/32: a length, then the type byte
			n, err = c.be(1<<(code-0xc7), at)
			n++
		case code == 0xca:
			n = 4
		case code == 0xcb:
			n = 8
		case code >= 0xcc && code <= 0xd3:
			n = 1 << (code & 3)
		case code >= 0xd4 && code <= 0xd8: // fixext 1, 2, 4, 8, 16 plus the type byte
			n = 1 + 1<<(code-0xd4)
		case code >= 0xdc && code <= 0xdf:
			c.i = at
			l, err := c.containerLen(code >= 0xde)
			if err != nil {
				return err
			}
			if code >= 0xde {
				l *= 2
			}
			pending += l
			continue
		default: // 0xc1 is never used
			c.i = at
			return c.typeError("a value", code)
		}
		if err != nil {
			c.i = at
			return err
		}
		if n > uint64(c.Left()) {
			c.i = at
			return c.truncated(at)
		}
		c.i += int(n)
	}
	return nil
}

// CountInts counts the elements of an array of integers without decoding
// them (token ids, of which kvtop keeps only how many there were). An
// element of another type is stepped over by Skip.
func (c *Cursor) CountInts() (int, error) {
	n, err := c.ArrayLen()
	if err != nil {
		return 0, err
	}
	return n, c.SkipInts(n)
}

// SkipInts steps over n values, integers without decoding them. Token ids
// of a large vocabulary alternate between 3- and 5-byte encodings at
// random, so their width comes from the type byte (uint8..uint64 are
// 0xcc..0xcf, 1+2^k bytes) rather than a chain of branches the CPU would
// mispredict every other id: 2.6 ns an id instead of 5 on 64 arrays of
// random ids (BenchmarkSkipInts). A truncation is reported at the last
// integer's start; the cursor never stands past the payload.
func (c *Cursor) SkipInts(n int) error {
	b, i := c.b, c.i
	prev := i // the last integer's start
	for k := 0; k < n; k++ {
		if i >= len(b) {
			if i > len(b) {
				i = prev
			}
			c.i = i
			return c.truncated(i)
		}
		code := b[i]
		if d := code - 0xcc; d < 4 { // uint8..uint64: the token ids past 127
			prev, i = i, i+1+1<<d
			continue
		}
		w := int(intWidth[code])
		if w == 0 { // not an integer: the generic skip
			c.i = i
			if err := c.Skip(); err != nil {
				return err
			}
			i = c.i
			continue
		}
		prev, i = i, i+w
	}
	if i > len(b) { // the last integer's bytes run past the end
		c.i = prev
		return c.truncated(prev)
	}
	c.i = i
	return nil
}

// intWidth is the encoded size of an integer by its type code, 0 for any
// other type.
var intWidth = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c <= 0x7f || c >= 0xe0:
			t[c] = 1
		case c >= 0xcc && c <= 0xd3:
			t[c] = 1 + 1<<(c&3)
		}
	}
	return t
}()
