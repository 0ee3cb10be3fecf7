package natsevents

import (
	"slices"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/msgpack"
)

// fastBatch reads a msgpack batch of name-keyed RouterEvents (rmp_serde's
// named encoding: what Dynamo's publisher sends on its ZMQ event plane and
// on NATS) straight off the cursor: no tokens interface between the bytes
// and the event, no container stack, no allocation but the scratch's and
// the batch's growth. It reads what the general decoder reads, the same
// way; anything else it declines: a positional value, an unknown variant,
// a malformed or truncated field, a repeated event, data or block_hash.
// Declined, it leaves the batch and the scratch as they were, and the
// general decoder reads the message from the start, so that every refusal
// and every rarer shape has one implementation (FuzzFastBatch holds the
// two to the same events).
//
// Its map loops (one a level: root, event, data, stored, block, removed)
// are written out on purpose, each with its count, key and error in
// registers. An iterator over a map's entries on the cursor (tried: a
// Scanner-like msgpack.Entries) keeps that state in memory and made this
// path about 30 % slower (pprof, DecodeIndexPerBlock on one core), so the
// repetition stays here and the general decoder's walk serves the rest.
func (d *readerPair) fastBatch(b []byte) bool {
	c := msgpack.New(b)
	n, err := c.ArrayLen()
	if err != nil || n == 0 || n > maxBatch {
		return false
	}
	evs, h0 := *d.batch, len(d.hs)
	n0 := len(evs)
	evs = slices.Grow(evs, n) // once: n is bounded by the bytes and maxBatch
	for range n {
		evs = append(evs, Event{})
		ev := &evs[len(evs)-1]
		ev.KV.Medium = "GPU"
		start := len(d.hs)
		if !d.fastRoot(&c, ev) {
			*d.batch, d.hs = evs[:n0], d.hs[:h0]
			return false
		}
		ev.KV.Hashes = d.hs[start:len(d.hs)]
	}
	if c.Left() > 0 {
		*d.batch, d.hs = evs[:n0], d.hs[:h0]
		return false
	}
	*d.batch = evs
	return true
}

// fastRoot reads one RouterEvent {worker_id, storage_tier, event, …}.
func (d *readerPair) fastRoot(c *msgpack.Cursor, ev *Event) bool {
	n, err := c.MapLen()
	seen := false
	for ; err == nil && n > 0; n-- {
		var key []byte
		if key, err = c.Str(); err != nil {
			break
		}
		switch string(key) {
		case "worker_id":
			ev.WorkerID, err = c.Bits()
			ev.HasWorker = err == nil
		case "storage_tier":
			if !c.TryNil() {
				key, err = c.Str()
				ev.KV.Medium = medium(key)
			}
		case "event":
			if seen || !d.fastEvent(c, ev) {
				return false
			}
			seen = true
		case "payload", "publisher_id", "sequence", "published_at":
			return false // an envelope's fields: the general decoder says what it makes of them
		case "topic", "published_at_ns", "residency_domain", "state_source":
			err = c.Skip()
		default:
			ev.UnknownFields++
			err = c.Skip()
		}
	}
	return err == nil && ev.HasWorker && ev.HasID
}

// fastEvent reads the KvCacheEvent {event_id, data, dp_rank}.
func (d *readerPair) fastEvent(c *msgpack.Cursor, ev *Event) bool {
	n, err := c.MapLen()
	hasData := false
	for ; err == nil && n > 0; n-- {
		var key []byte
		if key, err = c.Str(); err != nil {
			break
		}
		switch string(key) {
		case "event_id":
			ev.ID, err = c.Bits()
			ev.HasID = err == nil
		case "data":
			if hasData || !d.fastData(c, ev) {
				return false
			}
			hasData = true
		case "dp_rank":
			var r uint64
			if r, err = c.Bits(); r > maxRank {
				return false
			}
			ev.Rank = int(r)
		default:
			ev.UnknownFields++
			err = c.Skip()
		}
	}
	return err == nil && hasData
}

// fastData reads the data: {stored: …}, {removed: …}, or the unit
// variant cleared (a string, or a map to a value skipped).
func (d *readerPair) fastData(c *msgpack.Cursor, ev *Event) bool {
	if code, err := c.Peek(); err == nil && msgpack.TypeOf(code) == msgpack.Str {
		name, _ := c.Str()
		ev.KV.Kind = variantKind(name)
		return ev.KV.Kind == collectors.AllBlocksCleared
	}
	if n, err := c.MapLen(); err != nil || n != 1 {
		return false
	}
	name, err := c.Str()
	if err != nil {
		return false
	}
	switch ev.KV.Kind = variantKind(name); ev.KV.Kind {
	case collectors.BlockStored:
		return d.fastStored(c, ev)
	case collectors.BlockRemoved:
		return d.fastRemoved(c, ev)
	case collectors.AllBlocksCleared:
		return c.Skip() == nil
	}
	return false
}

// fastStored reads {parent_hash, start_position, blocks: [{block_hash,
// tokens_hash, mm_extra_info}]}.
func (d *readerPair) fastStored(c *msgpack.Cursor, ev *Event) bool {
	n, err := c.MapLen()
	start := len(d.hs)
	for ; err == nil && n > 0; n-- {
		var key []byte
		if key, err = c.Str(); err != nil {
			break
		}
		switch string(key) {
		case "parent_hash":
			if !c.TryNil() {
				ev.KV.Parent, err = c.Bits()
				ev.KV.HasParent = err == nil
			}
		case "blocks":
			var blocks int
			blocks, err = c.ArrayLen()
			for ; err == nil && blocks > 0; blocks-- {
				if len(d.hs)-start >= maxHashes || !d.fastBlock(c, ev) {
					return false
				}
			}
		case "start_position":
			err = c.Skip()
		default:
			ev.UnknownFields++
			err = c.Skip()
		}
	}
	return err == nil
}

// fastBlock reads one stored block {block_hash, tokens_hash,
// mm_extra_info} onto the scratch.
func (d *readerPair) fastBlock(c *msgpack.Cursor, ev *Event) bool {
	n, err := c.MapLen()
	found := false
	for ; err == nil && n > 0; n-- {
		var key []byte
		if key, err = c.Str(); err != nil {
			break
		}
		switch string(key) {
		case "block_hash":
			var h uint64
			if h, err = c.Bits(); found {
				return false
			}
			d.hs = append(d.hs, h)
			found = true
		case "tokens_hash", "mm_extra_info": // not needed
			err = c.Skip()
		default:
			ev.UnknownFields++
			err = c.Skip()
		}
	}
	return err == nil && found
}

// fastRemoved reads {block_hashes: […]} onto the scratch.
func (d *readerPair) fastRemoved(c *msgpack.Cursor, ev *Event) bool {
	n, err := c.MapLen()
	start := len(d.hs)
	for ; err == nil && n > 0; n-- {
		var key []byte
		if key, err = c.Str(); err != nil {
			break
		}
		if string(key) != "block_hashes" {
			ev.UnknownFields++
			err = c.Skip()
			continue
		}
		var hs int
		hs, err = c.ArrayLen()
		for ; err == nil && hs > 0; hs-- {
			if len(d.hs)-start >= maxHashes {
				return false
			}
			var h uint64
			h, err = c.Bits()
			d.hs = append(d.hs, h)
		}
	}
	return err == nil
}
