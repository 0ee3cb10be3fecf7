package pool

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// mix spreads i over 64 bits like a real block hash (splitmix64 finalizer).
func mix(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ (i >> 30)) * 0xbf58476d1ce4e5b9
	i = (i ^ (i >> 27)) * 0x94d049bb133111eb
	return i ^ (i >> 31)
}

// churnBatches builds a ring of batches that keeps `resident` blocks
// resident: batch j stores 16 new blocks (one BlockStored with token
// counts, chained to the previous prompt's block three times in four) and
// removes the 16 stored resident/16 batches earlier.
func churnBatches(worker string, resident int) []collectors.EventBatch {
	ring := 2 * resident // hashes; a hash is long gone before it returns
	hashes := make([]uint64, ring)
	for i := range hashes {
		hashes[i] = mix(uint64(i) + 1)
	}
	n := ring / 16
	lag := resident / 16
	out := make([]collectors.EventBatch, n)
	for j := range out {
		st := collectors.KVEvent{Kind: collectors.BlockStored, Hashes: hashes[16*j : 16*j+16], NumTokens: 256, BlockSize: 16, Medium: "GPU"}
		if j%4 != 0 && j > 0 {
			st.Parent, st.HasParent = hashes[16*j-1], true
		}
		r := (j - lag + n) % n
		rm := collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: hashes[16*r : 16*r+16], Medium: "GPU"}
		out[j] = collectors.EventBatch{Worker: worker, Seq: uint64(j), Events: []collectors.KVEvent{st, rm}}
	}
	return out
}

// BenchmarkApplyBlockEvents measures indexing alone (decode excluded):
// each op is one batch of one BlockStored (16 blocks) and one BlockRemoved
// (16 blocks), in steady state with 256 k (tables in cache) or 4 M
// (tables far larger than cache) resident blocks.
func BenchmarkApplyBlockEvents(b *testing.B) {
	for _, resident := range []int{256 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("resident=%dk", resident>>10), func(b *testing.B) {
			s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}})
			batches := churnBatches("w0", resident)
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
			el := b.Elapsed().Seconds()
			b.ReportMetric(float64(2*b.N)/el, "events/s")
			b.ReportMetric(float64(32*b.N)/el, "blocks/s")
			if got := s.Snapshot(t0.Add(time.Minute)).Workers[0].Blocks; blocksOf(got) != resident {
				b.Fatalf("resident blocks = %d, want %d", got, resident)
			}
		})
	}
}

// BenchmarkIndexMemory10M reports heap bytes per resident block with 10
// million blocks indexed on one worker (it allocates ~1 GB; skipped with
// -short).
func BenchmarkIndexMemory10M(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates ~1 GB")
	}
	const total = 10_000_000
	var perBlock float64
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}})
		hashes := make([]uint64, 16)
		ev := []collectors.KVEvent{{Kind: collectors.BlockStored, NumTokens: 256, BlockSize: 16}}
		bt := &collectors.EventBatch{Worker: "w0", Events: ev, At: time.Unix(1_800_000_000, 0)}
		for j := 0; j < total/16; j++ {
			for k := range hashes {
				hashes[k] = mix(uint64(16*j + k))
			}
			ev[0].Hashes = hashes
			ev[0].HasParent = j%4 != 0
			ev[0].Parent = mix(uint64(16*j - 1))
			s.Apply(bt)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := s.index.distinct(); got != total {
			b.Fatalf("indexed %d blocks, want %d", got, total)
		}
		perBlock = float64(after.HeapAlloc-before.HeapAlloc) / total
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perBlock, "B/block")
}

// BenchmarkSnapshot256x1M builds a full snapshot of 256 workers holding 1
// million blocks in all, with metrics windows, streams, a full decision
// journal and a full prefix table.
func BenchmarkSnapshot256x1M(b *testing.B) {
	s, now := bigState(b, 256, 1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		snap := s.Snapshot(now)
		if len(snap.Workers) != 256 || blocksOf(snap.Pool.Blocks) <= 0 {
			b.Fatal("incomplete snapshot")
		}
	}
	// CPU the process spent per snapshot, GC included: robust to the
	// neighbours' load where ns/op is not.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
}

