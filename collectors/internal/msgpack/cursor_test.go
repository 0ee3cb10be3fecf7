package msgpack

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	vm "github.com/vmihailenco/msgpack/v5"
)

func encode(t testing.TB, compact bool, vals ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := vm.NewEncoder(&buf)
	e.UseCompactInts(compact)
	for _, v := range vals {
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestReads reads one value of each kind as the producers write them.
func TestReads(t *testing.T) {
	b := encode(t, true, uint64(math.MaxUint64), int64(-5), int64(-40_000), 3, "worker_id", []byte{0xde, 0xad},
		1.25, float32(-2.5), []any{1, 2}, map[string]any{"k": nil}, nil)
	c := New(b)
	if v, neg, err := c.Integer(); v != math.MaxUint64 || neg || err != nil {
		t.Fatalf("uint64: %#x %v %v", v, neg, err)
	}
	if v, neg, err := c.Integer(); int64(v) != -5 || !neg || err != nil {
		t.Fatalf("negative fixint: %d %v %v", int64(v), neg, err)
	}
	if v, err := c.SmallInt(); v != -40_000 || err != nil {
		t.Fatalf("int32: %d %v", v, err)
	}
	if v, err := c.Bits(); v != 3 || err != nil {
		t.Fatalf("Bits: %d %v", v, err)
	}
	if s, err := c.Str(); string(s) != "worker_id" || err != nil {
		t.Fatalf("str: %q %v", s, err)
	}
	if s, err := c.Str(); !bytes.Equal(s, []byte{0xde, 0xad}) || err != nil {
		t.Fatalf("bin: % x %v", s, err)
	}
	for _, want := range []float64{1.25, -2.5} {
		if f, err := c.Number(); f != want || err != nil {
			t.Fatalf("float: %v %v, want %v", f, err, want)
		}
	}
	if n, err := c.ArrayLen(); n != 2 || err != nil {
		t.Fatalf("array: %d %v", n, err)
	}
	if n, err := c.CountInts(); n != 0 || err == nil {
		// The next value is 1, not an array.
		t.Fatalf("CountInts on an integer: %d %v", n, err)
	}
	if err := c.SkipInts(2); err != nil {
		t.Fatal(err)
	}
	if n, err := c.MapLen(); n != 1 || err != nil {
		t.Fatalf("map: %d %v", n, err)
	}
	if err := c.Skip(); err != nil { // the key
		t.Fatal(err)
	}
	if !c.TryNil() || !c.TryNil() || c.TryNil() {
		t.Fatal("two nils, then the end")
	}
	if c.Left() != 0 || c.Pos() != len(b) {
		t.Fatalf("%d bytes left at %d", c.Left(), c.Pos())
	}
}

// TestErrors: each error names what was wanted, the code found and where;
// a refused value leaves the cursor before it.
func TestErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []byte
		read func(*Cursor) error
		want string
	}{
		{"map for an integer", []byte{0xc0, 0x81}, func(c *Cursor) error { c.TryNil(); _, err := c.Bits(); return err },
			"msgpack: want an integer, found a map (0x81) at byte 1"},
		{"string for an array", []byte{0xa1, 'x'}, func(c *Cursor) error { _, err := c.ArrayLen(); return err },
			"want an array, found a string (0xa1) at byte 0"},
		{"array for a map", []byte{0xdc, 0, 1, 1}, func(c *Cursor) error { _, err := c.MapLen(); return err },
			"want a map, found an array (0xdc) at byte 0"},
		{"float for a string", []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, func(c *Cursor) error { _, err := c.Str(); return err },
			"want a string, found a float (0xcb) at byte 0"},
		{"string for a number", []byte{0xa0}, func(c *Cursor) error { _, err := c.Number(); return err },
			"want a number, found a string (0xa0) at byte 0"},
		{"the invalid code", []byte{0x91, 0xc1}, func(c *Cursor) error { return c.Skip() },
			"want a value, found an invalid code (0xc1) at byte 1"},
		{"a count the bytes cannot hold", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, func(c *Cursor) error { _, err := c.ArrayLen(); return err },
			"msgpack: truncated: array at byte 0 claims 4294967295 items, 4 bytes left"},
		{"a map count, skipped", []byte{0xde, 0, 3, 1, 2, 3, 4, 5}, func(c *Cursor) error { return c.Skip() },
			"map at byte 0 claims 3 items"},
		{"a string cut", []byte{0xd9, 10, 'a'}, func(c *Cursor) error { _, err := c.Str(); return err },
			"msgpack: truncated: the value at byte 0 runs past the end (3 bytes)"},
		{"a uint64 cut", []byte{0x92, 0xcf, 1, 2}, func(c *Cursor) error { c.ArrayLen(); _, err := c.Bits(); return err },
			"the value at byte 1 runs past the end"},
		{"out of range", []byte{0xce, 0xff, 0xff, 0xff, 0xff}, func(c *Cursor) error { _, err := c.SmallInt(); return err },
			"msgpack: integer 4294967295 out of range at byte 0"},
		{"negative out of range", []byte{0xd3, 0xff, 0, 0, 0, 0, 0, 0, 0}, func(c *Cursor) error { _, err := c.SmallInt(); return err },
			"integer -72057594037927936 out of range"},
		{"nothing", nil, func(c *Cursor) error { _, err := c.Peek(); return err }, "truncated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.in)
			err := tt.read(&c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			var te *TypeError
			if !errors.Is(err, ErrTruncated) && !errors.As(err, &te) && !strings.Contains(err.Error(), "out of range") {
				t.Fatalf("error %v is neither ErrTruncated nor a *TypeError", err)
			}
			if c.Pos() > len(tt.in) {
				t.Fatalf("cursor at %d, past %d bytes", c.Pos(), len(tt.in))
			}
		})
	}
}

