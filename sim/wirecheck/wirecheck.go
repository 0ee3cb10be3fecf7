// Package wirecheck is an independent checker of the KV event wire format
// (PROTOCOLS.md §1), for tests only. It decodes payloads generically with
// vmihailenco/msgpack into interface{} values and checks the documented
// shape: it shares no code with the simulator's encoder (sim/wire) nor with
// kvtop's decoder (collectors/kvevents). The simulator's output and the real
// captures of llm-d-inference-sim are held to the same checks.
package wirecheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"
)

// Options select what to require beyond the common shape.
type Options struct {
	Encoding string // "map", "array", or "" for either
	Hash     string // "uint64", "int64", "bytes", or "" for any
	// VLLMKeys requires the vLLM >= 0.24 map key set (lora_id, medium and
	// lora_name present even when nil) and, in array mode, every declared
	// position up to kv_cache_spec_sliding_window.
	VLLMKeys bool
	// PeerQuirks accepts llm-d-inference-sim's documented differences:
	// parent_block_hash 0 for "no parent" in array mode.
	PeerQuirks bool
}

// Batch is a checked payload.
type Batch struct {
	Len     int // elements in the batch array (0 for a map batch)
	TS      float64
	Events  []Event
	Rank    *int64 // slot 3 (data_parallel_rank / attn_dp_rank), nil when absent or nil
	Unknown int    // events of unknown type, skipped
}

// Event is one checked event.
type Event struct {
	Kind      string // BlockStored, BlockRemoved, AllBlocksCleared
	Encoding  string // map or array
	HashKind  string // uint64, int64 or bytes ("" when no hashes)
	Keys      []uint64
	Parent    *uint64 // nil: first block of a prompt
	NumTokens int
	BlockSize int
	Medium    string
	LoRAName  string
	Fields    int // array length or number of map keys
	Extra     int // unknown map keys
	// vLLM main: Group is group_idx (nil: absent or nil), SpecKind and
	// Window the group's kv_cache_spec_kind and sliding window ("" / 0:
	// absent). Placeholder: an offload store of block size 0, no tokens.
	Group       *int64
	SpecKind    string
	Window      int
	Placeholder bool
}

