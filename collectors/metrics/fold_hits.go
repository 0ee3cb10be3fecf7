package metrics

import (
	"slices"

	"github.com/kvtop/kvtop/collectors"
)

// Token hit counters whose source or unit differs by engine version, and
// the split of worker-level series off a data-parallel page.

// sglangTokenHits sets each SGLang entry's prefix hits and queries, in
// tokens, from one source per page:
//
//  1. sglang:realtime_tokens_total: the scheduler adds each admitted
//     prefill's matched prefix (mode prefill_cache, every cache tier) and
//     its computed tokens (prefill_compute) in one call, so hits = cache,
//     queries = cache + compute, per dp_rank like the gauges. A mode the
//     page lacks while the other is there is 0 (builds that skip zero
//     increments never create it).
//  2. Otherwise sglang:cached_tokens_total against prompt_tokens_total.
//     SGLang adds to cached_tokens only when a request had cached tokens,
//     so a declared family with no sample yet means 0 hits; a family that
//     is not on the page at all (multiprocess exposition drops it until
//     the first hit) leaves the rate unknown.
func (f *engineFold) sglangTokenHits(page *Page) {
	realtime := f.realtimeSeen
	noCached := page.cachedTyped && !f.cachedSeen
	for _, e := range f.engines {
		if realtime {
			e.PrefixHits, e.PrefixQueries = nil, nil // never two sources for one figure
			if e.rtCache == nil && e.rtCompute == nil {
				continue
			}
			hits, compute := deref(e.rtCache), deref(e.rtCompute)
			e.PrefixHits, e.PrefixQueries = collectors.F(hits), collectors.F(hits+compute)
			continue
		}
		if e.PrefixHits == nil && noCached && e.PromptTokens != nil {
			e.PrefixHits = collectors.F(0)
		}
		if e.PrefixHits != nil && e.PromptTokens != nil {
			e.PrefixQueries = collectors.F(*e.PromptTokens)
		}
	}
}

// blockUnits turns the prefix counters of vllm:gpu_prefix_cache_* into
// tokens on a page whose HELP says they count blocks (vLLM V1 0.7–0.8:
// queries are the prompt's full blocks, hits the cached ones). Without a
// block size they stay unknown: block counts summed with another worker's
// tokens would weight the pool's hit rate wrongly.
func (f *engineFold) blockUnits(e *engineAcc, page *Page) {
	fields := [2]**float64{&e.PrefixQueries, &e.PrefixHits}
	for i, p := range fields {
		if !f.oldPrefix[i] || *p == nil {
			continue
		}
		if e.BlockSize == nil || *e.BlockSize <= 0 {
			*p = nil
			if i == 0 || !f.oldPrefix[0] {
				page.warn("engine %q: vllm:gpu_prefix_cache_* count blocks and the block size is unknown: token hit rate not read", e.Engine)
			}
			continue
		}
		**p *= *e.BlockSize
	}
}

// splitTotals takes the unlabelled entry off a page whose other entries
// carry the engine label: SGLang labels its scheduler gauges with dp_rank
// but not its tokenizer counters and latency histograms, which are the
// whole worker's, not an engine of their own.
func splitTotals(engines []collectors.EngineMetrics) ([]collectors.EngineMetrics, *collectors.EngineMetrics) {
	if len(engines) < 2 {
		return engines, nil
	}
	i := slices.IndexFunc(engines, func(e collectors.EngineMetrics) bool { return e.Engine == "" })
	if i < 0 {
		return engines, nil
	}
	totals := engines[i]
	return slices.Delete(engines, i, i+1), &totals
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
