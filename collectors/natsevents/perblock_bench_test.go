package natsevents

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/kvevents"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// benchStep is one busy engine step as the sim's engines make it: stores
// of 16 chained blocks (new requests' prompts) and 128 one-block removals
// (vLLM's evictions), hashes fresh each call so the index keeps turning
// over like a full cache.
func benchStep(base uint64) []kvcache.Event {
	var evs []kvcache.Event
	for r := uint64(0); r < 8; r++ {
		hs := make([]uint64, 16)
		for i := range hs {
			hs[i] = (base+r*16+uint64(i))*0x9e3779b97f4a7c15 | 1
		}
		evs = append(evs, kvcache.Event{Kind: kvcache.Stored, Hashes: hs, Tokens: make([]uint32, 16*kvcache.BlockSize)})
	}
	for i := uint64(0); i < 128; i++ {
		// Remove what an earlier step stored.
		h := (base-1024+i)*0x9e3779b97f4a7c15 | 1
		evs = append(evs, kvcache.Event{Kind: kvcache.Removed, Hashes: []uint64{h}})
	}
	return evs
}

// BenchmarkDecodeIndexPerBlock: what one block costs from the wire to the
// index, on one core, for vLLM's ZMQ batches (kvevents' decoder, one
// EventBatch a step) and for Dynamo's ZMQ event plane (its envelope of
// RouterEvents, DecodeAll, one EventBatch a message as the collector sends
// them). Issue 24 asks Dynamo's within 80 % of vLLM's per block.
func BenchmarkDecodeIndexPerBlock(b *testing.B) {
	const steps = 64
	for _, c := range []string{"vllm", "dynamo-zmq"} {
		b.Run(c, func(b *testing.B) {
			var msgs [][]byte
			blocks := 0
			f := wire.Format{Encoding: wire.Map}
			for s := 0; s < steps; s++ {
				evs := benchStep(uint64(1024 + s*256))
				for _, e := range evs {
					blocks += len(e.Hashes)
				}
				if c == "vllm" {
					msgs = append(msgs, f.AppendBatch(nil, 1.7e9, evs, 0))
					continue
				}
				var payload []byte
				n := 0
				for i := range evs { // envelopes of 128, as Dynamo's publisher
					payload = wire.AppendDynamoMsgpack(payload, 42, uint64(s*len(evs)+i+1), 0, &evs[i])
					if n++; n == wire.DynamoBatch || i == len(evs)-1 {
						arr := append(wire.AppendArrayHeader(nil, n), payload...)
						msgs = append(msgs, wire.AppendDynamoEnvelope(nil, "kv-events", 9, uint64(len(msgs)), 1, arr))
						payload, n = nil, 0
					}
				}
			}
			st := pool.NewState(pool.Options{Workers: []pool.WorkerSpec{{Name: "worker_42"}}})
			at := time.Unix(1_800_000_000, 0)
			var evs []Event
			seq := uint64(0)
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m := msgs[i%len(msgs)]
				at = at.Add(time.Millisecond)
				if c == "vllm" {
					bt, err := kvevents.DecodeBatch(m)
					if err != nil {
						b.Fatal(err)
					}
					seq++
					st.Apply(&collectors.EventBatch{Worker: "worker_42", Seq: seq, Events: bt.Events, At: at})
					continue
				}
				var err error
				if evs, err = DecodeAll(m, evs[:0]); err != nil {
					b.Fatal(err)
				}
				// One batch a message, as the collector sends them (pub.apply).
				kv := make([]collectors.KVEvent, len(evs))
				for k := range evs {
					kv[k] = evs[k].KV
				}
				seq += uint64(len(evs))
				st.Apply(&collectors.EventBatch{Worker: "worker_42", Seq: seq, Events: kv, At: at})
			}
			b.StopTimer()
			s := (cpuTime() - cpu).Seconds()
			perMsg := float64(blocks) / float64(len(msgs))
			b.ReportMetric(float64(b.N)*perMsg/s, "blocks/cpu-s")
			b.ReportMetric(s*1e9/(float64(b.N)*perMsg), "ns/block")
		})
	}
}
