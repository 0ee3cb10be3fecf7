package pool

import (
	"sort"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Cache tiers from the pages: where prompt tokens came from over the
// window, per tier, token-weighted (the engine's own GPU cache, its KV
// connector's offload tiers, or computed), and the connector's traffic:
// bytes stored to the tiers against bytes read back. Stores with no loads
// is an offload tier that costs bandwidth and serves nothing.
//
// Sources, by engine: vLLM's prompt_tokens_by_source (local_cache_hit,
// external_kv_transfer, local_compute), else its prefix-cache and external
// prefix-cache hit counters over prompt tokens; the external tokens split
// over vLLM's tiering tiers by their chunk hits; SGLang's cached_tokens by
// cache_source (device, host, storage_…) over prompt tokens; LMCache's hit
// tokens where the engine has no external counter (LMCache is a connector:
// with one, its hits are in the external count already).
// vllm:kv_offload_cpu_cache_usage_perc counts blocks pinned by transfers,
// not what the tier holds: it is never read as a tier's use.

// TransferTier names, among where prompt tokens came from, a decode
// worker's KV received from prefill workers (P/D).
const TransferTier = "transfer"

// offloadWindows are one engine's counters of collectors.Offload.
type offloadWindows struct {
	load, store, computed, local, external, extHits counterWindow
	tierHits, chunkHits                             map[string]*counterWindow
	hostUsed, hostTotal                             *float64
}

func newOffloadWindows() *offloadWindows {
	return &offloadWindows{tierHits: map[string]*counterWindow{}, chunkHits: map[string]*counterWindow{}}
}

// maxEngineTiers bounds an engine's tier windows (the collector keeps 8
// labels per family; a label that changes every scrape must not grow this).
const maxEngineTiers = 16

// applyOffload records one scrape's offload counters. The windows appear
// with the engine's first Offload; when an earlier good scrape lacked them
// (prev), they stood at 0 then: engines create these series at their
// first increment, so those count.
func (e *engine) applyOffload(em *collectors.EngineMetrics, prev, at time.Time, window time.Duration) {
	o := em.Offload
	if e.off == nil {
		if o == nil {
			return
		}
		e.off = newOffloadWindows()
		if !prev.IsZero() {
			e.off.absentSince(prev)
		}
	}
	w := e.off
	if o == nil {
		o = &collectors.Offload{}
	}
	obs := func(c *counterWindow, p *float64) {
		if v := finite(p); v == nil || *v >= 0 {
			c.observe(at, v, window)
		}
	}
	obs(&w.load, o.LoadBytes)
	obs(&w.store, o.StoreBytes)
	obs(&w.computed, o.PromptComputed)
	obs(&w.local, o.PromptLocalHit)
	obs(&w.external, o.PromptExternal)
	obs(&w.extHits, em.ExternalHits)
	for _, m := range [...]struct {
		ws map[string]*counterWindow
		ts []collectors.TierCount
	}{{w.tierHits, o.TierHits}, {w.chunkHits, o.TierChunks}} {
		seen := map[string]bool{}
		for _, t := range m.ts {
			c := m.ws[t.Tier]
			if c == nil {
				if len(m.ws) >= maxEngineTiers {
					continue
				}
				c = &counterWindow{}
				if !prev.IsZero() {
					c.absent = prev.UnixNano()
				}
				m.ws[t.Tier] = c
			}
			seen[t.Tier] = true
			obs(c, t.Hits)
		}
		for tier, c := range m.ws {
			if !seen[tier] {
				c.observe(at, nil, window)
			}
		}
	}
	w.hostUsed, w.hostTotal = finite(o.HostUsedTokens), finite(o.HostTotalTokens)
}

// absentSince marks every window as lacking its counter at ns.
func (w *offloadWindows) absentSince(t time.Time) {
	for _, c := range w.counters() {
		c.absent = t.UnixNano()
	}
}

func (w *offloadWindows) counters() []*counterWindow {
	cs := []*counterWindow{&w.load, &w.store, &w.computed, &w.local, &w.external, &w.extHits}
	for _, m := range [...]map[string]*counterWindow{w.tierHits, w.chunkHits} {
		for _, c := range m {
			cs = append(cs, c)
		}
	}
	return cs
}

func (e *engine) offloadRestarted() {
	if e.off != nil {
		for _, c := range e.off.counters() {
			c.restarted()
		}
	}
}

// tierAcc sums tier figures, as rates per second.
type tierAcc struct {
	seen                bool // some engine had offload figures
	prompt, load, store optSum
	hits                map[string]float64
	hostUsed, hostTotal optSum
}

// optSum is a sum that is unknown until something is added.
type optSum struct {
	v  float64
	ok bool
}

func (s *optSum) add(v float64) { s.v, s.ok = s.v+v, true }
func (s *optSum) merge(o optSum) {
	if o.ok {
		s.add(o.v)
	}
}

func (s optSum) value() *float64 {
	if !s.ok {
		return nil
	}
	return fp(s.v)
}

// perSecond is a window's increase per second, if known.
func perSecond(c *counterWindow, now time.Time, w time.Duration) (float64, bool) {
	d, cov, ok := c.delta(now, w)
	if !ok || cov <= 0 {
		return 0, false
	}
	return d / cov.Seconds(), true
}

// addEngine adds engine e's figures (its page's own counters only); the
// connector's tokens, where no tiering splits them, go to offloadName.
func (a *tierAcc) addEngine(e *engine, offloadName string, now time.Time, w time.Duration) {
	o := e.off
	if o == nil {
		return
	}
	a.seen = true
	if a.hits == nil {
		a.hits = map[string]float64{}
	}
	if v, ok := perSecond(&o.load, now, w); ok {
		a.load.add(v)
	}
	if v, ok := perSecond(&o.store, now, w); ok {
		a.store.add(v)
	}
	if o.hostUsed != nil && o.hostTotal != nil {
		a.hostUsed.add(*o.hostUsed)
		a.hostTotal.add(*o.hostTotal)
	}
	// The denominator: every source of prompt tokens, else the prompt
	// token counter, else the prefix-cache queries.
	comp, okC := perSecond(&o.computed, now, w)
	local, okL := perSecond(&o.local, now, w)
	ext, okE := perSecond(&o.external, now, w)
	bySource := okC && okL && okE
	if bySource {
		a.prompt.add(comp + local + ext)
	} else if v, ok := perSecond(&e.tput[tputPrompt], now, w); ok {
		a.prompt.add(v)
	} else if v, ok := perSecond(&e.queries, now, w); ok {
		a.prompt.add(v)
	}
	// SGLang splits its hits by tier itself.
	if sg := tierRates(o.tierHits, now, w, "lmcache"); len(sg) > 0 {
		for tier, v := range sg {
			a.hits[sglangTier(tier)] += v
		}
		return
	}
	if okL {
		a.hits["GPU"] += local
	} else if v, ok := perSecond(&e.hits, now, w); ok {
		a.hits["GPU"] += v
	}
	if e.decode {
		// A decode worker's connector brings the prompt's KV from its
		// prefill worker: a transfer, no cache tier of its own.
		if okE && ext > 0 {
			a.hits[TransferTier] += ext
		}
		return
	}
	if !okE {
		ext, okE = perSecond(&o.extHits, now, w)
	}
	if !okE { // no connector counter: LMCache's own, if any
		if c := o.tierHits["lmcache"]; c != nil {
			if v, ok := perSecond(c, now, w); ok {
				a.hits["lmcache"] += v
			}
		}
		return
	}
	// The connector's tokens, over vLLM's tiering tiers by their chunk hits.
	chunks := tierRates(o.chunkHits, now, w, "")
	total := 0.0
	for _, v := range chunks {
		total += v
	}
	if total <= 0 {
		// A connector that served nothing, on a worker whose streams name
		// no tier beside the GPU, is no tier worth a share.
		if ext > 0 || offloadName != "offload" {
			a.hits[offloadName] += ext
		}
		return
	}
	for tier, v := range chunks {
		a.hits[tieringTier(tier)] += ext * v / total
	}
}

// tierRates are the rates of m's windows, without skip.
func tierRates(m map[string]*counterWindow, now time.Time, w time.Duration, skip string) map[string]float64 {
	out := map[string]float64{}
	for tier, c := range m {
		if tier == skip {
			continue
		}
		if v, ok := perSecond(c, now, w); ok {
			out[tier] = v
		}
	}
	return out
}

// sglangTier names SGLang's cache_source: device is the GPU, host the
// CPU pool, storage_<backend> the storage tier.
func sglangTier(s string) string {
	switch {
	case s == "device":
		return "GPU"
	case strings.HasPrefix(s, "storage"):
		return "storage"
	}
	return s
}

// tieringTier names a vLLM tiering label ("0:primary", "1:fs") by its type.
func tieringTier(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (a *tierAcc) merge(o *tierAcc) {
	if !o.seen {
		return
	}
	a.seen = true
	if a.hits == nil {
		a.hits = map[string]float64{}
	}
	for k, v := range o.hits {
		a.hits[k] += v
	}
	a.prompt.merge(o.prompt)
	a.load.merge(o.load)
	a.store.merge(o.store)
	a.hostUsed.merge(o.hostUsed)
	a.hostTotal.merge(o.hostTotal)
}

// figures is the snapshot's form, nil when no engine had offload figures.
func (a *tierAcc) figures() *snapshot.CacheTiers {
	if !a.seen {
		return nil
	}
	c := &snapshot.CacheTiers{Hits: []snapshot.TierHit{}}
	c.PromptTokensPerS = a.prompt.value()
	for tier, v := range a.hits {
		h := snapshot.TierHit{Tier: tier, TokensPerS: v}
		if a.prompt.ok && a.prompt.v > 0 {
			h.Share = fraction(min(v/a.prompt.v, 1))
		}
		c.Hits = append(c.Hits, h)
	}
	sort.Slice(c.Hits, func(i, j int) bool {
		x, y := c.Hits[i], c.Hits[j]
		if (x.Tier == "GPU") != (y.Tier == "GPU") {
			return x.Tier == "GPU"
		}
		if x.TokensPerS != y.TokensPerS {
			return x.TokensPerS > y.TokensPerS
		}
		return x.Tier < y.Tier
	})
	c.LoadBytesPerS, c.StoreBytesPerS = a.load.value(), a.store.value()
	c.StoresWithoutLoads = a.store.ok && a.store.v > 0 && a.load.ok && a.load.v == 0
	c.HostUsedTokens, c.HostTotalTokens = a.hostUsed.value(), a.hostTotal.value()
	return c
}

// cacheTiers is a worker's tier figures: its engines' (in name order) and
// its worker-level series'.
func (w *worker) cacheTiers(names []string, now time.Time, win time.Duration) tierAcc {
	var acc tierAcc
	off := w.offloadMedium()
	for _, name := range names {
		if e := w.engines[name]; e != nil {
			acc.addEngine(e, off, now, win)
		}
	}
	if w.totals != nil {
		var t tierAcc
		t.addEngine(w.totals, off, now, win)
		acc.merge(&t)
	}
	return acc
}

// offloadMedium names the tier a worker's KV connector serves hits from:
// the one medium beside the GPU its streams publish (CPU, STORAGE, …), or
// "offload" when they name none or several.
func (w *worker) offloadMedium() string {
	name := ""
	for _, p := range w.pubs {
		for _, t := range p.tiers {
			switch {
			case t.medium == "GPU" || t.medium == name:
			case name == "":
				name = t.medium
			default:
				return "offload"
			}
		}
	}
	if name == "" {
		return "offload"
	}
	return name
}
