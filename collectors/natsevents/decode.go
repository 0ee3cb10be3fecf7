package natsevents

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/msgpack"
)

// Event is one decoded Dynamo RouterEvent: one KV cache event of one
// worker's data-parallel rank, numbered by Dynamo's event id.
type Event struct {
	WorkerID  uint64
	HasWorker bool
	Rank      int // dp_rank, 0 when absent
	ID        uint64
	HasID     bool
	// KV is the event in kvtop's terms. Kind 0 is an event of a kind kvtop
	// does not know (Unknown names it): harmless, counted, skipped.
	KV      collectors.KVEvent
	Unknown string
	// UnknownFields counts keys (or trailing array items) kvtop skipped.
	UnknownFields int
	// Envelope is set when the event came inside Dynamo's event-plane
	// envelope: its publisher, sequence and publish time (producer clock,
	// milliseconds; shown, never compared with kvtop's).
	Envelope    bool
	PublisherID uint64
	Sequence    uint64
	PublishedMS uint64
	// Format is how it was encoded: json, msgpack, json-envelope or
	// msgpack-envelope.
	Format string
}

// maxHashes bounds the block hashes of one event: a stored event of
// Dynamo's batching publisher holds at most 128 blocks, a removal a few
// thousand; a message that claims more is refused.
const maxHashes = 1 << 16

// maxPayload bounds an envelope's payload (NATS' own max_payload is 1 MiB
// by default, 64 MiB at most).
const maxPayload = 64 << 20

// Decode reads one NATS message body: a RouterEvent as serde_json or
// rmp_serde (named or positional) writes it, or one wrapped in the event
// plane's envelope (JSON with the payload as an array of bytes, or
// msgpack with a bin payload). On an error, the fields read before it
// are kept (a worker id and event id let the caller account for the
// event). ev is overwritten; its Hashes slice is reused.
func Decode(b []byte, ev *Event) error {
	hashes := ev.KV.Hashes[:0]
	*ev = Event{}
	ev.KV.Hashes = hashes
	ev.KV.Medium = "GPU"
	d := readers.Get().(*readerPair)
	defer readers.Put(d)
	return d.decodeTop(b, ev, 0)
}

// maxBatch bounds the RouterEvents of one message: Dynamo's publisher
// sends at most 128 an envelope (lib/llm/src/kv_router/publisher/sinks.rs).
const maxBatch = 4096

// DecodeAll reads one message body as Decode does, and also the batch
// Dynamo's publisher has sent since 1.3 (on NATS and on its ZMQ event
// plane): an array of RouterEvents, bare or as an envelope's payload.
// Every event of an envelope carries its publisher, sequence and publish
// time. On an error, evs holds what was read before it (an event with a
// worker and an id can be accounted for). evs is reused.
func DecodeAll(b []byte, evs []Event) ([]Event, error) {
	evs = evs[:0]
	d := readers.Get().(*readerPair)
	defer readers.Put(d)
	var one Event
	one.KV.Medium = "GPU"
	d.batch = &evs
	defer func() { d.batch = nil }()
	err := d.decodeTop(b, &one, 0)
	if d.inner != nil && len(d.inner.hs) > 0 {
		d.inner.ownHashes(evs) // an envelope's batch was read by the inner pair
	} else if len(d.hs) > 0 {
		d.ownHashes(evs)
	}
	if len(evs) == 0 { // not a batch: the one event
		if err != nil && !one.HasWorker && !one.HasID {
			return evs, err
		}
		return append(evs, one), err
	}
	for i := range evs { // the envelope's fields, on each
		e := &evs[i]
		e.Envelope, e.PublisherID, e.Sequence, e.PublishedMS = one.Envelope, one.PublisherID, one.Sequence, one.PublishedMS
		if one.Envelope {
			e.Format = one.Format
		}
		e.UnknownFields += one.UnknownFields
	}
	return evs, err
}

// readerPair holds one reader of each encoding, reused (their stacks and
// scratch stay allocated); an envelope's payload gets the second pair.
// batch, set by DecodeAll, takes the events of a batched payload.
type readerPair struct {
	j     jsonTokens
	m     mpTokens
	inner *readerPair
	batch *[]Event
	hs    []uint64 // a batch's hashes, while it is read (keepHashes)
}

