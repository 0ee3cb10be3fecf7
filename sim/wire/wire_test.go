package wire

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

func sampleEvents() []kvcache.Event {
	h := kvcache.NewHasher(1)
	toks := make([]uint32, 48)
	for i := range toks {
		toks[i] = uint32(151000 + i)
	}
	hs := h.Extend(nil, toks)
	return []kvcache.Event{
		{Kind: kvcache.Removed, Hashes: []uint64{0xfedcba9876543210}},
		{Kind: kvcache.Stored, Hashes: hs[:2], Tokens: toks[:32]},
		{Kind: kvcache.Stored, Hashes: hs[2:], Parent: hs[1], HasParent: true, Tokens: toks[32:]},
		{Kind: kvcache.Cleared},
	}
}

// TestBatchShapes encodes the same events in every encoding and hash kind
// and holds them to the independent checker.
func TestBatchShapes(t *testing.T) {
	evs := sampleEvents()
	for _, c := range []struct {
		f    Format
		enc  string
		hash string
	}{
		{Format{Map, HashUint64, ArrayBatch}, "map", "uint64"},
		{Format{Array, HashUint64, ArrayBatch}, "array", "uint64"},
		{Format{Map, HashBytes, ArrayBatch}, "map", "bytes"},
		{Format{Array, HashBytes, ArrayBatch}, "array", "bytes"},
		{Format{Map, HashInt64, ArrayBatch}, "map", "int64"},
		{Format{Array, HashInt64, ArrayBatch}, "array", "int64"},
		{Format{Map, HashUint64, MapBatch}, "map", "uint64"},
		{Format{Array, HashBytes, MapBatch}, "array", "bytes"},
	} {
		t.Run(c.enc+"/"+c.hash+"/"+c.f.Batch.String()+"-batch", func(t *testing.T) {
			p := c.f.AppendBatch(nil, 1.7959e9, evs, 2)
			b, err := wirecheck.Payload(p, wirecheck.Options{Encoding: c.enc, Hash: c.hash, VLLMKeys: true})
			if err != nil {
				t.Fatal(err)
			}
			if first := map[BatchShape]byte{ArrayBatch: 0x93, MapBatch: 0x83}[c.f.Batch]; p[0] != first {
				t.Fatalf("batch starts with %#x, want %#x (a %s of 3)", p[0], first, c.f.Batch)
			}
			// The checker reports an array batch's length, 0 for a map.
			wantLen := map[BatchShape]int{ArrayBatch: 3, MapBatch: 0}[c.f.Batch]
			if b.Len != wantLen || b.TS != 1.7959e9 || b.Rank == nil || *b.Rank != 2 || len(b.Events) != 4 {
				t.Fatalf("batch %+v, want %s batch {ts, 4 events, rank 2}", b, c.f.Batch)
			}
			want := []string{"BlockRemoved", "BlockStored", "BlockStored", "AllBlocksCleared"}
			for i, e := range b.Events {
				if e.Kind != want[i] {
					t.Errorf("event %d is %s, want %s", i, e.Kind, want[i])
				}
			}
			// Whatever the representation, the key is the uint64 hash.
			if b.Events[0].Keys[0] != 0xfedcba9876543210 {
				t.Errorf("removed key %x", b.Events[0].Keys[0])
			}
			st := b.Events[2]
			if st.Parent == nil || *st.Parent != evs[2].Parent || st.Keys[0] != evs[2].Hashes[0] || st.NumTokens != 16 || st.Medium != "GPU" {
				t.Errorf("second store %+v does not match %+v", st, evs[2])
			}
			if b.Events[1].Parent != nil {
				t.Errorf("first block of a prompt has a parent")
			}
			wantFields := map[string][2]int{"map": {8, 3}, "array": {12, 4}}[c.enc]
			if b.Events[1].Fields != wantFields[0] || b.Events[0].Fields != wantFields[1] {
				t.Errorf("stored has %d fields, removed %d; want %v", b.Events[1].Fields, b.Events[0].Fields, wantFields)
			}
		})
	}
}

