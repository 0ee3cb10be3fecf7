package natsevents

import (
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// FuzzDecode: whatever a NATS subject carries, Decode returns (never
// panics, never loops), bounds what it keeps, and a success is a whole
// RouterEvent. The committed corpus (testdata/fuzz/FuzzDecode) holds
// Dynamo's shapes in both encodings and the hostile cases of the tests.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{jsonStored, jsonRemoved, jsonCleared,
		`{"publisher_id":3,"sequence":0,"published_at":1,"payload":[123,125]}`,
		`{"worker_id":1,"event":{"event_id":2,"data":{"accessed":{"n":1}},"dp_rank":0}}`,
		"\x81\xa1x\xdd\xff\xff\xff\xff", `{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev, again Event
		err := Decode(b, &ev)
		err2 := Decode(b, &again)
		if (err == nil) != (err2 == nil) || (err == nil && !reflect.DeepEqual(ev, again)) {
			t.Fatalf("two decodes differ: %v %+v / %v %+v", err, ev, err2, again)
		}
		if len(ev.KV.Hashes) > maxHashes || ev.Rank > maxRank || ev.Rank < 0 {
			t.Fatalf("unbounded: %d hashes, rank %d", len(ev.KV.Hashes), ev.Rank)
		}
		if err != nil {
			return
		}
		if !ev.HasWorker || !ev.HasID {
			t.Fatalf("success without ids: %+v", ev)
		}
		switch ev.KV.Kind {
		case 0, collectors.BlockStored, collectors.BlockRemoved, collectors.AllBlocksCleared:
		default:
			t.Fatalf("kind %d", ev.KV.Kind)
		}
		if ev.KV.Kind == 0 && ev.Unknown == "" {
			t.Fatalf("an event of no kind and no name: %+v", ev)
		}
	})
}

// FuzzDecodeAll: the batched form (an array of RouterEvents, bare or in an
// envelope) never panics, is bounded, gives the same events twice, and on
// success every event is a whole RouterEvent whose hashes are its own.
func FuzzDecodeAll(f *testing.F) {
	for _, s := range []string{"[" + jsonRemoved + "," + jsonCleared + "]", jsonStored, "[]", "\x92\x81\xa1x\x01\x90",
		`{"publisher_id":3,"sequence":0,"published_at":1,"payload":[91,93]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := DecodeAll(b, nil)
		again, err2 := DecodeAll(b, nil)
		if (err == nil) != (err2 == nil) || !reflect.DeepEqual(evs, again) {
			t.Fatalf("two decodes differ: %v / %v", err, err2)
		}
		if len(evs) > maxBatch {
			t.Fatalf("%d events from %d bytes", len(evs), len(b))
		}
		total := 0
		for i, ev := range evs {
			total += len(ev.KV.Hashes)
			if err == nil && (!ev.HasWorker || !ev.HasID) {
				t.Fatalf("event %d without ids on success: %+v", i, ev)
			}
			if len(evs) > 1 && len(ev.KV.Hashes) > 0 && cap(ev.KV.Hashes) != len(ev.KV.Hashes) {
				t.Fatalf("event %d's hashes reach into another's (cap %d, len %d)", i, cap(ev.KV.Hashes), len(ev.KV.Hashes))
			}
		}
		if total > len(b) {
			t.Fatalf("%d hashes from %d bytes", total, len(b))
		}
	})
}
