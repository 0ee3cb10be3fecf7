package journal

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
)

// busyBatch is a batch as a busy vLLM publisher sends it: a BlockStored
// of 4 blocks after a parent the publisher stored a while ago (the last
// block of the batch 8 before), and one evicted block.
func busyBatch(seq uint64, at time.Time) *collectors.EventBatch {
	h := seq * 0x9e3779b97f4a7c15
	parent := (seq-8)*0x9e3779b97f4a7c15 + 3
	return &collectors.EventBatch{Worker: "w7", Endpoint: "tcp://10.0.0.7:5557", Seq: seq, TS: float64(at.UnixNano()) / 1e9, At: at,
		Events: []collectors.KVEvent{
			{Kind: collectors.BlockStored, Hashes: []uint64{h, h + 1, h + 2, h + 3}, Parent: parent, HasParent: true, NumTokens: 64, BlockSize: 16, Medium: "GPU"},
			{Kind: collectors.BlockRemoved, Hashes: []uint64{h ^ 0xfff}, Medium: "GPU"},
		}}
}

// BenchmarkEncodeBatch is what recording adds to the pool goroutine for
// each event batch: the encoding alone (B/batch is its size in the
// journal, frame and checksum included).
func BenchmarkEncodeBatch(b *testing.B) {
	e := newEncoder()
	at := time.Unix(1_790_000_000, 0)
	batches := make([]*collectors.EventBatch, 1024)
	for i := range batches {
		batches[i] = busyBatch(uint64(i), at.Add(time.Duration(i)*2*time.Millisecond))
	}
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		e.observation(batches[i%len(batches)])
		if len(e.out) > 1<<20 {
			n += len(e.out)
			e.out = e.out[:0]
		}
	}
	n += len(e.out)
	b.ReportMetric(float64(n)/float64(b.N), "B/batch")
}

// BenchmarkRecorderObserved is the whole cost of a recorded observation
// on the pool goroutine: the wall-clock copy, the lock, the encoding, the
// hand-off to the writer (which writes a real file meanwhile).
func BenchmarkRecorderObserved(b *testing.B) {
	rec, err := Create(Options{Path: filepath.Join(b.TempDir(), "j"), Pool: pool.Options{Name: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	batches := make([]*collectors.EventBatch, 1024)
	for i := range batches {
		batches[i] = busyBatch(uint64(i), at.Add(time.Duration(i)*2*time.Millisecond))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec.Observed(batches[i%len(batches)])
		if i%500 == 499 {
			rec.Published(&snapshot.Snapshot{At: at, Seq: uint64(i)})
		}
	}
	b.StopTimer()
	if err := rec.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDecodeBatch is the reading side: a batch's frame to the
// observation the replay applies.
func BenchmarkDecodeBatch(b *testing.B) {
	e := newEncoder()
	at := time.Unix(1_790_000_000, 0)
	for i := 0; i < 1024; i++ {
		e.observation(busyBatch(uint64(i), at.Add(time.Duration(i)*2*time.Millisecond)))
	}
	var bodies [][]byte // in order, the symbol frames among them
	br := bufioReader(e.out)
	for {
		body, _, err := readFrame(br, nil, int64(len(e.out)))
		if err != nil {
			break
		}
		bodies = append(bodies, body)
	}
	d := newDecoder()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % len(bodies)
		if k == 0 {
			d = newDecoder()
		}
		if _, _, err := d.frame(bodies[k]); err != nil && err != errSkip {
			b.Fatal(err)
		}
	}
}
