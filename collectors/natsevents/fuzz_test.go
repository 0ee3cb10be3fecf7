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
