package natsevents

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// bothWays decodes a bare msgpack batch with the fast path alone and with
// the general decoder alone, each on a fresh reader, hashes owned as
// DecodeAll owns them. fast reports whether the fast path took it.
func bothWays(b []byte) (fast bool, fastEvs, general []Event, err error) {
	f := &readerPair{}
	f.batch = &fastEvs
	if fast = isBatch(b) && f.fastBatch(b); fast && len(f.hs) > 0 {
		f.ownHashes(fastEvs)
	}
	g := &readerPair{}
	g.batch = &general
	g.m.c.Reset(b)
	if err = g.decodeBatch(&g.m, 0); err == nil {
		err = trailing(&g.m, "batch")
	}
	if len(g.hs) > 0 {
		g.ownHashes(general)
	}
	return fast, fastEvs, general, err
}

func mp(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFastPathAsGeneral: on the batches Dynamo sends, and on the variants
// rmp_serde and newer Dynamos write, the fast path gives exactly the
// general decoder's events (unknown fields counted, tiers, parents, both
// spellings of variants); what it declines, the general decoder reads or
// refuses alone.
func TestFastPathAsGeneral(t *testing.T) {
	removed := func(hs ...uint64) map[string]any {
		return map[string]any{"removed": map[string]any{"block_hashes": hs}}
	}
	withExtra := dynamoEvent(5, 7, 1, storedData(uint64(99), 1, 2, 3))
	withExtra["shiny"] = true
	withExtra["storage_tier"] = "host_pinned"
	withExtra["event"].(map[string]any)["extra"] = []any{1, 2}
	stored := withExtra["event"].(map[string]any)["data"].(map[string]any)["stored"].(map[string]any)
	stored["blocks"].([]any)[0].(map[string]any)["new_field"] = "x"
	stored["lora"] = nil
	for _, tt := range []struct {
		name string
		in   []byte
		fast bool
		ok   bool
	}{
		{"stored, removed, cleared", mp(t, []any{dynamoEvent(9, 1, 0, storedData(nil, 11, 12)),
			dynamoEvent(9, 2, 0, removed(11)), dynamoEvent(9, 3, 0, "cleared")}), true, true},
		{"unknown fields and a tier", mp(t, []any{withExtra}), true, true},
		{"Rust spellings", mp(t, []any{dynamoEvent(1, 1, 0, map[string]any{"Stored": map[string]any{"blocks": []any{}}}),
			dynamoEvent(1, 2, 0, map[string]any{"Removed": map[string]any{"block_hashes": []uint64{}, "why": 1}}),
			dynamoEvent(1, 3, 0, "Cleared"), dynamoEvent(1, 4, 0, map[string]any{"cleared": nil})}), true, true},
		{"no tier, signed hashes", mp(t, []any{map[string]any{"worker_id": 3, "storage_tier": nil,
			"event": map[string]any{"event_id": 1, "data": removed(1<<63, 5)}}}), true, true},
		{"an unknown variant", mp(t, []any{dynamoEvent(1, 1, 0, map[string]any{"accessed": map[string]any{"n": 1}})}), false, true},
		{"an unknown unit variant", mp(t, []any{dynamoEvent(1, 1, 0, "touched")}), false, true},
		{"positional", mp(t, []any{[]any{1, []any{2, "cleared", 0}}}), false, true},
		{"data with two variants", mp(t, []any{dynamoEvent(1, 1, 0, map[string]any{"stored": map[string]any{}, "x": 1})}), false, true},
		{"a second block_hash", mp(t, []any{dynamoEvent(1, 1, 0, map[string]any{"stored": map[string]any{"blocks": []any{
			mpOrdered{{"block_hash", 1}, {"block_hash", 2}}}}})}), false, true},
		{"an envelope field in an event", mp(t, []any{map[string]any{"worker_id": 1, "sequence": 3,
			"event": map[string]any{"event_id": 1, "data": "cleared"}}}), false, true},
		{"no event id", mp(t, []any{map[string]any{"worker_id": 1, "event": map[string]any{"data": "cleared"}}}), false, false},
		{"rank over 255", mp(t, []any{dynamoEvent(1, 1, 300, "cleared")}), false, false},
		{"a string hash", mp(t, []any{dynamoEvent(1, 1, 0, map[string]any{"removed": map[string]any{"block_hashes": []any{"x"}}})}), false, false},
		{"trailing bytes", append(mp(t, []any{dynamoEvent(1, 1, 0, "cleared")}), 0xc0), false, false},
		{"truncated", mp(t, []any{dynamoEvent(1, 1, 0, removed(1, 2, 3))})[:40], false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fast, got, want, err := bothWays(tt.in)
			if fast != tt.fast || (err == nil) != tt.ok {
				t.Fatalf("fast path took it: %v (want %v); general: %v", fast, tt.fast, err)
			}
			if fast && !reflect.DeepEqual(got, want) {
				t.Fatalf("fast\n%+v\ngeneral\n%+v", got, want)
			}
			// Through DecodeAll, declined or not, the general decoder's
			// answer (a bare batch: no envelope's fields on its events;
			// a pooled reader's empty hashes may be nil or not).
			all, aerr := DecodeAll(tt.in, nil)
			for _, evs := range [][]Event{all, want} {
				for i := range evs {
					e := &evs[i]
					e.PublisherID, e.Sequence, e.PublishedMS = 0, 0, 0
					if len(e.KV.Hashes) == 0 {
						e.KV.Hashes = nil
					}
				}
			}
			if (aerr == nil) != (err == nil) || (err == nil && !reflect.DeepEqual(all, want)) {
				t.Fatalf("DecodeAll %+v, %v\ngeneral %+v, %v", all, aerr, want, err)
			}
		})
	}
}

