package pool

import (
	"math"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func cacheScrape(target string, t time.Time, kv float64) *collectors.MetricsScrape {
	return scrape(target, t, em{Engine: "0", Waiting: f(1), Running: f(8), KVUsage: f(kv), NumGPUBlocks: f(100), BlockSize: f(16)})
}

func replayed(b *collectors.EventBatch) *collectors.EventBatch { b.Replayed = true; return b }

// TestCacheFigures: a hand-built stream with known stores, removals and
// re-stores. Over the window: stored/s, removed/s, residency (store →
// removal on kvtop's clock), thrash (stored again after its own removal),
// capacity from the cache geometry and resident tokens from the index;
// replayed history indexed but not counted.
func TestCacheFigures(t *testing.T) {
	s := newTestState("w0")
	s.Apply(cacheScrape("w0", at(0.5), 0.5))
	const A, B, C, D, E = 0xa, 0xb, 0xc, 0xd, 0xe
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, A, B, C, D)))
	s.Apply(batch("w0", 0, 1, at(3), removed(A, B)))                                // resident 2 s each
	s.Apply(batch("w0", 0, 2, at(5), stored(0, false, A)))                          // A again: thrash
	s.Apply(batch("w0", 0, 3, at(11), removed(C)))                                  // resident 10 s
	s.Apply(batch("w0", 0, 4, at(12), stored(A, true, B, C)))                       // B and C again: thrash
	s.Apply(replayed(batch("w0", 0, 5, at(12.5), removed(D), stored(0, false, E)))) // history: indexed only
	snap := s.Snapshot(at(13))
	c := row(t, snap, "w0").Cache
	// 12 s covered (first live batch at 1 s); 7 blocks stored, 3 removed,
	// 3 of the stores thrash.
	for _, x := range []struct {
		name      string
		got       *float64
		want      float64
		tolerance float64
	}{
		{"stored_per_s", c.StoredPerS, 7.0 / 12, 1e-9},
		{"removed_per_s", c.RemovedPerS, 3.0 / 12, 1e-9},
		{"thrash_per_s", c.ThrashPerS, 3.0 / 12, 1e-9},
		{"thrash_share", c.ThrashShare, 3.0 / 7, 1e-9},
		{"residency mean", c.ResidencyS.Mean, 14.0 / 3, 1e-9},
		{"sample_rate", c.SampleRate, 1, 0},
	} {
		if x.got == nil || math.Abs(*x.got-x.want) > x.tolerance {
			t.Errorf("%s = %v, want %g", x.name, show(x.got), x.want)
		}
	}
	// The median residency is 2 s, read from its half-octave bucket.
	if p := c.ResidencyS.P50; p == nil || *p < resBound(9) || *p >= resBound(10) || c.ResidencyS.Samples != 3 || c.ResidencyS.Capped {
		t.Errorf("residency %+v (p50 %v): want about 2 s, from 3 samples", c.ResidencyS, show(c.ResidencyS.P50))
	}
	// A, B, C and E resident (D removed in the replay): 4 blocks of 16
	// tokens; the engine holds 100 blocks of 16.
	if c.ResidentTokens == nil || *c.ResidentTokens != 4*16 || blocksOf(row(t, snap, "w0").Blocks) != 4 ||
		c.CapacityTokens == nil || *c.CapacityTokens != 1600 {
		t.Errorf("resident %v tokens (%d blocks), capacity %v tokens", show2(c.ResidentTokens), blocksOf(row(t, snap, "w0").Blocks), show2(c.CapacityTokens))
	}
	// The engine row carries its own, the pool the sum.
	if e := row(t, snap, "w0").Engines[0].Cache; e.StoredPerS == nil || *e.StoredPerS != *c.StoredPerS || *e.CapacityTokens != 1600 {
		t.Errorf("engine 0 cache %+v", e)
	}
	if p := snap.Pool.Cache; p.ThrashShare == nil || *p.ThrashShare != *c.ThrashShare || *p.CapacityTokens != 1600 {
		t.Errorf("pool cache %+v", p)
	}
	// Out of the window, the rates are measured zeros, not unknown.
	later := s.Snapshot(at(100)).Workers[0].Cache
	if later.StoredPerS == nil || *later.StoredPerS != 0 || later.ThrashShare != nil || later.ResidencyS.P50 != nil {
		t.Errorf("a minute later: %+v, want 0 stored/s, no share, no residency", later)
	}
}

// TestCacheUnknownIsNull: a worker without a stream has no cache figures
// but its capacity; one whose stream has not delivered yet the same.
func TestCacheUnknownIsNull(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(cacheScrape("w0", at(1), 0.5))
	s.Apply(status("w1", 0, snapshot.StreamConnecting, at(1)))
	snap := s.Snapshot(at(2))
	c0, c1 := row(t, snap, "w0").Cache, row(t, snap, "w1").Cache
	if c0.CapacityTokens == nil || c0.StoredPerS != nil || c0.SampleRate != nil || c0.ResidentTokens != nil {
		t.Errorf("w0 (metrics, no stream) %+v", c0)
	}
	if c1.CapacityTokens != nil || c1.StoredPerS != nil || c1.ThrashShare != nil || c1.ResidencyS.Mean != nil {
		t.Errorf("w1 (stream connecting) %+v", c1)
	}
}