// keepHashes makes ev's hashes part of the scratch from start on (when
// appending outgrew the scratch they are copied in).
func (d *readerPair) keepHashes(ev *Event, start int) {
	hs := ev.KV.Hashes
	if len(hs) > 0 && (start+len(hs) > cap(d.hs) || &d.hs[:start+1][start] != &hs[0]) {
		d.hs = append(d.hs[:start], hs...)
	} else {
		d.hs = d.hs[:start+len(hs)]
	}
}

// ownHashes gives the batch's events one exact array for all their
// hashes, in order (two allocations a message, not one an event), and
// leaves the scratch for the next message.
func (d *readerPair) ownHashes(evs []Event) {
	all := make([]uint64, len(d.hs))
	copy(all, d.hs)
	off := 0
	for i := range evs {
		n := len(evs[i].KV.Hashes)
		if n == 0 {
			// nil, whatever the scratch held: the same bytes decode to
			// the same events whether the reader came fresh from the pool
			// or reused (FuzzDecodeAll compares two decodes).
			evs[i].KV.Hashes = nil
			continue
		}
		evs[i].KV.Hashes = all[off : off+n : off+n]
		off += n
	}
	if cap(d.hs) > maxScratch {
		d.hs = nil
	} else {
		d.hs = d.hs[:0]
	}
}

// maxScratch bounds the hashes scratch a reader keeps between messages.
const maxScratch = 1 << 16

// isBatch reports whether b (trimmed) is an array whose first element is
// a map or an array: RouterEvents, not a positional RouterEvent (whose
// first element is the worker id).
func isBatch(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	if b[0] == '[' {
		rest := bytes.TrimLeft(b[1:], " \t\r\n")
		return len(rest) > 0 && (rest[0] == '{' || rest[0] == '[' || rest[0] == ']')
	}
	i := 0
	switch c := b[0]; {
	case c >= 0x90 && c <= 0x9f:
		if c == 0x90 {
			return true // an empty batch
		}
		i = 1
	case c == 0xdc:
		i = 3
	case c == 0xdd:
		i = 5
	default:
		return false
	}
	if i >= len(b) {
		return false
	}
	c := b[i]
	return c >= 0x80 && c <= 0x9f || c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf
}

// decodeBatch reads an array of RouterEvents into *d.batch.
func (d *readerPair) decodeBatch(t tokens, depth int) error {
	if err := t.beginArray(); err != nil {
		return err
	}
	for {
		ok, err := t.more()
		if err != nil || !ok {
			if err == nil && len(*d.batch) == 0 {
				err = errors.New("an empty batch of events")
			}
			return err
		}
		if len(*d.batch) >= maxBatch {
			return fmt.Errorf("more than %d events in one message", maxBatch)
		}
		*d.batch = append(*d.batch, Event{})
		ev := &(*d.batch)[len(*d.batch)-1]
		ev.KV.Medium = "GPU"
		// The event's hashes go into the scratch, after the others'.
		start := len(d.hs)
		ev.KV.Hashes = d.hs[start:start]
		err = d.decodeRoot(t, ev, depth+1)
		d.keepHashes(ev, start)
		if err != nil {
			return fmt.Errorf("event %d of the batch: %w", len(*d.batch)-1, err)
		}
		if !ev.HasWorker || !ev.HasID {
			return fmt.Errorf("event %d of the batch is not a RouterEvent: no worker_id or event.event_id", len(*d.batch)-1)
		}
	}
}

var readers = sync.Pool{New: func() any { return &readerPair{} }}

func (d *readerPair) decodeTop(b []byte, ev *Event, depth int) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return errors.New("empty message")
	}
	var t tokens
	if b[0] == '{' || b[0] == '[' {
		d.j = jsonTokens{b: b, stack: d.j.stack[:0], scr: d.j.scr[:0]}
		t = &d.j
		ev.Format = "json"
	} else {
		d.m = mpTokens{c: msgpack.New(b), stack: d.m.stack[:0]}
		t = &d.m
		ev.Format = "msgpack"
	}
	if d.batch != nil && isBatch(b) {
		if err := d.decodeBatch(t, depth); err != nil {
			return err
		}
		if t.rest() > 0 {
			if jt, ok := t.(*jsonTokens); ok {
				jt.ws()
			}
			if t.rest() > 0 {
				return fmt.Errorf("%d bytes after the batch", t.rest())
			}
		}
		ev.HasWorker, ev.HasID = true, true // the batch's events say who they are
		return nil
	}
	if err := d.decodeRoot(t, ev, depth); err != nil {
		return err
	}
	if t.rest() > 0 {
		if jt, ok := t.(*jsonTokens); ok {
			jt.ws()
		}
		if t.rest() > 0 {
			return fmt.Errorf("%d bytes after the event", t.rest())
		}
	}
	if !ev.HasWorker || !ev.HasID {
		return errors.New("not a RouterEvent: no worker_id or event.event_id")
	}
	return nil
}

