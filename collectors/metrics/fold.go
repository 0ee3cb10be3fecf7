package metrics

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/collectors"
)

// fold reads the parsed families of one page into page, for group g.
// Families are visited in name order (so float sums do not depend on map
// order), current names first: a deprecated name fills a field only when
// no current name did. Its work is linear in the series; it stops at b's
// deadline.
func fold(fams map[string]*dto.MetricFamily, g group, page *Page, b *budget) error {
	if mf := fams["process_start_time_seconds"]; mf != nil {
		for _, m := range mf.Metric {
			if v, ok := value(m, page); ok {
				page.ProcessStart = collectors.F(v)
			}
		}
	}
	table := tables[g]
	if table == nil {
		return nil
	}
	names := make([]string, 0, len(fams))
	for name := range fams {
		names = append(names, name)
	}
	slices.Sort(names)

	var (
		seen    [nFields]bool
		fromOld [nFields]bool // filled from a deprecated name
		eng     engineFold
		rt      routerFold
	)
	eng.label = "engine"
	if g == gSGLang {
		eng.label = "dp_rank"
	}
	rt.init(g)
	folded := 0
	for _, old := range [...]bool{false, true} {
		for _, name := range names {
			e, ok := table[familyKey(name)]
			if !ok || e.old != old || e.f == fProcessStart || (old && seen[e.f]) {
				continue
			}
			seen[e.f], fromOld[e.f] = true, old
			mf := fams[name]
			for _, m := range mf.Metric {
				if folded++; folded%checkEvery == 0 && b.over() {
					return b.late(folded)
				}
				if g.isRouter() {
					rt.add(e.f, m, page)
				} else {
					eng.add(e.f, m, page)
				}
			}
		}
	}
	if g.isRouter() {
		page.Router = rt.finish(page)
	} else {
		eng.oldPrefix = [2]bool{fromOld[fPrefixQueries], fromOld[fPrefixHits]}
		page.Engines, page.WorkerTotals = eng.finish(g, page)
	}
	return nil
}

// value is the finite value of a counter, gauge or untyped sample; NaN
// and Inf are counted as skipped.
func value(m *dto.Metric, page *Page) (float64, bool) {
	var v float64
	switch {
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Counter != nil:
		v = m.Counter.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, false
	}
	if !finite(v) {
		page.Skipped++
		return 0, false
	}
	return v, true
}

