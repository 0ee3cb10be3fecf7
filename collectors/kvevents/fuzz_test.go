package kvevents

import (
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// FuzzDecodeBatch: any input either decodes to a sane batch or returns an
// error and nothing else; never a panic, never a hang (every loop is bounded
// by the input length), and the same input always gives the same answer.
// Seeds: testdata/fuzz/FuzzDecodeBatch (real simulator payloads and
// hand-built edge cases, root-* for the content fingerprint: salts, LoRA,
// extra keys, fields out of order) plus the encodings below.
func FuzzDecodeBatch(f *testing.F) {
	neg := int64(-0x2e3f4a5b6c7d8e9f)
	for _, seed := range [][]byte{
		batchOf(1, storedMap(nil, h1, h2), removedMap(h3), om{{"type", "AllBlocksCleared"}}),
		batchOf(2, storedArray(uint64(0), h1), removedArray(h1), []any{"AllBlocksCleared"}),
		mpEncode([]any{3.0, []any{[]any{"BlockStored", []any{neg}, neg, tokens(16), 16, nil}}, 1}),
		mpEncode(om{{"ts", 4.0}, {"events", []any{removedMap(h2)}}, {"data_parallel_rank", nil}}),
		batchOf(5, om{{"type", "BlockStored"}, {"block_hashes", []any{make([]byte, 32), []byte{1}}}}),
		batchOf(6, []any{"Unknown", 1, 2}, om{{"type", "X"}, {"y", 1}}, 42, []any{}),
		// A vLLM step (one BlockRemoved per block), an empty hash list, and
		// a map batch naming its events twice: the decoder's scratch.
		stepSeed(),
		batchOf(7, om{{"type", "BlockRemoved"}, {"block_hashes", []any{}}}, removedMap(h1)),
		mpEncode(om{{"ts", 8.0}, {"events", []any{removedMap(h1, h2)}}, {"events", []any{removedMap(h3)}}}),
		// Groups, tiers, origin and a proposed event type (issue 23).
		batchOf(9, vllmStored(nil, 64, 16, "GPU", 1, "sliding_window", 1024, h3, 4),
			append(vllmStored(nil, 16, 16, "STORAGE", 0, "full_attention", nil, h2), kv{"locality", "REMOTE"}, kv{"origin", "REUSED"}),
			om{{"type", "BlockInactive"}, {"block_hashes", hashList(h2)}},
			[]any{"BlockRemoved", hashList(h3), "CPU", 2, "LOCAL", nil}),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := DecodeBatch(payload)
		if err != nil {
			if !reflect.DeepEqual(b, Batch{}) {
				t.Fatalf("error %v came with a partial batch %+v", err, b)
			}
			return
		}
		st := b.Stats
		if st.UnknownEvents < 0 || st.UnknownFields < 0 || st.Malformed < 0 {
			t.Fatalf("negative stats %+v", st)
		}
		if len(b.Events)+st.Skipped() > len(payload) {
			t.Fatalf("%d events + %d skipped from %d bytes", len(b.Events), st.Skipped(), len(payload))
		}
		if cap(b.Events) > len(payload)/minEventBytes+1 {
			t.Fatalf("room for %d events reserved from %d bytes", cap(b.Events), len(payload))
		}
		for i, ev := range b.Events {
			if ev.Kind < collectors.BlockStored || ev.Kind > collectors.AllBlocksCleared {
				t.Fatalf("event %d has kind %d", i, ev.Kind)
			}
			if len(ev.Hashes) > len(payload) || ev.NumTokens > len(payload) || cap(ev.Hashes) != len(ev.Hashes) {
				t.Fatalf("event %d: %d hashes (cap %d), %d tokens from %d bytes", i, len(ev.Hashes), cap(ev.Hashes), ev.NumTokens, len(payload))
			}
			if ev.HasParent == (ev.Parent == 0) {
				t.Fatalf("event %d: parent %#x with HasParent %v", i, ev.Parent, ev.HasParent)
			}
			if ev.Medium == "" {
				t.Fatalf("event %d has no medium", i)
			}
			if ev.Group < 0 || ev.Window < 0 {
				t.Fatalf("event %d: group %d window %d", i, ev.Group, ev.Window)
			}
			// A fingerprint only for a root store that said what it holds.
			if ev.RootContent != 0 && (ev.Kind != collectors.BlockStored || ev.HasParent || ev.NumTokens == 0 || len(ev.Hashes) == 0) {
				t.Fatalf("event %d (%s, parent %v, %d tokens, %d hashes) has RootContent %#x", i, ev.Kind, ev.HasParent, ev.NumTokens, len(ev.Hashes), ev.RootContent)
			}
		}
		again, err := DecodeBatch(payload)
		if err != nil || !reflect.DeepEqual(again, b) {
			t.Fatalf("second decode differs: %v", err)
		}
		// A reader's decoder, fresh and with its scratch used by another
		// batch before (DecodeBatch's pool may give either).
		var d decoder
		if fresh, err := d.decode(payload); err != nil || !reflect.DeepEqual(fresh, b) {
			t.Fatalf("decode with a fresh scratch differs: %v", err)
		}
		_, _ = d.decode(stepSeed())
		if reused, err := d.decode(payload); err != nil || !reflect.DeepEqual(reused, b) {
			t.Fatalf("decode with a used scratch differs: %v", err)
		}
	})
}

// stepSeed is a small vLLM step: a BlockStored of 4 blocks and one
// BlockRemoved per evicted block.
func stepSeed() []byte {
	return batchOf(9, storedMap(nil, h1, h2, h3, h1+7), removedMap(h1+1), removedMap(h1+2), removedMap(h1+3))
}
