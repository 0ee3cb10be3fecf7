package metrics

import (
	"fmt"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/collectors"
)

// routerFold collects RouterMetrics; per-worker maps are keyed by the
// worker label exactly as the router exposes it.
type routerFold struct {
	r         collectors.RouterMetrics
	workerKey []string // label names that name the worker, first present wins
	dynamo    bool     // workers named as Dynamo names them (dynamoWorker)
	// The means over the histograms' lives of the predicted and the
	// shared-cache hit rate: what the router exposes, predictions.
	hit, shared histMean
	// rejects are the values that cannot be true: the figure each one
	// feeds (per worker for the per-worker maps) ends unknown.
	rejects []routerReject
}

type routerReject struct {
	f      field
	worker string
}

func (f *routerFold) reject(fd field, worker, note string, page *Page) {
	f.rejects = append(f.rejects, routerReject{fd, worker})
	page.reject(note)
}

// repeated rejects what a repeated series (labels as on the page) feeds.
func (f *routerFold) repeated(fd field, labels []byte, note string, page *Page) {
	worker := ""
	for _, k := range f.workerKey {
		if v, ok := labelValue(labels, k); ok && v != "" {
			worker = v
			break
		}
	}
	f.reject(fd, worker, note, page)
}

func (f *routerFold) init(g group) {
	switch g {
	case gProdStack:
		f.workerKey = []string{"server"}
	case gLLMD:
		f.workerKey = []string{"endpoint_name", "pod_name"}
	case gDynamo:
		f.dynamo = true
	default:
		f.workerKey = []string{"worker"}
	}
}

// dynamoWorker names a Dynamo worker series as Dynamo's router logs name
// the worker: worker_<id> (router_worker_id on the router's series, where
// worker_id is the producer's; worker_id on the frontend's), /dp<r> for a
// data-parallel rank r > 0. "" when the series names no worker.
func dynamoWorker(m *dto.Metric) string {
	id, ok := label(m, "router_worker_id")
	if !ok || id == "" {
		id, _ = label(m, "worker_id")
	}
	if id == "" {
		return ""
	}
	if r, _ := label(m, "dp_rank"); r != "" && r != "0" {
		return "worker_" + id + "/dp" + r
	}
	return "worker_" + id
}

func (f *routerFold) worker(m *dto.Metric) string {
	if f.dynamo {
		return dynamoWorker(m)
	}
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

// add folds one sample of family fam, which feeds field fd.
func (f *routerFold) add(fd field, fam string, m *dto.Metric, page *Page) {
	r := &f.r
	switch fd {
	case rTTFT, rPredictedHit, rProcessedHist, rTransferEst, rSharedCacheHit:
		h, why := histogram(m, page)
		if h == nil {
			if why != "" {
				f.reject(fd, f.worker(m), oneLine(seriesText(fam, m)+": "+why), page)
			}
			return
		}
		switch fd {
		case rTTFT:
			mergeHistogram(&r.TTFT, h)
		case rPredictedHit:
			f.hit.add(h, fam)
		case rTransferEst:
			mergeHistogram(&r.KVTransferEstimate, h)
		case rSharedCacheHit:
			f.shared.add(h, fam)
		default:
			addTo(&r.Processed, f.worker(m), h.Count)
		}
		return
	}
	v, ok := value(m, page)
	if !ok {
		return
	}
	switch fd {
	case rRole:
		if w, t := f.worker(m), labelOr(m, "worker_type"); w != "" && t != "" && v > 0 {
			if r.Roles == nil {
				r.Roles = map[string]string{}
			}
			r.Roles[w] = t
		}
		return
	case rActivePrefill, rActiveDecode:
		if v < 0 {
			f.reject(fd, f.worker(m), oneLine(fmt.Sprintf("%s = %s: a load cannot be negative", seriesText(fam, m), gval(v))), page)
			return
		}
		dst := &r.ActivePrefillTokens
		if fd == rActiveDecode {
			dst = &r.ActiveDecodeBlocks
		}
		addTo(dst, f.worker(m), v)
		return
	}
	if fd == rProcessedSuccess {
		if s, _ := label(m, "status"); s != "success" {
			return // failed attempts are not requests processed
		}
	}
	if v < 0 && fd != rCBState {
		why := "a counter cannot be negative"
		if fd == rRunning {
			why = "a running count cannot be negative"
		}
		f.reject(fd, f.worker(m), oneLine(fmt.Sprintf("%s = %s: %s", seriesText(fam, m), gval(v), why)), page)
		return
	}
	switch fd {
	case rProcessed:
		addTo(&r.Processed, f.worker(m), v)
	case rProcessedSuccess:
		addTo(&r.Processed, f.worker(m), v)
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
	r.PredictedHit = f.hit.mean(page)
	r.SharedCacheHit = f.shared.mean(page)
	for _, x := range f.rejects {
		switch x.f {
		case rActivePrefill:
			delete(r.ActivePrefillTokens, x.worker)
		case rActiveDecode:
			delete(r.ActiveDecodeBlocks, x.worker)
		case rTransferEst:
			r.KVTransferEstimate = nil
		case rSharedCacheHit:
			r.SharedCacheHit = nil
		case rProcessed, rProcessedSuccess, rProcessedHist:
			delete(r.Processed, x.worker)
		case rRunning:
			delete(r.Running, x.worker)
		case rCBState:
			delete(r.CBState, x.worker)
		case rRequests:
			r.Requests = nil
		case rRequestsStatus:
			r.Requests, r.Errors = nil, nil
		case rErrors:
			r.Errors = nil
		case rRetries:
			r.Retries = nil
		case rCacheHits:
			r.CacheHits = nil
		case rCacheMisses:
			r.CacheMisses = nil
		case rTTFT:
			r.TTFT = nil
		case rPredictedHit:
			r.PredictedHit = nil
		}
	}
	for _, p := range []**float64{&r.Requests, &r.Retries, &r.Errors, &r.CacheHits, &r.CacheMisses, &r.PredictedHit} {
		sanitize(p, page)
	}
	for _, m := range []map[string]float64{r.Processed, r.Running, r.CBState, r.ActivePrefillTokens, r.ActiveDecodeBlocks} {
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
	for _, h := range []**collectors.Histogram{&e.TTFT, &e.QueueTime, &e.E2E, &e.ITL} {
		sanitizeHistogram(h, page)
	}
}

// labelOr is a label's value, "" when absent.
func labelOr(m *dto.Metric, name string) string {
	v, _ := label(m, name)
	return v
}

// histMean sums histograms of a fraction (0..1) for their mean.
type histMean struct {
	sum, count float64
	fam        string // the family, for the note
}

func (m *histMean) add(h *collectors.Histogram, fam string) {
	m.sum += h.Sum
	m.count += h.Count
	m.fam = fam
}

// mean is the mean over the histograms' lives, nil without an
// observation; a mean outside 0..1 cannot be a fraction: rejected, said.
func (m *histMean) mean(page *Page) *float64 {
	if m.count <= 0 {
		return nil
	}
	v := m.sum / m.count
	if v < 0 || v > 1 {
		page.reject(oneLine(fmt.Sprintf("%s: mean %s is outside 0..1", m.fam, gval(v))))
		return nil
	}
	return collectors.F(v)
}
