package natsevents

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvtop/kvtop/collectors"
)

// dynamoEvent is a RouterEvent as rmp_serde::to_vec_named writes it
// (lib/kv-router/src/protocols.rs): a map of worker_id, storage_tier,
// event{event_id, data, dp_rank}, data externally tagged.
func dynamoEvent(worker, id uint64, rank uint32, data any) map[string]any {
	return map[string]any{"worker_id": worker, "storage_tier": "device", "residency_domain": "worker",
		"event": map[string]any{"event_id": id, "dp_rank": rank, "data": data}}
}

func storedData(parent any, hs ...uint64) map[string]any {
	blocks := make([]any, len(hs))
	for i, h := range hs {
		blocks[i] = map[string]any{"block_hash": h, "tokens_hash": h + 1000, "mm_extra_info": nil}
	}
	return map[string]any{"stored": map[string]any{"parent_hash": parent, "start_position": nil, "blocks": blocks}}
}

// TestDecodeBatchedPayload: since Dynamo 1.3 the publisher sends up to 128
// RouterEvents in one envelope (lib/llm/src/kv_router/publisher/sinks.rs),
// on NATS as on its ZMQ event plane; each event keeps its own id and rank
// and carries the envelope's publisher, sequence and time.
func TestDecodeBatchedPayload(t *testing.T) {
	batch, _ := msgpack.Marshal([]any{
		dynamoEvent(9, 1, 0, storedData(nil, 11, 12)),
		dynamoEvent(9, 2, 0, map[string]any{"removed": map[string]any{"block_hashes": []uint64{11}}}),
		dynamoEvent(9, 3, 0, "cleared"),
	})
	env, _ := msgpack.Marshal(map[string]any{"publisher_id": uint64(77), "sequence": uint64(4), "published_at": uint64(1700000000123),
		"topic": "kv-events", "payload": batch})
	for name, in := range map[string][]byte{"bare": batch, "envelope": env} {
		evs, err := DecodeAll(in, nil)
		if err != nil || len(evs) != 3 {
			t.Fatalf("%s: %d events, %v", name, len(evs), err)
		}
		kinds := []collectors.EventKind{collectors.BlockStored, collectors.BlockRemoved, collectors.AllBlocksCleared}
		for i, ev := range evs {
			if ev.WorkerID != 9 || ev.ID != uint64(i+1) || ev.KV.Kind != kinds[i] {
				t.Fatalf("%s: event %d %+v", name, i, ev)
			}
			if name == "envelope" && (!ev.Envelope || ev.PublisherID != 77 || ev.Sequence != 4 || ev.PublishedMS != 1700000000123 || ev.Format != "msgpack-envelope") {
				t.Fatalf("envelope fields not on event %d: %+v", i, ev)
			}
		}
		if len(evs[0].KV.Hashes) != 2 || evs[0].KV.Hashes[1] != 12 {
			t.Fatalf("%s: hashes %v", name, evs[0].KV.Hashes)
		}
	}
	// JSON batches too, and a single event still decodes alone.
	evs, err := DecodeAll([]byte("["+jsonRemoved+","+jsonCleared+"]"), nil)
	if err != nil || len(evs) != 2 || evs[1].KV.Kind != collectors.AllBlocksCleared {
		t.Fatalf("json batch: %+v %v", evs, err)
	}
	if evs, err := DecodeAll([]byte(jsonStored), nil); err != nil || len(evs) != 1 || evs[0].ID != 12 {
		t.Fatalf("single: %+v %v", evs, err)
	}
	// A broken event ends the batch there; those before it are kept.
	bad, _ := msgpack.Marshal([]any{dynamoEvent(9, 1, 0, "cleared"), map[string]any{"worker_id": uint64(9), "event": "x"}})
	if evs, err := DecodeAll(bad, nil); err == nil || len(evs) != 2 || evs[0].ID != 1 {
		t.Fatalf("broken batch: %+v %v", evs, err)
	}
	if _, err := DecodeAll([]byte{0x90}, nil); err == nil {
		t.Fatal("an empty batch is no message")
	}
}
