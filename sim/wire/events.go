package wire

import (
	"fmt"

	"github.com/kvtop/kvtop/sim/kvcache"
)

// Encoding is how events are laid out.
type Encoding uint8

const (
	// Map is vLLM >= 0.24 (and SGLang since ~Sep 2026): each event is a
	// msgpack map with a "type" key; fields whose default is nil are omitted.
	Map Encoding = iota
	// Array is vLLM <= 0.23 (and older SGLang): each event is a tagged array
	// with every declared position present, trailing nils included.
	Array
)

// HashKind is how a block hash is written.
type HashKind uint8

const (
	HashUint64 HashKind = iota // vLLM default: unsigned 64-bit int
	HashBytes                  // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: 32 raw bytes
	HashInt64                  // SGLang: signed 64-bit int
)

// ParseEncoding parses "map" or "array".
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "", "map":
		return Map, nil
	case "array":
		return Array, nil
	}
	return 0, fmt.Errorf("encoding %q is not one of map, array", s)
}

// ParseHash parses "uint64", "bytes" or "int64".
func ParseHash(s string) (HashKind, error) {
	switch s {
	case "", "uint64":
		return HashUint64, nil
	case "bytes":
		return HashBytes, nil
	case "int64":
		return HashInt64, nil
	}
	return 0, fmt.Errorf("hash %q is not one of uint64, bytes, int64", s)
}

// BatchShape is how the batch around the events is laid out.
type BatchShape uint8

const (
	// ArrayBatch is `[ts, events, data_parallel_rank]` (msgspec
	// array_like=True): vLLM releases and SGLang.
	ArrayBatch BatchShape = iota
	// MapBatch is `{"ts", "events", "data_parallel_rank"}`: vLLM main
	// between vllm-project/vllm#42892 (which dropped array_like from the
	// event structs and, for a while, from EventBatch too) and the commit
	// that made EventBatch array_like again.
	MapBatch
)

// ParseBatch parses "array" or "map".
func ParseBatch(s string) (BatchShape, error) {
	switch s {
	case "", "array":
		return ArrayBatch, nil
	case "map":
		return MapBatch, nil
	}
	return 0, fmt.Errorf("batch %q is not one of array, map", s)
}

func (e Encoding) String() string   { return [...]string{"map", "array"}[e] }
func (b BatchShape) String() string { return [...]string{"array", "map"}[b] }
func (h HashKind) String() string   { return [...]string{"uint64", "bytes", "int64"}[h] }

// Medium is where the simulated blocks live unless an event says.
const Medium = "GPU"

func medium(t kvcache.Tag) string {
	if t.Medium == "" {
		return Medium
	}
	return t.Medium
}

// Format is one publisher's payload format.
type Format struct {
	Encoding Encoding
	Hash     HashKind
	Batch    BatchShape
}

// AppendBatch appends one batch `[ts, events, dp_rank]` (SGLang's slot 3 is
// attn_dp_rank: the same position and type), or with MapBatch the map
// `{"ts", "events", "data_parallel_rank"}` in vLLM's field order.
func (f Format) AppendBatch(b []byte, ts float64, events []kvcache.Event, rank int) []byte {
	if f.Batch == MapBatch {
		b = appendMapHeader(b, 3)
		b = appendFloat64(appendStr(b, "ts"), ts)
		b = f.appendEvents(appendStr(b, "events"), events)
		return appendInt(appendStr(b, "data_parallel_rank"), int64(rank))
	}
	b = appendArrayHeader(b, 3)
	b = appendFloat64(b, ts)
	b = f.appendEvents(b, events)
	return appendInt(b, int64(rank))
}

func (f Format) appendEvents(b []byte, events []kvcache.Event) []byte {
	b = appendArrayHeader(b, len(events))
	for i := range events {
		b = f.appendEvent(b, &events[i])
	}
	return b
}