// TestThrashAlert: at thrash_share while KV use is at kv_usage_high, a
// warning says the cache is too small for its working set; with room in
// the cache (KV low), or below the share, none.
func TestThrashAlert(t *testing.T) {
	var s *State
	run := func(kv float64, again int) *snapshot.Snapshot {
		s = newTestState("w0")
		s.Apply(cacheScrape("w0", at(0.5), kv))
		// 400 blocks stored, all removed, then `again` of them stored
		// again and 400 - again new ones: 800 stores, past
		// thrash_min_stored.
		var hs []uint64
		for i := uint64(1); i <= 400; i++ {
			hs = append(hs, i)
		}
		s.Apply(batch("w0", 0, 0, at(1), stored(0, false, hs...)))
		s.Apply(batch("w0", 0, 1, at(2), removed(hs...)))
		var next []uint64
		for i := 0; i < 400; i++ {
			if i < again {
				next = append(next, hs[i])
			} else {
				next = append(next, uint64(1000+i))
			}
		}
		s.Apply(batch("w0", 0, 2, at(3), stored(0, false, next...)))
		s.Apply(cacheScrape("w0", at(4), kv))
		return s.Snapshot(at(5))
	}
	snap := run(0.95, 200) // 200 of 800 stores thrash: 25%
	a := alertOf(snap, snapshot.AlertThrash)
	want := "w0 thrashes its KV cache: 25% of its stores in the last 60 s re-store blocks it evicted (50 blocks/s recomputed); KV 95% of 1.6k tokens — too small for its working set"
	if a == nil || a.Text != want || a.Severity != snapshot.SeverityWarning || a.Since != at(5) {
		t.Fatalf("alert %+v\nwant %q since %s", a, want, at(5))
	}
	// It says for how long: since the first snapshot that had it.
	if a := alertOf(s.Snapshot(at(6)), snapshot.AlertThrash); a == nil || a.Since != at(5) {
		t.Errorf("a refresh later: %+v, want it since %s", a, at(5))
	}
	if a := alertOf(run(0.5, 200), snapshot.AlertThrash); a != nil {
		t.Errorf("KV 50%%: %q, want none (the cache has room)", a.Text)
	}
	if a := alertOf(run(0.95, 100), snapshot.AlertThrash); a != nil {
		t.Errorf("12.5%% thrash: %q, want none (below thrash_share)", a.Text)
	}
}

// TestCacheSampling: a cache far larger than the sample table follows a
// hash-chosen share of its blocks (table bounded), and the thrash it
// estimates from them is close to the truth.
func TestCacheSampling(t *testing.T) {
	s := newTestState("w0")
	const resident, churn = 40000, 4000
	hs := make([]uint64, resident)
	for i := range hs {
		hs[i] = mix(uint64(i) + 1)
	}
	for i := 0; i < resident; i += 16 {
		s.Apply(batch("w0", 0, uint64(i), at(1), stored(0, false, hs[i:i+16]...)))
	}
	// Ten rounds: evict churn blocks, then store them again (thrash) and
	// churn new ones (not thrash). Truth: half of those stores thrash.
	fresh := uint64(1 << 40)
	for r := 0; r < 10; r++ {
		ev := hs[r*churn : (r+1)*churn]
		s.Apply(batch("w0", 0, 0, at(2+float64(r)), removed(ev...)))
		var news []uint64
		for i := 0; i < churn; i++ {
			news = append(news, mix(fresh))
			fresh++
		}
		s.Apply(batch("w0", 0, 0, at(2.5+float64(r)), stored(0, false, ev...), stored(0, false, news...)))
	}
	c := s.Snapshot(at(13)).Workers[0].Cache
	p := s.pubs[pubKey{s.workers[0], 0}]
	if len(p.sample.keys) > maxSampleSlots || p.sample.level == 0 || c.SampleRate == nil || *c.SampleRate >= 1 {
		t.Fatalf("sample table %d slots at level %d (rate %v): want bounded and sampled", len(p.sample.keys), p.sample.level, show(c.SampleRate))
	}
	truth := float64(10*churn) / float64(resident+20*churn)
	t.Logf("level %d (1 in %.0f blocks), %d of %d slots; thrash share %.4f (truth %.4f), residency mean %.2f s from %d samples",
		p.sample.level, 1 / *c.SampleRate, p.sample.count, len(p.sample.keys), *c.ThrashShare, truth, *c.ResidencyS.Mean, c.ResidencyS.Samples)
	if c.ThrashShare == nil || math.Abs(*c.ThrashShare-truth) > 0.25*truth {
		t.Errorf("thrash share %v, truth %.3f (±25%%)", show(c.ThrashShare), truth)
	}
	if c.ResidencyS.Samples == 0 || c.ResidencyS.Mean == nil || *c.ResidencyS.Mean < 1 || *c.ResidencyS.Mean > 11 {
		t.Errorf("residency %+v (mean %v): want the sampled blocks' 1–11 s", c.ResidencyS, show(c.ResidencyS.Mean))
	}
}

// TestCacheClearAndRestart: a block cleared (AllBlocksCleared) or lost in
// a restart and stored again is no eviction.
func TestCacheClearAndRestart(t *testing.T) {
	s := newTestState("w0")
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2)))
	s.Apply(batch("w0", 0, 1, at(2), removed(1)))
	s.Apply(batch("w0", 0, 2, at(3), collectors.KVEvent{Kind: collectors.AllBlocksCleared}))
	s.Apply(batch("w0", 0, 3, at(4), stored(0, false, 1, 2)))
	s.Apply(&collectors.StreamReset{Worker: "w0", Rank: 0, Reason: "restart", At: at(5)})
	s.Apply(batch("w0", 0, 0, at(6), stored(0, false, 1, 2)))
	c := s.Snapshot(at(7)).Workers[0].Cache
	if c.ThrashShare == nil || *c.ThrashShare != 0 || *c.StoredPerS != 6.0/6 {
		t.Errorf("cache %+v (share %v, stored/s %v): want no thrash, 6 blocks over 6 s", c, show(c.ThrashShare), show(c.StoredPerS))
	}
}

func show2(p *int) any {
	if p == nil {
		return "nil"
	}
	return *p
}
