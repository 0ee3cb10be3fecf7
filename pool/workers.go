package pool

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// worker is one configured or discovered worker.
type worker struct {
	name       string
	configured bool

	scraped    bool // at least one scrape, good or bad
	up         bool
	downSince  time.Time
	errMsg     string
	profile    string
	lastScrape time.Time
	scrapeDur  time.Duration
	procStart  *float64
	restarts   int

	engines map[string]*engine
	current []string // engines in the last good scrape, sorted

	idx  workerIndex
	pubs []*publisher // sorted by rank

	outcomes *buckets // request-weighted hits by outcome worker: (hits, outcomes)
	series   workerSeries
}

type workerSeries struct {
	queue, running, kv, hit series
}

// engine is one DP engine of a worker, with its own counter windows.
type engine struct {
	name     string
	waiting  *float64
	running  *float64
	kvUsage  *float64
	gpuBlock *float64
	queries  counterWindow
	hits     counterWindow
	// others are the last raw values of further counters, only to detect
	// a process restart (several counters decreasing at once).
	others   [4]float64
	hasOther [4]bool
	lastSeen time.Time
}

func newWorker(name string, configured bool, window time.Duration) *worker {
	return &worker{
		name:       name,
		configured: configured,
		engines:    map[string]*engine{},
		outcomes:   newBuckets(window),
	}
}

func cp(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// fp returns a pointer to a computed figure, or nil when the arithmetic
// overflowed (sums of absurd inputs): unknown, never Inf or NaN.
func fp(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// finite copies a value from a source, dropping NaN and ±Inf: they are
// not measurements, and JSON cannot carry them.
func finite(p *float64) *float64 {
	if p == nil || math.IsNaN(*p) || math.IsInf(*p, 0) {
		return nil
	}
	v := *p
	return &v
}

func (s *State) applyScrape(m *collectors.MetricsScrape) {
	w := s.workerFor(m.Target, true)
	if w == nil {
		return
	}
	w.scraped = true
	w.lastScrape = m.At
	w.scrapeDur = m.Duration
	if m.Err != nil {
		if w.up || w.downSince.IsZero() {
			w.downSince = m.At
		}
		w.up = false
		w.errMsg = message(m.Err.Message, 300)
		if w.errMsg == "" {
			w.errMsg = m.Err.Kind
		}
		s.errors.add(m.Err.Source, m.Err.Kind, m.Err.Message, m.Err.At)
		return
	}
	w.up = true
	w.downSince = time.Time{}
	w.errMsg = ""
	w.profile = m.Profile

	restart := false
	if ps := finite(m.ProcessStart); ps != nil {
		if w.procStart != nil && *w.procStart != *ps {
			restart = true
		}
		w.procStart = ps
	}
	resets := 0
	w.current = w.current[:0]
	for i := range m.Engines {
		em := &m.Engines[i]
		e := w.engines[em.Engine]
		if e == nil {
			e = &engine{name: em.Engine}
			w.engines[em.Engine] = e
		}
		resets += e.apply(em, m.At, s.window)
		w.current = append(w.current, em.Engine)
		if em.BlockSize != nil && *em.BlockSize > 0 && s.blockSize == 0 {
			s.blockSize = int(*em.BlockSize)
		}
	}
	sort.Slice(w.current, func(i, j int) bool { return engineLess(w.current[i], w.current[j]) })
	if resets >= 2 {
		restart = true
	}
	if restart {
		w.restarts++
	}
	// Forget engines gone for longer than the window: their counts have
	// left it anyway.
	for name, e := range w.engines {
		if m.At.Sub(e.lastSeen) > s.window {
			delete(w.engines, name)
		}
	}
}

// engineLess orders engine labels numerically when both are numbers
// (DP ranks: 2 before 10), else as text.
func engineLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x < y
	}
	return a < b
}

// apply copies one scrape of the engine and returns how many counters
// went backwards.
func (e *engine) apply(em *collectors.EngineMetrics, at time.Time, window time.Duration) int {
	e.lastSeen = at
	e.waiting = finite(em.Waiting)
	e.running = finite(em.Running)
	e.kvUsage = finite(em.KVUsage)
	if b := finite(em.NumGPUBlocks); b != nil {
		e.gpuBlock = b
	}
	resets := 0
	if em.PrefixQueries != nil && e.queries.add(at, *em.PrefixQueries, window) {
		resets++
	}
	if em.PrefixHits != nil && e.hits.add(at, *em.PrefixHits, window) {
		resets++
	}
	for i, p := range [4]*float64{em.PromptTokens, em.GenerationTokens, em.RequestsFinished, em.Preemptions} {
		if p == nil {
			continue
		}
		if e.hasOther[i] && *p < e.others[i] {
			resets++
		}
		e.others[i], e.hasOther[i] = *p, true
	}
	return resets
}

// tokenHit sums the worker's engines' windowed prefix-cache deltas over
// [from, now]. ok is false when no engine exposes both counters.
type hitSum struct {
	hits, queries float64
	covered       time.Duration
	ok            bool
}

func (h *hitSum) addSum(o hitSum) {
	if !o.ok {
		return
	}
	h.hits += o.hits
	h.queries += o.queries
	if !h.ok || o.covered < h.covered {
		h.covered = o.covered
	}
	h.ok = true
}

func (h hitSum) rate() *float64 {
	if !h.ok || h.queries <= 0 {
		return nil
	}
	return fp(h.hits / h.queries)
}

func (e *engine) hitSince(from, now time.Time) hitSum {
	dq, cq, okq := e.queries.since(from, now)
	dh, ch, okh := e.hits.since(from, now)
	if !okq || !okh {
		return hitSum{}
	}
	c := cq
	if ch < c {
		c = ch
	}
	return hitSum{hits: dh, queries: dq, covered: c, ok: true}
}

func (w *worker) hitSince(from, now time.Time) hitSum {
	var h hitSum
	for _, e := range w.engines {
		h.addSum(e.hitSince(from, now))
	}
	return h
}

// poolHitSince is the pool token hit rate over [from, now], over up
// workers.
func (s *State) poolHitSince(from, now time.Time) hitSum {
	var h hitSum
	for _, w := range s.workers {
		if w.up {
			h.addSum(w.hitSince(from, now))
		}
	}
	return h
}