func bigState(tb testing.TB, workers, blocks int) (*State, time.Time) {
	var specs []WorkerSpec
	for i := 0; i < workers; i++ {
		specs = append(specs, WorkerSpec{Name: fmt.Sprintf("w%d", i), Aliases: []string{fmt.Sprintf("http://10.0.%d.%d:8000", i/256, i%256)}})
	}
	s := NewState(Options{Workers: specs, Routers: []RouterSpec{{Name: "r0"}}})
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	// 60 scrapes per worker: a full window of counters, and of the four
	// latency histograms in vLLM's layouts (every bucket moving).
	for k := 0; k < 60; k++ {
		now = t0.Add(time.Duration(k) * time.Second)
		for i := 0; i < workers; i++ {
			q := float64(1000 * k)
			s.Apply(&collectors.MetricsScrape{Target: specs[i].Name, At: now, Profile: "vllm", Engines: []collectors.EngineMetrics{{
				Waiting: collectors.F(float64(i % 7)), Running: collectors.F(8), KVUsage: collectors.F(0.5),
				PrefixQueries: collectors.F(q), PrefixHits: collectors.F(q * 0.7), NumGPUBlocks: collectors.F(4096),
				PromptTokens: collectors.F(q), GenerationTokens: collectors.F(q / 10), RequestsFinished: collectors.F(float64(3 * k)),
				TTFT: benchHist(vllmTTFT, k), QueueTime: benchHist(vllmLatency, k), E2E: benchHist(vllmLatency, k), ITL: benchHist(vllmITL, 30*k),
			}}})
		}
		processed := map[string]float64{}
		for i := 0; i < workers; i++ {
			processed[fmt.Sprintf("http://10.0.%d.%d:8000", i/256, i%256)] = float64(10 * k)
		}
		s.Apply(&collectors.MetricsScrape{Target: "r0", Role: collectors.RoleRouter, At: now, Profile: "vllm-router",
			Router: &collectors.RouterMetrics{Processed: processed, Requests: collectors.F(float64(10 * k * workers))}})
	}
	// Blocks: shared prompts on several workers, so pool-distinct < Σ.
	per := blocks / workers
	hashes := make([]uint64, 16)
	for i := 0; i < workers; i++ {
		for j := 0; j < per/16; j++ {
			for k := range hashes {
				hashes[k] = mix(uint64(i*per + 16*j + k))
			}
			ev := collectors.KVEvent{Kind: collectors.BlockStored, Hashes: hashes, NumTokens: 256, BlockSize: 16}
			if j > 0 {
				ev.Parent, ev.HasParent = mix(uint64(i*per+16*j-1)), true
			}
			s.Apply(&collectors.EventBatch{Worker: specs[i].Name, Seq: uint64(j), At: now, Events: []collectors.KVEvent{ev}})
		}
	}
	for i := 0; i < 25000; i++ {
		w := specs[i%workers].Name
		s.Apply(&collectors.Decision{RequestID: fmt.Sprintf("r-%d", i), Chosen: w, At: now, TS: now,
			Prediction: &collectors.Prediction{Units: "blocks", Matched: collectors.F(3), Total: collectors.F(10), Owner: w},
			Prefix:     fmt.Sprintf("%016x", mix(uint64(i%5000)))})
		cached := i % 3 * 16
		s.Apply(&collectors.Outcome{RequestID: fmt.Sprintf("r-%d", i), Worker: w, HTTPStatus: 200, CachedTokens: &cached, At: now})
	}
	for k := 0; k < 60; k++ {
		s.Snapshot(now.Add(time.Duration(k) * time.Second))
	}
	return s, now.Add(60 * time.Second)
}

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
var (
	vllmTTFT    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	vllmITL     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	vllmLatency = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

// benchHist is a histogram after n rounds of one observation per bucket.
func benchHist(bounds []float64, n int) *collectors.Histogram {
	h := &collectors.Histogram{Buckets: make([]collectors.Bucket, 0, len(bounds)+1)}
	for i, b := range bounds {
		h.Buckets = append(h.Buckets, collectors.Bucket{UpperBound: b, Count: float64(n * (i + 1))})
	}
	h.Count = float64(n * (len(bounds) + 1))
	h.Buckets = append(h.Buckets, collectors.Bucket{UpperBound: math.Inf(1), Count: h.Count})
	return h
}

// BenchmarkIndexAtLimit fills the block index to the default limit
// (Limits.IndexBlocks, 2^24 entries) over 256 workers of 64 k distinct
// blocks each — the worst case: no block shared, so the pool table holds
// every one — then sends one more batch, which is dropped. It reports heap
// per block and the process's resident memory at the limit (VmRSS) and at
// its peak (VmHWM, table growth included). Allocates ~1.5 GB; skipped
// with -short.
func BenchmarkIndexAtLimit(b *testing.B) {
	if testing.Short() {
		b.Skip("allocates ~1.5 GB")
	}
	const workers = 256
	per := DefaultIndexBlocks / workers
	var perBlock, rss, hwm float64
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var specs []WorkerSpec
		for w := 0; w < workers; w++ {
			specs = append(specs, WorkerSpec{Name: fmt.Sprintf("w%d", w)})
		}
		s := NewState(Options{Workers: specs})
		hashes := make([]uint64, 16)
		ev := []collectors.KVEvent{{Kind: collectors.BlockStored, NumTokens: 256, BlockSize: 16}}
		bt := &collectors.EventBatch{Events: ev, At: time.Unix(1_800_000_000, 0)}
		for w := 0; w < workers; w++ {
			bt.Worker = specs[w].Name
			for j := 0; j < per/16; j++ {
				for k := range hashes {
					hashes[k] = mix(uint64(w*per + 16*j + k))
				}
				ev[0].Hashes = hashes
				// 100 requests/s per worker: the recent-tails table
				// holds a few seconds of them, as live.
				bt.At = bt.At.Add(10 * time.Millisecond)
				s.Apply(bt)
			}
		}
		// One more request's blocks: over the limit, dropped.
		for k := range hashes {
			hashes[k] = mix(uint64(DefaultIndexBlocks + k))
		}
		s.Apply(bt)
		runtime.GC()
		runtime.ReadMemStats(&after)
		snap := s.Snapshot(bt.At)
		if s.index.entries != DefaultIndexBlocks || !snap.Pool.IndexFull || snap.Workers[workers-1].Streams[0].DroppedBlocks != 16 {
			b.Fatalf("entries %d (want %d), index_full %v", s.index.entries, DefaultIndexBlocks, snap.Pool.IndexFull)
		}
		perBlock = float64(after.HeapAlloc-before.HeapAlloc) / DefaultIndexBlocks
		rss, hwm = procStatusMB("VmRSS:"), procStatusMB("VmHWM:")
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perBlock, "B/block")
	b.ReportMetric(rss, "MB-RSS")
	b.ReportMetric(hwm, "MB-peak-RSS")
}

// procStatusMB reads one kB figure of /proc/self/status in MB (0 where
// there is no /proc).
func procStatusMB(key string) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