// decodeRoot reads a RouterEvent, or an envelope around one.
func (d *readerPair) decodeRoot(t tokens, ev *Event, depth int) error {
	k, err := t.peek()
	if err != nil {
		return err
	}
	if k == kArray {
		return decodePositional(t, ev)
	}
	if k != kMap {
		return fmt.Errorf("message is %s %s, want a map", article(k), k)
	}
	if err := t.beginMap(); err != nil {
		return err
	}
	for {
		ok, err := t.more()
		if err != nil || !ok {
			return err
		}
		key, err := t.key()
		if err != nil {
			return err
		}
		switch string(key) {
		case "worker_id":
			if ev.WorkerID, err = t.uint(); err != nil {
				return fmt.Errorf("worker_id: %w", err)
			}
			ev.HasWorker = true
		case "storage_tier":
			if err = tier(t, ev); err != nil {
				return err
			}
		case "event":
			if err = decodeEvent(t, ev); err != nil {
				return err
			}
		// The event plane's envelope.
		case "payload":
			if depth > 0 {
				return errors.New("an envelope inside an envelope")
			}
			p, err := t.bytes(maxPayload)
			if err != nil {
				return fmt.Errorf("envelope payload: %w", err)
			}
			if _, isJSON := t.(*jsonTokens); isJSON {
				p = append([]byte(nil), p...) // out of the reader's scratch
			}
			if d.inner == nil {
				d.inner = &readerPair{}
			}
			d.inner.batch = d.batch
			format := ev.Format
			if err := d.inner.decodeTop(p, ev, depth+1); err != nil {
				return fmt.Errorf("envelope payload: %w", err)
			}
			ev.Envelope, ev.Format = true, format+"-envelope"
		case "publisher_id":
			ev.PublisherID, err = t.uint()
		case "sequence":
			ev.Sequence, err = t.uint()
		case "published_at":
			ev.PublishedMS, err = t.uint()
		case "topic", "published_at_ns", "residency_domain", "state_source":
			err = t.skip() // known, not needed
		default:
			ev.UnknownFields++
			err = t.skip()
		}
		if err != nil {
			return err
		}
	}
}

// tier maps Dynamo's storage tier to kvtop's medium names (the index keys
// blocks per medium). Absent is the device.
func tier(t tokens, ev *Event) error {
	if ok, err := t.null(); ok || err != nil {
		return err
	}
	s, err := t.str()
	if err != nil {
		return fmt.Errorf("storage_tier: %w", err)
	}
	switch string(s) {
	case "device", "Device":
		ev.KV.Medium = "GPU"
	case "host_pinned", "HostPinned":
		ev.KV.Medium = "CPU_PINNED"
	case "disk", "Disk":
		ev.KV.Medium = "DISK"
	case "external", "External":
		ev.KV.Medium = "EXTERNAL"
	default:
		ev.KV.Medium = shortText(s)
	}
	return nil
}

// decodePositional reads rmp_serde's positional RouterEvent: [worker_id,
// event] or [worker_id, storage_tier, event]. Trailing items are counted.
func decodePositional(t tokens, ev *Event) error {
	if err := t.beginArray(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		ok, err := t.more()
		if err != nil || !ok {
			return err
		}
		k, err := t.peek()
		if err != nil {
			return err
		}
		switch {
		case i == 0:
			if ev.WorkerID, err = t.uint(); err == nil {
				ev.HasWorker = true
			}
		case i == 1 && k == kString:
			err = tier(t, ev)
		case (i == 1 || i == 2) && !ev.HasID && (k == kArray || k == kMap):
			err = decodeEvent(t, ev)
		default:
			ev.UnknownFields++
			err = t.skip()
		}
		if err != nil {
			return err
		}
	}
}

