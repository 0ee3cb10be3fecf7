package pool

import (
	"math"
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// worker is one configured or discovered worker.
type worker struct {
	name       string
	configured bool
	// noMetrics: configured without a metrics URL (events only).
	noMetrics bool
	// origin names the source a discovered worker came from.
	origin string

	scraped   bool // at least one scrape, good or bad
	up        bool
	downSince time.Time
	// failStart is when the first failing scrape of the current run of
	// failures started (its end minus its duration): events that arrived
	// after it came from a process whose metrics were already failing.
	failStart  time.Time
	errMsg     string
	profile    string
	lastScrape time.Time
	lastGood   time.Time // last successful scrape
	scrapeDur  time.Duration
	procStart  *float64
	restarts   int

	// The last process restart seen in metrics, and the blocks it dropped
	// from the index (a restarted engine's cache is empty).
	restartAt      time.Time
	restartDropped int

	engines map[string]*engine
	current []string // engines in the last good scrape, sorted
	// totals holds the worker-level series of a data-parallel page
	// (MetricsScrape.WorkerTotals): figures of the whole worker, never
	// an engine row. nil when the page has none.
	totals *engine

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
	blockSz  int // tokens per block from cache geometry, 0 unknown
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
	if p == nil {
		return nil
	}
	return fp(*p)
}

func (s *State) applyScrape(m *collectors.MetricsScrape) {
	w := s.workerFor(m.Target, "metrics")
	if w == nil {
		return
	}
	w.scraped = true
	w.lastScrape = m.At
	w.scrapeDur = m.Duration
	if m.Err != nil {
		if w.up || w.downSince.IsZero() {
			w.downSince = m.At
			w.failStart = m.At.Add(-m.Duration)
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
	prevGood := w.lastGood
	w.lastGood = m.At

	restart := false
	if ps := finite(m.ProcessStart); ps != nil {
		if w.procStart != nil && *w.procStart != *ps {
			restart = true
			s.workerProcessRestarted(w, prevGood, m.At)
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
	}
	if m.WorkerTotals != nil {
		if w.totals == nil {
			w.totals = &engine{}
		}
		resets += w.totals.apply(m.WorkerTotals, m.At, s.window)
	}
	sort.Slice(w.current, func(i, j int) bool { return collectors.CompareEngines(w.current[i], w.current[j]) < 0 })
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
	if w.totals != nil && m.At.Sub(w.totals.lastSeen) > s.window {
		w.totals = nil
	}
}

// workerProcessRestarted handles a changed process_start_time: every
// counter starts again from 0 (even one already above its old value), and
// the blocks indexed from the old process are dropped, since a restarted
// engine's cache is empty. An idle restarted engine sends no event that
// would tell the stream collector, so without this its old blocks would
// stay forever. A publisher reset after the previous good scrape has
// already been cleared for this restart (and may hold new blocks): kept.
func (s *State) workerProcessRestarted(w *worker, prevGood, at time.Time) {
	for _, e := range w.engines {
		e.restarted()
	}
	if w.totals != nil {
		w.totals.restarted()
	}
	dropped := 0
	for _, p := range w.pubs {
		if !p.clearedAt.IsZero() && p.clearedAt.After(prevGood) {
			continue
		}
		dropped += p.idx.t.count
		s.index.clear(&w.idx, p.idx)
		p.clearedAt = at
	}
	w.restartAt, w.restartDropped = at, dropped
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
	if b := finite(em.BlockSize); b != nil && *b >= 1 && *b < 1<<20 {
		e.blockSz = int(*b)
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

// restarted makes every counter's next sample a reset.
func (e *engine) restarted() {
	e.queries.restarted()
	e.hits.restarted()
	e.hasOther = [4]bool{}
}

// hitSum is a windowed sum of prefix-cache deltas. ok is false when no
// engine exposes both counters.
type hitSum struct {
	hits, queries float64
	// covered is the span the sum really covers: weighted by queries over
	// its parts, so a worker that joined a moment ago (few queries) does
	// not make the whole pool read "2 of 60 s"; the longest part while no
	// part has queries.
	covered time.Duration
	covW    float64 // Σ covered×queries (seconds×tokens)
	maxCov  time.Duration
	ok      bool
}

func (h *hitSum) addSum(o hitSum) {
	if !o.ok {
		return
	}
	h.hits += o.hits
	h.queries += o.queries
	h.covW += o.covW
	h.maxCov = max(h.maxCov, o.maxCov)
	h.ok = true
	if h.queries > 0 {
		h.covered = time.Duration(h.covW / h.queries * float64(time.Second))
	} else {
		h.covered = h.maxCov
	}
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
	c := min(cq, ch)
	return hitSum{hits: dh, queries: dq, covered: c, covW: c.Seconds() * max(dq, 0), maxCov: c, ok: true}
}

// hitSince is the worker's token hit over [from, now]: from its
// worker-level counters when the page has them (SGLang's DP pages count
// tokens per worker, not per rank), else summed over its engines. Never
// both: that would count the same tokens twice.
func (w *worker) hitSince(from, now time.Time) hitSum {
	if w.totals != nil {
		if h := w.totals.hitSince(from, now); h.ok {
			return h
		}
	}
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

// blockSize is the worker's tokens per block from its cache geometry
// (metrics), 0 when unknown.
func (w *worker) blockSize() int {
	if w.totals != nil && w.totals.blockSz > 0 {
		return w.totals.blockSz
	}
	for _, name := range w.current {
		if e := w.engines[name]; e != nil && e.blockSz > 0 {
			return e.blockSz
		}
	}
	return 0
}

// eventsArrivingWithin is how recent a batch must be for a worker whose
// scrapes fail to count as serving: a few refreshes, at least 5 s.
func (s *State) eventsArrivingWithin() time.Duration {
	return max(2*s.refresh, 5*time.Second)
}

// eventsArriving: the worker's metrics fail, yet one of its streams
// delivered a batch after the failures began and recently. Such a worker
// is serving traffic — its /metrics is what is broken — so it is not
// "down". A batch from before the first failure proves nothing: a process
// that died had sent its last events just before.
func (s *State) eventsArriving(w *worker, now time.Time) bool {
	if !w.scraped || w.up {
		return false
	}
	within := s.eventsArrivingWithin()
	for _, p := range w.pubs {
		last := p.lastAt
		if p.status != nil && p.status.LastMessage.After(last) {
			last = p.status.LastMessage
		}
		if !last.IsZero() && !last.Before(w.failStart) && now.Sub(last) <= within {
			return true
		}
	}
	return false
}