func (f Format) appendEvent(b []byte, ev *kvcache.Event) []byte {
	switch ev.Kind {
	case kvcache.Stored:
		return f.appendStored(b, ev)
	case kvcache.Removed:
		if f.Encoding == Map {
			n := 3
			if ev.Grouped {
				n++
			}
			b = appendMapHeader(b, n)
			b = appendStr(appendStr(b, "type"), "BlockRemoved")
			b = f.appendHashes(appendStr(b, "block_hashes"), ev.Hashes)
			b = appendStr(appendStr(b, "medium"), medium(ev.Tag))
			if ev.Grouped {
				b = appendInt(appendStr(b, "group_idx"), int64(ev.Group))
			}
			return b
		}
		// ["BlockRemoved", block_hashes, medium, group_idx]
		b = appendArrayHeader(b, 4)
		b = appendStr(b, "BlockRemoved")
		b = f.appendHashes(b, ev.Hashes)
		b = appendStr(b, medium(ev.Tag))
		return appendGroup(b, ev.Tag)
	default: // kvcache.Cleared
		if f.Encoding == Map {
			b = appendMapHeader(b, 1)
			return appendStr(appendStr(b, "type"), "AllBlocksCleared")
		}
		return appendStr(appendArrayHeader(b, 1), "AllBlocksCleared")
	}
}

// appendStored writes vLLM's BlockStored. In the map encoding msgspec's
// omit_defaults leaves out the defaulted fields that are None (extra_keys,
// group_idx, the kind and window, locality, …); lora_id, medium and
// lora_name have no default and are always written.
func (f Format) appendStored(b []byte, ev *kvcache.Event) []byte {
	bs := uint64(kvcache.BlockSize)
	if ev.Placeholder {
		bs = 0 // an offload placeholder says nothing of its block
	}
	if f.Encoding == Map {
		n := 8
		for _, set := range []bool{ev.Grouped, ev.Spec != "", ev.Window > 0} {
			if set {
				n++
			}
		}
		b = appendMapHeader(b, n)
		b = appendStr(appendStr(b, "type"), "BlockStored")
		b = f.appendHashes(appendStr(b, "block_hashes"), ev.Hashes)
		b = f.appendParent(appendStr(b, "parent_block_hash"), ev)
		b = appendTokens(appendStr(b, "token_ids"), ev.Tokens)
		b = appendUint(appendStr(b, "block_size"), bs)
		b = appendNil(appendStr(b, "lora_id"))
		b = appendStr(appendStr(b, "medium"), medium(ev.Tag))
		b = appendNil(appendStr(b, "lora_name"))
		if ev.Grouped {
			b = appendInt(appendStr(b, "group_idx"), int64(ev.Group))
		}
		if ev.Spec != "" {
			b = appendStr(appendStr(b, "kv_cache_spec_kind"), ev.Spec)
		}
		if ev.Window > 0 {
			b = appendInt(appendStr(b, "kv_cache_spec_sliding_window"), int64(ev.Window))
		}
		return b
	}
	// ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
	//  lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
	//  kv_cache_spec_sliding_window]
	b = appendArrayHeader(b, 12)
	b = appendStr(b, "BlockStored")
	b = f.appendHashes(b, ev.Hashes)
	b = f.appendParent(b, ev)
	b = appendTokens(b, ev.Tokens)
	b = appendUint(b, bs)
	b = appendNil(b)
	b = appendStr(b, medium(ev.Tag))
	b = appendNil(b)
	b = appendNil(b) // extra_keys
	b = appendGroup(b, ev.Tag)
	if ev.Spec == "" {
		b = appendNil(b)
	} else {
		b = appendStr(b, ev.Spec)
	}
	if ev.Window == 0 {
		return appendNil(b)
	}
	return appendInt(b, int64(ev.Window))
}

func appendGroup(b []byte, t kvcache.Tag) []byte {
	if !t.Grouped {
		return appendNil(b)
	}
	return appendInt(b, int64(t.Group))
}

func (f Format) appendParent(b []byte, ev *kvcache.Event) []byte {
	if !ev.HasParent {
		return appendNil(b)
	}
	return f.appendHash(b, ev.Parent)
}

func (f Format) appendHashes(b []byte, hs []uint64) []byte {
	b = appendArrayHeader(b, len(hs))
	for _, h := range hs {
		b = f.appendHash(b, h)
	}
	return b
}

func (f Format) appendHash(b []byte, h uint64) []byte {
	switch f.Hash {
	case HashBytes:
		x := kvcache.Bytes32(h)
		return appendBin(b, x[:])
	case HashInt64:
		return appendInt(b, int64(h))
	}
	return appendUint(b, h)
}

func appendTokens(b []byte, ts []uint32) []byte {
	b = appendArrayHeader(b, len(ts))
	for _, t := range ts {
		b = appendUint(b, uint64(t))
	}
	return b
}
