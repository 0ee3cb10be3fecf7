package kvevents

import (
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// Events as vLLM main writes them since hybrid models, offload tiers and
// the full report mode (docs/PROTOCOLS.md §1.1 cites the files): BlockStored
// is block_hashes, parent_block_hash, token_ids, block_size, lora_id,
// medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
// kv_cache_spec_sliding_window, locality, ownership, session_id; BlockRemoved
// is block_hashes, medium, group_idx, locality, ownership. msgspec's map
// encoding (omit_defaults) leaves out the defaulted fields that are None;
// lora_id, medium and lora_name have no default and are always written.

// vllmStored is a map-encoded BlockStored of group g with every field.
func vllmStored(parent any, ntok, bs int, medium string, g int, kind string, window any, hs ...uint64) om {
	ev := om{
		{"type", "BlockStored"}, {"block_hashes", hashList(hs...)}, {"parent_block_hash", parent},
		{"token_ids", tokens(ntok)}, {"block_size", bs}, {"lora_id", nil},
		{"medium", medium}, {"lora_name", nil}, {"group_idx", g},
	}
	if kind != "" {
		ev = append(ev, kv{"kv_cache_spec_kind", kind})
	}
	if window != nil {
		ev = append(ev, kv{"kv_cache_spec_sliding_window", window})
	}
	return ev
}

func TestDecodeGroupsTiersAndOrigin(t *testing.T) {
	// A hybrid model (Gemma-3-like): group 0 full attention, group 1
	// sliding window (1024 tokens) whose event spans the whole prompt but
	// names only the blocks inside the window.
	full := vllmStored(nil, 64, 16, "GPU", 0, "full_attention", nil, h1, h2, h3, 4)
	sw := vllmStored(nil, 64, 16, "GPU", 1, "sliding_window", 1024, h3, 4)
	// An offload placeholder (no self-describing events): no tokens, block
	// size 0, no parent, a group but no kind, one key.
	placeholder := om{{"type", "BlockStored"}, {"block_hashes", hashList(h1)}, {"parent_block_hash", nil},
		{"token_ids", []any{}}, {"block_size", 0}, {"lora_id", nil}, {"medium", "CPU"}, {"lora_name", nil}, {"group_idx", 0}}
	// A STORAGE tier block on a remote store, with ownership and a session.
	storage := append(vllmStored(nil, 16, 16, "STORAGE", 0, "full_attention", nil, h2),
		kv{"locality", "REMOTE"}, kv{"ownership", "kvcr"}, kv{"session_id", "s-1"})
	reused := append(vllmStored(nil, 32, 16, "GPU", 0, "full_attention", nil, h1, h2), kv{"origin", "REUSED"})
	rmSW := om{{"type", "BlockRemoved"}, {"block_hashes", hashList(h3)}, {"medium", "GPU"}, {"group_idx", 1}}
	// The same events in the array encoding (vLLM before #42892), every
	// position up to session_id.
	arrSW := []any{"BlockStored", hashList(h3, 4), nil, tokens(64), 16, nil, "GPU", nil, nil, 1, "sliding_window", 1024, nil, nil, "s-2"}
	arrRm := []any{"BlockRemoved", hashList(h3), "CPU", 2, "LOCAL", nil}

	got, err := DecodeBatch(batchOf(1, full, sw, placeholder, storage, reused, rmSW, arrSW, arrRm))
	if err != nil {
		t.Fatal(err)
	}
	dropRoots(t, got.Events)
	gpu := func(ntok, g int, kind string, win int32, hs ...uint64) collectors.KVEvent {
		return collectors.KVEvent{Kind: collectors.BlockStored, Hashes: hs, NumTokens: ntok, BlockSize: 16, Medium: "GPU",
			Group: int32(g), GroupKind: kind, Window: win}
	}
	want := []collectors.KVEvent{
		gpu(64, 0, "full_attention", 0, h1, h2, h3, 4),
		gpu(64, 1, "sliding_window", 1024, h3, 4),
		{Kind: collectors.BlockStored, Hashes: []uint64{h1}, Medium: "CPU"},
		{Kind: collectors.BlockStored, Hashes: []uint64{h2}, NumTokens: 16, BlockSize: 16, Medium: "STORAGE",
			GroupKind: "full_attention", Locality: collectors.LocalityRemote},
		{Kind: collectors.BlockStored, Hashes: []uint64{h1, h2}, NumTokens: 32, BlockSize: 16, Medium: "GPU",
			GroupKind: "full_attention", Origin: collectors.OriginReused},
		{Kind: collectors.BlockRemoved, Hashes: []uint64{h3}, Medium: "GPU", Group: 1},
		gpu(64, 1, "sliding_window", 1024, h3, 4),
		{Kind: collectors.BlockRemoved, Hashes: []uint64{h3}, Medium: "CPU", Group: 2, Locality: collectors.LocalityLocal},
	}
	if !reflect.DeepEqual(got.Events, want) {
		t.Fatalf("events\ngot  %+v\nwant %+v", got.Events, want)
	}
	if !reflect.DeepEqual(got.Stats, Stats{}) {
		t.Fatalf("stats %+v: every field of these events is known", got.Stats)
	}
}

// TestUnknownEventTypesCountedByType: a proposed BlockInactive (and any
// other new tag) costs only itself: the batch's other events are applied,
// and each type is counted by its name.
func TestUnknownEventTypesCountedByType(t *testing.T) {
	inactive := om{{"type", "BlockInactive"}, {"block_hashes", hashList(h2)}, {"medium", "GPU"}}
	got, err := DecodeBatch(batchOf(1, storedMap(nil, h1), inactive, removedMap(h1), inactive,
		[]any{"TierBlocksCleared", "CPU"}, removedMap(h3)))
	if err != nil {
		t.Fatal(err)
	}
	dropRoots(t, got.Events)
	want := []collectors.KVEvent{stored(0, false, 16, h1), removed(h1), removed(h3)}
	if !reflect.DeepEqual(got.Events, want) {
		t.Fatalf("events %+v, want %+v", got.Events, want)
	}
	if got.Stats.UnknownEvents != 3 || !reflect.DeepEqual(got.Stats.UnknownByType, map[string]int{"BlockInactive": 2, "TierBlocksCleared": 1}) {
		t.Fatalf("stats %+v", got.Stats)
	}
}
