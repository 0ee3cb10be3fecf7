package natsevents

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvtop/kvtop/collectors"
)

// Shapes as Dynamo writes them (lib/kv-router/src/protocols.rs: serde's
// externally tagged, snake_case KvCacheEventData; u64 hashes).
const (
	jsonStored = `{"worker_id":7587889926375407000,"storage_tier":"device","event":{"event_id":12,` +
		`"data":{"stored":{"parent_hash":18446744073709551615,"start_position":null,"blocks":[` +
		`{"block_hash":11,"tokens_hash":99,"mm_extra_info":null},{"block_hash":12,"tokens_hash":98}]}},"dp_rank":1}}`
	jsonRemoved = `{"worker_id":5,"event":{"event_id":3,"data":{"removed":{"block_hashes":[11,12,13]}},"dp_rank":0}}`
	jsonCleared = `{"worker_id":5,"event":{"event_id":4,"data":"cleared","dp_rank":0}}`
)

func TestDecodeShapes(t *testing.T) {
	inner, _ := msgpack.Marshal(map[string]any{
		"worker_id": uint64(42), "storage_tier": "host_pinned",
		"event": map[string]any{"event_id": uint64(9), "dp_rank": uint32(2),
			"data": map[string]any{"removed": map[string]any{"block_hashes": []uint64{1, 2}}}},
	})
	mpEnvelope, _ := msgpack.Marshal(map[string]any{"topic": "kv-events", "publisher_id": uint64(77), "sequence": uint64(5),
		"published_at": uint64(1700000000123), "payload": inner})
	jsonPayload, _ := json.Marshal([]byte(jsonCleared)) // base64: not what Dynamo writes
	_ = jsonPayload
	arr := make([]string, len(jsonCleared))
	for i, c := range []byte(jsonCleared) {
		arr[i] = fmt.Sprint(c)
	}
	jsonEnvelope := `{"publisher_id":3,"sequence":0,"published_at":1700000000000,"payload":[` + strings.Join(arr, ",") + `]}`
	positional, _ := msgpack.Marshal([]any{uint64(8), "device", []any{uint64(2), map[string]any{"stored": []any{nil, nil,
		[]any{[]any{uint64(100), uint64(1), nil}, []any{uint64(101), uint64(2), nil}}}}, uint32(0)}})

	cases := []struct {
		name string
		in   []byte
		want Event
	}{
		{"json stored", []byte(jsonStored), Event{WorkerID: 7587889926375407000, HasWorker: true, Rank: 1, ID: 12, HasID: true, Format: "json",
			KV: collectors.KVEvent{Kind: collectors.BlockStored, Hashes: []uint64{11, 12}, Parent: 1<<64 - 1, HasParent: true, Medium: "GPU"}}},
		{"json removed", []byte(jsonRemoved), Event{WorkerID: 5, HasWorker: true, ID: 3, HasID: true, Format: "json",
			KV: collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: []uint64{11, 12, 13}, Medium: "GPU"}}},
		{"json cleared", []byte(jsonCleared), Event{WorkerID: 5, HasWorker: true, ID: 4, HasID: true, Format: "json",
			KV: collectors.KVEvent{Kind: collectors.AllBlocksCleared, Hashes: []uint64{}, Medium: "GPU"}}},
		{"json envelope", []byte(jsonEnvelope), Event{WorkerID: 5, HasWorker: true, ID: 4, HasID: true, Format: "json-envelope",
			Envelope: true, PublisherID: 3, PublishedMS: 1700000000000,
			KV: collectors.KVEvent{Kind: collectors.AllBlocksCleared, Hashes: []uint64{}, Medium: "GPU"}}},
		{"msgpack envelope", mpEnvelope, Event{WorkerID: 42, HasWorker: true, Rank: 2, ID: 9, HasID: true, Format: "msgpack-envelope",
			Envelope: true, PublisherID: 77, Sequence: 5, PublishedMS: 1700000000123,
			KV: collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: []uint64{1, 2}, Medium: "CPU_PINNED"}}},
		{"msgpack positional", positional, Event{WorkerID: 8, HasWorker: true, ID: 2, HasID: true, Format: "msgpack",
			KV: collectors.KVEvent{Kind: collectors.BlockStored, Hashes: []uint64{100, 101}, Medium: "GPU"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ev Event
			if err := Decode(c.in, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.KV.Hashes == nil {
				ev.KV.Hashes = []uint64{}
			}
			if !reflect.DeepEqual(ev, c.want) {
				t.Errorf("got  %+v\nwant %+v", ev, c.want)
			}
		})
	}
}

func TestDecodeUnknownAndBad(t *testing.T) {
	var ev Event
	// A newer Dynamo: an event kind and fields kvtop does not know.
	err := Decode([]byte(`{"worker_id":1,"residency_domain":"worker","shiny":true,"event":{"event_id":2,"data":{"accessed":{"num_cached":3}},"dp_rank":0,"extra":[1,{"a":2}]}}`), &ev)
	if err != nil || ev.KV.Kind != 0 || ev.Unknown != "accessed" || ev.UnknownFields != 2 || ev.ID != 2 {
		t.Errorf("unknown kind: %v %+v", err, ev)
	}
	for _, c := range []struct{ in, words string }{
		{``, "empty message"},
		{`{"worker_id":1,"event":{"event_id":2,"data":{"stored":{"blocks":[{"tokens_hash":1}]}}}}`, "without block_hash"},
		{`{"worker_id":1.5,"event":{}}`, "worker_id: want an integer"},
		{`{"worker_id":1,"event":{"event_id":2,"data":{}}}`, "empty map"},
		{`{"worker_id":1,"event":{"event_id":2,"data":"cleared","dp_rank":4000}}`, "dp_rank 4000 is over"},
		{`{"worker_id":1}`, "no worker_id or event.event_id"},
		{`{"worker_id":1,"event":{"event_id":2,"data":"cleared"}} trailing`, "bytes after the event"},
		{`{"worker_id":18446744073709551616,"event":{}}`, "out of range"},
		{`{"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, "deeper than 32"},
		{"\x81\xa1x\xdd\xff\xff\xff\xff", "claims"},
		{"\x81\xa9worker_id\xdd\xff\xff\xff\xff", "want an integer"},
		{`{"payload":[1,2,300]}`, "over 255"},
		{`{"worker_id":1,"event":{"event_id":2,"data":{"removed":{"block_hashes":[1,2`, "truncated"},
	} {
		if err := Decode([]byte(c.in), &ev); err == nil || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%q: %v, want %q", c.in, err, c.words)
		}
	}
	// A failure after the ids keeps them: the event is accounted for.
	err = Decode([]byte(`{"worker_id":9,"event":{"event_id":5,"data":{"stored":{"blocks":[{"block_hash":"x"}]}}}}`), &ev)
	if err == nil || !ev.HasWorker || ev.WorkerID != 9 || !ev.HasID || ev.ID != 5 {
		t.Errorf("partial decode: %v %+v", err, ev)
	}
}