// TestMinimalInts: integers use the smallest msgpack form, as msgspec and
// Python msgpack write them; full-width hashes are 0xcf.
func TestMinimalInts(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		want []byte
	}{
		{5, []byte{5}}, {200, []byte{0xcc, 200}}, {70000, []byte{0xce, 0, 1, 0x11, 0x70}},
		{1 << 63, []byte{0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0}},
	} {
		if got := appendUint(nil, c.v); !bytes.Equal(got, c.want) {
			t.Errorf("%d -> % x, want % x", c.v, got, c.want)
		}
	}
	if got := appendInt(nil, -1<<40); got[0] != 0xd3 {
		t.Errorf("-2^40 -> % x, want int64 (0xd3)", got)
	}
	if got := appendInt(nil, -3); !bytes.Equal(got, []byte{0xfd}) {
		t.Errorf("-3 -> % x, want negative fixint", got)
	}
}

func TestFramesAndLayouts(t *testing.T) {
	live := Live("kv", 7, []byte{0x90})
	if len(live) != 3 || string(live[0]) != "kv" || binary.BigEndian.Uint64(live[1]) != 7 {
		t.Fatalf("live frames %q", live)
	}
	payload := Format{}.AppendBatch(nil, 1.7e9, nil, 0)
	for _, l := range []Layout{V26, Legacy} {
		r, err := wirecheck.ReplyFrames(l.Reply("kv", 9, payload), l.String(), wirecheck.Options{})
		if err != nil || r.Seq != 9 || r.End {
			t.Errorf("%s reply: %+v, %v", l, r, err)
		}
		end, err := wirecheck.ReplyFrames(l.End(), l.String(), wirecheck.Options{})
		if err != nil || !end.End {
			t.Errorf("%s end marker: %+v, %v", l, end, err)
		}
	}
}

func TestParseRequest(t *testing.T) {
	id, seq, err := ParseRequest([][]byte{{1, 2}, {}, Seq8(42)})
	if err != nil || seq != 42 || !bytes.Equal(id, []byte{1, 2}) {
		t.Fatalf("got %v %d %v", id, seq, err)
	}
	for _, bad := range [][][]byte{
		{{1}, Seq8(1)},         // no delimiter (2 frames at the ROUTER)
		{{1}, {0}, Seq8(1)},    // delimiter not empty
		{{1}, {}, {1, 2, 3}},   // short seq
		{{1}, {}, Seq8(1), {}}, // extra frame
	} {
		if _, _, err := ParseRequest(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestRing(t *testing.T) {
	r := NewRing(3)
	for s := uint64(0); s < 5; s++ {
		r.Push(s, []byte{byte(s)})
	}
	var got []uint64
	r.From(0, func(s uint64, p []byte) {
		if p[0] != byte(s) {
			t.Errorf("seq %d holds payload %d", s, p[0])
		}
		got = append(got, s)
	})
	if len(got) != 3 || got[0] != 2 || got[2] != 4 {
		t.Fatalf("ring keeps %v, want the last 3 (2..4)", got)
	}
	got = got[:0]
	r.From(4, func(s uint64, _ []byte) { got = append(got, s) })
	if len(got) != 1 {
		t.Fatalf("From(4) gave %v", got)
	}
	r.Reset()
	if r.Len() != 0 {
		t.Fatal("reset ring not empty")
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte{1}, []byte{}, Seq8(3))
	f.Add([]byte{}, []byte{0}, []byte{1})
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		_, seq, err := ParseRequest([][]byte{a, b, c})
		if err == nil && (len(b) != 0 || len(c) != 8 || seq != binary.BigEndian.Uint64(c)) {
			t.Fatalf("accepted %q %q %q", a, b, c)
		}
	})
}

// BenchmarkAppendBatch measures encoding of a typical step: one request's
// 8-block store and 8 single-block evictions.
func BenchmarkAppendBatch(b *testing.B) {
	h := kvcache.NewHasher(1)
	toks := make([]uint32, 128)
	for i := range toks {
		toks[i] = uint32(100000 + i*7)
	}
	hs := h.Extend(nil, toks)
	evs := []kvcache.Event{{Kind: kvcache.Stored, Hashes: hs, Tokens: toks}}
	for _, x := range hs {
		evs = append(evs, kvcache.Event{Kind: kvcache.Removed, Hashes: []uint64{x ^ 1}})
	}
	for _, f := range []Format{{Map, HashUint64, ArrayBatch}, {Array, HashBytes, ArrayBatch}} {
		b.Run(f.Encoding.String()+"/"+f.Hash.String(), func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				buf = f.AppendBatch(buf[:0], 1.7e9, evs, 0)
			}
			blocks := 0
			for _, e := range evs {
				blocks += len(e.Hashes)
			}
			b.ReportMetric(float64(len(evs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "block-events/s")
		})
	}
}
