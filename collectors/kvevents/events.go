package kvevents

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/msgpack"
	"github.com/kvtop/kvtop/figures"
)

// eventDecoder decodes one event, appending its hashes to hs.
type eventDecoder struct {
	r             *cursor
	hs            []uint64
	tag           string // set for unknown tags only (short, for the operator)
	unknownFields int
	root          rootInputs
}

func (d *eventDecoder) event(ev *collectors.KVEvent) (known bool, err error) {
	c, err := d.r.Peek()
	if err != nil {
		return false, err
	}
	switch {
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		known, err = d.arrayEvent(ev)
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		known, err = d.mapEvent(ev)
	default:
		return false, fmt.Errorf("event is %s, want array or map", figures.A(msgpack.TypeOf(c).String()))
	}
	if known && err == nil && ev.Kind == collectors.BlockStored && !ev.HasParent {
		ev.RootContent = d.rootContent(ev)
	}
	return known, err
}

func kindOf(tag []byte) collectors.EventKind {
	switch string(tag) {
	case "BlockStored":
		return collectors.BlockStored
	case "BlockRemoved":
		return collectors.BlockRemoved
	case "AllBlocksCleared":
		return collectors.AllBlocksCleared
	}
	return 0
}

// shortTag keeps an unknown tag printable and short.
func shortTag(tag []byte) string {
	const max = 40
	out := make([]byte, 0, min(len(tag), max))
	for _, c := range tag {
		if len(out) == max {
			break
		}
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out = append(out, c)
	}
	return string(out)
}

// Positions of the array encoding after the tag (vLLM's field order).
const (
	posStoredHashes = 1 + iota
	posStoredParent
	posStoredTokens
	posStoredBlockSize
	posStoredLoRAID
	posStoredMedium
	posStoredLoRAName
	posStoredExtraKeys
	posStoredGroupIdx
	posStoredSpecKind
	posStoredSpecWindow
	posStoredLocality
	posStoredOwnership
	posStoredSessionID
	posStoredKnown // first position we do not know
)

const (
	posRemovedHashes = 1 + iota
	posRemovedMedium
	posRemovedGroupIdx
	posRemovedLocality
	posRemovedOwnership
	posRemovedKnown
)