func label(m *dto.Metric, name string) (string, bool) {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

func add(p **float64, v float64) {
	if *p == nil {
		*p = collectors.F(v)
		return
	}
	**p += v
}

// histogram converts a classic histogram; false (counted as skipped) when
// its count, sum or a bucket is not a finite number.
func histogram(m *dto.Metric, page *Page) (*collectors.Histogram, bool) {
	h := m.Histogram
	if h == nil {
		return nil, false
	}
	count := float64(h.GetSampleCount())
	if h.SampleCountFloat != nil {
		count = h.GetSampleCountFloat()
	}
	sum := h.GetSampleSum()
	if !finite(count) || !finite(sum) {
		page.Skipped++
		return nil, false
	}
	out := &collectors.Histogram{Count: count, Sum: sum, Buckets: make([]collectors.Bucket, 0, len(h.Bucket)+1)}
	for _, b := range h.Bucket {
		c := float64(b.GetCumulativeCount())
		if b.CumulativeCountFloat != nil {
			c = b.GetCumulativeCountFloat()
		}
		ub := b.GetUpperBound()
		if math.IsNaN(ub) || !finite(c) {
			page.Skipped++
			return nil, false
		}
		out.Buckets = append(out.Buckets, collectors.Bucket{UpperBound: ub, Count: c})
	}
	if !slices.IsSortedFunc(out.Buckets, cmpBucket) {
		slices.SortStableFunc(out.Buckets, cmpBucket)
	}
	if n := len(out.Buckets); n == 0 || !math.IsInf(out.Buckets[n-1].UpperBound, 1) {
		out.Buckets = append(out.Buckets, collectors.Bucket{UpperBound: math.Inf(1), Count: count})
	}
	return out, true
}

func cmpBucket(a, b collectors.Bucket) int { return cmp.Compare(a.UpperBound, b.UpperBound) }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// mergeHistogram adds h into *dst (several series for one engine, e.g. one
// per model). Buckets add up only when both have the same bounds; otherwise
// only +Inf is kept, so no quantile is made up.
func mergeHistogram(dst **collectors.Histogram, h *collectors.Histogram) {
	d := *dst
	if d == nil {
		*dst = h
		return
	}
	d.Count += h.Count
	d.Sum += h.Sum
	same := len(d.Buckets) == len(h.Buckets)
	for i := 0; same && i < len(d.Buckets); i++ {
		same = d.Buckets[i].UpperBound == h.Buckets[i].UpperBound
	}
	if !same {
		d.Buckets = []collectors.Bucket{{UpperBound: math.Inf(1), Count: d.Count}}
		return
	}
	for i := range d.Buckets {
		d.Buckets[i].Count += h.Buckets[i].Count
	}
}

// ---------------------------------------------------------------------------
// Engines

type engineAcc struct {
	collectors.EngineMetrics
	maxTokens *float64 // sglang:max_total_num_tokens
	// sglang:realtime_tokens_total by mode: prefix-cache hits and computed
	// prompt tokens, counted by the scheduler as it admits a prefill.
	rtCache, rtCompute *float64
}

// engineFold collects one EngineMetrics per value of the engine label.
type engineFold struct {
	label      string                // "engine" (vLLM) or "dp_rank" (SGLang)
	engines    []*engineAcc          // in the order first seen
	byID       map[string]*engineAcc // the same, by engine id: one lookup per sample
	cachedSeen bool                  // some sglang:cached_tokens sample was on the page
	oldPrefix  [2]bool               // prefix queries, hits came from vllm:gpu_prefix_cache_*
}

func (f *engineFold) get(m *dto.Metric) *engineAcc {
	id, _ := label(m, f.label)
	e := f.byID[id]
	if e == nil {
		if f.byID == nil {
			f.byID = map[string]*engineAcc{}
		}
		e = &engineAcc{EngineMetrics: collectors.EngineMetrics{Engine: id}}
		f.engines = append(f.engines, e)
		f.byID[id] = e
	}
	if e.Model == "" {
		for _, l := range [...]string{"model_name", "model", "name"} {
			if v, ok := label(m, l); ok && v != "" {
				e.Model = v
				break
			}
		}
	}
	return e
}

func (f *engineFold) add(fd field, m *dto.Metric, page *Page) {
	switch fd {
	case fTTFT, fQueueTime, fE2E:
		h, ok := histogram(m, page)
		if !ok {
			return
		}
		e := f.get(m)
		switch fd {
		case fTTFT:
			mergeHistogram(&e.TTFT, h)
		case fQueueTime:
			mergeHistogram(&e.QueueTime, h)
		default:
			mergeHistogram(&e.E2E, h)
		}
		return
	case fCacheConfig:
		// vllm:cache_config_info: the value is 1, the geometry is in labels
		// ("None" when unset).
		e := f.get(m)
		if v, ok := labelNumber(m, "block_size"); ok {
			e.BlockSize = collectors.F(v)
		}
		if v, ok := labelNumber(m, "num_gpu_blocks"); ok {
			e.NumGPUBlocks = collectors.F(v)
		}
		return
	}
	if fd == fPrefixHits {
		f.cachedSeen = true // even if unreadable: then the hits are unknown, not 0
	}
	v, ok := value(m, page)
	if !ok {
		return
	}
	e := f.get(m)
	switch fd {
	case fRealtime:
		switch mode, _ := label(m, "mode"); mode {
		case "prefill_cache":
			add(&e.rtCache, v)
		case "prefill_compute":
			add(&e.rtCompute, v)
		} // decode tokens are not prompt tokens
	case fWaiting:
		add(&e.Waiting, v)
	case fRunning:
		add(&e.Running, v)
	case fKVUsage:
		e.KVUsage = maxOf(e.KVUsage, v)
	case fPrefixQueries:
		add(&e.PrefixQueries, v)
	case fPrefixHits:
		add(&e.PrefixHits, v) // SGLang: every cache_source tier
	case fExtQueries:
		add(&e.ExternalQueries, v)
	case fExtHits:
		add(&e.ExternalHits, v)
	case fCacheHitRate:
		e.CacheHitRate = maxOf(e.CacheHitRate, v)
	case fPromptTokens:
		add(&e.PromptTokens, v)
	case fGenTokens:
		add(&e.GenerationTokens, v)
	case fPreemptions:
		add(&e.Preemptions, v)
	case fFinished:
		add(&e.RequestsFinished, v) // summed over finish reasons
	case fBlockSize:
		e.BlockSize = maxOf(e.BlockSize, v)
	case fNumBlocks:
		e.NumGPUBlocks = maxOf(e.NumGPUBlocks, v)
	case fMaxTokens:
		e.maxTokens = maxOf(e.maxTokens, v)
	}
}

// finish completes the derived fields and returns the engines sorted, and
// the worker-level totals of a data-parallel page (see splitTotals).
func (f *engineFold) finish(g group, page *Page) ([]collectors.EngineMetrics, *collectors.EngineMetrics) {
	if g == gSGLang {
		f.sglangTokenHits(page)
	}
	f.spreadWorkerGeometry()
	out := make([]collectors.EngineMetrics, 0, len(f.engines))
	for _, e := range f.engines {
		if g == gVLLM && page.prefixBlocks {
			f.blockUnits(e, page)
		}
		sanitizeEngine(&e.EngineMetrics, page)
		if g == gSGLang {
			if e.NumGPUBlocks == nil && e.maxTokens != nil && e.BlockSize != nil && *e.BlockSize > 0 {
				e.NumGPUBlocks = collectors.F(math.Floor(*e.maxTokens / *e.BlockSize))
				sanitize(&e.NumGPUBlocks, page)
			}
		}
		if e.KVUsage != nil && (*e.KVUsage < 0 || *e.KVUsage > 1) {
			page.warn("engine %q: KV usage %g is outside 0..1 (shown as exposed)", e.Engine, *e.KVUsage)
		}
		if e.CacheHitRate != nil && (*e.CacheHitRate < 0 || *e.CacheHitRate > 1) {
			page.warn("engine %q: cache hit rate %g is outside 0..1 (shown as exposed)", e.Engine, *e.CacheHitRate)
		}
		out = append(out, e.EngineMetrics)
	}
	slices.SortFunc(out, func(a, b collectors.EngineMetrics) int { return collectors.CompareEngines(a.Engine, b.Engine) })
	return splitTotals(out)
}

// spreadWorkerGeometry handles a page whose engines carry the engine label
// but whose cache geometry does not (one vllm:cache_config_info for the
// whole worker): the geometry goes to every engine, and the unlabelled
// entry is dropped if geometry was all it had.
func (f *engineFold) spreadWorkerGeometry() {
	var bare *engineAcc
	at := -1
	for i, e := range f.engines {
		if e.Engine == "" {
			bare, at = e, i
		}
	}
	if bare == nil || len(f.engines) == 1 {
		return
	}
	only := bare.EngineMetrics
	only.Engine, only.Model, only.BlockSize, only.NumGPUBlocks = "", "", nil, nil
	for _, e := range f.engines {
		if e == bare {
			continue
		}
		if e.BlockSize == nil && bare.BlockSize != nil {
			e.BlockSize = collectors.F(*bare.BlockSize)
		}
		if e.NumGPUBlocks == nil && bare.NumGPUBlocks != nil {
			e.NumGPUBlocks = collectors.F(*bare.NumGPUBlocks)
		}
	}
	if only == (collectors.EngineMetrics{}) && bare.maxTokens == nil {
		f.engines = slices.Delete(f.engines, at, at+1)
		delete(f.byID, "")
	}
}

func labelNumber(m *dto.Metric, name string) (float64, bool) {
	s, ok := label(m, name)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !finite(v) {
		return 0, false
	}
	return v, true
}

func maxOf(p *float64, v float64) *float64 {
	if p == nil || v > *p {
		return collectors.F(v)
	}
	return p
}
