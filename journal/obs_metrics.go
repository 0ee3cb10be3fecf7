package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// A metrics scrape (a worker's or a router's page, or Prometheus' read
// back), tag 'm'. Fields added after the first release are written at the
// end of the payload, only when set, so an older journal's scrape ends
// before them.
func init() { register(tagScrape, (*encoder).scrape, (*decoder).scrape) }

func (e *encoder) scrape(v *collectors.MetricsScrape) {
	w := e.beginAt(tagScrape, v.At)
	w.sym(v.Target)
	w.uv(uint64(v.Role))
	w.sym(v.URL)
	w.dur(v.Duration)
	if v.Err != nil {
		w.byte1(1)
		w.tm(v.Err.At)
		w.sourceError(v.Err)
	} else {
		w.byte1(0)
	}
	w.sym(v.Profile)
	w.fp(v.ProcessStart)
	w.count(len(v.Engines), v.Engines == nil)
	for i := range v.Engines {
		e.engine(&v.Engines[i])
	}
	if v.WorkerTotals != nil {
		w.byte1(1)
		e.engine(v.WorkerTotals)
	} else {
		w.byte1(0)
	}
	if r := v.Router; r != nil {
		w.byte1(1)
		w.floatMap(r.Processed)
		w.floatMap(r.Running)
		w.floatMap(r.CBState)
		for _, f := range []*float64{r.Requests, r.Retries, r.Errors, r.CacheHits, r.CacheMisses, r.PredictedHit} {
			w.fp(f)
		}
		e.histogram(r.TTFT)
	} else {
		w.byte1(0)
	}
	w.uv(uint64(v.Skipped))
	w.count(len(v.Invalid), v.Invalid == nil)
	for _, iv := range v.Invalid {
		w.sym(iv.Engine)
		w.sym(iv.Field)
		w.sym(iv.Note)
	}
	// Where the figures came from (a Prometheus read back, issue 13),
	// added after format 1's fields: at the end of the payload, only when
	// set — a journal recorded before them ends here.
	offloads := 0
	eachOffload(v, func(int, *collectors.Offload) { offloads++ })
	dyn := v.Router != nil && hasDynamo(v.Router)
	if v.Via != "" || v.Interval != 0 || offloads > 0 || dyn {
		w.sym(v.Via)
		w.dur(v.Interval)
	}
	// The engines' offload figures (issue 23), after the source: how many,
	// then each one's engine (len(Engines) for the worker totals).
	if offloads > 0 || dyn {
		w.uv(uint64(offloads))
		eachOffload(v, func(i int, o *collectors.Offload) {
			w.uv(uint64(i))
			for _, f := range offloadFields(o) {
				w.fp(*f)
			}
			for _, ts := range [...][]collectors.TierCount{o.TierHits, o.TierChunks} {
				w.count(len(ts), ts == nil)
				for _, t := range ts {
					w.sym(t.Tier)
					w.fp(t.Hits)
					w.fp(t.Queries)
				}
			}
		})
	}
	// Dynamo's router figures (issue 24), after the offloads.
	if dyn {
		r := v.Router
		w.count(len(r.Roles), r.Roles == nil)
		for _, k := range slices.Sorted(maps.Keys(r.Roles)) {
			w.sym(k)
			w.sym(r.Roles[k])
		}
		w.floatMap(r.ActivePrefillTokens)
		w.floatMap(r.ActiveDecodeBlocks)
		e.histogram(r.KVTransferEstimate)
		w.fp(r.SharedCacheHit)
	}
	e.end()
}

// hasDynamo: the router has any of Dynamo's later figures.
func hasDynamo(r *collectors.RouterMetrics) bool {
	return r.Roles != nil || r.ActivePrefillTokens != nil || r.ActiveDecodeBlocks != nil || r.KVTransferEstimate != nil || r.SharedCacheHit != nil
}

// eachOffload calls f with each engine's offload figures, the worker
// totals' last (index len(Engines)).
func eachOffload(v *collectors.MetricsScrape, f func(int, *collectors.Offload)) {
	for i := range v.Engines {
		if o := v.Engines[i].Offload; o != nil {
			f(i, o)
		}
	}
	if t := v.WorkerTotals; t != nil && t.Offload != nil {
		f(len(v.Engines), t.Offload)
	}
}