// Payload checks one msgpack batch.
func Payload(p []byte, o Options) (*Batch, error) {
	if err := bounds(p); err != nil {
		return nil, fmt.Errorf("payload is not msgpack: %w", err)
	}
	r := bytes.NewReader(p)
	dec := msgpack.NewDecoder(r)
	dec.SetMapDecoder(decodeMap)
	v, err := dec.DecodeInterface()
	if err != nil {
		return nil, fmt.Errorf("payload is not msgpack: %w", err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("payload has %d trailing bytes", r.Len())
	}
	b := &Batch{}
	var tsV, evV, rankV interface{}
	hasRank := false
	switch x := v.(type) {
	case []interface{}:
		if len(x) < 2 {
			return nil, fmt.Errorf("batch array has %d elements, want >= 2", len(x))
		}
		b.Len = len(x)
		tsV, evV = x[0], x[1]
		if len(x) >= 3 {
			rankV, hasRank = x[2], true
		}
	case map[interface{}]interface{}:
		tsV, evV = x["ts"], x["events"]
		rankV, hasRank = x["data_parallel_rank"]
	default:
		return nil, fmt.Errorf("batch is %T, want array or map", v)
	}
	ts, ok := tsV.(float64)
	if !ok {
		return nil, fmt.Errorf("batch ts is %T, want float64", tsV)
	}
	if math.IsNaN(ts) || ts <= 0 {
		return nil, fmt.Errorf("batch ts %v is not a unix time", ts)
	}
	b.TS = ts
	if hasRank && rankV != nil {
		n, ok := asInt(rankV)
		if !ok {
			return nil, fmt.Errorf("batch rank is %T, want int or nil", rankV)
		}
		b.Rank = &n
	}
	evs, ok := evV.([]interface{})
	if !ok {
		return nil, fmt.Errorf("batch events is %T, want array", evV)
	}
	for i, ev := range evs {
		e, known, err := checkEvent(ev, o)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if !known {
			b.Unknown++
			continue
		}
		b.Events = append(b.Events, e)
	}
	return b, nil
}

// decodeMap decodes any msgpack map, refusing keys Go cannot hash (arrays,
// maps, bytes) instead of panicking on them.
func decodeMap(d *msgpack.Decoder) (interface{}, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, err
	}
	m := make(map[interface{}]interface{}, min(n, 64))
	for i := 0; i < n; i++ {
		k, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		if k != nil && !reflect.TypeOf(k).Comparable() {
			return nil, fmt.Errorf("map key of type %T", k)
		}
		v, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}

func checkEvent(v interface{}, o Options) (e Event, known bool, err error) {
	var get func(key string, pos int) (interface{}, bool)
	switch x := v.(type) {
	case []interface{}:
		if len(x) == 0 {
			return e, false, errors.New("empty event array")
		}
		tag, ok := x[0].(string)
		if !ok {
			return e, false, fmt.Errorf("event tag is %T, want string", x[0])
		}
		e.Kind, e.Encoding, e.Fields = tag, "array", len(x)
		get = func(_ string, pos int) (interface{}, bool) {
			if pos < len(x) {
				return x[pos], true
			}
			return nil, false
		}
	case map[interface{}]interface{}:
		tag, ok := x["type"].(string)
		if !ok {
			return e, false, fmt.Errorf("event map type is %T, want string", x["type"])
		}
		e.Kind, e.Encoding, e.Fields = tag, "map", len(x)
		get = func(key string, _ int) (interface{}, bool) {
			val, ok := x[key]
			return val, ok
		}
		e.Extra = countExtra(x, tag)
	default:
		return e, false, fmt.Errorf("event is %T, want array or map", v)
	}
	if o.Encoding != "" && e.Encoding != o.Encoding {
		return e, false, fmt.Errorf("%s event is %s-encoded, want %s", e.Kind, e.Encoding, o.Encoding)
	}
	switch e.Kind {
	case "BlockStored":
		return e, true, checkStored(&e, get, o)
	case "BlockRemoved":
		return e, true, checkRemoved(&e, get, o)
	case "AllBlocksCleared":
		if e.Encoding == "array" && e.Fields != 1 {
			return e, true, fmt.Errorf("AllBlocksCleared array has %d elements, want 1", e.Fields)
		}
		return e, true, nil
	}
	return e, false, nil
}

var knownKeys = map[string]map[string]bool{
	"BlockStored": {"type": true, "block_hashes": true, "parent_block_hash": true, "token_ids": true, "block_size": true,
		"lora_id": true, "medium": true, "lora_name": true, "extra_keys": true, "group_idx": true,
		"kv_cache_spec_kind": true, "kv_cache_spec_sliding_window": true, "locality": true, "ownership": true, "session_id": true},
	"BlockRemoved":     {"type": true, "block_hashes": true, "medium": true, "group_idx": true, "locality": true, "ownership": true},
	"AllBlocksCleared": {"type": true},
}

// specKinds are vLLM's KVCacheSpecKind values; windowed ones name only the
// blocks inside their window, while their token ids may span the blocks
// they skip.
var specKinds = map[string]bool{"full_attention": false, "mla_attention": false, "sliding_window": true,
	"sliding_window_mla": true, "mamba": true, "chunked_local_attention": true, "sink_full_attention": false,
	"encoder_only_attention": false, "cross_attention": false, "unknown": true}

func countExtra(m map[interface{}]interface{}, tag string) int {
	n := 0
	for k := range m {
		if s, ok := k.(string); !ok || !knownKeys[tag][s] {
			n++
		}
	}
	return n
}

func checkStored(e *Event, get func(string, int) (interface{}, bool), o Options) error {
	if e.Encoding == "array" {
		min := 7 // tag .. medium
		if o.VLLMKeys {
			min = 12
		}
		if e.Fields < min {
			return fmt.Errorf("BlockStored array has %d elements, want >= %d", e.Fields, min)
		}
	}
	hv, ok := get("block_hashes", 1)
	if !ok {
		return errors.New("BlockStored has no block_hashes")
	}
	if err := checkHashes(e, hv, o); err != nil {
		return fmt.Errorf("BlockStored %w", err)
	}
	pv, ok := get("parent_block_hash", 2)
	if !ok {
		return errors.New("BlockStored has no parent_block_hash")
	}
	if pv != nil {
		kind, key, err := hashValue(pv)
		if err != nil {
			return fmt.Errorf("BlockStored parent_block_hash: %w", err)
		}
		switch {
		case o.PeerQuirks && e.Encoding == "array" && kind != "bytes" && key == 0:
			// llm-d-inference-sim writes 0 for "no parent" in array mode.
		case kind != e.HashKind && (kind == "bytes" || e.HashKind == "bytes"):
			return fmt.Errorf("BlockStored parent_block_hash is %s, block_hashes are %s", kind, e.HashKind)
		default:
			e.Parent = &key
		}
	}
	if err := medium(e, get, 6, o.VLLMKeys); err != nil {
		return fmt.Errorf("BlockStored %w", err)
	}
	if err := group(e, get, 9); err != nil {
		return fmt.Errorf("BlockStored %w", err)
	}
	if v, ok := get("kv_cache_spec_kind", 10); ok && v != nil {
		k, isStr := v.(string)
		if _, known := specKinds[k]; !isStr || !known {
			return fmt.Errorf("BlockStored kv_cache_spec_kind is %v, not one of vLLM's", v)
		}
		e.SpecKind = k
	}
	if v, ok := get("kv_cache_spec_sliding_window", 11); ok && v != nil {
		w, isInt := asInt(v)
		if !isInt || w <= 0 || !specKinds[e.SpecKind] {
			return fmt.Errorf("BlockStored kv_cache_spec_sliding_window is %v for kind %q", v, e.SpecKind)
		}
		e.Window = int(w)
	}
	bsV, ok := get("block_size", 4)
	bs, isInt := asInt(bsV)
	if !ok || !isInt || bs < 0 || bs > 1<<20 {
		return fmt.Errorf("BlockStored block_size is %v, want an int", bsV)
	}
	e.BlockSize = int(bs)
	tv, ok := get("token_ids", 3)
	toks, isArr := tv.([]interface{})
	if !ok || !isArr {
		return fmt.Errorf("BlockStored token_ids is %T, want array", tv)
	}
	for i, t := range toks {
		n, ok := asInt(t)
		if !ok || n < 0 || n > math.MaxUint32 {
			return fmt.Errorf("BlockStored token_ids[%d] is %v, want a uint32 token id", i, t)
		}
	}
	e.NumTokens = len(toks)
	switch {
	case e.BlockSize == 0:
		// vLLM's offload placeholder: one key, no tokens, not the GPU's.
		if e.NumTokens != 0 || len(e.Keys) != 1 || e.Medium == "GPU" || e.SpecKind != "" {
			return fmt.Errorf("BlockStored block_size is 0 on %s with %d token_ids, %d hashes, kind %q: not an offload placeholder",
				e.Medium, e.NumTokens, len(e.Keys), e.SpecKind)
		}
		e.Placeholder = true
	case specKinds[e.SpecKind]:
		if e.NumTokens%e.BlockSize != 0 || e.NumTokens < e.BlockSize*len(e.Keys) {
			return fmt.Errorf("BlockStored (%s) has %d token_ids for %d blocks of %d", e.SpecKind, e.NumTokens, len(e.Keys), e.BlockSize)
		}
	case e.NumTokens != e.BlockSize*len(e.Keys):
		return fmt.Errorf("BlockStored has %d token_ids for %d blocks of %d", e.NumTokens, len(e.Keys), e.BlockSize)
	}
	if v, ok := get("lora_id", 5); ok && v != nil {
		if _, isInt := asInt(v); !isInt {
			return fmt.Errorf("BlockStored lora_id is %T, want int or nil", v)
		}
	} else if !ok && o.VLLMKeys {
		return errors.New("BlockStored has no lora_id key")
	}
	if v, ok := get("lora_name", 7); ok && v != nil {
		s, isStr := v.(string)
		if !isStr {
			return fmt.Errorf("BlockStored lora_name is %T, want string or nil", v)
		}
		e.LoRAName = s
	} else if !ok && o.VLLMKeys {
		return errors.New("BlockStored has no lora_name key")
	}
	return nil
}

func checkRemoved(e *Event, get func(string, int) (interface{}, bool), o Options) error {
	if e.Encoding == "array" && e.Fields < 2 {
		return fmt.Errorf("BlockRemoved array has %d elements, want >= 2", e.Fields)
	}
	hv, ok := get("block_hashes", 1)
	if !ok {
		return errors.New("BlockRemoved has no block_hashes")
	}
	if err := checkHashes(e, hv, o); err != nil {
		return fmt.Errorf("BlockRemoved %w", err)
	}
	if err := medium(e, get, 2, o.VLLMKeys); err != nil {
		return fmt.Errorf("BlockRemoved %w", err)
	}
	if err := group(e, get, 3); err != nil {
		return fmt.Errorf("BlockRemoved %w", err)
	}
	return nil
}

// group reads group_idx: a non-negative int or nil.
func group(e *Event, get func(string, int) (interface{}, bool), pos int) error {
	v, ok := get("group_idx", pos)
	if !ok || v == nil {
		return nil
	}
	g, isInt := asInt(v)
	if !isInt || g < 0 {
		return fmt.Errorf("group_idx is %v, want a non-negative int", v)
	}
	e.Group = &g
	return nil
}

func medium(e *Event, get func(string, int) (interface{}, bool), pos int, required bool) error {
	v, ok := get("medium", pos)
	if !ok || v == nil {
		if required {
			return errors.New("has no medium")
		}
		e.Medium = "GPU"
		return nil
	}
	s, isStr := v.(string)
	if !isStr || s == "" {
		return fmt.Errorf("medium is %v, want a string", v)
	}
	e.Medium = s
	return nil
}

func checkHashes(e *Event, v interface{}, o Options) error {
	hs, ok := v.([]interface{})
	if !ok {
		return fmt.Errorf("block_hashes is %T, want array", v)
	}
	if len(hs) == 0 {
		return errors.New("block_hashes is empty")
	}
	for i, h := range hs {
		kind, key, err := hashValue(h)
		if err != nil {
			return fmt.Errorf("block_hashes[%d]: %w", i, err)
		}
		// A non-negative int written by a signed producer is unsigned on the
		// wire: it belongs to any int kind. One negative value makes it int64.
		switch {
		case e.HashKind == "" || e.HashKind == kind:
			e.HashKind = kind
		case e.HashKind == "uint64" && kind == "int64":
			e.HashKind = "int64"
		case e.HashKind == "int64" && kind == "uint64":
		default:
			return fmt.Errorf("block_hashes mix %s and %s", e.HashKind, kind)
		}
		e.Keys = append(e.Keys, key)
	}
	switch o.Hash {
	case "":
	case "int64":
		if e.HashKind == "bytes" {
			return errors.New("block_hashes are bytes, want int64")
		}
		for i, h := range hs {
			if u, ok := h.(uint64); ok && u > math.MaxInt64 {
				return fmt.Errorf("block_hashes[%d] %d is above the int64 range", i, u)
			}
		}
	case "uint64":
		if e.HashKind != "uint64" {
			return fmt.Errorf("block_hashes are %s, want uint64", e.HashKind)
		}
	default:
		if e.HashKind != o.Hash {
			return fmt.Errorf("block_hashes are %s, want %s", e.HashKind, o.Hash)
		}
	}
	return nil
}

// hashValue classifies one hash: "uint64" for unsigned wire formats,
// "int64" for negative signed ones, "bytes" for 32 raw bytes (key = last 8
// bytes big-endian).
func hashValue(v interface{}) (kind string, key uint64, err error) {
	switch x := v.(type) {
	case []byte:
		if len(x) != 32 {
			return "", 0, fmt.Errorf("bytes hash has %d bytes, want 32", len(x))
		}
		return "bytes", binary.BigEndian.Uint64(x[24:]), nil
	case uint8, uint16, uint32, uint64:
		n, _ := asUint(x)
		return "uint64", n, nil
	case int8, int16, int32, int64:
		n, _ := asInt(x)
		if n >= 0 {
			return "uint64", uint64(n), nil
		}
		return "int64", uint64(n), nil
	}
	return "", 0, fmt.Errorf("hash is %T, want int or 32 bytes", v)
}

func asUint(v interface{}) (uint64, bool) {
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	}
	return 0, false
}

// asInt returns an integer value as int64; uint64 values above MaxInt64 are
// reported as not fitting.
func asInt(v interface{}) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	if u, ok := asUint(v); ok && u <= math.MaxInt64 {
		return int64(u), true
	}
	return 0, false
}
