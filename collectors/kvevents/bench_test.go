package kvevents

import (
	"context"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// benchBatch is a busy engine's batch: 12 BlockStored events of 16 blocks
// (256 token ids each, uint32 like vLLM's) and 4 BlockRemoved of 16 blocks:
// 256 block events.
func benchBatch(mapEncoded bool) ([]byte, int) {
	var events []any
	blocks := 0
	for e := 0; e < 16; e++ {
		hs := make([]uint64, 16)
		for i := range hs {
			hs[i] = uint64(e*16+i) | 0xd000000000000000
		}
		blocks += len(hs)
		switch {
		case e < 12 && mapEncoded:
			events = append(events, storedMap(hs[0]-1, hs...))
		case e < 12:
			events = append(events, storedArray(hs[0]-1, hs...))
		case mapEncoded:
			events = append(events, removedMap(hs...))
		default:
			events = append(events, removedArray(hs...))
		}
	}
	return batchOf(1.8e9, events...), blocks
}

// stepBatch is a busy vLLM step as vLLM sends it: 8 BlockStored prefill
// chunks of 16 blocks (256 token ids each, vocabulary-sized) and one
// BlockRemoved per evicted block, 128 of them: 256 block events, 136
// events.
func stepBatch() ([]byte, int) {
	var events []any
	for e := 0; e < 8; e++ {
		hs := make([]uint64, 16)
		for i := range hs {
			hs[i] = uint64(e*16+i) | 0xd000000000000000
		}
		events = append(events, storedMap(hs[0]-1, hs...))
	}
	for i := 0; i < 128; i++ {
		events = append(events, removedMap(uint64(i)|0xe000000000000000))
	}
	return batchOf(1.8e9, events...), 256
}

func BenchmarkDecodeBatch(b *testing.B) {
	for _, enc := range []struct {
		name string
		map_ bool
	}{{"map", true}, {"array", false}} {
		b.Run(enc.name, func(b *testing.B) {
			payload, blocks := benchBatch(enc.map_)
			if got, err := DecodeBatch(payload); err != nil || len(got.Events) != 16 {
				b.Fatalf("bench batch: %v, %d events", err, len(got.Events))
			}
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := DecodeBatch(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blockevents/s")
		})
	}
}

// BenchmarkLiveMessage is the reader goroutine's whole per-message work:
// frames → seq, decoded batch, fingerprint; for the 16-event batch and
// for a vLLM step (stepBatch).
func BenchmarkLiveMessage(b *testing.B) {
	for _, c := range []struct {
		name  string
		batch func() ([]byte, int)
	}{{"map", func() ([]byte, int) { return benchBatch(true) }}, {"step", stepBatch}} {
		b.Run(c.name, func(b *testing.B) {
			payload, blocks := c.batch()
			frames := [][]byte{[]byte("kv@10.0.0.5:8000@model"), seq8(42), payload}
			now := time.Now()
			var d decoder
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if m := parseLive(0, frames, &d, now); m.b.err != nil {
					b.Fatal(m.b.err)
				}
			}
			b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blockevents/s")
		})
	}
}

// BenchmarkCollectorThroughput pushes map-encoded batches through a real PUB
// → SUB → reader (decode) → state machine → observation channel, and counts
// block events delivered per second. Batches the SUB's high-water mark
// dropped (the collector fell behind) are reported as lost/op.
func BenchmarkCollectorThroughput(b *testing.B) {
	payload, blocks := benchBatch(true)
	p := newTestPub(b, pubOpts{})
	c, err := New(Options{Endpoints: []Endpoint{{Worker: "w0", Events: p.Events}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan collectors.Observation, 1024)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	defer func() { cancel(); <-done }()
	p.waitSubscribed()
	want := uint64(b.N) // seqs 0..N-1 plus one end batch
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for i := 0; i <= b.N; i++ {
			p.publish(payload)
		}
	}()
	var applied uint64
	for {
		o := <-out
		taken(o)
		if eb, ok := o.(*collectors.EventBatch); ok {
			applied++
			if eb.Seq == want {
				break
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(int(applied)*blocks)/b.Elapsed().Seconds(), "blockevents/s")
	b.ReportMetric(float64(want+1-applied)/float64(b.N), "lost/op")
}

// BenchmarkReplay repairs one gap of b.N busy batches through a real
// ROUTER → DEALER replay (decoded and handed over in chunks as they
// arrive) and the state machine: time and allocations per replayed batch.
// The test ROUTER's send high-water mark is lifted: it is unpaced Go and
// would otherwise drop replies itself. lost/op should be 0.
func BenchmarkReplay(b *testing.B) {
	payload, blocks := benchBatch(true)
	p := newTestPub(b, pubOpts{replay: true, ring: b.N + 2, replayUnbounded: true})
	c, err := New(Options{Endpoints: []Endpoint{{Worker: "w0", Events: p.Events, Replay: p.Replay}}, ReplayTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan collectors.Observation, 1024)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	defer func() { cancel(); <-done }()
	p.waitSubscribed()
	p.publish(payload)
	for i := 0; i < b.N; i++ {
		p.drop(payload)
	}
	b.ReportAllocs()
	b.ResetTimer()
	last := p.publish(payload)
	var replayed uint64
	for {
		o := <-out
		taken(o)
		if eb, ok := o.(*collectors.EventBatch); ok {
			if eb.Replayed {
				replayed++
			}
			if eb.Seq == last {
				break
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(int(replayed)*blocks)/b.Elapsed().Seconds(), "blockevents/s")
	b.ReportMetric(float64(uint64(b.N)-replayed)/float64(b.N), "lost/op")
}
