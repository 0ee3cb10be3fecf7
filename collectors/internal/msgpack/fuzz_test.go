package msgpack

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	vm "github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// step is one value as a reader saw it: its type code, what it holds, and
// the offset after its header or scalar.
type step struct {
	Code byte
	Bits uint64 // integers (their 64-bit pattern), floats (float64 bits), lengths
	Neg  bool
	Data string // strings and binaries
	End  int
}

// walkCursor reads every top-level value of b with the cursor, in document
// order. A container adds its items to what is pending, so the walk is as
// iterative as Skip. It stops at the first error.
func walkCursor(b []byte) ([]step, error) {
	c := New(b)
	var out []step
	for c.Left() > 0 {
		start := c.Pos()
		for pending := 1; pending > 0; pending-- {
			code, err := c.Peek()
			if err != nil {
				return out, err
			}
			s := step{Code: code}
			switch TypeOf(code) {
			case Int:
				if s.Bits, s.Neg, err = c.Integer(); err == nil {
					err = sameInteger(b, c.Pos()-int(intWidth[code]), s)
				}
			case Float:
				var f float64
				f, err = c.Number()
				s.Bits = math.Float64bits(f)
			case Str, Bin:
				var p []byte
				p, err = c.Str()
				s.Data = string(p)
			case Array:
				var n int
				n, err = c.ArrayLen()
				s.Bits, pending = uint64(n), pending+n
			case Map:
				var n int
				n, err = c.MapLen()
				s.Bits, pending = uint64(n), pending+2*n
			case Nil:
				if !c.TryNil() {
					err = fmt.Errorf("TryNil refused 0x%02x", code)
				}
			default: // bool, ext, the invalid code
				err = c.Skip()
			}
			if err != nil {
				return out, err
			}
			s.End = c.Pos()
			out = append(out, s)
		}
		// Skip steps over the same whole value.
		again := At(b, start)
		if err := again.Skip(); err != nil || again.Pos() != c.Pos() {
			return out, fmt.Errorf("Skip from %d: %v, at %d; the walk ended at %d", start, err, again.Pos(), c.Pos())
		}
	}
	return out, nil
}

// walkReference reads b the same way with github.com/vmihailenco/msgpack,
// classifying codes with its own msgpcode.
func walkReference(b []byte) ([]step, error) {
	r := bytes.NewReader(b)
	d := vm.NewDecoder(r)
	pos := func() int { return len(b) - r.Len() }
	var out []step
	for r.Len() > 0 {
		for pending := 1; pending > 0; pending-- {
			code, err := d.PeekCode()
			if err != nil {
				return out, err
			}
			if n, ok := declared(b[pos():]); ok && n > r.Len() {
				// The reference would make the whole declared length
				// before finding the bytes missing (up to 4 GiB).
				return out, fmt.Errorf("a value of %d bytes, %d left", n, r.Len())
			}
			s := step{Code: code}
			switch {
			case msgpcode.IsFixedNum(code) || code >= msgpcode.Uint8 && code <= msgpcode.Int64:
				s.Bits, err = d.DecodeUint64() // signed ones bit for bit
				s.Neg = (code >= msgpcode.NegFixedNumLow || code >= msgpcode.Int8 && code <= msgpcode.Int64) && int64(s.Bits) < 0
			case code == msgpcode.Float || code == msgpcode.Double:
				var f float64
				f, err = d.DecodeFloat64()
				s.Bits = math.Float64bits(f)
			case msgpcode.IsString(code) || msgpcode.IsBin(code):
				var p []byte
				p, err = d.DecodeBytes()
				s.Data = string(p)
			case msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32:
				var n int
				n, err = d.DecodeArrayLen()
				s.Bits, pending = uint64(n), pending+n
			case msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32:
				var n int
				n, err = d.DecodeMapLen()
				s.Bits, pending = uint64(n), pending+2*n
			case code == msgpcode.Nil:
				err = d.DecodeNil()
			default:
				err = d.Skip()
			}
			if err != nil {
				return out, err
			}
			s.End = pos()
			out = append(out, s)
		}
	}
	return out, nil
}

// declared is the length a str, bin or ext value at the start of p claims,
// header included.
func declared(p []byte) (int, bool) {
	var w, extra int // width of the length field; ext: its type byte
	switch c := p[0]; {
	case c == msgpcode.Str8 || c == msgpcode.Bin8 || c == msgpcode.Ext8:
		w = 1
	case c == msgpcode.Str16 || c == msgpcode.Bin16 || c == msgpcode.Ext16:
		w = 2
	case c == msgpcode.Str32 || c == msgpcode.Bin32 || c == msgpcode.Ext32:
		w = 4
	default:
		return 0, false
	}
	if msgpcode.IsExt(p[0]) {
		extra = 1
	}
	if len(p) < 1+w {
		return 0, false
	}
	var n uint64
	for _, x := range p[1 : 1+w] {
		n = n<<8 | uint64(x)
	}
	return 1 + w + extra + int(n), true
}

// FuzzCursor compares the cursor with github.com/vmihailenco/msgpack on
// any bytes: both read the same values (integers bit for bit with their
// sign, floats, strings and binaries, container lengths, nil) ending at the
// same offsets, and both refuse the same inputs. The cursor also refuses
// early what the reference finds out late (a length the bytes cannot
// hold): only whether the whole input reads is compared then. Seeds:
// testdata/fuzz/FuzzCursor and the values below.
func FuzzCursor(f *testing.F) {
	for _, v := range []any{
		uint64(math.MaxUint64), int64(math.MinInt64), int8(-32), int8(-33), uint8(200), int16(-300), uint16(60000),
		int32(-70000), uint32(1 << 31), 0.5, float32(1.5), math.NaN(), "", "kv-events", strings.Repeat("x", 40),
		strings.Repeat("y", 300), []byte{1, 2, 3}, nil, true, false,
		[]any{1, "a", nil}, map[string]any{"block_hash": uint64(1 << 63), "tokens_hash": -1},
		make([]any, 20), time.Unix(1_800_000_000, 5),
	} {
		p, err := vm.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	f.Add([]byte{0xc1})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xdf, 0, 0, 0, 1, 0xa1, 'k', 0xc0})
	f.Add([]byte{0xd4, 1, 2, 0xc7, 2, 5, 0xaa, 0xbb, 0xd8})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return // the reference recurses per level of nesting
		}
		got, err := walkCursor(b)
		want, werr := walkReference(b)
		if (err == nil) != (werr == nil) {
			t.Fatalf("cursor error %v, reference error %v on % x", err, werr, b)
		}
		if err != nil {
			var te *TypeError
			if !errors.Is(err, ErrTruncated) && !errors.As(err, &te) {
				t.Fatalf("error %v is neither a truncation nor a type error", err)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("cursor read\n%+v\nreference read\n%+v", got, want)
		}
	})
}

// sameInteger checks that Bits and Number read the integer at off as
// Integer did.
func sameInteger(b []byte, off int, s step) error {
	c := At(b, off)
	if bits, err := c.Bits(); err != nil || bits != s.Bits {
		return fmt.Errorf("Bits at %d: %#x, %v; Integer read %#x", off, bits, err, s.Bits)
	}
	want := float64(s.Bits)
	if s.Neg {
		want = float64(int64(s.Bits))
	}
	c.Seek(off)
	if f, err := c.Number(); err != nil || f != want {
		return fmt.Errorf("Number at %d: %v, %v; Integer read %#x", off, f, err, s.Bits)
	}
	return nil
}
