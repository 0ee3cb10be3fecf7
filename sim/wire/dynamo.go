package wire

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"

	"github.com/kvtop/kvtop/sim/kvcache"
)

// Dynamo's KV events as its NATS event plane carries them (see
// docs/PROTOCOLS.md, "Dynamo event plane (NATS)"): one RouterEvent
//
//	{worker_id, storage_tier, event: {event_id, data, dp_rank}}
//
// per KV cache event, data externally tagged in snake case:
// {"stored": {parent_hash, start_position, blocks: [{block_hash,
// tokens_hash, mm_extra_info}]}}, {"removed": {block_hashes}} or
// "cleared". Dynamo numbers each (worker, dp_rank)'s events from 1.

// DynamoEncoding is how a Dynamo RouterEvent is put on NATS.
type DynamoEncoding uint8

const (
	// DynamoJSON is serde_json: the durable KV events in JetStream
	// (NatsQueue, --durable-kv-events) and the older core-NATS subject.
	DynamoJSON DynamoEncoding = iota
	// DynamoEnvelope is the event plane (DYN_EVENT_PLANE=nats): a msgpack
	// EventEnvelope {topic, publisher_id, sequence, published_at, payload}
	// whose payload is a batch of RouterEvents as rmp_serde writes them
	// (named; lib/llm/src/kv_router/publisher/sinks.rs batches up to 128).
	DynamoEnvelope
	// DynamoZMQ is the same envelope on Dynamo's ZMQ event plane
	// (DYN_EVENT_PLANE=zmq, its default since mid-2026), framed
	// (AppendDynamoFrames).
	DynamoZMQ
)

// DynamoBatch is how many RouterEvents Dynamo's publisher puts in one
// envelope at most.
const DynamoBatch = 128

// AppendArrayHeader appends a msgpack array header (a batch's).
func AppendArrayHeader(b []byte, n int) []byte { return appendArrayHeader(b, n) }

// DynamoFrames are the four frames of one ZMQ event plane message
// (lib/runtime/src/transports/event_plane/zmq_transport.rs, frame.rs):
// the topic, the publisher id and the sequence as 8 bytes big-endian, and
// the frame: a version byte (1), the envelope's length as a big-endian
// u32, the envelope.
func DynamoFrames(topic string, publisherID, sequence uint64, envelope []byte) [][]byte {
	pid, seq := make([]byte, 8), make([]byte, 8)
	binary.BigEndian.PutUint64(pid, publisherID)
	binary.BigEndian.PutUint64(seq, sequence)
	f := make([]byte, 5, 5+len(envelope))
	f[0] = 1
	binary.BigEndian.PutUint32(f[1:], uint32(len(envelope)))
	return [][]byte{[]byte(topic), pid, seq, append(f, envelope...)}
}

// AppendDynamoJSON appends ev as serde_json writes a RouterEvent.
func AppendDynamoJSON(b []byte, workerID, eventID uint64, rank int, ev *kvcache.Event) []byte {
	b = append(b, `{"worker_id":`...)
	b = strconv.AppendUint(b, workerID, 10)
	b = append(b, `,"storage_tier":"device","event":{"event_id":`...)
	b = strconv.AppendUint(b, eventID, 10)
	b = append(b, `,"data":`...)
	switch ev.Kind {
	case kvcache.Stored:
		b = append(b, `{"stored":{"parent_hash":`...)
		if ev.HasParent {
			b = strconv.AppendUint(b, ev.Parent, 10)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"start_position":null,"blocks":[`...)
		for i, h := range ev.Hashes {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"block_hash":`...)
			b = strconv.AppendUint(b, h, 10)
			b = append(b, `,"tokens_hash":`...)
			b = strconv.AppendUint(b, tokensHash(ev, i), 10)
			b = append(b, `,"mm_extra_info":null}`...)
		}
		b = append(b, "]}}"...)
	case kvcache.Removed:
		b = append(b, `{"removed":{"block_hashes":[`...)
		for i, h := range ev.Hashes {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, h, 10)
		}
		b = append(b, "]}}"...)
	default:
		b = append(b, `"cleared"`...)
	}
	b = append(b, `,"dp_rank":`...)
	b = strconv.AppendInt(b, int64(rank), 10)
	return append(b, "}}"...)
}

// AppendDynamoMsgpack appends ev as rmp_serde's to_vec_named writes a
// RouterEvent: maps with field names, the unit variant as its name.
func AppendDynamoMsgpack(b []byte, workerID, eventID uint64, rank int, ev *kvcache.Event) []byte {
	b = appendMapHeader(b, 3)
	b = appendUint(appendStr(b, "worker_id"), workerID)
	b = appendStr(appendStr(b, "storage_tier"), "device")
	b = appendMapHeader(appendStr(b, "event"), 3)
	b = appendUint(appendStr(b, "event_id"), eventID)
	b = appendStr(b, "data")
	switch ev.Kind {
	case kvcache.Stored:
		b = appendMapHeader(b, 1)
		b = appendMapHeader(appendStr(b, "stored"), 3)
		b = appendStr(b, "parent_hash")
		if ev.HasParent {
			b = appendUint(b, ev.Parent)
		} else {
			b = appendNil(b)
		}
		b = appendNil(appendStr(b, "start_position"))
		b = appendArrayHeader(appendStr(b, "blocks"), len(ev.Hashes))
		for i, h := range ev.Hashes {
			b = appendMapHeader(b, 3)
			b = appendUint(appendStr(b, "block_hash"), h)
			b = appendUint(appendStr(b, "tokens_hash"), tokensHash(ev, i))
			b = appendNil(appendStr(b, "mm_extra_info"))
		}
	case kvcache.Removed:
		b = appendMapHeader(b, 1)
		b = appendMapHeader(appendStr(b, "removed"), 1)
		b = appendArrayHeader(appendStr(b, "block_hashes"), len(ev.Hashes))
		for _, h := range ev.Hashes {
			b = appendUint(b, h)
		}
	default:
		b = appendStr(b, "cleared")
	}
	return appendUint(appendStr(b, "dp_rank"), uint64(rank))
}

// AppendDynamoEnvelope appends the event plane's msgpack envelope around a
// payload (rmp_serde named: a map of its five fields).
func AppendDynamoEnvelope(b []byte, topic string, publisherID, sequence, publishedMS uint64, payload []byte) []byte {
	b = appendMapHeader(b, 5)
	b = appendStr(appendStr(b, "topic"), topic)
	b = appendUint(appendStr(b, "publisher_id"), publisherID)
	b = appendUint(appendStr(b, "sequence"), sequence)
	b = appendUint(appendStr(b, "published_at"), publishedMS)
	return appendBin(appendStr(b, "payload"), payload)
}

// tokensHash stands in for Dynamo's tokens_hash (xxh3 of the block's
// tokens): kvtop does not read it, Dynamo's router matches on it.
func tokensHash(ev *kvcache.Event, i int) uint64 {
	h := fnv.New64a()
	if lo, hi := i*kvcache.BlockSize, (i+1)*kvcache.BlockSize; hi <= len(ev.Tokens) {
		var buf [4]byte
		for _, t := range ev.Tokens[lo:hi] {
			buf[0], buf[1], buf[2], buf[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
			h.Write(buf[:])
		}
	}
	return h.Sum64()
}
