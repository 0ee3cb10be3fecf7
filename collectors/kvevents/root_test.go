package kvevents

import (
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// dropRoots checks that exactly the root stores that carry a block's worth
// of token ids have a content fingerprint, then zeroes it so the events
// compare with hand-written ones.
func dropRoots(t *testing.T, evs []collectors.KVEvent) {
	t.Helper()
	for i := range evs {
		ev := &evs[i]
		want := ev.Kind == collectors.BlockStored && !ev.HasParent && ev.BlockSize > 0 && ev.NumTokens >= ev.BlockSize
		if (ev.RootContent != 0) != want {
			t.Errorf("event %d (%s, parent %v, %d tokens, block %d): RootContent %#x", i, ev.Kind, ev.HasParent, ev.NumTokens, ev.BlockSize, ev.RootContent)
		}
		ev.RootContent = 0
	}
}

// rootOf decodes a batch of one event and returns its root fingerprint.
func rootOf(t *testing.T, event any) uint64 {
	t.Helper()
	b, err := DecodeBatch(batchOf(1, event))
	if err != nil || len(b.Events) != 1 {
		t.Fatalf("decode: %v, %d events (%+v)", err, len(b.Events), b.Stats)
	}
	return b.Events[0].RootContent
}

// ids is n token ids starting at from, in the given msgpack width.
func ids(from, n int, wide bool) []any {
	out := make([]any, n)
	for i := range out {
		if wide {
			out[i] = uint32(from + i)
		} else {
			out[i] = from + i // compact: fixint, uint8, uint16…
		}
	}
	return out
}

// TestRootContent: the fingerprint names the content of a root block — the
// same content gives the same value whatever the encoding, field order or
// integer widths; content isolated on purpose (another salt, LoRA, extra
// key) or another block size gives another; only the first block counts.
func TestRootContent(t *testing.T) {
	both := append(ids(500, 16, true), ids(900, 16, true)...)
	storedM := func(kvs ...kv) om {
		m := om{{"type", "BlockStored"}, {"block_hashes", hashList(h1, h2)}, {"parent_block_hash", nil},
			{"token_ids", both}, {"block_size", 16}, {"lora_id", nil}, {"medium", "GPU"}, {"lora_name", nil}}
		for _, x := range kvs {
			replaced := false
			for i := range m {
				if m[i].k == x.k {
					m[i].v, replaced = x.v, true
				}
			}
			if !replaced {
				m = append(m, x)
			}
		}
		return m
	}
	base := rootOf(t, storedM())
	if base == 0 {
		t.Fatal("a root store of 32 token ids has no fingerprint")
	}
	same := map[string]any{
		"array encoding":                    []any{"BlockStored", hashList(h1, h2), nil, both, 16, nil, "GPU", nil, nil, 0, "full_attention", nil},
		"other block hashes (another seed)": storedM(kv{"block_hashes", hashList(h3, h1)}),
		"compact integers":                  storedM(kv{"token_ids", append(ids(500, 16, false), ids(900, 16, false)...)}),
		"another second block":              storedM(kv{"token_ids", append(ids(500, 16, true), ids(7, 16, true)...)}),
		"another medium":                    storedM(kv{"medium", "CPU"}),
		"parent 0 (llm-d-inference-sim)":    storedM(kv{"parent_block_hash", uint64(0)}),
		"token_ids before the hashes and parent (map order is no contract)": om{{"token_ids", both}, {"type", "BlockStored"},
			{"block_size", 16}, {"block_hashes", hashList(h1, h2)}, {"parent_block_hash", nil}},
		"no block_size: tokens per block from the counts": om{{"type", "BlockStored"}, {"block_hashes", hashList(h1, h2)},
			{"parent_block_hash", nil}, {"token_ids", both}},
		"extra keys of the second block only": storedM(kv{"extra_keys", []any{nil, []any{"mm-hash-2"}}}),
	}
	for name, ev := range same {
		if got := rootOf(t, ev); got != base {
			t.Errorf("%s: fingerprint %#x, want the same content's %#x", name, got, base)
		}
	}
	differ := map[string]any{
		"another first block":           storedM(kv{"token_ids", append(ids(501, 16, true), ids(900, 16, true)...)}),
		"block size 32 (same ids)":      storedM(kv{"block_hashes", hashList(h1)}, kv{"block_size", 32}),
		"lora_name":                     storedM(kv{"lora_name", "adapter-a"}),
		"lora_id":                       storedM(kv{"lora_id", 3}),
		"cache_salt (SGLang map key)":   storedM(kv{"cache_salt", "tenant-a"}),
		"extra keys of the first block": storedM(kv{"extra_keys", []any{[]any{"tenant-a"}, nil}}),
	}
	seen := map[uint64]string{base: "base"}
	for name, ev := range differ {
		got := rootOf(t, ev)
		if got == 0 {
			t.Errorf("%s: no fingerprint", name)
			continue
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: fingerprint %#x equals %s's: isolated content must differ", name, got, prev)
		}
		seen[got] = name
	}
	// The salt is content whichever way SGLang sends it (a map key, or
	// the position-7 map of older builds), and two salts are two contents.
	arraySalt := rootOf(t, []any{"BlockStored", hashList(h1, h2), nil, both, 16, nil, "GPU", om{{"cache_salt", "tenant-a"}}})
	if mapSalt := rootOf(t, storedM(kv{"cache_salt", "tenant-a"})); arraySalt != mapSalt {
		t.Errorf("salt tenant-a: %#x at position 7, %#x as a map key: want one content", arraySalt, mapSalt)
	}
	if b := rootOf(t, []any{"BlockStored", hashList(h1, h2), nil, both, 16, nil, "GPU", om{{"cache_salt", "tenant-b"}}}); arraySalt == b {
		t.Errorf("salts tenant-a and tenant-b give one fingerprint %#x", b)
	}
	none := map[string]any{
		"not a root":                storedM(kv{"parent_block_hash", h3}),
		"hash-only (no token ids)":  storedM(kv{"token_ids", []any{}}),
		"token_ids nil":             storedM(kv{"token_ids", nil}),
		"fewer ids than a block":    storedM(kv{"token_ids", ids(1, 8, true)}, kv{"block_hashes", hashList(h1)}),
		"ids not a multiple, no bs": om{{"type", "BlockStored"}, {"block_hashes", hashList(h1, h2)}, {"parent_block_hash", nil}, {"token_ids", ids(1, 33, true)}},
		"a float among the ids":     storedM(kv{"token_ids", append([]any{1.5}, ids(1, 31, true)...)}),
		"removal":                   removedMap(h1),
	}
	for name, ev := range none {
		if got := rootOf(t, ev); got != 0 {
			t.Errorf("%s: fingerprint %#x, want none (0)", name, got)
		}
	}
}
