package kvevents

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/msgpack"
	"github.com/kvtop/kvtop/figures"
)

// Batch is one decoded event batch.
type Batch struct {
	TS      float64 // publisher wall clock, unix seconds (0 if absent); shown, never compared to ours
	Rank    int     // data_parallel_rank (vLLM) or attn_dp_rank (SGLang)
	HasRank bool    // false when the batch has no rank (old vLLM) or it is nil
	Events  []collectors.KVEvent
	Stats   Stats
	// Mem is the bytes the decoded batch holds (its events, the arrays
	// behind their hashes, its strings): what keeping it costs.
	Mem int
}

// Stats counts what the decoder skipped in one batch. Skipped input never
// rejects the rest of the batch.
type Stats struct {
	UnknownEvents int    // events with a tag we do not know
	UnknownFields int    // map keys / trailing array positions we do not know
	Malformed     int    // events that could not be decoded
	FirstUnknown  string // tag of the first unknown event (for the operator)
	// UnknownByType counts the unknown events by tag; nil when none
	// (allocated only for a batch that has one).
	UnknownByType  map[string]int
	FirstMalformed string // why the first malformed event was rejected
}

// Skipped is everything the decoder stepped over.
func (s Stats) Skipped() int { return s.UnknownEvents + s.UnknownFields + s.Malformed }

// DecodeBatch decodes one msgpack batch payload: an array [ts, events,
// rank?, ...] (2 elements in old vLLM) or a map {ts, events,
// data_parallel_rank}. Events may use the array or the map encoding. An error
// means the payload is not a batch at all; problems inside single events are
// counted in Stats instead.
func DecodeBatch(payload []byte) (Batch, error) {
	d := decoders.Get().(*decoder)
	defer decoders.Put(d)
	return d.decode(payload)
}

// decoders lend DecodeBatch their scratch.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

// decoder decodes batches with a reused scratch array for their hashes,
// which each batch then gets an exact copy of (one allocation of the right
// size: the bytes left are a poor guess when token ids fill them). Not
// safe for concurrent use: each reader has its own.
type decoder struct {
	hs    []uint64
	topic string // the last topic seen (topicOf)
}

// topicOf is b as a string, the same one while a publisher's topic does
// not change: no allocation per batch.
func (d *decoder) topicOf(b []byte) string {
	if string(b) != d.topic {
		d.topic = string(b)
	}
	return d.topic
}

// noHashes is every event's empty block_hashes: a shared zero-capacity
// array (an append makes a new one).
var noHashes = []uint64{}

// maxScratch bounds the hashes a decoder keeps between batches (one
// giant batch must not pin its array).
const maxScratch = 1 << 16

// decode is DecodeBatch with d's scratch. Nothing of the payload nor of
// the scratch is kept in the batch.
func (d *decoder) decode(payload []byte) (Batch, error) {
	var b Batch
	r := cursor{Cursor: msgpack.New(payload), scratch: d.hs[:0]}
	defer func() {
		if cap(r.scratch) <= maxScratch {
			d.hs = r.scratch[:0]
		} else {
			d.hs = nil
		}
	}()
	c, err := r.Peek()
	if err != nil {
		return b, fmt.Errorf("empty payload")
	}
	switch {
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		err = decodeArrayBatch(&r, &b)
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		err = decodeMapBatch(&r, &b)
	default:
		return b, fmt.Errorf("payload is not a batch: starts with %s", figures.A(msgpack.TypeOf(c).String()))
	}
	if err != nil {
		return Batch{}, err
	}
	if r.Left() != 0 {
		return Batch{}, fmt.Errorf("%d bytes after the end of the batch", r.Left())
	}
	return b, nil
}

func decodeArrayBatch(r *cursor, b *Batch) error {
	n, err := r.ArrayLen()
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if n < 2 {
		return fmt.Errorf("batch array has %d elements, want [ts, events, ...]", n)
	}
	if err := decodeTS(r, b); err != nil {
		return err
	}
	if err := decodeEvents(r, b); err != nil {
		return err
	}
	if n >= 3 {
		decodeRank(r, b)
	}
	for k := 3; k < n; k++ {
		if err := r.Skip(); err != nil {
			return fmt.Errorf("batch: %w", err)
		}
		b.Stats.UnknownFields++
	}
	return nil
}

func decodeMapBatch(r *cursor, b *Batch) error {
	n, err := r.MapLen()
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	sawEvents := false
	for k := 0; k < n; k++ {
		key, err := r.Str()
		if err != nil {
			return fmt.Errorf("batch key: %w", err)
		}
		switch string(key) {
		case "ts":
			err = decodeTS(r, b)
		case "events":
			sawEvents = true
			err = decodeEvents(r, b)
		case "data_parallel_rank", "attn_dp_rank", "dp_rank":
			decodeRank(r, b)
		default:
			b.Stats.UnknownFields++
			err = r.Skip()
		}
		if err != nil {
			return err
		}
	}
	if !sawEvents {
		return fmt.Errorf("batch map has no events")
	}
	return nil
}