// TestRefusedLeavesCursor: a read that fails leaves the cursor where the
// value starts, so a caller can skip it or read it another way.
func TestRefusedLeavesCursor(t *testing.T) {
	for _, in := range [][]byte{{0xcd, 1}, {0xd9, 5, 'a'}, {0xdc, 0}, {0xdd, 0, 0, 0, 9}, {0xcb, 1, 2}, {0xce, 0xff, 0xff, 0xff, 0xff}} {
		for _, read := range []func(*Cursor) error{
			func(c *Cursor) error { _, _, err := c.Integer(); return err },
			func(c *Cursor) error { _, err := c.Str(); return err },
			func(c *Cursor) error { _, err := c.ArrayLen(); return err },
			func(c *Cursor) error { _, err := c.Number(); return err },
			func(c *Cursor) error { _, err := c.SmallInt(); return err },
			func(c *Cursor) error { return c.Skip() },
		} {
			b := append([]byte{0x01}, in...)
			c := At(b, 1)
			if err := read(&c); err != nil && c.Pos() != 1 {
				t.Errorf("% x: %v, cursor moved to %d", in, err, c.Pos())
			}
		}
	}
}

// TestSkipIntsMatchesSkip checks the integer skip (computed widths, a
// table for the rest) against Skip on token-id arrays as msgpack-go writes
// them (every integer width, signed and unsigned, a non-integer among
// them), cut at every byte: the same position after a whole array,
// ErrTruncated wherever Skip finds the payload ends inside a value, and
// never a cursor past the end.
func TestSkipIntsMatchesSkip(t *testing.T) {
	vals := []any{int64(5), int64(-3), uint64(200), int64(-100), uint64(40_000), int64(-30_000),
		uint64(151_935), int64(-70_000), uint64(1 << 40), int64(-(1 << 40)), "x", int64(127), uint64(255), []any{1, "y"}}
	full := encode(t, true, vals...)
	for cut := 0; cut <= len(full); cut++ {
		b := full[:cut]
		want := New(b)
		var wantErr error
		for range vals {
			if wantErr = want.Skip(); wantErr != nil {
				break
			}
		}
		got := New(b)
		gotErr := got.SkipInts(len(vals))
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("cut at %d of %d: SkipInts error %v, Skip %v", cut, len(full), gotErr, wantErr)
		}
		if gotErr == nil {
			if got.Pos() != want.Pos() {
				t.Fatalf("whole array: SkipInts stopped at %d, Skip at %d", got.Pos(), want.Pos())
			}
			continue
		}
		if !errors.Is(gotErr, ErrTruncated) {
			t.Fatalf("cut at %d: %v, want ErrTruncated", cut, gotErr)
		}
		if got.Pos() > cut {
			t.Fatalf("cut at %d: cursor left at %d, past the payload", cut, got.Pos())
		}
	}
}

// TestCutEverywhere: every value as the producers write it, cut at every
// byte, is refused as truncated by Skip, and Skip of the whole ends where
// the reference encoder stopped writing.
func TestCutEverywhere(t *testing.T) {
	vals := []any{map[string]any{"block_hashes": []any{uint64(1 << 63), -7, "h"}, "medium": nil, "ts": 1.5},
		[]byte(strings.Repeat("b", 300)), strings.Repeat("s", 70_000), float32(3), true}
	for _, v := range vals {
		full := encode(t, false, v)
		c := New(full)
		if err := c.Skip(); err != nil || c.Left() != 0 {
			t.Fatalf("%T whole: %v, %d left", v, err, c.Left())
		}
		for cut := 0; cut < len(full); cut++ {
			c := New(full[:cut])
			if err := c.Skip(); !errors.Is(err, ErrTruncated) || c.Pos() > cut {
				t.Fatalf("%T cut at %d: %v at %d", v, cut, err, c.Pos())
			}
		}
	}
}

// TestTypeOf names every code as the reference classifies it.
func TestTypeOf(t *testing.T) {
	for _, tt := range []struct {
		v    any
		want Type
	}{{-1, Int}, {uint64(1 << 60), Int}, {int8(-100), Int}, {"s", Str}, {[]byte{1}, Bin}, {1.5, Float},
		{nil, Nil}, {true, Bool}, {[]int{1}, Array}, {map[string]int{}, Map}} {
		p := encode(t, true, tt.v)
		if got := TypeOf(p[0]); got != tt.want {
			t.Errorf("%#v (0x%02x): %s, want %s", tt.v, p[0], got, tt.want)
		}
	}
	if TypeOf(0xc1) != Invalid || TypeOf(0xd6) != Ext || !Signed(0xd3) || Signed(0xcf) || !Signed(0xff) {
		t.Error("invalid, ext or the signed codes")
	}
}

// BenchmarkSkipInts skips one BlockStored's 256 token ids of a 151 936-word
// vocabulary (3- and 5-byte integers, as vLLM's arrive), over 64 arrays so
// that a branch predictor cannot learn the widths.
func BenchmarkSkipInts(b *testing.B) {
	var arrays [][]byte
	x := uint64(1)
	for range 64 {
		ids := make([]any, 256)
		for i := range ids {
			x = x*6364136223846793005 + 1442695040888963407
			ids[i] = (x >> 33) % 151936
		}
		arrays = append(arrays, encode(b, true, ids...))
	}
	b.SetBytes(int64(len(arrays[0])))
	k := 0
	for b.Loop() {
		p := arrays[k%len(arrays)]
		k++
		c := New(p)
		if err := c.SkipInts(256); err != nil || c.Left() != 0 {
			b.Fatal(err, c.Pos())
		}
	}
}