// offloadFields are an Offload's single values, in journal order.
func offloadFields(o *collectors.Offload) []**float64 {
	return []**float64{&o.LoadBytes, &o.StoreBytes, &o.LoadSeconds, &o.StoreSeconds,
		&o.PromptComputed, &o.PromptLocalHit, &o.PromptExternal, &o.HostUsedTokens, &o.HostTotalTokens}
}

func (e *encoder) engine(m *collectors.EngineMetrics) {
	w := &e.w
	w.sym(m.Engine)
	w.sym(m.Model)
	for _, f := range []*float64{m.Waiting, m.Running, m.KVUsage, m.PrefixQueries, m.PrefixHits,
		m.ExternalQueries, m.ExternalHits, m.CacheHitRate, m.PromptTokens, m.GenerationTokens,
		m.Preemptions, m.RequestsFinished, m.NumGPUBlocks, m.BlockSize} {
		w.fp(f)
	}
	e.histogram(m.TTFT)
	e.histogram(m.QueueTime)
	e.histogram(m.E2E)
	e.histogram(m.ITL)
}

// histogram writes h with its bucket bounds as one symbol (they repeat
// every scrape) and its cumulative counts as differences when those are
// exact (whole numbers, as counts are).
func (e *encoder) histogram(h *collectors.Histogram) {
	w := &e.w
	if h == nil {
		w.byte1(0)
		return
	}
	w.byte1(1)
	w.f(h.Count)
	w.f(h.Sum)
	w.count(len(h.Buckets), h.Buckets == nil)
	if len(h.Buckets) == 0 {
		return
	}
	e.layout = e.layout[:0]
	for _, b := range h.Buckets {
		e.layout = binary.LittleEndian.AppendUint64(e.layout, math.Float64bits(b.UpperBound))
	}
	w.sym(string(e.layout))
	deltas := true
	prev := 0.0
	for _, b := range h.Buckets {
		d := b.Count - prev
		if prev+d != b.Count || d != math.Trunc(d) || math.Signbit(b.Count) {
			deltas = false
			break
		}
		prev = b.Count
	}
	w.flag(deltas)
	prev = 0
	for _, b := range h.Buckets {
		if deltas {
			w.f(b.Count - prev)
			prev = b.Count
		} else {
			w.f(b.Count)
		}
	}
}

// floatMap writes a map in key order, so equal maps are equal bytes.
func (w *wbuf) floatMap(m map[string]float64) {
	w.count(len(m), m == nil)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.sym(k)
		w.f(m[k])
	}
}

func (d *decoder) scrape(at time.Time) *collectors.MetricsScrape {
	r := &d.r
	v := &collectors.MetricsScrape{At: at}
	v.Target = r.sym()
	v.Role = collectors.Role(r.uv())
	v.URL = r.sym()
	v.Duration = r.dur()
	if r.flag() {
		t := r.tm()
		v.Err = r.sourceError()
		v.Err.At = t
	}
	v.Profile = r.sym()
	v.ProcessStart = r.fp()
	if n, isNil := r.count(20); !isNil {
		v.Engines = make([]collectors.EngineMetrics, n)
		for i := range v.Engines {
			d.engine(&v.Engines[i])
		}
	}
	if r.flag() {
		v.WorkerTotals = &collectors.EngineMetrics{}
		d.engine(v.WorkerTotals)
	}
	if r.flag() {
		m := &collectors.RouterMetrics{}
		m.Processed = r.floatMap()
		m.Running = r.floatMap()
		m.CBState = r.floatMap()
		for _, f := range []**float64{&m.Requests, &m.Retries, &m.Errors, &m.CacheHits, &m.CacheMisses, &m.PredictedHit} {
			*f = r.fp()
		}
		m.TTFT = d.histogram()
		v.Router = m
	}
	v.Skipped = int(r.uv())
	if n, isNil := r.count(3); !isNil {
		v.Invalid = make([]collectors.InvalidValue, n)
		for i := range v.Invalid {
			v.Invalid[i] = collectors.InvalidValue{Engine: r.sym(), Field: r.sym(), Note: r.sym()}
		}
	}
	if len(r.b) > 0 && r.err == nil { // the source, when the payload goes on
		v.Via = r.sym()
		v.Interval = r.dur()
	}
	if len(r.b) > 0 && r.err == nil { // the engines' offload figures
		d.offloads(v)
	}
	if len(r.b) > 0 && r.err == nil { // Dynamo's router figures
		if v.Router == nil {
			r.fail(errors.New("router figures in a scrape without a router"))
			return v
		}
		m := v.Router
		if n, isNil := r.count(2); !isNil {
			m.Roles = make(map[string]string, n)
			for range n {
				k := r.sym()
				m.Roles[k] = r.sym()
			}
		}
		m.ActivePrefillTokens = r.floatMap()
		m.ActiveDecodeBlocks = r.floatMap()
		m.KVTransferEstimate = d.histogram()
		m.SharedCacheHit = r.fp()
	}
	return v
}

