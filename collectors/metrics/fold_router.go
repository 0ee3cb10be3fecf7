package metrics

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/collectors"
)

// routerFold collects RouterMetrics; per-worker maps are keyed by the
// worker label exactly as the router exposes it.
type routerFold struct {
	r         collectors.RouterMetrics
	workerKey []string // label names that name the worker, first present wins
	hitSum    float64
	hitCount  float64
	hitSeen   bool
}

func (f *routerFold) init(g group) {
	switch g {
	case gProdStack:
		f.workerKey = []string{"server"}
	case gLLMD:
		f.workerKey = []string{"endpoint_name", "pod_name"}
	default:
		f.workerKey = []string{"worker"}
	}
}

func (f *routerFold) worker(m *dto.Metric) string {
	for _, k := range f.workerKey {
		if v, ok := label(m, k); ok && v != "" {
			return v
		}
	}
	return ""
}

func addTo(mp *map[string]float64, key string, v float64) {
	if key == "" {
		return // not attributable to a worker
	}
	if *mp == nil {
		*mp = map[string]float64{}
	}
	(*mp)[key] += v
}

func (f *routerFold) add(fd field, m *dto.Metric, page *Page) {
	r := &f.r
	switch fd {
	case rTTFT:
		if h, ok := histogram(m, page); ok {
			mergeHistogram(&r.TTFT, h)
		}
		return
	case rPredictedHit:
		if h, ok := histogram(m, page); ok {
			f.hitSum += h.Sum
			f.hitCount += h.Count
			f.hitSeen = true
		}
		return
	case rProcessedHist:
		if h, ok := histogram(m, page); ok {
			addTo(&r.Processed, f.worker(m), h.Count)
		}
		return
	}
	v, ok := value(m, page)
	if !ok {
		return
	}
	switch fd {
	case rProcessed:
		addTo(&r.Processed, f.worker(m), v)
	case rProcessedSuccess:
		if s, _ := label(m, "status"); s == "success" {
			addTo(&r.Processed, f.worker(m), v)
		}
	case rRunning:
		addTo(&r.Running, f.worker(m), v)
	case rCBState:
		if w := f.worker(m); w != "" {
			if r.CBState == nil {
				r.CBState = map[string]float64{}
			}
			if old, ok := r.CBState[w]; !ok || v > old {
				r.CBState[w] = v
			}
		}
	case rRequests:
		add(&r.Requests, v)
	case rRequestsStatus:
		add(&r.Requests, v)
		add(&r.Errors, 0) // the status label makes errors known, 0 included
		if s, ok := label(m, "status"); ok && s != "success" {
			add(&r.Errors, v)
		}
	case rErrors:
		add(&r.Errors, v)
	case rRetries:
		add(&r.Retries, v)
	case rCacheHits:
		add(&r.CacheHits, v)
	case rCacheMisses:
		add(&r.CacheMisses, v)
	}
}

func (f *routerFold) finish(page *Page) *collectors.RouterMetrics {
	r := f.r
	if f.hitSeen && f.hitCount > 0 {
		// The mean predicted hit over the histogram's lifetime: what the
		// router exposes, a prediction rather than a measurement.
		r.PredictedHit = collectors.F(f.hitSum / f.hitCount)
	}
	for _, p := range []**float64{&r.Requests, &r.Retries, &r.Errors, &r.CacheHits, &r.CacheMisses, &r.PredictedHit} {
		sanitize(p, page)
	}
	for _, m := range []map[string]float64{r.Processed, r.Running, r.CBState} {
		for k, v := range m {
			if !finite(v) {
				delete(m, k)
				page.Skipped++
			}
		}
	}
	sanitizeHistogram(&r.TTFT, page)
	return &r
}

// sanitize drops a sum that overflowed: finite samples can add up to Inf,
// and an Inf is never shown as a number.
func sanitize(p **float64, page *Page) {
	if *p != nil && !finite(**p) {
		*p = nil
		page.Skipped++
	}
}

func sanitizeHistogram(h **collectors.Histogram, page *Page) {
	x := *h
	if x == nil {
		return
	}
	ok := finite(x.Count) && finite(x.Sum)
	for _, b := range x.Buckets {
		ok = ok && finite(b.Count)
	}
	if !ok {
		*h = nil
		page.Skipped++
	}
}

func sanitizeEngine(e *collectors.EngineMetrics, page *Page) {
	for _, p := range []**float64{&e.Waiting, &e.Running, &e.KVUsage, &e.PrefixQueries, &e.PrefixHits,
		&e.ExternalQueries, &e.ExternalHits, &e.CacheHitRate, &e.PromptTokens, &e.GenerationTokens,
		&e.Preemptions, &e.RequestsFinished, &e.NumGPUBlocks, &e.BlockSize} {
		sanitize(p, page)
	}
	for _, h := range []**collectors.Histogram{&e.TTFT, &e.QueueTime, &e.E2E} {
		sanitizeHistogram(h, page)
	}
}