// mpOrdered is a msgpack map with its keys in order, repeats allowed.
type mpOrdered []struct {
	k string
	v any
}

func (m mpOrdered) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeMapLen(len(m)); err != nil {
		return err
	}
	for _, kv := range m {
		if err := e.EncodeString(kv.k); err != nil {
			return err
		}
		if err := e.Encode(kv.v); err != nil {
			return err
		}
	}
	return nil
}

// TestFastPathAllocations: a batch of 128 RouterEvents costs the fast path
// no allocation once its reader and the caller's events are warm: none
// per event, none per block (the hashes' own array is DecodeAll's, one a
// message).
func TestFastPathAllocations(t *testing.T) {
	var payload []byte
	for i := range 128 {
		ev := kvcache.Event{Kind: kvcache.Removed, Hashes: []uint64{uint64(i) * 7}}
		if i%8 == 0 {
			ev = kvcache.Event{Kind: kvcache.Stored, Hashes: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, Tokens: make([]uint32, 8*kvcache.BlockSize)}
		}
		payload = wire.AppendDynamoMsgpack(payload, 42, uint64(i+1), 0, &ev)
	}
	batch := append(wire.AppendArrayHeader(nil, 128), payload...)
	d := &readerPair{}
	var evs []Event
	d.batch = &evs
	allocs := testing.AllocsPerRun(50, func() {
		evs, d.hs = evs[:0], d.hs[:0]
		if !d.fastBatch(batch) {
			t.Fatal("declined Dynamo's own batch")
		}
	})
	if allocs != 0 || len(evs) != 128 || evs[0].KV.Kind != collectors.BlockStored || len(evs[0].KV.Hashes) != 8 {
		t.Fatalf("%.1f allocations a batch; %d events, first %+v", allocs, len(evs), evs[0])
	}
}

// FuzzFastBatch: whatever the bytes, the fast path either declines them
// or gives exactly the events the general decoder gives, which then
// succeeds too. Seeds: Dynamo's batches (sim/wire) and the cases of
// TestFastPathAsGeneral's kind; testdata/fuzz/FuzzFastBatch.
func FuzzFastBatch(f *testing.F) {
	var payload []byte
	evs := []kvcache.Event{
		{Kind: kvcache.Stored, Hashes: []uint64{1, 2}, Parent: 9, HasParent: true, Tokens: make([]uint32, 2*kvcache.BlockSize)},
		{Kind: kvcache.Removed, Hashes: []uint64{1}},
		{Kind: kvcache.Cleared},
	}
	for i := range evs {
		payload = wire.AppendDynamoMsgpack(payload, 42, uint64(i+1), 1, &evs[i])
	}
	f.Add(append(wire.AppendArrayHeader(nil, len(evs)), payload...))
	f.Add(mp(f, []any{dynamoEvent(1, 1, 0, map[string]any{"Stored": map[string]any{"blocks": []any{map[string]any{"block_hash": -1, "x": 1}}, "y": nil}})}))
	f.Add(mp(f, []any{map[string]any{"worker_id": 1, "storage_tier": "disk", "q": 1, "event": map[string]any{"event_id": 2, "data": "cleared", "z": 0}}}))
	f.Add([]byte{3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 200, 7, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		// The bytes as they are (mostly declined), and as the choices of
		// a batch built to be read (mostly taken).
		for _, in := range [][]byte{b, buildBatch(b)} {
			if len(in) == 0 || in[0] == '[' || in[0] == '{' {
				continue // JSON: the general decoder's alone
			}
			fast, got, want, err := bothWays(in)
			if !fast {
				continue
			}
			if err != nil {
				t.Fatalf("the fast path took what the general decoder refuses (%v): %+v", err, got)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("fast\n%+v\ngeneral\n%+v", got, want)
			}
		}
	})
}