func (d *decoder) offloads(v *collectors.MetricsScrape) {
	r := &d.r
	k := r.uv()
	if k > uint64(len(v.Engines))+1 {
		r.fail(errors.New("more offload figures than engines"))
		return
	}
	for j := uint64(0); j < k && r.err == nil; j++ {
		i := r.uv()
		var m *collectors.EngineMetrics
		switch {
		case i < uint64(len(v.Engines)):
			m = &v.Engines[i]
		case i == uint64(len(v.Engines)) && v.WorkerTotals != nil:
			m = v.WorkerTotals
		default:
			r.fail(errors.New("offload figures for an engine the scrape does not have"))
			return
		}
		o := &collectors.Offload{}
		for _, f := range offloadFields(o) {
			*f = r.fp()
		}
		for _, ts := range [...]*[]collectors.TierCount{&o.TierHits, &o.TierChunks} {
			if n, isNil := r.count(3); !isNil {
				*ts = make([]collectors.TierCount, n)
				for t := range *ts {
					(*ts)[t] = collectors.TierCount{Tier: r.sym(), Hits: r.fp(), Queries: r.fp()}
				}
			}
		}
		m.Offload = o
	}
}

func (d *decoder) engine(m *collectors.EngineMetrics) {
	r := &d.r
	m.Engine = r.sym()
	m.Model = r.sym()
	for _, f := range []**float64{&m.Waiting, &m.Running, &m.KVUsage, &m.PrefixQueries, &m.PrefixHits,
		&m.ExternalQueries, &m.ExternalHits, &m.CacheHitRate, &m.PromptTokens, &m.GenerationTokens,
		&m.Preemptions, &m.RequestsFinished, &m.NumGPUBlocks, &m.BlockSize} {
		*f = r.fp()
	}
	m.TTFT = d.histogram()
	m.QueueTime = d.histogram()
	m.E2E = d.histogram()
	m.ITL = d.histogram()
}

func (d *decoder) histogram() *collectors.Histogram {
	r := &d.r
	if !r.flag() {
		return nil
	}
	h := &collectors.Histogram{Count: r.f(), Sum: r.f()}
	n, isNil := r.count(1)
	if isNil || r.err != nil {
		return h
	}
	h.Buckets = make([]collectors.Bucket, n)
	if n == 0 {
		return h
	}
	layout := r.sym()
	if len(layout) != 8*n {
		r.fail(fmt.Errorf("histogram of %d buckets with %d bytes of bounds", n, len(layout)))
		return h
	}
	deltas := r.flag()
	prev := 0.0
	for i := range h.Buckets {
		c := r.f()
		if deltas {
			c += prev
			prev = c
		}
		h.Buckets[i] = collectors.Bucket{UpperBound: bound(layout, i), Count: c}
	}
	return h
}

// bound is the i-th float of a histogram layout symbol.
func bound(layout string, i int) float64 {
	var u uint64
	for j := 7; j >= 0; j-- {
		u = u<<8 | uint64(layout[8*i+j])
	}
	return math.Float64frombits(u)
}

func (r *rbuf) floatMap() map[string]float64 {
	n, isNil := r.count(2)
	if isNil {
		return nil
	}
	m := make(map[string]float64, n)
	for i := 0; i < n && r.err == nil; i++ {
		k := r.sym()
		m[k] = r.f()
	}
	return m
}