func decodeTS(r *cursor, b *Batch) error {
	if r.TryNil() {
		return nil
	}
	ts, err := r.Number()
	if err != nil {
		return fmt.Errorf("batch ts: %w", err)
	}
	if math.IsNaN(ts) || math.IsInf(ts, 0) {
		return nil // not a time: treated as absent (and kept out of JSON)
	}
	b.TS = ts
	return nil
}

// decodeRank reads the rank; a rank of the wrong type is skipped and counted
// (it only labels the batch, the endpoint already names the publisher).
func decodeRank(r *cursor, b *Batch) {
	if r.TryNil() {
		return
	}
	at := r.Pos()
	if v, err := r.SmallInt(); err == nil {
		b.Rank, b.HasRank = v, true
		return
	}
	r.Seek(at)
	if r.Skip() == nil {
		b.Stats.UnknownFields++
	}
}

// kvEventSize is what one decoded event costs beside its hashes.
const kvEventSize = int(unsafe.Sizeof(collectors.KVEvent{}))

// minEventBytes is the smallest encoding of an event the decoder keeps: an
// array or map header, a string header and the shortest tag (BlockStored).
const minEventBytes = 1 + 1 + len("BlockStored")

func decodeEvents(r *cursor, b *Batch) error {
	if b.Events != nil { // a map batch with two "events" keys: the last one wins
		b.Events, b.Mem = nil, 0
	}
	n, err := r.ArrayLen()
	if err != nil {
		return fmt.Errorf("batch events: %w", err)
	}
	// Capacity from the bytes left, not the count the payload claims: an
	// array of a million 1-byte nils must not reserve a million events.
	b.Events = make([]collectors.KVEvent, 0, min(n, r.Left()/minEventBytes+1))
	// The hashes go to the scratch array first, then to one exact copy.
	hs := r.scratch[:0]
	for k := 0; k < n; k++ {
		start, hstart := r.Pos(), len(hs)
		d := eventDecoder{r: r, hs: hs}
		// Decoded in place: a KVEvent is 96 bytes, copied twice on
		// its way out by value (136 events a busy vLLM step). Within
		// the capacity the next slot is already zero (make's memory,
		// or cleared when its event was dropped): appending a zero
		// value would write it again (with write barriers while the GC
		// marks): 7 % of BenchmarkLiveMessage/step.
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:len(b.Events)+1]
		} else {
			b.Events = append(b.Events, collectors.KVEvent{})
		}
		ev := &b.Events[len(b.Events)-1]
		known, err := d.event(ev)
		hs = d.hs
		if err != nil || !known {
			*ev = collectors.KVEvent{}
			b.Events = b.Events[:len(b.Events)-1]
		}
		switch {
		case err != nil:
			hs = hs[:hstart]
			r.Seek(start)
			if serr := r.Skip(); serr != nil {
				r.scratch = hs
				return fmt.Errorf("batch event %d: %w", k, serr)
			}
			b.Stats.Malformed++
			if b.Stats.FirstMalformed == "" {
				b.Stats.FirstMalformed = fmt.Sprintf("event %d: %v", k, err)
			}
		case !known:
			hs = hs[:hstart]
			b.Stats.UnknownEvents++
			if b.Stats.FirstUnknown == "" {
				b.Stats.FirstUnknown = d.tag
			}
			if b.Stats.UnknownByType == nil {
				b.Stats.UnknownByType = map[string]int{}
			}
			if _, ok := b.Stats.UnknownByType[d.tag]; ok || len(b.Stats.UnknownByType) < collectors.MaxUnknownTypes {
				b.Stats.UnknownByType[d.tag]++
			} else {
				b.Stats.UnknownByType[collectors.OtherUnknownType]++
			}
		default:
			b.Stats.UnknownFields += d.unknownFields
			b.Mem += len(ev.LoRA) + len(ev.Medium) // (Medium is mostly interned: an overcount)
		}
	}
	r.scratch = hs
	// Events point into the scratch (or an older array it grew from):
	// give them their part of one array of the right size, in order.
	var all []uint64
	if len(hs) > 0 {
		all = make([]uint64, len(hs))
	}
	off := 0
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Hashes == nil {
			continue
		}
		if len(ev.Hashes) == 0 {
			ev.Hashes = noHashes // an empty block_hashes stays an empty list
			continue
		}
		n := copy(all[off:], ev.Hashes)
		ev.Hashes = all[off : off+n : off+n]
		off += n
	}
	b.Mem += cap(b.Events)*kvEventSize + cap(all)*8
	return nil
}
