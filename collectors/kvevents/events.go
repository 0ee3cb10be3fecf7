package kvevents

import (
	"fmt"

	"github.com/kvtop/kvtop/collectors"
)

// eventDecoder decodes one event, appending its hashes to hs.
type eventDecoder struct {
	r             *reader
	hs            []uint64
	tag           string // set for unknown tags only (short, for the operator)
	unknownFields int
}

func (d *eventDecoder) event() (ev collectors.KVEvent, known bool, err error) {
	c, err := d.r.peek()
	if err != nil {
		return ev, false, err
	}
	switch {
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		return d.arrayEvent()
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		return d.mapEvent()
	}
	return ev, false, fmt.Errorf("event is a %s, want array or map", codeName(c))
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
	posStoredKnown // first position we do not know
)

const (
	posRemovedHashes = 1 + iota
	posRemovedMedium
	posRemovedGroupIdx
	posRemovedKnown
)

func (d *eventDecoder) arrayEvent() (ev collectors.KVEvent, known bool, err error) {
	r := d.r
	n, err := r.arrayLen()
	if err != nil {
		return ev, false, err
	}
	if n == 0 {
		return ev, false, fmt.Errorf("empty event array")
	}
	tag, err := r.strOrBin()
	if err != nil {
		return ev, false, fmt.Errorf("event tag: %w", err)
	}
	ev.Kind = kindOf(tag)
	ev.Medium = "GPU"
	if ev.Kind == 0 {
		d.tag = shortTag(tag)
		for k := 1; k < n; k++ {
			if err := r.skip(); err != nil {
				return ev, false, err
			}
		}
		return ev, false, nil
	}
	if ev.Kind != collectors.AllBlocksCleared && n <= posStoredHashes {
		return ev, false, fmt.Errorf("%s without block_hashes", ev.Kind)
	}
	for pos := 1; pos < n; pos++ {
		if err := d.arrayField(&ev, pos); err != nil {
			return ev, false, err
		}
	}
	return ev, true, nil
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
			if c, err := d.r.peek(); err == nil && isMapCode(c) {
				return d.r.skip()
			}
			return d.loraName(ev)
		case posStoredLoRAID, posStoredExtraKeys, posStoredGroupIdx, posStoredSpecKind, posStoredSpecWindow:
			return d.r.skip()
		}
	case collectors.BlockRemoved:
		switch pos {
		case posRemovedHashes:
			return d.hashes(ev)
		case posRemovedMedium:
			return d.medium(ev)
		case posRemovedGroupIdx:
			return d.r.skip()
		}
	}
	d.unknownFields++
	return d.r.skip()
}

func (d *eventDecoder) mapEvent() (ev collectors.KVEvent, known bool, err error) {
	r := d.r
	n, err := r.mapLen()
	if err != nil {
		return ev, false, err
	}
	ev.Medium = "GPU"
	sawType, sawHashes, unknownType := false, false, false
	for k := 0; k < n; k++ {
		key, err := r.strOrBin()
		if err != nil {
			return ev, false, fmt.Errorf("event key: %w", err)
		}
		if unknownType { // nothing of an unknown event is used
			if err := r.skip(); err != nil {
				return ev, false, err
			}
			continue
		}
		switch string(key) {
		case "type":
			tag, err := r.strOrBin()
			if err != nil {
				return ev, false, fmt.Errorf("event type: %w", err)
			}
			sawType = true
			if ev.Kind = kindOf(tag); ev.Kind == 0 {
				unknownType = true
				d.tag = shortTag(tag)
			}
		case "block_hashes":
			sawHashes = true
			err = d.hashes(&ev)
		case "parent_block_hash":
			err = d.parent(&ev)
		case "token_ids":
			err = d.tokens(&ev)
		case "block_size":
			err = d.blockSize(&ev)
		case "medium":
			err = d.medium(&ev)
		case "lora_name":
			err = d.loraName(&ev)
		case "lora_id", "extra_keys", "group_idx", "kv_cache_spec_kind",
			"kv_cache_spec_sliding_window", "locality", "ownership", "session_id", "cache_salt":
			err = r.skip()
		default:
			d.unknownFields++
			err = r.skip()
		}
		if err != nil {
			return ev, false, fmt.Errorf("%s: %w", shortTag(key), err)
		}
	}
	switch {
	case !sawType:
		return ev, false, fmt.Errorf("event map without type")
	case unknownType:
		d.unknownFields = 0
		return ev, false, nil
	case ev.Kind != collectors.AllBlocksCleared && !sawHashes:
		return ev, false, fmt.Errorf("%s without block_hashes", ev.Kind)
	}
	return ev, true, nil
}

func (d *eventDecoder) hashes(ev *collectors.KVEvent) error {
	n, err := d.r.arrayLen()
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
	if d.r.tryNil() {
		return nil
	}
	h, err := d.r.hash()
	if err != nil {
		return fmt.Errorf("parent_block_hash: %w", err)
	}
	ev.Parent, ev.HasParent = h, h != 0
	return nil
}

func (d *eventDecoder) tokens(ev *collectors.KVEvent) error {
	if d.r.tryNil() {
		return nil
	}
	n, err := d.r.countInts()
	if err != nil {
		return fmt.Errorf("token_ids: %w", err)
	}
	ev.NumTokens = n
	return nil
}

func (d *eventDecoder) blockSize(ev *collectors.KVEvent) error {
	if d.r.tryNil() {
		return nil
	}
	v, err := d.r.smallInt()
	if err != nil {
		return fmt.Errorf("block_size: %w", err)
	}
	ev.BlockSize = v
	return nil
}

func (d *eventDecoder) medium(ev *collectors.KVEvent) error {
	if d.r.tryNil() {
		return nil
	}
	s, err := d.r.strOrBin()
	if err != nil {
		return fmt.Errorf("medium: %w", err)
	}
	ev.Medium = internMedium(s)
	return nil
}

func (d *eventDecoder) loraName(ev *collectors.KVEvent) error {
	if d.r.tryNil() {
		return nil
	}
	s, err := d.r.strOrBin()
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