// decodeEvent reads a KvCacheEvent {event_id, data, dp_rank}, as a map or
// positionally.
func decodeEvent(t tokens, ev *Event) (err error) {
	k, err := t.peek()
	if err != nil {
		return err
	}
	hasData := false
	defer func() {
		if err == nil && !hasData {
			err = errors.New("event without data")
		}
	}()
	field := func(name string) error {
		switch name {
		case "event_id":
			if ev.ID, err = t.uint(); err != nil {
				return fmt.Errorf("event_id: %w", err)
			}
			ev.HasID = true
		case "data":
			hasData = true
			return decodeData(t, ev)
		case "dp_rank":
			r, err := t.uint()
			if err != nil {
				return fmt.Errorf("dp_rank: %w", err)
			}
			if r > maxRank {
				return fmt.Errorf("dp_rank %d is over %d", r, maxRank)
			}
			ev.Rank = int(r)
		default:
			ev.UnknownFields++
			return t.skip()
		}
		return nil
	}
	if k == kArray {
		if err := t.beginArray(); err != nil {
			return err
		}
		for i, names := 0, []string{"event_id", "data", "dp_rank"}; ; i++ {
			ok, err := t.more()
			if err != nil || !ok {
				return err
			}
			name := ""
			if i < len(names) {
				name = names[i]
			}
			if err := field(name); err != nil {
				return err
			}
		}
	}
	if err := t.beginMap(); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	for {
		ok, err := t.more()
		if err != nil || !ok {
			return err
		}
		key, err := t.key()
		if err != nil {
			return err
		}
		if err := field(string(key)); err != nil {
			return err
		}
	}
}

// maxRank bounds dp_rank (as the ZMQ collector does for its topics).
const maxRank = 255

// decodeData reads KvCacheEventData, externally tagged: {"stored": {...}},
// {"removed": {...}}, "cleared" (a unit variant: a string, or a map to
// null). Variant names are matched in snake case (serde's rename) and as
// written in Rust. A variant kvtop does not know (Dynamo added "accessed")
// is skipped and named.
func decodeData(t tokens, ev *Event) error {
	k, err := t.peek()
	if err != nil {
		return err
	}
	if k == kString {
		s, err := t.str()
		if err != nil {
			return err
		}
		return variant(t, ev, s, false)
	}
	if err := t.beginMap(); err != nil {
		return fmt.Errorf("data: %w", err)
	}
	n := 0
	for {
		ok, err := t.more()
		if err != nil || !ok {
			if n == 0 && err == nil {
				return errors.New("data: an empty map, want one variant")
			}
			return err
		}
		key, err := t.key()
		if err != nil {
			return err
		}
		if n++; n > 1 {
			ev.UnknownFields++
			if err := t.skip(); err != nil {
				return err
			}
			continue
		}
		if err := variant(t, ev, key, true); err != nil {
			return err
		}
	}
}

func variant(t tokens, ev *Event, name []byte, hasValue bool) error {
	switch string(name) {
	case "stored", "Stored":
		if !hasValue {
			return errors.New("stored without its data")
		}
		ev.KV.Kind = collectors.BlockStored
		return decodeStored(t, ev)
	case "removed", "Removed":
		if !hasValue {
			return errors.New("removed without its data")
		}
		ev.KV.Kind = collectors.BlockRemoved
		return hashList(t, ev, "block_hashes", 0)
	case "cleared", "Cleared":
		ev.KV.Kind = collectors.AllBlocksCleared
		if hasValue {
			return t.skip() // null, or an empty map or array
		}
		return nil
	}
	ev.Unknown = shortText(name)
	if hasValue {
		return t.skip()
	}
	return nil
}

// decodeStored reads KvCacheStoreData {parent_hash, start_position,
// blocks: [{block_hash, tokens_hash, mm_extra_info}]}, or positionally.
func decodeStored(t tokens, ev *Event) error {
	k, err := t.peek()
	if err != nil {
		return err
	}
	parent := func() error {
		if ok, err := t.null(); ok || err != nil {
			return err
		}
		p, err := t.uint()
		if err != nil {
			return fmt.Errorf("parent_hash: %w", err)
		}
		ev.KV.Parent, ev.KV.HasParent = p, true
		return nil
	}
	if k == kArray {
		// [parent_hash, blocks] or [parent_hash, start_position, blocks]
		if err := t.beginArray(); err != nil {
			return err
		}
		for i := 0; ; i++ {
			ok, err := t.more()
			if err != nil || !ok {
				return err
			}
			nk, err := t.peek()
			if err != nil {
				return err
			}
			switch {
			case i == 0:
				err = parent()
			case nk == kArray && len(ev.KV.Hashes) == 0:
				err = blocks(t, ev)
			default:
				if i > 2 {
					ev.UnknownFields++
				}
				err = t.skip()
			}
			if err != nil {
				return err
			}
		}
	}
	if err := t.beginMap(); err != nil {
		return fmt.Errorf("stored: %w", err)
	}
	for {
		ok, err := t.more()
		if err != nil || !ok {
			return err
		}
		key, err := t.key()
		if err != nil {
			return err
		}
		switch string(key) {
		case "parent_hash":
			err = parent()
		case "blocks":
			err = blocks(t, ev)
		case "start_position":
			err = t.skip()
		default:
			ev.UnknownFields++
			err = t.skip()
		}
		if err != nil {
			return err
		}
	}
}

