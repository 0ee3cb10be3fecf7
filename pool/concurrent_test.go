package pool

import (
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// TestPoolsInOneProcessShareNothing: two pools applying KV events at once
// (two consoles in one process, parallel tests) touch no common memory.
// Run under -race: a package-level scratch variable written on the event
// path was a data race.
func TestPoolsInOneProcessShareNothing(t *testing.T) {
	t0 := time.Date(2026, 9, 5, 14, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	blocks := make([]int, 2)
	for i := range blocks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}})
			for seq := uint64(0); seq < 50; seq++ {
				hashes := []uint64{seq*4 + 1, seq*4 + 2, seq*4 + 3, seq*4 + 4}
				s.Apply(&collectors.EventBatch{Worker: "w0", Seq: seq, At: t0.Add(time.Duration(seq) * time.Millisecond),
					Events: []collectors.KVEvent{
						{Kind: collectors.BlockStored, Hashes: hashes, BlockSize: 16, NumTokens: 64},
						{Kind: collectors.BlockRemoved, Hashes: hashes[:2]},
					}})
			}
			blocks[i] = s.Snapshot(t0.Add(time.Second)).Workers[0].Streams[0].Blocks
		}()
	}
	wg.Wait()
	for i, n := range blocks {
		if n != 100 {
			t.Errorf("pool %d: %d blocks, want 50 batches × 2 kept", i, n)
		}
	}
}
