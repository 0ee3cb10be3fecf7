package pool

import (
	"runtime"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// heapNow is the live heap after a full collection.
func heapNow() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkFingerprintTableAtCap reports the hash-boundary check's memory
// with its table full (limits.fingerprints, the default 65 536 root
// prefixes, each stored by two workers): the heap of a pool fed those root
// stores minus that of the same pool fed them without a fingerprint (the
// index's share), per table and per entry.
func BenchmarkFingerprintTableAtCap(b *testing.B) {
	const limit = DefaultFingerprints
	feed := func(fingerprint bool) (uint64, *State) {
		before := heapNow()
		s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}, {Name: "w1"}}, Limits: Limits{Fingerprints: limit}})
		t0 := time.Unix(1_800_000_000, 0)
		ev := []collectors.KVEvent{{Kind: collectors.BlockStored, BlockSize: 16, NumTokens: 16, Medium: "GPU", Hashes: make([]uint64, 1)}}
		for i := 0; i < limit-1; i++ { // one short of the cap: no prune
			for w, name := range []string{"w0", "w1"} {
				ev[0].Hashes[0] = mix(uint64(2*i + w + 1))
				if fingerprint {
					ev[0].RootContent = mix(uint64(i) + 1<<40)
				}
				s.Apply(&collectors.EventBatch{Worker: name, Seq: uint64(i), Events: ev, At: t0.Add(time.Duration(i) * time.Microsecond)})
			}
		}
		return heapNow() - before, s
	}
	var per, table float64
	for i := 0; i < b.N; i++ {
		base, s0 := feed(false)
		with, s1 := feed(true)
		if n := len(s1.fps.ents); n != limit-1 || s1.fps.dropped != 0 {
			b.Fatalf("table holds %d entries (%d dropped), want %d", n, s1.fps.dropped, limit-1)
		}
		table = float64(with) - float64(base)
		per = table / float64(limit-1)
		runtime.KeepAlive(s0)
		runtime.KeepAlive(s1)
	}
	b.ReportMetric(table/(1<<20), "MiB/table")
	b.ReportMetric(per, "B/entry")
}

// BenchmarkSampleTableAtCap reports one engine's residency and thrash
// table (recently stored and removed blocks) at its bound: filled with
// more blocks than it may hold, it stays at maxSampleSlots and raises its
// sampling level instead.
func BenchmarkSampleTableAtCap(b *testing.B) {
	var size float64
	var level uint8
	for i := 0; i < b.N; i++ {
		before := heapNow()
		t := &blockSample{}
		now := int64(1_800_000_000e9)
		for j := uint64(1); j <= 1<<20; j++ {
			h := mix(j)
			if t.sampled(h) {
				t.put(slotKey(h), uint64(now)<<1, now, time.Minute)
			}
		}
		if len(t.keys) != maxSampleSlots {
			b.Fatalf("table of %d slots, want its bound %d", len(t.keys), maxSampleSlots)
		}
		size, level = float64(heapNow()-before), t.level
		runtime.KeepAlive(t)
	}
	b.ReportMetric(size/(1<<10), "KiB/engine")
	b.ReportMetric(float64(level), "level")
}