// blocks reads the stored blocks: their block_hash (the chained hash the
// router indexes); tokens_hash and multimodal info are not needed.
func blocks(t tokens, ev *Event) error {
	if err := t.beginArray(); err != nil {
		return fmt.Errorf("blocks: %w", err)
	}
	for {
		ok, err := t.more()
		if err != nil || !ok {
			return err
		}
		if len(ev.KV.Hashes) >= maxHashes {
			return fmt.Errorf("more than %d blocks in one event", maxHashes)
		}
		k, err := t.peek()
		if err != nil {
			return err
		}
		if k == kArray { // positional [block_hash, tokens_hash, mm_extra_info]
			if err := t.beginArray(); err != nil {
				return err
			}
			for i := 0; ; i++ {
				ok, err := t.more()
				if err != nil {
					return err
				}
				if !ok {
					if i == 0 {
						return errors.New("a stored block without its hash")
					}
					break
				}
				if i == 0 {
					h, err := t.uint()
					if err != nil {
						return fmt.Errorf("block_hash: %w", err)
					}
					ev.KV.Hashes = append(ev.KV.Hashes, h)
					continue
				}
				if i > 2 {
					ev.UnknownFields++
				}
				if err := t.skip(); err != nil {
					return err
				}
			}
			continue
		}
		if err := t.beginMap(); err != nil {
			return fmt.Errorf("stored block: %w", err)
		}
		found := false
		for {
			ok, err := t.more()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			key, err := t.key()
			if err != nil {
				return err
			}
			switch string(key) {
			case "block_hash":
				h, err := t.uint()
				if err != nil {
					return fmt.Errorf("block_hash: %w", err)
				}
				if !found {
					ev.KV.Hashes = append(ev.KV.Hashes, h)
				}
				found = true
			case "tokens_hash", "mm_extra_info":
				err = t.skip()
			default:
				ev.UnknownFields++
				err = t.skip()
			}
			if err != nil {
				return err
			}
		}
		if !found {
			return errors.New("a stored block without block_hash")
		}
	}
}

// hashList reads {block_hashes: [...]} (or positionally [[...]]).
func hashList(t tokens, ev *Event, name string, _ int) error {
	k, err := t.peek()
	if err != nil {
		return err
	}
	list := func() error {
		if err := t.beginArray(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for {
			ok, err := t.more()
			if err != nil || !ok {
				return err
			}
			if len(ev.KV.Hashes) >= maxHashes {
				return fmt.Errorf("more than %d hashes in one event", maxHashes)
			}
			h, err := t.uint()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			ev.KV.Hashes = append(ev.KV.Hashes, h)
		}
	}
	if k == kArray {
		if err := t.beginArray(); err != nil {
			return err
		}
		for i := 0; ; i++ {
			ok, err := t.more()
			if err != nil || !ok {
				return err
			}
			if i == 0 {
				err = list()
			} else {
				ev.UnknownFields++
				err = t.skip()
			}
			if err != nil {
				return err
			}
		}
	}
	if err := t.beginMap(); err != nil {
		return fmt.Errorf("removed: %w", err)
	}
	for {
		ok, err := t.more()
		if err != nil || !ok {
			return err
		}
		key, err := t.key()
		if err != nil {
			return err
		}
		if string(key) == name {
			err = list()
		} else {
			ev.UnknownFields++
			err = t.skip()
		}
		if err != nil {
			return err
		}
	}
}

func article(k kind) string {
	switch k {
	case kArray, kInt, kUint, kExt:
		return "an"
	}
	return "a"
}

// kExt is kOther, named for article.
const kExt = kOther

// shortText keeps a producer's word printable and short for a message.
func shortText(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	if len(b) > 32 {
		b = b[:32]
	}
	s := strconv.Quote(string(b))
	return s[1 : len(s)-1]
}
