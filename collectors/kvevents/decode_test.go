package kvevents

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

const (
	h1 = uint64(0xd1b46c644854acaf) // above int64 range: msgpack 0xcf
	h2 = uint64(0xe5561014958f4013)
	h3 = uint64(0x253a700448fdc650)
)

func stored(parent uint64, hasParent bool, ntok int, hs ...uint64) collectors.KVEvent {
	return collectors.KVEvent{Kind: collectors.BlockStored, Hashes: hs, Parent: parent, HasParent: hasParent,
		NumTokens: ntok, BlockSize: 16, Medium: "GPU"}
}

func removed(hs ...uint64) collectors.KVEvent {
	return collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: hs, Medium: "GPU"}
}

func fullAttention(e collectors.KVEvent) collectors.KVEvent { e.GroupKind = "full_attention"; return e }

var cleared = collectors.KVEvent{Kind: collectors.AllBlocksCleared, Medium: "GPU"}

func TestDecodeBatch(t *testing.T) {
	neg := int64(-0x2e3f4a5b6c7d8e9f)
	sha := make([]byte, 32)
	for i := range sha {
		sha[i] = byte(i + 1)
	}
	tests := []struct {
		name    string
		payload []byte
		want    Batch
	}{{
		name:    "map events (vLLM >= 0.24)",
		payload: batchOf(1795993508.5, storedMap(nil, h1, h2), removedMap(h3), om{{"type", "AllBlocksCleared"}}),
		want: Batch{TS: 1795993508.5, HasRank: true, Events: []collectors.KVEvent{
			stored(0, false, 32, h1, h2), removed(h3), cleared}},
	}, {
		name:    "array events with every vLLM position",
		payload: batchOf(2.25, storedArray(h3, h1, h2), removedArray(h3), []any{"AllBlocksCleared"}),
		want: Batch{TS: 2.25, HasRank: true, Events: []collectors.KVEvent{
			fullAttention(stored(h3, true, 32, h1, h2)), removed(h3), cleared}},
	}, {
		name: "llm-d-inference-sim array mode: parent 0 means no parent",
		payload: batchOf(1, []any{"BlockStored", hashList(h1), uint64(0), tokens(16), 16, nil, "GPU", nil, nil},
			[]any{"BlockRemoved", hashList(h1), "GPU"}),
		want: Batch{TS: 1, HasRank: true, Events: []collectors.KVEvent{stored(0, false, 16, h1), removed(h1)}},
	}, {
		name: "SGLang: signed int64 hashes keep their bits, attn_dp_rank in slot 3",
		payload: mpEncode([]any{3.0, []any{
			[]any{"BlockStored", []any{neg, int64(5)}, neg, tokens(32), 16, nil},
			[]any{"BlockRemoved", []any{neg}},
		}, 2}),
		want: Batch{TS: 3, Rank: 2, HasRank: true, Events: []collectors.KVEvent{
			{Kind: collectors.BlockStored, Hashes: []uint64{uint64(neg), 5}, Parent: uint64(neg), HasParent: true,
				NumTokens: 32, BlockSize: 16, Medium: "GPU"},
			{Kind: collectors.BlockRemoved, Hashes: []uint64{uint64(neg)}, Medium: "GPU"},
		}},
	}, {
		name: "bytes hashes: last 8 bytes big-endian; short ones right-aligned",
		payload: batchOf(4, om{{"type", "BlockStored"}, {"block_hashes", []any{sha, []byte{0x01, 0x02}, "abc"}},
			{"parent_block_hash", sha}, {"token_ids", tokens(48)}, {"block_size", 16}, {"medium", "CPU"}}),
		want: Batch{TS: 4, HasRank: true, Events: []collectors.KVEvent{{Kind: collectors.BlockStored,
			Hashes: []uint64{0x191a1b1c1d1e1f20, 0x0102, 0x616263}, Parent: 0x191a1b1c1d1e1f20, HasParent: true,
			NumTokens: 48, BlockSize: 16, Medium: "CPU"}}},
	}, {
		name:    "NaN ts is treated as absent",
		payload: mpEncode([]any{math.NaN(), []any{removedMap(h1)}, 0}),
		want:    Batch{HasRank: true, Events: []collectors.KVEvent{removed(h1)}},
	}, {
		name:    "old vLLM: 2-element batch, no rank",
		payload: mpEncode([]any{5.5, []any{removedArray(h1)}}),
		want:    Batch{TS: 5.5, Events: []collectors.KVEvent{removed(h1)}},
	}, {
		name:    "map batch",
		payload: mpEncode(om{{"events", []any{removedMap(h2)}}, {"ts", 6.0}, {"data_parallel_rank", 3}}),
		want:    Batch{TS: 6, Rank: 3, HasRank: true, Events: []collectors.KVEvent{removed(h2)}},
	}, {
		// vLLM main after vllm-project/vllm#42892, until EventBatch was
		// array_like again: msgspec writes the fields in declaration order.
		name:    "map batch as vLLM main wrote it for a while",
		payload: mpEncode(om{{"ts", 9.0}, {"events", []any{storedMap(nil, h1), removedMap(h2)}}, {"data_parallel_rank", 0}}),
		want:    Batch{TS: 9, HasRank: true, Events: []collectors.KVEvent{stored(0, false, 16, h1), removed(h2)}},
	}, {
		name:    "map batch without a rank (omit_defaults drops a nil one)",
		payload: mpEncode(om{{"ts", 9.5}, {"events", []any{removedMap(h1)}}}),
		want:    Batch{TS: 9.5, Events: []collectors.KVEvent{removed(h1)}},
	}, {
		name:    "nil rank and nil medium",
		payload: mpEncode([]any{7.0, []any{om{{"type", "BlockRemoved"}, {"block_hashes", hashList(h1)}, {"medium", nil}}}, nil}),
		want:    Batch{TS: 7, Events: []collectors.KVEvent{removed(h1)}},
	}, {
		name: "LoRA and offloaded medium",
		payload: batchOf(8, om{{"type", "BlockStored"}, {"block_hashes", hashList(h1)}, {"parent_block_hash", nil},
			{"token_ids", tokens(16)}, {"block_size", 16}, {"lora_id", 1}, {"medium", "CPU_PINNED"}, {"lora_name", "sim-lora-a"}}),
		want: Batch{TS: 8, HasRank: true, Events: []collectors.KVEvent{{Kind: collectors.BlockStored, Hashes: []uint64{h1},
			NumTokens: 16, BlockSize: 16, Medium: "CPU_PINNED", LoRA: "sim-lora-a"}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBatch(tt.payload)
			if err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			if least := memOf(got); got.Mem < least {
				t.Errorf("Mem %d, less than the %d bytes its events and hashes hold", got.Mem, least)
			}
			got.Mem = 0
			dropRoots(t, got.Events)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Unknown and malformed input is skipped and counted; the rest of the batch
// is kept.
func TestDecodeBatchSkipsAndCounts(t *testing.T) {
	tests := []struct {
		name      string
		payload   []byte
		want      []collectors.KVEvent
		stats     Stats
		problemIn string
	}{{
		name: "unknown event types in both encodings",
		payload: batchOf(1, removedArray(h1), []any{"BlockMoved", hashList(h2), "GPU"},
			om{{"type", "CacheResized"}, {"blocks", 9}}, removedMap(h3)),
		want:  []collectors.KVEvent{removed(h1), removed(h3)},
		stats: Stats{UnknownEvents: 2, FirstUnknown: "BlockMoved", UnknownByType: map[string]int{"BlockMoved": 1, "CacheResized": 1}},
	}, {
		name: "unknown map keys and trailing array positions",
		payload: batchOf(1, append(removedMap(h1), kv{"placement", "rack-1"}, kv{"future_field", []any{1, 2}}),
			append(storedArray(nil, h2), nil, nil, nil, "future-1", "future-2"), om{{"type", "AllBlocksCleared"}, {"why", "sleep"}}),
		want:  []collectors.KVEvent{removed(h1), fullAttention(stored(0, false, 16, h2)), cleared},
		stats: Stats{UnknownFields: 5},
	}, {
		name:    "unknown batch fields",
		payload: mpEncode(om{{"ts", 1.0}, {"events", []any{removedMap(h1)}}, {"producer", "x"}}),
		want:    []collectors.KVEvent{removed(h1)},
		stats:   Stats{UnknownFields: 1},
	}, {
		name: "malformed events: rest kept",
		payload: batchOf(1,
			om{{"type", "BlockStored"}, {"block_hashes", "not-a-list"}},
			removedMap(h1),
			[]any{"BlockStored"},
			om{{"block_hashes", hashList(h2)}},
			[]any{"BlockRemoved", []any{1.5}},
			42,
			removedArray(h2)),
		want:      []collectors.KVEvent{removed(h1), removed(h2)},
		stats:     Stats{Malformed: 5},
		problemIn: "block_hashes",
	}, {
		// SGLang (between its metadata extension and sglang#37482) puts
		// {"cache_salt": …} at position 7 of a salted store, and newer
		// SGLang sends cache_salt as a map key: request metadata, known.
		name: "SGLang's cache_salt, in both encodings",
		payload: batchOf(1,
			[]any{"BlockStored", hashList(h1), nil, tokens(16), 16, nil, "GPU", om{{"cache_salt", "tenant-a"}}},
			append(storedMap(nil, h2), kv{"cache_salt", "tenant-b"})),
		want:  []collectors.KVEvent{stored(0, false, 16, h1), stored(0, false, 16, h2)},
		stats: Stats{},
	}, {
		name:    "unknown tag with hashes first in the map is not malformed",
		payload: batchOf(1, om{{"block_hashes", hashList(h1)}, {"type", "Other"}}, removedMap(h2)),
		want:    []collectors.KVEvent{removed(h2)},
		stats:   Stats{UnknownEvents: 1, FirstUnknown: "Other", UnknownByType: map[string]int{"Other": 1}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBatch(tt.payload)
			if err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			dropRoots(t, got.Events)
			if !reflect.DeepEqual(got.Events, tt.want) {
				t.Errorf("events\ngot  %+v\nwant %+v", got.Events, tt.want)
			}
			if !strings.Contains(got.Stats.FirstMalformed, tt.problemIn) {
				t.Errorf("FirstMalformed %q does not mention %q", got.Stats.FirstMalformed, tt.problemIn)
			}
			got.Stats.FirstMalformed = ""
			if !reflect.DeepEqual(got.Stats, tt.stats) {
				t.Errorf("stats %+v, want %+v", got.Stats, tt.stats)
			}
		})
	}
}

func TestDecodeBatchRejectsNonBatches(t *testing.T) {
	good := batchOf(1, removedMap(h1))
	tests := []struct {
		name    string
		payload []byte
		wantErr string
	}{
		{"empty", nil, "empty payload"},
		{"integer", mpEncode(7), "not a batch"},
		{"string", mpEncode("hello"), "not a batch"},
		{"one-element array", mpEncode([]any{1.0}), "want [ts, events"},
		{"events not an array", mpEncode([]any{1.0, "x", 0}), "batch events"},
		{"ts not a number", mpEncode([]any{"now", []any{}, 0}), "batch ts"},
		{"map without events", mpEncode(om{{"ts", 1.0}}), "no events"},
		{"truncated", good[:len(good)-3], "truncated"},
		{"trailing bytes", append(append([]byte{}, good...), 0x01, 0x02), "2 bytes after"},
		{"huge array length, no data", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "truncated"},
		{"invalid code", []byte{0x92, 0xc1, 0x90}, "batch ts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := DecodeBatch(tt.payload)
			if err == nil {
				t.Fatalf("no error; got %+v", b)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not mention %q", err, tt.wantErr)
			}
			if b.Events != nil {
				t.Errorf("events returned with an error: %+v", b.Events)
			}
		})
	}
}

// Every skip path of the reader, through an unknown map key.
func TestSkipEveryType(t *testing.T) {
	values := []raw{
		{0x05}, {0xe0}, {0xc0}, {0xc2}, {0xc3},
		{0xcc, 1}, {0xcd, 1, 2}, {0xce, 1, 2, 3, 4}, {0xcf, 1, 2, 3, 4, 5, 6, 7, 8},
		{0xd0, 1}, {0xd1, 1, 2}, {0xd2, 1, 2, 3, 4}, {0xd3, 1, 2, 3, 4, 5, 6, 7, 8},
		{0xca, 1, 2, 3, 4}, {0xcb, 1, 2, 3, 4, 5, 6, 7, 8},
		{0xa2, 'h', 'i'}, {0xd9, 1, 'x'}, {0xda, 0, 1, 'x'}, {0xdb, 0, 0, 0, 1, 'x'},
		{0xc4, 1, 9}, {0xc5, 0, 1, 9}, {0xc6, 0, 0, 0, 1, 9},
		{0xd4, 1, 9}, {0xd5, 1, 9, 9}, {0xd6, 1, 9, 9, 9, 9}, {0xd7, 1, 1, 2, 3, 4, 5, 6, 7, 8},
		{0xd8, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		{0xc7, 2, 1, 9, 9}, {0xc8, 0, 2, 1, 9, 9}, {0xc9, 0, 0, 0, 2, 1, 9, 9},
		{0x92, 0x01, 0x91, 0x80}, {0xdc, 0, 1, 0x01}, {0xdd, 0, 0, 0, 1, 0x01},
		{0x81, 0xa1, 'k', 0x90}, {0xde, 0, 1, 0xa1, 'k', 0x01}, {0xdf, 0, 0, 0, 1, 0xa1, 'k', 0x01},
	}
	for _, v := range values {
		payload := batchOf(1, append(removedMap(h1), kv{"x", v}))
		b, err := DecodeBatch(payload)
		if err != nil {
			t.Fatalf("value % x: %v", []byte(v), err)
		}
		if len(b.Events) != 1 || b.Stats.UnknownFields != 1 {
			t.Errorf("value % x: events %d, unknown fields %d; want 1 and 1", []byte(v), len(b.Events), b.Stats.UnknownFields)
		}
	}
}

// The hashes of consecutive events share one backing array; appending the
// next event's hashes must never change an earlier event's.
func TestDecodeBatchHashesDoNotAlias(t *testing.T) {
	var events []any
	var want [][]uint64
	for i := 0; i < 50; i++ {
		hs := make([]uint64, i%7+1)
		for j := range hs {
			hs[j] = uint64(i*100+j) | 1<<63
		}
		want = append(want, hs)
		events = append(events, storedMap(nil, hs...))
	}
	b, err := DecodeBatch(batchOf(1, events...))
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range b.Events {
		if !reflect.DeepEqual(ev.Hashes, want[i]) {
			t.Fatalf("event %d hashes %x, want %x", i, ev.Hashes, want[i])
		}
		if cap(ev.Hashes) != len(ev.Hashes) {
			t.Fatalf("event %d hashes have spare capacity %d: an append by the pool would overwrite the next event", i, cap(ev.Hashes))
		}
	}
}

// A batch claiming a million events of one byte each (nil: malformed)
// reserves room for what its bytes can hold, not for the count it claims:
// a hostile payload within MaxMsgSize cannot make the decoder allocate a
// hundred times its size.
func TestDecodeBatchRoomFromBytes(t *testing.T) {
	const n = 1 << 20
	payload := []byte{0x92, 0xcb, 0x41, 0xda, 0xd2, 0x74, 0x80, 0, 0, 0, 0xdd, n >> 24, n >> 16 & 0xff, n >> 8 & 0xff, n & 0xff}
	payload = append(payload, make([]byte, n)...)
	for i := len(payload) - n; i < len(payload); i++ {
		payload[i] = 0xc0 // nil
	}
	b, err := DecodeBatch(payload)
	if err != nil {
		t.Fatal(err)
	}
	if b.Stats.Malformed != n || len(b.Events) != 0 {
		t.Errorf("malformed %d, %d events; want %d malformed, none kept", b.Stats.Malformed, len(b.Events), n)
	}
	if most := len(payload)/minEventBytes + 1; cap(b.Events) > most {
		t.Errorf("room for %d events reserved, want at most %d (the bytes' worth)", cap(b.Events), most)
	}
}

// memOf is the least a decoded batch holds: its events and their hashes.
func memOf(b Batch) int {
	n := len(b.Events) * kvEventSize
	for _, ev := range b.Events {
		n += len(ev.Hashes)*8 + len(ev.LoRA)
	}
	return n
}

// Mem counts every array the decoder made, including those a growing
// hash list left behind that earlier events still use, and never much more
// than what the batch holds.
func TestDecodeBatchMem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []any
	}{
		{"one event, 3000 hashes", []any{removedMap(make([]uint64, 3000)...)}},
		{"many events, growing", func() []any {
			var evs []any
			for e := 0; e < 50; e++ {
				evs = append(evs, removedMap(make([]uint64, 10*e)...))
			}
			return evs
		}()},
		{"tiny events", func() []any {
			var evs []any
			for e := 0; e < 500; e++ {
				evs = append(evs, removedMap(h1))
			}
			return evs
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := DecodeBatch(batchOf(1, tc.events...))
			if err != nil {
				t.Fatal(err)
			}
			least := memOf(b)
			if b.Mem < least || b.Mem > 4*least+4096 {
				t.Errorf("Mem %d for a batch holding at least %d bytes", b.Mem, least)
			}
		})
	}
}

// TestDecodeBatchDroppedEventLeavesNothing: an event is decoded in place
// in the batch's array, so a malformed or unknown one that was dropped
// after some of its fields were read must leave none of them to the event
// decoded into its slot next. The oracle is the same event decoded alone.
func TestDecodeBatchDroppedEventLeavesNothing(t *testing.T) {
	next := om{{"type", "BlockStored"}, {"block_hashes", hashList(h3)}} // every other field absent
	alone, err := DecodeBatch(batchOf(1, next))
	if err != nil || len(alone.Events) != 1 {
		t.Fatalf("the event alone: %v, %d events", err, len(alone.Events))
	}
	dropped := map[string]any{
		"malformed late": om{{"type", "BlockStored"}, {"block_hashes", hashList(h1, h2)}, {"parent_block_hash", h2},
			{"medium", "CPU_TIER"}, {"lora_name", "adapter-a"}, {"block_size", 32}, {"token_ids", "not-a-list"}},
		"unknown tag last": om{{"block_hashes", hashList(h1)}, {"parent_block_hash", h2}, {"medium", "CPU_TIER"},
			{"lora_name", "adapter-a"}, {"token_ids", tokens(16)}, {"type", "BlockMoved"}},
		"malformed array": []any{"BlockStored", hashList(h1), h2, tokens(16), 16, 7, "CPU_TIER", []any{1.5}},
	}
	for name, ev := range dropped {
		got, err := DecodeBatch(batchOf(1, ev, next))
		if err != nil {
			t.Fatalf("%s: DecodeBatch: %v", name, err)
		}
		if got.Stats.Malformed+got.Stats.UnknownEvents != 1 {
			t.Fatalf("%s: the first event was not dropped: %+v", name, got.Stats)
		}
		if !reflect.DeepEqual(got.Events, alone.Events) {
			t.Errorf("%s: the next event decoded as\n%+v\nwant, as alone,\n%+v", name, got.Events, alone.Events)
		}
	}
}
