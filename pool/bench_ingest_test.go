package pool

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// vllmBatches is churnBatches in vLLM's shape: each batch's BlockStored of
// 16 blocks, then one BlockRemoved per evicted block (as vLLM sends them),
// 16 of them.
func vllmBatches(worker string, resident int) []collectors.EventBatch {
	out := churnBatches(worker, resident)
	for j := range out {
		st, rm := out[j].Events[0], out[j].Events[1]
		evs := []collectors.KVEvent{st}
		for k := range rm.Hashes {
			evs = append(evs, collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: rm.Hashes[k : k+1 : k+1], Medium: "GPU"})
		}
		out[j].Events = evs
	}
	return out
}

// BenchmarkApplyVLLMRemovals is BenchmarkApplyBlockEvents with vLLM's
// one-block BlockRemoved events: 32 block events per batch, 17 events.
func BenchmarkApplyVLLMRemovals(b *testing.B) {
	for _, resident := range []int{256 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("resident=%dk", resident>>10), func(b *testing.B) {
			s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}})
			batches := vllmBatches("w0", resident)
			t0 := time.Unix(1_800_000_000, 0)
			warm := resident / 16
			for j := 0; j < warm; j++ {
				batches[j].At = t0
				s.Apply(&batches[j])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bt := &batches[(warm+i)%len(batches)]
				bt.At = t0.Add(time.Duration(i) * time.Microsecond)
				s.Apply(bt)
			}
			b.ReportMetric(float64(32*b.N)/b.Elapsed().Seconds(), "blocks/s")
			if got := s.Snapshot(t0.Add(time.Minute)).Workers[0].Blocks; blocksOf(got) != resident {
				b.Fatalf("resident blocks = %d, want %d", blocksOf(got), resident)
			}
		})
	}
}
