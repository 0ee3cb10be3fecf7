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
	d.out, d.batch = evs, &d.out // not &evs: that would move evs to the heap, an allocation a message
	err := d.decodeTop(b, &one, 0)
	evs, d.out, d.batch = d.out, nil, nil
	if d.inner != nil && len(d.inner.hs) > 0 {
		d.inner.ownHashes(evs) // an envelope's batch was read by the inner pair
	} else if len(d.hs) > 0 {
		d.ownHashes(evs)
	} else {
		// No hashes held: an event without any has nil, as ownHashes
		// gives it, whichever path read it (the same bytes decode to the
		// same events, FuzzDecodeAll).
		for i := range evs {
			if len(evs[i].KV.Hashes) == 0 {
				evs[i].KV.Hashes = nil
			}
		}
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
	out   []Event  // DecodeAll's events, while it runs (batch points here)
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

// walk steps through one array or map, like a bufio.Scanner:
//
//	var w walk
//	w.open(t, isMap, "what")
//	for w.next() { … the item (an entry's value, its key in w.key) is next … }
//	return w.err
//
// No closure per container nor call through one per item: the loop body
// stays in its function.
type walk struct {
	t     tokens
	isMap bool
	i     int    // the item's index, from 0
	key   []byte // a map entry's key
	err   error
}

// open enters an array or a map; a value of the other type is refused as
// what (when one is named).
func (w *walk) open(t tokens, isMap bool, what string) {
	w.t, w.isMap, w.i = t, isMap, -1
	if isMap {
		w.err = t.beginMap()
	} else {
		w.err = t.beginArray()
	}
	if w.err != nil && what != "" {
		w.err = fmt.Errorf("%s: %w", what, w.err)
	}
}

// named is what a struct's errors are prefixed with: its name when it is
// read as a map, nothing when read positionally.
func named(isMap bool, what string) string {
	if isMap {
		return what
	}
	return ""
}

// field is which of a struct's fields the item is, by its key in a map
// or its position in an array: an index of names, len(names) for a field
// not among them.
func (w *walk) field(names []string) int {
	if !w.isMap {
		return min(w.i, len(names))
	}
	for i, n := range names {
		if string(w.key) == n {
			return i
		}
	}
	return len(names)
}

// next steps to the next item: false at the end or on an error (w.err).
func (w *walk) next() bool {
	if w.err != nil {
		return false
	}
	var ok bool
	if w.key, ok, w.err = w.t.next(); ok {
		w.i++ // w.i stays the last item's index at the end: -1 for none
	}
	return ok
}

// unknown counts a field kvtop does not know and steps over it.
func unknown(t tokens, ev *Event) error {
	ev.UnknownFields++
	return t.skip()
}

// decodeBatch reads an array of RouterEvents into *d.batch.
func (d *readerPair) decodeBatch(t tokens, depth int) error {
	var w walk
	w.open(t, false, "")
	for w.next() {
		if len(*d.batch) >= maxBatch {
			return fmt.Errorf("more than %d events in one message", maxBatch)
		}
		*d.batch = append(*d.batch, Event{})
		ev := &(*d.batch)[len(*d.batch)-1]
		ev.KV.Medium = "GPU"
		// The event's hashes go into the scratch, after the others'.
		start := len(d.hs)
		ev.KV.Hashes = d.hs[start:start]
		err := d.decodeRoot(t, ev, depth+1)
		d.keepHashes(ev, start)
		if err != nil {
			return fmt.Errorf("event %d of the batch: %w", len(*d.batch)-1, err)
		}
		if !ev.HasWorker || !ev.HasID {
			return fmt.Errorf("event %d of the batch is not a RouterEvent: no worker_id or event.event_id", len(*d.batch)-1)
		}
	}
	if w.err == nil && len(*d.batch) == 0 {
		return errors.New("an empty batch of events")
	}
	return w.err
}

var readers = sync.Pool{New: func() any { return &readerPair{} }}

func (d *readerPair) decodeTop(b []byte, ev *Event, depth int) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return errors.New("empty message")
	}
	var t tokens
	isJSON := b[0] == '{' || b[0] == '['
	if isJSON {
		d.j = jsonTokens{b: b, stack: d.j.stack[:0], scr: d.j.scr[:0]}
		t = &d.j
		ev.Format = "json"
	} else {
		d.m = mpTokens{c: msgpack.New(b), stack: d.m.stack[:0]}
		t = &d.m
		ev.Format = "msgpack"
	}
	if d.batch != nil && isBatch(b) {
		// Dynamo's publisher's batch, straight off the cursor; the
		// general decoder reads what the fast path declines.
		if !isJSON && d.fastBatch(b) {
			ev.HasWorker, ev.HasID = true, true
			return nil
		}
		if err := d.decodeBatch(t, depth); err != nil {
			return err
		}
		if err := trailing(t, "batch"); err != nil {
			return err
		}
		ev.HasWorker, ev.HasID = true, true // the batch's events say who they are
		return nil
	}
	if err := d.decodeRoot(t, ev, depth); err != nil {
		return err
	}
	if err := trailing(t, "event"); err != nil {
		return err
	}
	if !ev.HasWorker || !ev.HasID {
		return errors.New("not a RouterEvent: no worker_id or event.event_id")
	}
	return nil
}

