package metrics

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/collectors"
)

// fold reads the parsed families of one page into page, for group g.
// Families are visited in name order (so float sums do not depend on map
// order), current names first: a deprecated name fills a field only when
// no current name did. dups are the repeated samples the prefilter set
// aside: the field each one feeds is rejected. The work is linear in the
// series; it stops at b's deadline.
func fold(fams map[string]*dto.MetricFamily, g group, page *Page, dups []dupLine, b *budget) error {
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
					rt.add(e.f, name, m, page)
				} else {
					eng.add(e.f, name, m, page)
				}
			}
		}
	}
	for _, d := range dups {
		n := nameLen(d.series)
		e, ok := table[tableKey(d.series[:n])]
		if !ok || e.f == fProcessStart || !seen[e.f] || fromOld[e.f] != e.old {
			continue // a family not read (another dialect, or a deprecated name the current one shadows)
		}
		note := oneLine(fmt.Sprintf("%s appears twice (lines %d and %d): never summed", d.series, d.first, d.line))
		if g.isRouter() {
			rt.repeated(e.f, d.series[n:], note, page)
		} else {
			eng.repeated(e.f, d.series[n:], note)
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

// histogram converts a classic histogram. It returns nil and "" (counted
// as skipped) when its count, sum or a bucket is not a finite number, and
// nil and the reason when its buckets cannot be true: a negative count,
// a bound twice, cumulative counts that go down, a +Inf bucket that is
// not the count.
func histogram(m *dto.Metric, page *Page) (*collectors.Histogram, string) {
	h := m.Histogram
	if h == nil {
		return nil, ""
	}
	count := float64(h.GetSampleCount())
	if h.SampleCountFloat != nil {
		count = h.GetSampleCountFloat()
	}
	sum := h.GetSampleSum()
	if !finite(count) || !finite(sum) {
		page.Skipped++
		return nil, ""
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
			return nil, ""
		}
		out.Buckets = append(out.Buckets, collectors.Bucket{UpperBound: ub, Count: c})
	}
	if !slices.IsSortedFunc(out.Buckets, cmpBucket) {
		slices.SortStableFunc(out.Buckets, cmpBucket)
	}
	if count < 0 {
		return nil, "a count cannot be negative"
	}
	for i, b := range out.Buckets {
		switch {
		case b.Count < 0:
			return nil, fmt.Sprintf("bucket le=%q counts %s: a count cannot be negative", gval(b.UpperBound), gval(b.Count))
		case i == 0:
		case b.UpperBound == out.Buckets[i-1].UpperBound:
			return nil, fmt.Sprintf("bucket le=%q appears twice", gval(b.UpperBound))
		case b.Count < out.Buckets[i-1].Count:
			a := out.Buckets[i-1]
			return nil, fmt.Sprintf("cumulative counts go down (le=%q %s, le=%q %s)", gval(a.UpperBound), gval(a.Count), gval(b.UpperBound), gval(b.Count))
		}
	}
	n := len(out.Buckets)
	switch {
	case n > 0 && math.IsInf(out.Buckets[n-1].UpperBound, 1):
		if c := out.Buckets[n-1].Count; c != count {
			return nil, fmt.Sprintf("the +Inf bucket (%s) is not the count (%s)", gval(c), gval(count))
		}
	case n > 0 && out.Buckets[n-1].Count > count:
		a := out.Buckets[n-1]
		return nil, fmt.Sprintf("bucket le=%q counts %s, more than the count (%s)", gval(a.UpperBound), gval(a.Count), gval(count))
	default:
		out.Buckets = append(out.Buckets, collectors.Bucket{UpperBound: math.Inf(1), Count: count})
	}
	return out, ""
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
	// rejects are the fields fed by a value that cannot be true, with the
	// first such value's note: they end unknown, never summed around it.
	rejects []reject
	shown   uint64 // bit per field already in page.Invalid
}

type reject struct {
	f    field
	note string
}

func (e *engineAcc) reject(f field, note string) {
	for _, r := range e.rejects {
		if r.f == f {
			return
		}
	}
	e.rejects = append(e.rejects, reject{f, note})
}

// engineFold collects one EngineMetrics per value of the engine label.
type engineFold struct {
	label      string                // "engine" (vLLM) or "dp_rank" (SGLang)
	engines    []*engineAcc          // in the order first seen
	byID       map[string]*engineAcc // the same, by engine id: one lookup per sample
	cachedSeen bool                  // some sglang:cached_tokens sample was on the page
	// realtimeSeen: some sglang:realtime_tokens prefill sample was on the
	// page (valid or not): the page's source of token hits.
	realtimeSeen bool
	oldPrefix    [2]bool // prefix queries, hits came from vllm:gpu_prefix_cache_*
}

// engine returns the entry of engine id, new if need be.
func (f *engineFold) engine(id string) *engineAcc {
	e := f.byID[id]
	if e == nil {
		if f.byID == nil {
			f.byID = map[string]*engineAcc{}
		}
		e = &engineAcc{EngineMetrics: collectors.EngineMetrics{Engine: id}}
		f.engines = append(f.engines, e)
		f.byID[id] = e
	}
	return e
}

func (f *engineFold) get(m *dto.Metric) *engineAcc {
	id, _ := label(m, f.label)
	e := f.engine(id)
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

// add folds one sample of family fam, which feeds field fd.
func (f *engineFold) add(fd field, fam string, m *dto.Metric, page *Page) {
	switch fd {
	case fTTFT, fQueueTime, fE2E, fITL:
		h, why := histogram(m, page)
		if h == nil {
			if why != "" {
				f.get(m).reject(fd, oneLine(seriesText(fam, m)+": "+why))
			}
			return
		}
		e := f.get(m)
		switch fd {
		case fTTFT:
			mergeHistogram(&e.TTFT, h)
		case fQueueTime:
			mergeHistogram(&e.QueueTime, h)
		case fITL:
			mergeHistogram(&e.ITL, h)
		default:
			mergeHistogram(&e.E2E, h)
		}
		return
	case fCacheConfig:
		// vllm:cache_config_info: the value is 1, the geometry is in labels
		// ("None" when unset).
		e := f.get(m)
		for _, g := range [...]struct {
			label string
			f     field
			p     **float64
		}{{"block_size", fBlockSize, &e.BlockSize}, {"num_gpu_blocks", fNumBlocks, &e.NumGPUBlocks}} {
			v, ok := labelNumber(m, g.label)
			if !ok {
				continue
			}
			if why := impossible(g.f, v); why != "" {
				e.reject(g.f, oneLine(fmt.Sprintf("%s %s=%q: %s", idText(fam, f.label, e.Engine), g.label, gval(v), why)))
				continue
			}
			*g.p = collectors.F(v)
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
	mode := ""
	if fd == fRealtime {
		mode, _ = label(m, "mode")
		if mode != "prefill_cache" && mode != "prefill_compute" {
			return // decode tokens are not prompt tokens
		}
		f.realtimeSeen = true
	}
	e := f.get(m)
	if why := impossible(fd, v); why != "" {
		e.reject(fd, oneLine(fmt.Sprintf("%s = %s: %s", seriesText(fam, m), gval(v), why)))
		return
	}
	if fd >= fOffLoadBytes && fd <= fHostTotal || fd == fPrefixHits && f.label == "dp_rank" {
		f.addOffload(e, fd, fam, m, v)
		if fd != fPrefixHits {
			return
		}
	}
	switch fd {
	case fRealtime:
		if mode == "prefill_cache" {
			add(&e.rtCache, v)
		} else {
			add(&e.rtCompute, v)
		}
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

// addOffload folds one sample of the offload and tier families into e's
// Offload (created on first use).
func (f *engineFold) addOffload(e *engineAcc, fd field, fam string, m *dto.Metric, v float64) {
	if fd == fPrefixHits {
		if _, ok := label(m, "cache_source"); !ok {
			return // an SGLang without the split: nothing beyond the prefix hits
		}
	}
	o := e.Offload
	if o == nil {
		o = &collectors.Offload{}
		e.Offload = o
	}
	switch fd {
	case fOffLoadBytes, fOffLoadTime:
		load, store := &o.LoadBytes, &o.StoreBytes
		if fd == fOffLoadTime {
			load, store = &o.LoadSeconds, &o.StoreSeconds
		}
		if !strings.Contains(fam, "kv_offload_total_") {
			add(load, v)
			return
		}
		// The CPU spec's deprecated totals, by direction.
		switch tt, _ := label(m, "transfer_type"); tt {
		case "CPU_to_GPU":
			add(load, v)
		case "GPU_to_CPU":
			add(store, v)
		}
	case fOffStoreBytes:
		add(&o.StoreBytes, v)
	case fOffStoreTime:
		add(&o.StoreSeconds, v)
	case fPromptBySource:
		switch src, _ := label(m, "source"); src {
		case "local_compute":
			add(&o.PromptComputed, v)
		case "local_cache_hit":
			add(&o.PromptLocalHit, v)
		case "external_kv_transfer":
			add(&o.PromptExternal, v)
		}
	case fTierChunkQ, fTierChunkH:
		tier, _ := label(m, "tier")
		tc := tierCount(&o.TierChunks, tier)
		if fd == fTierChunkQ {
			add(&tc.Queries, v)
		} else {
			add(&tc.Hits, v)
		}
	case fLMCacheHits:
		add(&tierCount(&o.TierHits, "lmcache").Hits, v)
	case fPrefixHits: // SGLang's cached_tokens{cache_source}
		src, _ := label(m, "cache_source")
		add(&tierCount(&o.TierHits, src).Hits, v)
	case fHostUsed:
		o.HostUsedTokens = maxOf(o.HostUsedTokens, v)
	case fHostTotal:
		o.HostTotalTokens = maxOf(o.HostTotalTokens, v)
	}
}

// maxTiers bounds the tiers one engine's Offload keeps (labels are free
// text on a page).
const maxTiers = 8

// tierCount is tier's entry of *ts, kept sorted; past maxTiers an extra
// tier is folded into the last.
func tierCount(ts *[]collectors.TierCount, tier string) *collectors.TierCount {
	i, ok := slices.BinarySearchFunc(*ts, tier, func(t collectors.TierCount, s string) int { return strings.Compare(t.Tier, s) })
	if ok {
		return &(*ts)[i]
	}
	if len(*ts) >= maxTiers {
		return &(*ts)[len(*ts)-1]
	}
	*ts = slices.Insert(*ts, i, collectors.TierCount{Tier: tier})
	return &(*ts)[i]
}

// repeated rejects field fd of the engine a repeated series belongs to
// (labels as on the page).
func (f *engineFold) repeated(fd field, labels []byte, note string) {
	if fd == fRealtime {
		if mode, _ := labelValue(labels, "mode"); mode != "prefill_cache" && mode != "prefill_compute" {
			return
		}
		f.realtimeSeen = true
	}
	id, _ := labelValue(labels, f.label)
	e := f.engine(id)
	if fd == fCacheConfig {
		e.reject(fBlockSize, note)
		e.reject(fNumBlocks, note)
		return
	}
	e.reject(fd, note)
}

// finish completes the derived fields and returns the engines sorted, and
// the worker-level totals of a data-parallel page (see splitTotals).
// Rejected fields are unknown before anything is derived from them, and
// listed in page.Invalid.
func (f *engineFold) finish(g group, page *Page) ([]collectors.EngineMetrics, *collectors.EngineMetrics) {
	for _, e := range f.engines {
		e.dropRejected()
	}
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
		f.report(e, g, page)
		out = append(out, e.EngineMetrics)
	}
	slices.SortFunc(out, func(a, b collectors.EngineMetrics) int { return collectors.CompareEngines(a.Engine, b.Engine) })
	slices.SortStableFunc(page.Invalid, func(a, b collectors.InvalidValue) int {
		return cmp.Or(collectors.CompareEngines(a.Engine, b.Engine), cmp.Compare(shownRank[a.Field], shownRank[b.Field]))
	})
	return splitTotals(out)
}

// dropRejected makes the rejected inputs unknown.
func (e *engineAcc) dropRejected() {
	for _, r := range e.rejects {
		switch r.f {
		case fRealtime:
			e.rtCache, e.rtCompute = nil, nil
		case fMaxTokens:
			e.maxTokens = nil
		default:
			e.drop(r.f)
		}
	}
}

// drop makes shown field fd unknown.
func (e *engineAcc) drop(fd field) {
	switch fd {
	case fTTFT:
		e.TTFT = nil
	case fQueueTime:
		e.QueueTime = nil
	case fE2E:
		e.E2E = nil
	case fITL:
		e.ITL = nil
	case fTierChunkQ, fTierChunkH:
		if e.Offload != nil {
			e.Offload.TierChunks = nil
		}
	case fLMCacheHits:
		if e.Offload != nil {
			e.Offload.TierHits = nil
		}
	case fPromptBySource:
		if o := e.Offload; o != nil {
			o.PromptComputed, o.PromptLocalHit, o.PromptExternal = nil, nil, nil
		}
	default:
		if p := e.value(fd); p != nil {
			*p = nil
		}
	}
}

// value is the EngineMetrics field that table field fd fills, nil for
// the fields that are inputs only or histograms.
func (e *engineAcc) value(fd field) **float64 {
	switch fd {
	case fWaiting:
		return &e.Waiting
	case fRunning:
		return &e.Running
	case fKVUsage:
		return &e.KVUsage
	case fPrefixQueries:
		return &e.PrefixQueries
	case fPrefixHits:
		return &e.PrefixHits
	case fExtQueries:
		return &e.ExternalQueries
	case fExtHits:
		return &e.ExternalHits
	case fCacheHitRate:
		return &e.CacheHitRate
	case fPromptTokens:
		return &e.PromptTokens
	case fGenTokens:
		return &e.GenerationTokens
	case fPreemptions:
		return &e.Preemptions
	case fFinished:
		return &e.RequestsFinished
	case fBlockSize:
		return &e.BlockSize
	case fNumBlocks:
		return &e.NumGPUBlocks
	}
	if o := e.Offload; o != nil {
		switch fd {
		case fOffLoadBytes:
			return &o.LoadBytes
		case fOffStoreBytes:
			return &o.StoreBytes
		case fOffLoadTime:
			return &o.LoadSeconds
		case fOffStoreTime:
			return &o.StoreSeconds
		case fHostUsed:
			return &o.HostUsedTokens
		case fHostTotal:
			return &o.HostTotalTokens
		}
	}
	return nil
}

// shownNames are the snapshot words of the fields an InvalidValue names.
var shownNames = [nFields]string{
	fWaiting: "queue", fRunning: "running", fKVUsage: "kv_usage",
	fPrefixQueries: "prefix_queries", fPrefixHits: "prefix_hits",
	fExtQueries: "external_queries", fExtHits: "external_hits", fCacheHitRate: "cache_hit_rate",
	fPromptTokens: "prompt_tokens", fGenTokens: "generation_tokens", fPreemptions: "preemptions",
	fFinished: "requests_finished", fNumBlocks: "num_gpu_blocks", fBlockSize: "block_size",
	fTTFT: "ttft", fQueueTime: "queue_time", fE2E: "e2e", fITL: "itl",
	fOffLoadBytes: "offload_load_bytes", fOffStoreBytes: "offload_store_bytes",
	fOffLoadTime: "offload_load_seconds", fOffStoreTime: "offload_store_seconds",
	fPromptBySource: "prompt_tokens_by_source", fTierChunkQ: "tier_chunk_queries", fTierChunkH: "tier_chunk_hits",
	fLMCacheHits: "lmcache_hit_tokens", fHostUsed: "host_used_tokens", fHostTotal: "host_total_tokens",
}

// shownRank orders the fields of page.Invalid as EngineMetrics does.
var shownRank = func() map[string]int {
	m := map[string]int{}
	for f, name := range shownNames {
		if name != "" {
			m[name] = f
		}
	}
	return m
}()

// report lists e's rejected fields in page.Invalid, each with the shown
// fields it leaves unknown, and makes sure those are nil.
func (f *engineFold) report(e *engineAcc, g group, page *Page) {
	sglangCached := g == gSGLang && !f.realtimeSeen // hits from cached_tokens, queries from prompt_tokens
	for _, r := range e.rejects {
		shown := []field{r.f}
		switch r.f {
		case fRealtime:
			shown = []field{fPrefixHits, fPrefixQueries}
		case fPrefixHits:
			if g == gSGLang && f.realtimeSeen {
				continue // cached_tokens is not read where realtime_tokens is
			}
			if sglangCached {
				shown = []field{fPrefixHits, fPrefixQueries}
			}
		case fPromptTokens:
			if sglangCached {
				shown = []field{fPromptTokens, fPrefixQueries}
			}
		case fMaxTokens:
			if e.NumGPUBlocks != nil {
				continue // the page's num_pages gave the blocks
			}
			shown = []field{fNumBlocks}
		}
		for _, s := range shown {
			e.drop(s)
			if e.shown&(1<<s) != 0 {
				continue
			}
			e.shown |= 1 << s
			page.Invalid = append(page.Invalid, collectors.InvalidValue{Engine: e.Engine, Field: shownNames[s], Note: r.note})
		}
	}
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
	// LMCache's in-process counters carry no engine label: on a page of
	// one engine they are that engine's.
	if bare.Offload != nil && len(f.engines) == 2 {
		other := f.engines[1-at]
		other.Offload = mergeOffload(other.Offload, bare.Offload)
		only.Offload = nil
	}
	if only == (collectors.EngineMetrics{}) && bare.maxTokens == nil && len(bare.rejects) == 0 {
		f.engines = slices.Delete(f.engines, at, at+1)
		delete(f.byID, "")
	}
}

// mergeOffload fills a's absent figures from b (a may be nil).
func mergeOffload(a, b *collectors.Offload) *collectors.Offload {
	if a == nil {
		return b
	}
	for _, p := range [...][2]**float64{{&a.LoadBytes, &b.LoadBytes}, {&a.StoreBytes, &b.StoreBytes},
		{&a.LoadSeconds, &b.LoadSeconds}, {&a.StoreSeconds, &b.StoreSeconds},
		{&a.PromptComputed, &b.PromptComputed}, {&a.PromptLocalHit, &b.PromptLocalHit}, {&a.PromptExternal, &b.PromptExternal},
		{&a.HostUsedTokens, &b.HostUsedTokens}, {&a.HostTotalTokens, &b.HostTotalTokens}} {
		if *p[0] == nil {
			*p[0] = *p[1]
		}
	}
	for _, t := range b.TierHits {
		if c := tierCount(&a.TierHits, t.Tier); c.Hits == nil {
			c.Hits, c.Queries = t.Hits, t.Queries
		}
	}
	for _, t := range b.TierChunks {
		if c := tierCount(&a.TierChunks, t.Tier); c.Hits == nil && c.Queries == nil {
			c.Hits, c.Queries = t.Hits, t.Queries
		}
	}
	return a
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

// impossible says why v cannot be a value of field fd ("" when it can).
func impossible(fd field, v float64) string {
	switch fd {
	case fKVUsage, fCacheHitRate:
		if v < 0 || v > 1 {
			return "a fraction must be within 0..1"
		}
		return ""
	}
	if v >= 0 {
		return ""
	}
	switch fd {
	case fWaiting:
		return "a queue cannot be negative"
	case fRunning:
		return "a running count cannot be negative"
	case fBlockSize:
		return "a block size cannot be negative"
	case fNumBlocks:
		return "a block count cannot be negative"
	case fMaxTokens:
		return "a token capacity cannot be negative"
	}
	return "a counter cannot be negative"
}

// seriesText names a parsed series the way a page writes it.
func seriesText(fam string, m *dto.Metric) string {
	var b strings.Builder
	b.WriteString(fam)
	if len(m.Label) > 0 {
		b.WriteByte('{')
		for i, l := range m.Label {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l.GetName())
			b.WriteByte('=')
			b.WriteString(strconv.Quote(l.GetValue()))
		}
		b.WriteByte('}')
	}
	return b.String()
}

// idText names a series by its engine label only (an info series has
// many labels, one of them matters).
func idText(fam, label, id string) string {
	if id == "" {
		return fam
	}
	return fam + "{" + label + "=" + strconv.Quote(id) + "}"
}

func gval(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