func (d *eventDecoder) arrayEvent(ev *collectors.KVEvent) (known bool, err error) {
	r := d.r
	n, err := r.ArrayLen()
	if err != nil {
		return false, err
	}
	if n == 0 {
		return false, fmt.Errorf("empty event array")
	}
	tag, err := r.Str()
	if err != nil {
		return false, fmt.Errorf("event tag: %w", err)
	}
	ev.Kind = kindOf(tag)
	ev.Medium = "GPU"
	if ev.Kind == 0 {
		d.tag = shortTag(tag)
		for k := 1; k < n; k++ {
			if err := r.Skip(); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	if ev.Kind != collectors.AllBlocksCleared && n <= posStoredHashes {
		return false, fmt.Errorf("%s without block_hashes", ev.Kind)
	}
	for pos := 1; pos < n; pos++ {
		if err := d.arrayField(ev, pos); err != nil {
			return false, err
		}
	}
	return true, nil
}

// arrayField decodes position pos of an array-encoded event.
func (d *eventDecoder) arrayField(ev *collectors.KVEvent, pos int) error {
	switch ev.Kind {
	case collectors.BlockStored:
		switch pos {
		case posStoredHashes:
			return d.hashes(ev)
		case posStoredParent:
			return d.parent(ev)
		case posStoredTokens:
			return d.tokens(ev)
		case posStoredBlockSize:
			return d.blockSize(ev)
		case posStoredMedium:
			return d.medium(ev)
		case posStoredLoRAName:
			// SGLang builds between its metadata extension and sglang#37482
			// put a map ({"cache_salt": …}) here, where vLLM has lora_name:
			// request metadata, not a LoRA, and no reason to lose the event.
			// Its salt is part of the content (a prefix isolated on purpose).
			if c, err := d.r.Peek(); err == nil && msgpack.TypeOf(c) == msgpack.Map {
				return d.metadata()
			}
			return d.loraName(ev)
		case posStoredLoRAID:
			return d.r.spanOf(&d.root.loraID)
		case posStoredExtraKeys:
			return d.extraKeys()
		case posStoredGroupIdx:
			return d.int32Field("group_idx", &ev.Group)
		case posStoredSpecKind:
			return d.specKind(ev)
		case posStoredSpecWindow:
			return d.int32Field("kv_cache_spec_sliding_window", &ev.Window)
		case posStoredLocality:
			return d.locality(ev)
		case posStoredOwnership, posStoredSessionID:
			return d.r.Skip()
		}
	case collectors.BlockRemoved:
		switch pos {
		case posRemovedHashes:
			return d.hashes(ev)
		case posRemovedMedium:
			return d.medium(ev)
		case posRemovedGroupIdx:
			return d.int32Field("group_idx", &ev.Group)
		case posRemovedLocality:
			return d.locality(ev)
		case posRemovedOwnership:
			return d.r.Skip()
		}
	}
	d.unknownFields++
	return d.r.Skip()
}

func (d *eventDecoder) mapEvent(ev *collectors.KVEvent) (known bool, err error) {
	r := d.r
	n, err := r.MapLen()
	if err != nil {
		return false, err
	}
	ev.Medium = "GPU"
	sawType, sawHashes, unknownType := false, false, false
	for k := 0; k < n; k++ {
		key, err := r.Str()
		if err != nil {
			return false, fmt.Errorf("event key: %w", err)
		}
		if unknownType { // nothing of an unknown event is used
			if err := r.Skip(); err != nil {
				return false, err
			}
			continue
		}
		switch string(key) {
		case "type":
			tag, err := r.Str()
			if err != nil {
				return false, fmt.Errorf("event type: %w", err)
			}
			sawType = true
			if ev.Kind = kindOf(tag); ev.Kind == 0 {
				unknownType = true
				d.tag = shortTag(tag)
			}
		case "block_hashes":
			sawHashes = true
			err = d.hashes(ev)
		case "parent_block_hash":
			err = d.parent(ev)
		case "token_ids":
			err = d.tokens(ev)
		case "block_size":
			err = d.blockSize(ev)
		case "medium":
			err = d.medium(ev)
		case "lora_name":
			err = d.loraName(ev)
		case "lora_id":
			err = r.spanOf(&d.root.loraID)
		case "extra_keys":
			err = d.extraKeys()
		case "cache_salt":
			err = r.spanOf(&d.root.salt)
		case "group_idx":
			err = d.int32Field("group_idx", &ev.Group)
		case "kv_cache_spec_kind":
			err = d.specKind(ev)
		case "kv_cache_spec_sliding_window":
			err = d.int32Field("kv_cache_spec_sliding_window", &ev.Window)
		case "locality":
			err = d.locality(ev)
		case "origin":
			err = d.origin(ev)
		case "ownership", "session_id":
			err = r.Skip()
		default:
			d.unknownFields++
			err = r.Skip()
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", shortTag(key), err)
		}
	}
	switch {
	case !sawType:
		return false, fmt.Errorf("event map without type")
	case unknownType:
		d.unknownFields = 0
		return false, nil
	case ev.Kind != collectors.AllBlocksCleared && !sawHashes:
		return false, fmt.Errorf("%s without block_hashes", ev.Kind)
	}
	return true, nil
}

func (d *eventDecoder) hashes(ev *collectors.KVEvent) error {
	n, err := d.r.ArrayLen()
	if err != nil {
		return fmt.Errorf("block_hashes: %w", err)
	}
	if n == 0 {
		ev.Hashes = noHashes // an empty list, whatever the scratch holds
		return nil
	}
	start := len(d.hs)
	for k := 0; k < n; k++ {
		h, err := d.r.hash()
		if err != nil {
			return fmt.Errorf("block_hashes[%d]: %w", k, err)
		}
		d.hs = append(d.hs, h)
	}
	ev.Hashes = d.hs[start:len(d.hs):len(d.hs)]
	return nil
}

// parent: nil or 0 (llm-d-inference-sim's array mode) means no parent.
func (d *eventDecoder) parent(ev *collectors.KVEvent) error {
	d.root.parentSeen = true
	if d.r.TryNil() {
		return nil
	}
	h, err := d.r.hash()
	if err != nil {
		return fmt.Errorf("parent_block_hash: %w", err)
	}
	ev.Parent, ev.HasParent = h, h != 0
	return nil
}

// tokens counts the token ids (they are never kept). A root block's ids
// are also folded into its fingerprint while they are stepped over, when
// the event already said it is a root and how many blocks it holds (vLLM's
// and SGLang's field order); otherwise rootContent reads them again from
// their span once the whole event is known.
func (d *eventDecoder) tokens(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	d.root.tok.from = d.r.Pos()
	var n int
	var err error
	if ev.Kind == collectors.BlockStored && d.root.parentSeen && !ev.HasParent && len(ev.Hashes) > 0 {
		n, err = d.root.hashTokens(d.r, len(ev.Hashes))
	} else {
		n, err = d.r.CountInts()
	}
	if err != nil {
		return fmt.Errorf("token_ids: %w", err)
	}
	d.root.tok.to = d.r.Pos()
	ev.NumTokens = n
	return nil
}

func (d *eventDecoder) blockSize(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	v, err := d.r.SmallInt()
	if err != nil {
		return fmt.Errorf("block_size: %w", err)
	}
	ev.BlockSize = v
	return nil
}

func (d *eventDecoder) medium(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	s, err := d.r.Str()
	if err != nil {
		return fmt.Errorf("medium: %w", err)
	}
	ev.Medium = internMedium(s)
	return nil
}

// int32Field reads a non-negative int32 field into *dst: group_idx (nil:
// group 0, a model of one group) and kv_cache_spec_sliding_window (nil:
// none).
func (d *eventDecoder) int32Field(name string, dst *int32) error {
	if d.r.TryNil() {
		return nil
	}
	v, err := d.r.SmallInt()
	if err != nil || v < 0 || v > math.MaxInt32 {
		return fmt.Errorf("%s: %w", name, errOr(err, "out of range"))
	}
	*dst = int32(v)
	return nil
}

// specKind reads kv_cache_spec_kind, interned for the kinds vLLM names.
func (d *eventDecoder) specKind(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	s, err := d.r.Str()
	if err != nil {
		return fmt.Errorf("kv_cache_spec_kind: %w", err)
	}
	ev.GroupKind = internKind(s)
	return nil
}

func internKind(s []byte) string {
	for _, k := range knownKinds {
		if string(s) == k {
			return k
		}
	}
	return shortTag(s)
}

// knownKinds are vLLM's KV cache spec kinds (KVCacheSpecKind in
// vllm/v1/kv_cache_interface.py; llm-d's router knows the same ten).
var knownKinds = [...]string{"full_attention", "mla_attention", "sliding_window", "sliding_window_mla", "mamba",
	"chunked_local_attention", "sink_full_attention", "encoder_only_attention", "cross_attention", "unknown"}

// locality reads LOCAL or REMOTE; another string is kept as "other".
func (d *eventDecoder) locality(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	s, err := d.r.Str()
	if err != nil {
		return fmt.Errorf("locality: %w", err)
	}
	switch string(s) {
	case "LOCAL":
		ev.Locality = collectors.LocalityLocal
	case "REMOTE":
		ev.Locality = collectors.LocalityRemote
	case "":
	default:
		ev.Locality = collectors.LocalityOther
	}
	return nil
}

// origin reads the proposed origin (vLLM PR #51699, open: NEW or
// REUSED); another value, or one not a string, is read as absent.
func (d *eventDecoder) origin(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	at := d.r.Pos()
	s, err := d.r.Str()
	if err != nil {
		d.r.Seek(at)
		ev.Origin = collectors.OriginOther
		return d.r.Skip()
	}
	switch string(s) {
	case "NEW":
		ev.Origin = collectors.OriginNew
	case "REUSED":
		ev.Origin = collectors.OriginReused
	default:
		ev.Origin = collectors.OriginOther
	}
	return nil
}

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

func (d *eventDecoder) loraName(ev *collectors.KVEvent) error {
	if d.r.TryNil() {
		return nil
	}
	s, err := d.r.Str()
	if err != nil {
		return fmt.Errorf("lora_name: %w", err)
	}
	ev.LoRA = string(s)
	return nil
}

// internMedium avoids one allocation per event for the known media.
func internMedium(s []byte) string {
	switch string(s) {
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "CPU_PINNED":
		return "CPU_PINNED"
	case "DISK":
		return "DISK"
	case "EXTERNAL":
		return "EXTERNAL"
	case "":
		return "GPU"
	}
	return string(s)
}

// The root block's content fingerprint (KVEvent.RootContent): a local
// 64-bit hash of what makes a root block's KV what it is — its token ids,
// the block size, the LoRA (lora_name, lora_id), the first block's extra
// keys (vLLM: multimodal hashes, cache_salt, …) and SGLang's cache_salt —
// so that the pool can tell the same content stored under different block
// hashes (a hash seed or algorithm that differs between workers, or across
// a restart) from content isolated on purpose (another salt or LoRA: other
// content). Token ids are folded in as they are read and never kept.
// Values are hashed, not their encoding, so the same ids written with
// different integer widths give the same fingerprint; LoRA ids, salts and
// extra keys are hashed as encoded (a producer writes them one way).

// span is a value's bytes in the payload (to == 0: absent or nil).
type span struct{ from, to int }

// rootInputs gathers what a root block's fingerprint needs while its event
// is read, in whatever order the fields come.
type rootInputs struct {
	parentSeen bool
	tok        span   // token_ids: the whole array, header included
	tokHash    uint64 // the leading tokHashed ids, folded while counted
	tokHashed  int
	loraID     span
	salt       span
	extra      span // extra_keys[0]: the first block's
}

// hashTokens counts an array of token ids, folding the ids of the first
// of blocks blocks into tokHash (no allocation, one pass).
func (x *rootInputs) hashTokens(r *cursor, blocks int) (int, error) {
	n, err := r.ArrayLen()
	if err != nil {
		return 0, err
	}
	k := 0
	if n%blocks == 0 {
		k = n / blocks
	}
	h := uint64(fpSeed)
	for i := 0; i < k; i++ {
		at := r.Pos()
		v, _, err := r.Integer()
		if err != nil { // not an integer: counted as countInts would, no fingerprint
			r.Seek(at)
			return n, r.SkipInts(n - i)
		}
		h = fpMix(h, v)
	}
	x.tokHash, x.tokHashed = h, k
	return n, r.SkipInts(n - k)
}

// metadata reads SGLang's position-7 map: its cache_salt is content.
func (d *eventDecoder) metadata() error {
	n, err := d.r.MapLen()
	if err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		key, err := d.r.Str()
		if err != nil {
			return err
		}
		if string(key) == "cache_salt" {
			err = d.r.spanOf(&d.root.salt)
		} else {
			err = d.r.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// extraKeys keeps the span of the first block's extra keys (vLLM sends one
// entry per block); the others do not concern the root block.
func (d *eventDecoder) extraKeys() error {
	if d.r.TryNil() {
		return nil
	}
	n, err := d.r.ArrayLen()
	if err != nil {
		return err
	}
	for k := 0; k < n; k++ {
		if k == 0 {
			err = d.r.spanOf(&d.root.extra)
		} else {
			err = d.r.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// spanOf skips one value and records where it lies (nil: absent).
func (r *cursor) spanOf(s *span) error {
	if r.TryNil() {
		*s = span{}
		return nil
	}
	from := r.Pos()
	if err := r.Skip(); err != nil {
		return err
	}
	*s = span{from, r.Pos()}
	return nil
}

const fpSeed = 0x6b76746f70726f6f // "kvtoproo"

// fpMix folds one 64-bit value into h: a multiply and a shift per value,
// finished by fpFinal. Local equality tests on honest input need no more.
func fpMix(h, v uint64) uint64 {
	h = (h ^ v) * 0x9e3779b97f4a7c15
	return h ^ h>>29
}

// fpBytes folds a length and bytes, eight at a time.
func fpBytes[B ~string | ~[]byte](h uint64, b B) uint64 {
	h = fpMix(h, uint64(len(b)))
	var w uint64
	for i := 0; i < len(b); i++ {
		w |= uint64(b[i]) << (8 * (i & 7))
		if i&7 == 7 {
			h, w = fpMix(h, w), 0
		}
	}
	return fpMix(h, w)
}

// fpFinal is the splitmix64 finalizer; 0 stays free to mean "none".
func fpFinal(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	if h == 0 {
		h = 1
	}
	return h
}

// rootContent is the fingerprint of a stored root block (no parent), or 0
// when the event does not say what the block holds: no token ids (vLLM's
// hash-only offload stores), no block size, fewer ids than a block.
func (d *eventDecoder) rootContent(ev *collectors.KVEvent) uint64 {
	x := &d.root
	bs := ev.BlockSize
	if bs <= 0 && len(ev.Hashes) > 0 && ev.NumTokens%len(ev.Hashes) == 0 {
		bs = ev.NumTokens / len(ev.Hashes)
	}
	if x.tok.to == 0 || bs <= 0 || ev.NumTokens < bs || len(ev.Hashes) == 0 {
		return 0
	}
	h := x.tokHash
	if x.tokHashed != bs { // the fields came in another order: read the ids again
		r := msgpack.At(d.r.Bytes()[:x.tok.to], x.tok.from)
		if _, err := r.ArrayLen(); err != nil {
			return 0
		}
		h = fpSeed
		for i := 0; i < bs; i++ {
			v, _, err := r.Integer()
			if err != nil {
				return 0
			}
			h = fpMix(h, v)
		}
	}
	h = fpMix(h, uint64(bs))
	h = fpBytes(h, ev.LoRA)
	for _, s := range [...]span{x.loraID, x.salt, x.extra} {
		h = fpBytes(h, d.r.Bytes()[s.from:s.to])
	}
	return fpFinal(h)
}