// trailing refuses bytes after the value read (JSON: but white space).
func trailing(t tokens, what string) error {
	if jt, ok := t.(*jsonTokens); ok {
		jt.ws()
	}
	if t.rest() > 0 {
		return fmt.Errorf("%d bytes after the %s", t.rest(), what)
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
	var w walk
	w.open(t, true, "")
	for w.next() {
		switch string(w.key) {
		case "worker_id":
			if ev.WorkerID, err = t.uint(); err != nil {
				return fmt.Errorf("worker_id: %w", err)
			}
			ev.HasWorker = true
		case "storage_tier":
			err = tier(t, ev)
		case "event":
			err = decodeEvent(t, ev)
		// The event plane's envelope.
		case "payload":
			err = d.envelope(t, ev, depth)
		case "publisher_id":
			ev.PublisherID, err = t.uint()
		case "sequence":
			ev.Sequence, err = t.uint()
		case "published_at":
			ev.PublishedMS, err = t.uint()
		case "topic", "published_at_ns", "residency_domain", "state_source":
			err = t.skip() // known, not needed
		default:
			err = unknown(t, ev)
		}
		if err != nil {
			return err
		}
	}
	return w.err
}

// envelope reads the event plane envelope's payload: the RouterEvent (or
// the batch of them) it carries, encoded again.
func (d *readerPair) envelope(t tokens, ev *Event, depth int) error {
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
	ev.Envelope = true
	switch format { // constants: no string built per message
	case "json":
		ev.Format = "json-envelope"
	case "msgpack":
		ev.Format = "msgpack-envelope"
	default:
		ev.Format = format + "-envelope"
	}
	return nil
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
	ev.KV.Medium = medium(s)
	return nil
}

// medium is kvtop's name of a storage tier, as serde writes it (snake
// case) or as Rust names it.
func medium(s []byte) string {
	switch string(s) {
	case "device", "Device":
		return "GPU"
	case "host_pinned", "HostPinned":
		return "CPU_PINNED"
	case "disk", "Disk":
		return "DISK"
	case "external", "External":
		return "EXTERNAL"
	}
	return shortText(s)
}

// decodePositional reads rmp_serde's positional RouterEvent: [worker_id,
// event] or [worker_id, storage_tier, event]. Trailing items are counted.
func decodePositional(t tokens, ev *Event) error {
	var w walk
	w.open(t, false, "")
	for w.next() {
		k, err := t.peek()
		if err != nil {
			return err
		}
		switch i := w.i; {
		case i == 0:
			if ev.WorkerID, err = t.uint(); err == nil {
				ev.HasWorker = true
			}
		case i == 1 && k == kString:
			err = tier(t, ev)
		case (i == 1 || i == 2) && !ev.HasID && (k == kArray || k == kMap):
			err = decodeEvent(t, ev)
		default:
			err = unknown(t, ev)
		}
		if err != nil {
			return err
		}
	}
	return w.err
}

// eventFields are KvCacheEvent's fields in rmp_serde's positional order.
var eventFields = [...]string{"event_id", "data", "dp_rank"}

// decodeEvent reads a KvCacheEvent {event_id, data, dp_rank}, as a map or
// positionally.
func decodeEvent(t tokens, ev *Event) error {
	k, err := t.peek()
	if err != nil {
		return err
	}
	hasData := false
	var w walk
	w.open(t, k != kArray, named(k != kArray, "event"))
	for w.next() {
		switch w.field(eventFields[:]) {
		case 0: // event_id
			if ev.ID, err = t.uint(); err != nil {
				return fmt.Errorf("event_id: %w", err)
			}
			ev.HasID = true
		case 1: // data
			hasData = true
			err = decodeData(t, ev)
		case 2: // dp_rank
			var r uint64
			if r, err = t.uint(); err != nil {
				return fmt.Errorf("dp_rank: %w", err)
			}
			if r > maxRank {
				return fmt.Errorf("dp_rank %d is over %d", r, maxRank)
			}
			ev.Rank = int(r)
		default:
			err = unknown(t, ev)
		}
		if err != nil {
			return err
		}
	}
	if w.err == nil && !hasData {
		return errors.New("event without data")
	}
	return w.err
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
	var w walk
	w.open(t, true, "data")
	for w.next() {
		if w.i > 0 {
			err = unknown(t, ev)
		} else {
			err = variant(t, ev, w.key, true)
		}
		if err != nil {
			return err
		}
	}
	if w.i < 0 && w.err == nil {
		return errors.New("data: an empty map, want one variant")
	}
	return w.err
}

// variantKind is the kind a KvCacheEventData variant names, 0 for one
// kvtop does not know.
func variantKind(name []byte) collectors.EventKind {
	switch string(name) {
	case "stored", "Stored":
		return collectors.BlockStored
	case "removed", "Removed":
		return collectors.BlockRemoved
	case "cleared", "Cleared":
		return collectors.AllBlocksCleared
	}
	return 0
}

func variant(t tokens, ev *Event, name []byte, hasValue bool) error {
	kind := variantKind(name)
	switch {
	case kind == 0:
		ev.Unknown = shortText(name)
	case kind == collectors.BlockStored && !hasValue:
		return errors.New("stored without its data")
	case kind == collectors.BlockRemoved && !hasValue:
		return errors.New("removed without its data")
	default:
		ev.KV.Kind = kind
	}
	switch {
	case kind == collectors.BlockStored:
		return decodeStored(t, ev)
	case kind == collectors.BlockRemoved:
		return hashList(t, ev, "block_hashes")
	case hasValue:
		return t.skip() // cleared's null, or an empty map or array; an unknown variant's data
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
		var w walk
		w.open(t, false, "")
		for w.next() {
			nk, err := t.peek()
			switch {
			case err != nil:
			case w.i == 0:
				err = parent()
			case nk == kArray && len(ev.KV.Hashes) == 0:
				err = blocks(t, ev)
			case w.i > 2:
				err = unknown(t, ev)
			default:
				err = t.skip()
			}
			if err != nil {
				return err
			}
		}
		return w.err
	}
	var w walk
	w.open(t, true, "stored")
	for w.next() {
		switch string(w.key) {
		case "parent_hash":
			err = parent()
		case "blocks":
			err = blocks(t, ev)
		case "start_position":
			err = t.skip()
		default:
			err = unknown(t, ev)
		}
		if err != nil {
			return err
		}
	}
	return w.err
}

// blocks reads the stored blocks: their block_hash (the chained hash the
// router indexes); tokens_hash and multimodal info are not needed.
func blocks(t tokens, ev *Event) error {
	var w walk
	w.open(t, false, "blocks")
	for w.next() {
		if len(ev.KV.Hashes) >= maxHashes {
			return fmt.Errorf("more than %d blocks in one event", maxHashes)
		}
		k, err := t.peek()
		if err == nil {
			err = oneBlock(t, ev, k != kArray)
		}
		if err != nil {
			return err
		}
	}
	return w.err
}

// oneBlock reads a stored block, {block_hash, tokens_hash,
// mm_extra_info} or positionally: its block_hash (a second one is read and
// not kept).
func oneBlock(t tokens, ev *Event, isMap bool) error {
	found := false
	var w walk
	w.open(t, isMap, named(isMap, "stored block"))
	for w.next() {
		var err error
		switch w.field(blockFields[:]) {
		case 0: // block_hash
			var h uint64
			if h, err = t.uint(); err != nil {
				return fmt.Errorf("block_hash: %w", err)
			}
			if !found {
				ev.KV.Hashes = append(ev.KV.Hashes, h)
			}
			found = true
		case 1, 2: // tokens_hash, mm_extra_info
			err = t.skip()
		default:
			err = unknown(t, ev)
		}
		if err != nil {
			return err
		}
	}
	switch {
	case w.err != nil:
		return w.err
	case !found && isMap:
		return errors.New("a stored block without block_hash")
	case !found:
		return errors.New("a stored block without its hash")
	}
	return nil
}

// blockFields are a stored block's fields in rmp_serde's positional order.
var blockFields = [...]string{"block_hash", "tokens_hash", "mm_extra_info"}

// hashList reads {block_hashes: [...]} (or positionally [[...]]).
func hashList(t tokens, ev *Event, name string) error {
	k, err := t.peek()
	if err != nil {
		return err
	}
	list := func() error {
		var w walk
		w.open(t, false, name)
		for w.next() {
			if len(ev.KV.Hashes) >= maxHashes {
				return fmt.Errorf("more than %d hashes in one event", maxHashes)
			}
			h, err := t.uint()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			ev.KV.Hashes = append(ev.KV.Hashes, h)
		}
		return w.err
	}
	var w walk
	w.open(t, k != kArray, named(k != kArray, "removed"))
	for w.next() {
		if w.isMap && string(w.key) == name || !w.isMap && w.i == 0 {
			err = list()
		} else {
			err = unknown(t, ev)
		}
		if err != nil {
			return err
		}
	}
	return w.err
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
