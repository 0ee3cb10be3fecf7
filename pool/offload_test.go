package pool

import (
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func hitOf(t *testing.T, c *snapshot.CacheTiers, tier string) snapshot.TierHit {
	t.Helper()
	for _, h := range c.Hits {
		if h.Tier == tier {
			return h
		}
	}
	t.Fatalf("no tier %q in %+v", tier, c.Hits)
	return snapshot.TierHit{}
}

// vllmOffload is a vLLM engine page with the offloading connector and
// tiering: prompt tokens by source, the connector's bytes, chunk hits.
func vllmOffload(computed, local, external, loadB, storeB, primary, fs float64) em {
	e := counters("0", 0, local+external+computed, local)
	e.PromptTokens = f(local + external + computed)
	e.ExternalHits = f(external)
	e.Offload = &collectors.Offload{LoadBytes: f(loadB), StoreBytes: f(storeB),
		PromptComputed: f(computed), PromptLocalHit: f(local), PromptExternal: f(external),
		TierChunks: []collectors.TierCount{{Tier: "0:primary", Hits: f(primary)}, {Tier: "1:fs", Hits: f(fs)}}}
	return e
}

// TestCacheTiersFromPages: where prompt tokens hit, per tier, over the
// window: the GPU's own cache, the connector's tiers split by their chunk
// hits; the connector's bytes; stores that are never read back flagged.
func TestCacheTiersFromPages(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(scrape("w0", at(0), vllmOffload(1000, 5000, 1000, 1e9, 2e9, 100, 100)))
	s.Apply(scrape("w0", at(10), vllmOffload(2500, 11100, 3400, 1.5e9, 3e9, 250, 150)))
	// w1 stores to its tier and never reads anything back.
	s.Apply(scrape("w1", at(0), vllmOffload(1000, 0, 0, 7e8, 1e9, 0, 0)))
	s.Apply(scrape("w1", at(10), vllmOffload(3000, 0, 0, 7e8, 3e9, 0, 0)))
	snap := s.Snapshot(at(10))
	c := row(t, snap, "w0").CacheTiers
	if c == nil || blocksOf(intOf(c.PromptTokensPerS)) != 1000 {
		t.Fatalf("w0 cache tiers %+v: 10 000 prompt tokens in 10 s", c)
	}
	// 6 100 GPU hits, 2 400 from the connector: 150 of 200 chunk hits on
	// the primary tier, 50 on fs.
	gpu, primary, fs := hitOf(t, c, "GPU"), hitOf(t, c, "primary"), hitOf(t, c, "fs")
	if !near(gpu.TokensPerS, 610) || !near(*gpu.Share, 0.61) || !near(primary.TokensPerS, 180) || !near(*fs.Share, 0.06) {
		t.Fatalf("hits %+v", c.Hits)
	}
	if c.Hits[0].Tier != "GPU" || !near(*c.LoadBytesPerS, 5e7) || !near(*c.StoreBytesPerS, 1e8) || c.StoresWithoutLoads {
		t.Fatalf("w0 %+v", c)
	}
	if c1 := row(t, snap, "w1").CacheTiers; c1 == nil || !c1.StoresWithoutLoads || !near(*c1.StoreBytesPerS, 2e8) {
		t.Fatalf("w1 %+v: stores with no loads", c1)
	}
	p := snap.Pool.CacheTiers
	if p == nil || !near(*p.PromptTokensPerS, 1200) || !near(hitOf(t, p, "GPU").TokensPerS, 610) || !near(*p.StoreBytesPerS, 3e8) || p.StoresWithoutLoads {
		t.Fatalf("pool %+v", p)
	}
}

func intOf(p *float64) *int {
	if p == nil {
		return nil
	}
	n := int(*p + 0.5)
	return &n
}

// TestCacheTiersLazySeries: engines create the offload series at their
// first increment; a series that appears after a good scrape without it
// counts from 0, not as a baseline.
func TestCacheTiersLazySeries(t *testing.T) {
	s := newTestState("w0")
	plain := counters("0", 0, 100, 50)
	plain.PromptTokens = f(100)
	s.Apply(scrape("w0", at(0), plain))
	s.Apply(scrape("w0", at(10), vllmOffload(100, 500, 400, 4e8, 8e8, 0, 0)))
	c := row(t, s.Snapshot(at(10)), "w0").CacheTiers
	if c == nil || !near(*c.LoadBytesPerS, 4e7) || !near(hitOf(t, c, "offload").TokensPerS, 40) {
		t.Fatalf("%+v: the first values are increases since the scrape without them", c)
	}
	// Once its streams name the tier the connector fills, the hits are
	// that tier's.
	s.Apply(batch("w0", 0, 0, at(10), stored(0, false, 1), onMedium(stored(0, false, 1), "CPU")))
	if c := row(t, s.Snapshot(at(10)), "w0").CacheTiers; !near(hitOf(t, c, "CPU").TokensPerS, 40) {
		t.Fatalf("%+v: the connector's hits are the CPU tier's", c.Hits)
	}
}

// TestCacheTiersSGLangAndLMCache: SGLang splits its cached tokens by
// cache_source itself; a vLLM with LMCache and no external counter shows
// LMCache's hit tokens.
func TestCacheTiersSGLangAndLMCache(t *testing.T) {
	s := newTestState("sg", "lm")
	sg := func(prompt, dev, host, store, used float64) em {
		e := em{PromptTokens: f(prompt), PrefixHits: f(dev + host + store)}
		e.Offload = &collectors.Offload{HostUsedTokens: f(used), HostTotalTokens: f(4e5),
			TierHits: []collectors.TierCount{{Tier: "device", Hits: f(dev)}, {Tier: "host", Hits: f(host)}, {Tier: "storage_mooncake", Hits: f(store)}}}
		return e
	}
	s.Apply(scrape("sg", at(0), sg(1000, 0, 0, 0, 0)))
	s.Apply(scrape("sg", at(10), sg(11000, 6000, 2000, 500, 1.2e5)))
	lm := func(prompt, local, lmc float64) em {
		e := counters("0", 0, prompt, local)
		e.PromptTokens = f(prompt)
		e.Offload = &collectors.Offload{TierHits: []collectors.TierCount{{Tier: "lmcache", Hits: f(lmc)}}}
		return e
	}
	s.Apply(scrape("lm", at(0), lm(0, 0, 0)))
	s.Apply(scrape("lm", at(10), lm(1000, 300, 200)))
	snap := s.Snapshot(at(10))
	c := row(t, snap, "sg").CacheTiers
	if c == nil || !near(*hitOf(t, c, "GPU").Share, 0.6) || !near(*hitOf(t, c, "host").Share, 0.2) ||
		!near(*hitOf(t, c, "storage").Share, 0.05) || !near(*c.HostUsedTokens, 1.2e5) || !near(*c.HostTotalTokens, 4e5) {
		t.Fatalf("sglang %+v", c)
	}
	if c := row(t, snap, "lm").CacheTiers; c == nil || !near(*hitOf(t, c, "GPU").Share, 0.3) || !near(*hitOf(t, c, "lmcache").Share, 0.2) {
		t.Fatalf("lmcache %+v", c)
	}
}
