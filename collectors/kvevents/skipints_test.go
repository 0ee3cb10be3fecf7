package kvevents

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestSkipIntsMatchesSkip checks the integer skip (computed widths, a table
// for the rest) against the generic skip on token-id arrays as msgpack-go
// writes them (every integer width, signed and unsigned, a non-integer in
// the middle), cut at every byte: the same position after a whole array,
// errTruncated wherever the generic skip finds the payload ends inside a
// value.
func TestSkipIntsMatchesSkip(t *testing.T) {
	vals := []any{int64(5), int64(-3), uint64(200), int64(-100), uint64(40_000), int64(-30_000),
		uint64(151_935), int64(-70_000), uint64(1 << 40), int64(-(1 << 40)), "x", int64(127), uint64(255)}
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(true)
	for _, v := range vals {
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	full := buf.Bytes()
	for cut := 0; cut <= len(full); cut++ {
		b := full[:cut]
		want := &reader{b: b}
		var wantErr error
		for range vals {
			if wantErr = want.skip(); wantErr != nil {
				break
			}
		}
		got := &reader{b: b}
		gotErr := got.skipInts(len(vals))
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("cut at %d of %d: skipInts error %v, generic skip %v", cut, len(full), gotErr, wantErr)
		}
		if gotErr == nil {
			if got.i != want.i {
				t.Fatalf("whole array: skipInts stopped at %d, generic skip at %d", got.i, want.i)
			}
			continue
		}
		if !errors.Is(gotErr, errTruncated) {
			t.Fatalf("cut at %d: %v, want errTruncated", cut, gotErr)
		}
		if got.i > cut {
			t.Fatalf("cut at %d: reader left at %d, past the payload", cut, got.i)
		}
	}
}

// BenchmarkSkipInts skips one BlockStored's 256 token ids of a
// 151 936-word vocabulary (3- and 5-byte integers, as vLLM's arrive).
func BenchmarkSkipInts(b *testing.B) {
	// 64 different arrays: a branch predictor cannot learn the widths.
	var arrays [][]byte
	x := uint64(1)
	for range 64 {
		var buf bytes.Buffer
		e := msgpack.NewEncoder(&buf)
		e.UseCompactInts(true)
		for range 256 {
			x = x*6364136223846793005 + 1442695040888963407
			_ = e.Encode((x >> 33) % 151936)
		}
		arrays = append(arrays, buf.Bytes())
	}
	b.SetBytes(int64(len(arrays[0])))
	k := 0
	for b.Loop() {
		p := arrays[k%len(arrays)]
		k++
		r := reader{b: p}
		if err := r.skipInts(256); err != nil || r.i != len(p) {
			b.Fatal(err, r.i)
		}
	}
}
