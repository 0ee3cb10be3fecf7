package natsevents

import (
	"syscall"
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// benchEvents are what the simulator publishes: stores of 8 chained blocks
// (16 tokens each) and removals of 4, as Dynamo's workers encode them.
func benchEvents(enc wire.DynamoEncoding) [][]byte {
	var out [][]byte
	for i := uint64(0); i < 64; i++ {
		ev := kvcache.Event{Kind: kvcache.Stored, HasParent: i%2 == 1, Parent: 1<<63 + i,
			Hashes: []uint64{1<<62 + i, 2<<60 + i, 3<<59 + i, 4<<58 + i, 5<<57 + i, 6<<56 + i, 7<<55 + i, 8<<54 + i},
			Tokens: make([]uint32, 8*kvcache.BlockSize)}
		if i%4 == 3 {
			ev = kvcache.Event{Kind: kvcache.Removed, Hashes: ev.Hashes[:4]}
		}
		var b []byte
		if enc == wire.DynamoJSON {
			b = wire.AppendDynamoJSON(nil, 7587889926375407, i+1, 0, &ev)
		} else {
			inner := wire.AppendDynamoMsgpack(nil, 7587889926375407, i+1, 0, &ev)
			b = wire.AppendDynamoEnvelope(nil, "kv-events", 99, i, 1700000000000, inner)
		}
		out = append(out, b)
	}
	return out
}

// BenchmarkDecode: Dynamo RouterEvents decoded per second on one core, in
// both of Dynamo's encodings; blocks/s counts the hashes they carry.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name string
		enc  wire.DynamoEncoding
	}{{"json", wire.DynamoJSON}, {"msgpack-envelope", wire.DynamoEnvelope}} {
		b.Run(c.name, func(b *testing.B) {
			msgs := benchEvents(c.enc)
			var ev Event
			bytes, blocks := 0, 0
			for _, m := range msgs {
				bytes += len(m)
				if err := Decode(m, &ev); err != nil {
					b.Fatal(err)
				}
				blocks += len(ev.KV.Hashes)
			}
			b.SetBytes(int64(bytes / len(msgs)))
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := Decode(msgs[i%len(msgs)], &ev); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// Per CPU second of this process: on a shared machine the wall
			// clock counts the other engineers' work too.
			s := (cpuTime() - cpu).Seconds()
			b.ReportMetric(float64(b.N)/s, "events/cpu-s")
			b.ReportMetric(float64(b.N)*float64(blocks)/float64(len(msgs))/s, "blocks/cpu-s")
		})
	}
}

// cpuTime is this process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