// choices hands out the fuzzer's bytes one at a time, zeros once spent.
type choices []byte

func (c *choices) next(n int) int {
	if len(*c) == 0 {
		return 0
	}
	v := int((*c)[0]) % n
	*c = (*c)[1:]
	return v
}

// buildBatch writes a batch of name-keyed RouterEvents whose every choice
// comes from p: how many, the order of their fields, tiers (known,
// unknown, nil), unknown fields, ids and hashes of every integer width,
// ranks over the bound, each variant in both spellings and forms, an
// unknown one, a repeated block_hash, and a cut at the end.
func buildBatch(p []byte) []byte {
	c := choices(p)
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(c.next(2) == 0)
	num := func() any {
		switch c.next(5) {
		case 0:
			return uint64(c.next(256)) << 56
		case 1:
			return -int64(c.next(256)) - 1
		case 2:
			return c.next(256)
		case 3:
			return uint64(c.next(256))*0x9e3779b97f4a7c15 | 1
		}
		return "h"
	}
	str := func(words ...string) string { return words[c.next(len(words))] }
	n := 1 + c.next(4)
	_ = e.EncodeArrayLen(n)
	for range n {
		fields := []string{"worker_id", "storage_tier", "event", "residency_domain", "shiny"}[:2+c.next(4)]
		if c.next(4) == 0 {
			fields = append(fields, "worker_id")
		}
		rotate := c.next(len(fields))
		fields = append(fields[rotate:], fields[:rotate]...)
		_ = e.EncodeMapLen(len(fields))
		for _, f := range fields {
			_ = e.EncodeString(f)
			switch f {
			case "worker_id":
				_ = e.Encode(num())
			case "storage_tier":
				if c.next(4) == 0 {
					_ = e.EncodeNil()
				} else {
					_ = e.EncodeString(str("device", "host_pinned", "Disk", "external", "tape"))
				}
			case "event":
				buildEvent(e, &c, num, str)
			default:
				_ = e.Encode(num())
			}
		}
	}
	out := buf.Bytes()
	if c.next(4) == 0 {
		out = out[:c.next(len(out)+1)]
	}
	return out
}

func buildEvent(e *msgpack.Encoder, c *choices, num func() any, str func(...string) string) {
	fields := []string{"event_id", "data", "dp_rank", "extra"}[:2+c.next(3)]
	_ = e.EncodeMapLen(len(fields))
	for _, f := range fields {
		_ = e.EncodeString(f)
		switch f {
		case "event_id":
			_ = e.Encode(num())
		case "dp_rank":
			_ = e.Encode(c.next(260))
		case "extra":
			_ = e.Encode([]any{num()})
		case "data":
			switch v := str("stored", "Stored", "removed", "Removed", "cleared", "Cleared", "accessed"); {
			case c.next(3) == 0:
				_ = e.EncodeString(v)
			case v == "stored" || v == "Stored":
				_ = e.EncodeMapLen(1)
				_ = e.EncodeString(v)
				keys := []string{"parent_hash", "blocks", "start_position", "lora"}[:1+c.next(4)]
				_ = e.EncodeMapLen(len(keys))
				for _, k := range keys {
					_ = e.EncodeString(k)
					switch k {
					case "parent_hash":
						if c.next(2) == 0 {
							_ = e.EncodeNil()
						} else {
							_ = e.Encode(num())
						}
					case "blocks":
						nb := c.next(4)
						_ = e.EncodeArrayLen(nb)
						for range nb {
							bk := []string{"block_hash", "tokens_hash", "mm_extra_info", "block_hash", "what"}[:1+c.next(5)]
							_ = e.EncodeMapLen(len(bk))
							for _, k := range bk {
								_ = e.EncodeString(k)
								_ = e.Encode(num())
							}
						}
					default:
						_ = e.Encode(num())
					}
				}
			case v == "removed" || v == "Removed":
				why := c.next(2) == 0
				_ = e.EncodeMapLen(1 + map[bool]int{true: 1}[why])
				_ = e.EncodeString("block_hashes")
				nh := c.next(4)
				_ = e.EncodeArrayLen(nh)
				for range nh {
					_ = e.Encode(num())
				}
				if why {
					_ = e.EncodeString("why")
					_ = e.EncodeNil()
				}
			default:
				_ = e.EncodeMapLen(1)
				_ = e.EncodeString(v)
				_ = e.Encode(num())
			}
		}
	}
}
