package pool

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// worker is one configured or discovered worker.
type worker struct {
	id         int32 // never reused (State.nextWorkerID)
	name       string
	configured bool
	// noMetrics: configured without a metrics URL (events only).
	noMetrics bool
	// events: configured with a KV event source (WorkerSpec.Events).
	events bool
	// origin names the source a discovered worker came from.
	origin string
	// cfgRole is the role the config gives it (WorkerSpec.Role); role and
	// roleSource what roleOf made of every source at the last snapshot.
	cfgRole, role, roleSource string
	// model is the model its engines' pages name (the last good scrape).
	model string
	// aliases it was added with; tg what the targets layer says of it.
	aliases []string
	tg      targetInfo

	scraped bool // at least one scrape, good or bad
	// via and viaInterval say where the metrics came from when kvtop did
	// not scrape them itself (MetricsScrape.Via, .Interval).
	via         string
	viaInterval time.Duration
	up          bool
	downSince   time.Time
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
	// failedSinceGood: a scrape failed after the last good one. A page
	// that comes back with its counters reset after such a down period
	// is a restarted process even without process_start_time.
	failedSinceGood bool
	// invalid are the values the last good scrape exposed that cannot be
	// true (the collector's notes, then the pool's own), bounded.
	invalid []collectors.InvalidValue

	// The last process restart seen in metrics, and the blocks it dropped
	// from the index (a restarted engine's cache is empty).
	restartAt      time.Time
	restartDropped int
	restartWhy     string // restartProcessStart, restartCounters or restartSeriesGone
	restartDrops   int    // restarts that dropped blocks (any evidence)

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

	// inPoolHit: the worker fed the pool token rate at the last snapshot;
	// leftPoolHit is when it stopped (zero while it feeds it, or never did).
	inPoolHit   bool
	leftPoolHit time.Time
	// recomp is the prefill this worker recomputed as the chosen one
	// (recompute.go); lseries its latency and throughput series.
	recomp  *recomputeWindows
	ladder  *ladderWindow // the hit-rate ladder's classes over the window (ladder.go)
	lseries latencySeries

	// hashGen counts its publishers' restarts (fingerprints.go); its own
	// hash findings are reported while their gen is current.
	hashGen uint32
	// thrashSince is when its thrash alert began (zero: none).
	thrashSince time.Time
	// The held verdicts (verdict.go): its KV use high by its worker-level
	// series (a DP page without engine KV), its thrash share high;
	// saturated is whether any engine's or that one holds, at the last
	// snapshot.
	satTotal, thrashHigh verdict
	saturated            bool
	acrossRestart        workerHash
	acrossRanks          workerHash
	cseries              cacheSeries
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
	// presentOther: the counter was on the last good page (a vanished
	// counter after a down period is a restart).
	presentOther [4]bool
	lastSeen     time.Time
	// lat are the latency histograms' windows (latency.go), tput the
	// throughput counters' (throughput.go).
	lat  [nLat]histWindow
	tput [nTput]counterWindow
	off  *offloadWindows // nil until the page has offload figures (offload.go)
	// decode: the engine is a decode worker's (roles.go): prompt tokens
	// that arrived by KV transfer are out of its hit rate's queries.
	decode bool
	sat    verdict // its KV use high (verdict.go)
}

func newWorker(name string, configured bool, window time.Duration) *worker {
	return &worker{
		name:       name,
		configured: configured,
		engines:    map[string]*engine{},
		outcomes:   newBuckets(window),
		recomp:     newRecomputeWindows(window),
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
	w.via = m.Via
	if m.Interval > 0 || m.Via == "" {
		w.viaInterval = m.Interval
	}
	if m.Err != nil {
		if w.up || w.downSince.IsZero() {
			w.downSince = m.At
			w.failStart = m.At.Add(-m.Duration)
		}
		if !w.lastGood.IsZero() {
			w.failedSinceGood = true
		}
		s.setUp(w, false)
		w.errMsg = message(m.Err.Message, 300)
		if w.errMsg == "" {
			w.errMsg = m.Err.Kind
		}
		s.errors.add(m.Err.Source, m.Err.Kind, m.Err.Message, m.Err.At)
		return
	}
	wasDown := w.failedSinceGood
	s.setUp(w, true)
	w.downSince = time.Time{}
	w.failedSinceGood = false
	w.errMsg = ""
	w.profile = m.Profile
	w.model = pageModel(m)
	prevGood := w.lastGood
	w.lastGood = m.At
	inv := invalidSet(m.Invalid)

	restart := false
	ps := finite(m.ProcessStart)
	switch {
	case ps != nil && w.procStart != nil:
		if *w.procStart != *ps {
			restart = true
			s.workerProcessRestarted(w, prevGood, m.At, restartProcessStart)
		}
	case wasDown && w.countersReset(m, inv):
		// Without process_start_time the counters tell: the scrapes
		// failed, and the page came back with a counter lower than
		// before, or without one it had (a new process that has not
		// served yet). One such counter is enough after a down period;
		// while up, a single noisy counter is only a reset (below).
		restart = true
		s.workerProcessRestarted(w, prevGood, m.At, restartCounters)
	case !prevGood.IsZero() && w.seriesRestarted(m, inv):
		// Between two good scrapes, without process_start_time on both
		// pages: an engine that creates its series lazily
		// (llm-d-inference-sim, vLLM's labelled series) loses all of
		// them at a restart, and has them again only once the new
		// process observes something. No counter went backwards, so
		// the rule below never saw it: the old process's blocks stayed.
		restart = true
		s.workerProcessRestarted(w, prevGood, m.At, restartSeriesGone)
	}
	if ps != nil {
		w.procStart = ps
	}
	resets := 0
	w.invalid = w.invalid[:0]
	w.current = w.current[:0]
	for i := range m.Engines {
		em := &m.Engines[i]
		e := w.engines[em.Engine]
		if e == nil {
			e = &engine{name: em.Engine}
			w.engines[em.Engine] = e
		}
		resets += e.apply(em, m.At, s.window, inv, &w.invalid)
		w.current = append(w.current, em.Engine)
	}
	if m.WorkerTotals != nil {
		if w.totals == nil {
			w.totals = &engine{}
		}
		resets += w.totals.apply(m.WorkerTotals, m.At, s.window, inv, &w.invalid)
	}
	// The collector's notes first (they name the series), then the pool's
	// own for values it had to reject; bounded whatever the page.
	w.invalid = append(w.invalid, m.Invalid...)
	w.invalid = boundInvalid(w.invalid)
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

// Why a restart was concluded: the alert says which evidence it was.
const (
	restartProcessStart = "process_start_time changed"
	restartCounters     = "counters reset while its metrics were down"
	restartSeriesGone   = "every counter and histogram it had vanished or went back at once"
)

// seriesRestarted reports whether the page shows a new process although
// every scrape succeeded: each cumulative series (counter or latency
// histogram) of the worker's engines and totals on the last good page, at
// least two of them, is missing now or lower than then. One series that
// goes away, or goes back, is no restart (a label set that vanished, a
// collector's hiccup), nor is one engine's alone while its siblings keep
// theirs (the restart drops every rank's blocks); a series appearing is
// never evidence (engines create them lazily). Values the collector
// rejected as invalid are no evidence either way.
func (w *worker) seriesRestarted(m *collectors.MetricsScrape, inv map[invalidKey]bool) bool {
	had, gone := 0, 0
	for i := range m.Engines {
		if e := w.engines[m.Engines[i].Engine]; e != nil {
			e.seriesGone(&m.Engines[i], inv, &had, &gone)
		}
	}
	if w.totals != nil {
		// A data-parallel page whose worker-level series (SGLang's token
		// counters and histograms) all vanished has no totals at all.
		tm := m.WorkerTotals
		if tm == nil {
			tm = &collectors.EngineMetrics{}
		}
		w.totals.seriesGone(tm, inv, &had, &gone)
	}
	return had >= 2 && gone == had
}

// seriesGone adds to had the engine's cumulative series on the last good
// page, and to gone those of them missing or lower on this one.
func (e *engine) seriesGone(em *collectors.EngineMetrics, inv map[invalidKey]bool, had, gone *int) {
	counter := func(field string, present bool, last float64, p *float64) {
		if !present || inv[invalidKey{em.Engine, field}] {
			return
		}
		v := finite(p)
		if v != nil && *v < 0 {
			return // rejected in apply: no evidence
		}
		*had++
		if v == nil || *v < last {
			*gone++
		}
	}
	counter("prefix_queries", e.queries.has && e.queries.absent == 0, e.queries.last, em.PrefixQueries)
	counter("prefix_hits", e.hits.has && e.hits.absent == 0, e.hits.last, em.PrefixHits)
	for i, p := range e.otherValues(em) {
		counter(otherFields[i], e.hasOther[i] && e.presentOther[i], e.others[i], p)
	}
	for k, x := range latOf(em) {
		h := &e.lat[k]
		if !h.has || h.absent != 0 || inv[invalidKey{em.Engine, latFields[k]}] || x != nil && len(x.Buckets) == 0 {
			continue
		}
		*had++
		if x == nil || x.Count < h.last[len(h.last)-1] {
			*gone++
		}
	}
}

// countersReset reports whether the page shows a new process, judged from
// counters alone (no process_start_time on one side): some counter of an
// engine kvtop knows is lower than its last value, was there in the last
// good scrape and is missing now, or had vanished and came back. Values
// the collector rejected as invalid are no evidence either way.
func (w *worker) countersReset(m *collectors.MetricsScrape, inv map[invalidKey]bool) bool {
	check := func(e *engine, em *collectors.EngineMetrics) bool {
		if e == nil {
			return false
		}
		for _, c := range []struct {
			cw    *counterWindow
			v     *float64
			field string
		}{{&e.queries, em.PrefixQueries, "prefix_queries"}, {&e.hits, em.PrefixHits, "prefix_hits"}} {
			if inv[invalidKey{em.Engine, c.field}] || !c.cw.has {
				continue
			}
			v := finite(c.v)
			if v != nil && *v < 0 {
				continue // rejected below: no evidence
			}
			if v == nil && c.cw.absent == 0 || v != nil && (*v < c.cw.last || c.cw.vanished()) {
				return true
			}
		}
		for i, p := range e.otherValues(em) {
			if inv[invalidKey{em.Engine, otherFields[i]}] || !e.hasOther[i] {
				continue
			}
			v := finite(p)
			if v != nil && *v < 0 {
				continue
			}
			if v == nil && e.presentOther[i] || v != nil && (*v < e.others[i] || !e.presentOther[i]) {
				return true
			}
		}
		return false
	}
	for i := range m.Engines {
		if check(w.engines[m.Engines[i].Engine], &m.Engines[i]) {
			return true
		}
	}
	return m.WorkerTotals != nil && check(w.totals, m.WorkerTotals)
}

// workerProcessRestarted handles a process restart seen in metrics (a
// changed process_start_time, counters that came back reset after a down
// period, or every counter and histogram gone at once): every counter
// starts again from 0 (even one already above its old value), and the
// blocks indexed from the old process are dropped, since a restarted
// engine's cache is empty. An idle restarted
// engine sends no event that would tell the stream collector, so without
// this its old blocks would stay forever. A publisher reset after the
// previous good scrape has already been cleared for this restart (and may
// hold new blocks): kept. Each publisher dropped gets an incident in its
// history, so the stream says what happened even if it published nothing.
func (s *State) workerProcessRestarted(w *worker, prevGood, at time.Time, why string) {
	for _, e := range w.engines {
		e.restarted()
	}
	if w.totals != nil {
		w.totals.restarted()
	}
	dropped := 0
	for _, p := range w.pubs {
		if !p.resetAt.IsZero() && p.resetAt.After(prevGood) {
			continue // its stream already said so (seq back to 0)
		}
		s.restartedHashing(p)
	}
	for _, p := range w.pubs {
		if !p.clearedAt.IsZero() && p.clearedAt.After(prevGood) {
			continue
		}
		n := p.idx.t.count
		dropped += n
		s.clearPublisher(p, at)
		p.addIncident(collectors.StreamIncident{Kind: "restart", Start: at, End: at,
			Note: restartIncidentNote(why, n)}, s.opt.Limits.Incidents)
	}
	w.restartAt, w.restartDropped, w.restartWhy = at, dropped, why
	w.restartDrops++
}

func restartIncidentNote(why string, n int) string {
	lead := "engine restarted (process_start_time changed)"
	switch why {
	case restartCounters:
		lead = "engine restarted while its metrics were down (counters reset)"
	case restartSeriesGone:
		lead = "engine restarted between two scrapes (every counter and histogram gone or lower)"
	}
	return fmt.Sprintf("%s: %s indexed blocks dropped", lead, count(uint64(n)))
}

// invalidKey names one rejected field of one engine ("" for worker totals).
type invalidKey struct{ engine, field string }

func invalidSet(vs []collectors.InvalidValue) map[invalidKey]bool {
	if len(vs) == 0 {
		return nil
	}
	m := make(map[invalidKey]bool, len(vs))
	for _, v := range vs {
		m[invalidKey{v.Engine, v.Field}] = true
	}
	return m
}

// maxInvalid bounds the invalid values kept per worker: a page can repeat
// every series, the screen shows one line and the count.
const maxInvalid = 32

func boundInvalid(vs []collectors.InvalidValue) []collectors.InvalidValue {
	if len(vs) > maxInvalid {
		vs = vs[:maxInvalid]
	}
	for i := range vs {
		vs[i].Engine = truncate(vs[i].Engine, 80)
		vs[i].Field = truncate(vs[i].Field, 40)
		vs[i].Note = message(vs[i].Note, 200)
	}
	return vs
}

// otherFields are the snapshot words of engine.others, in order.
var otherFields = [4]string{"prompt_tokens", "generation_tokens", "requests_finished", "preemptions"}

func (e *engine) otherValues(em *collectors.EngineMetrics) [4]*float64 {
	return [4]*float64{em.PromptTokens, em.GenerationTokens, em.RequestsFinished, em.Preemptions}
}

// apply copies one scrape of the engine and returns how many counters
// went backwards. Values that cannot be true (a negative queue, a KV use
// outside 0..1, a negative counter) are dropped with a note in bad; the
// collector rejects them first, this keeps the snapshot's contract
// whatever the source.
func (e *engine) apply(em *collectors.EngineMetrics, at time.Time, window time.Duration, inv map[invalidKey]bool, bad *[]collectors.InvalidValue) int {
	prev := e.lastSeen
	e.lastSeen = at
	reject := func(field string, v float64, why string) {
		*bad = append(*bad, collectors.InvalidValue{Engine: em.Engine, Field: field,
			Note: fmt.Sprintf("%s = %s%s: %s", field, num(v), engineSuffix(em.Engine), why)})
	}
	gauge := func(p *float64, field, why string, ok func(float64) bool) *float64 {
		v := finite(p)
		if v != nil && !ok(*v) {
			reject(field, *v, why)
			return nil
		}
		return v
	}
	nonNeg := func(v float64) bool { return v >= 0 }
	e.waiting = gauge(em.Waiting, "queue", "a queue cannot be negative", nonNeg)
	e.running = gauge(em.Running, "running", "a running count cannot be negative", nonNeg)
	e.kvUsage = gauge(em.KVUsage, "kv_usage", "a fraction is within 0..1", func(v float64) bool { return v >= 0 && v <= 1 })
	if b := gauge(em.NumGPUBlocks, "num_gpu_blocks", "a block count cannot be negative", nonNeg); b != nil {
		e.gpuBlock = b
	}
	if b := finite(em.BlockSize); b != nil && *b >= 1 && *b < 1<<20 {
		e.blockSz = int(*b)
	}
	resets := 0
	// A counter the collector rejected is neither present nor absent: no
	// sample, and its absence is not noted (it did not vanish).
	counter := func(c *counterWindow, p *float64, field string) {
		if inv[invalidKey{em.Engine, field}] {
			return
		}
		v := finite(p)
		if v != nil && *v < 0 {
			reject(field, *v, "a counter cannot be negative")
			return
		}
		if c.observe(at, v, window) {
			resets++
		}
	}
	counter(&e.queries, em.PrefixQueries, "prefix_queries")
	counter(&e.hits, em.PrefixHits, "prefix_hits")
	for i, p := range e.otherValues(em) {
		if inv[invalidKey{em.Engine, otherFields[i]}] {
			continue
		}
		v := finite(p)
		if v != nil && *v < 0 {
			continue // cannot be a counter: no evidence either way
		}
		e.presentOther[i] = v != nil
		if v == nil {
			continue
		}
		if e.hasOther[i] && *v < e.others[i] {
			resets++
		}
		e.others[i], e.hasOther[i] = *v, true
	}
	e.applyLatency(em, at, window, inv)
	e.applyThroughput(em, at, window, inv)
	e.applyOffload(em, prev, at, window)
	return resets
}

// engineSuffix names the engine in a note, when the page has several.
func engineSuffix(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" (engine %s)", name)
}

// restarted makes every counter's next sample a reset.
func (e *engine) restarted() {
	e.queries.restarted()
	e.hits.restarted()
	e.hasOther = [4]bool{}
	e.latencyRestarted()
	e.throughputRestarted()
	e.offloadRestarted()
}

// hitSum is a windowed sum of prefix-cache deltas. ok is false when no
// engine exposes both counters.
type hitSum struct {
	hits, queries float64
	// transferred: prompt tokens a decode worker received by KV transfer
	// over the window, already taken out of queries.
	transferred float64
	// covered is the span the sum really covers: weighted by queries over
	// its parts, so a worker that joined a moment ago (few queries) does
	// not make the whole pool read "2 of 60 s"; the longest part while no
	// part has queries.
	covered time.Duration
	covW    float64 // Σ covered×queries (seconds×tokens)
	maxCov  time.Duration
	ok      bool
	// bad says why the sum is no rate (hits above queries: counters that
	// oscillate or reset apart); badWho names the part at fault ("w3
	// engine 1"), the first by name so the reason does not flicker.
	bad, badWho string
}

func (h *hitSum) addSum(o hitSum, who string) {
	if !o.ok {
		return
	}
	h.hits += o.hits
	h.queries += o.queries
	h.transferred += o.transferred
	h.covW += o.covW
	h.maxCov = max(h.maxCov, o.maxCov)
	h.ok = true
	if h.queries > 0 {
		h.covered = time.Duration(h.covW / h.queries * float64(time.Second))
	} else {
		h.covered = h.maxCov
	}
	if o.bad != "" {
		w := strings.TrimSpace(who + " " + o.badWho)
		if h.bad == "" || w < h.badWho {
			h.bad, h.badWho = o.bad, w
		}
	}
}

// rate is Δhits/Δqueries, nil without queries or when it cannot be true.
func (h hitSum) rate() *float64 {
	if !h.ok || h.queries <= 0 || h.bad != "" {
		return nil
	}
	return fraction(h.hits / h.queries)
}

// reason says why rate is nil although counters exist; "" otherwise.
func (h hitSum) reason() string {
	if h.bad == "" || h.badWho == "" {
		return h.bad
	}
	return h.badWho + ": " + h.bad
}

func (e *engine) hitSince(from, now time.Time) hitSum {
	dq, cq, okq := e.queries.since(from, now)
	dh, ch, okh := e.hits.since(from, now)
	if !okq || !okh {
		return hitSum{}
	}
	c := min(cq, ch)
	// A decode worker's engine counts the prompt tokens its prefill
	// worker sent as queries it did not hit (vLLM's scheduler looks the
	// whole prompt up before the connector loads the rest): they are no
	// miss of its cache, and leave the denominator.
	var moved float64
	if e.decode && e.off != nil {
		if dx, _, ok := e.off.external.since(from, now); ok && dx > 0 {
			moved = min(dx, max(dq-dh, 0))
			dq -= moved
		}
	}
	h := hitSum{hits: dh, queries: dq, transferred: moved, covered: c, covW: c.Seconds() * max(dq, 0), maxCov: c, ok: true}
	// Hits are a subset of queries: more hits than queries over the
	// window means the two counters do not count the same thing (they
	// oscillate, or reset apart). Never a rate of 3.0. A hair over is
	// float error in the interpolation.
	if dh > dq+1e-9*max(dq, 1) || dh < 0 || dq < 0 {
		h.bad = fmt.Sprintf("hits exceed queries over the window (%s > %s): counters inconsistent", tokenCount(dh), tokenCount(dq))
	}
	return h
}

// tokenCount prints a windowed token count: whole tokens, or one decimal
// when the window cuts a step (interpolation).
func tokenCount(v float64) string {
	if r := math.Round(v); math.Abs(v-r) < 0.05 {
		return num(r)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
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
	for _, name := range w.engineNames() { // in name order: the same float sum every time
		e := w.engines[name]
		who := ""
		if e.name != "" {
			who = "engine " + e.name
		}
		h.addSum(e.hitSince(from, now), who)
	}
	return h
}

// poolHitSince is the pool token hit rate over [from, now], over up
// workers.
func (s *State) poolHitSince(from, now time.Time) hitSum {
	return s.poolHitFed(from, now, nil)
}

// poolHitFed is poolHitSince that also tells fed, for every worker,
// whether it is in the sum (up, with both counters in the range).
func (s *State) poolHitFed(from, now time.Time, fed func(w *worker, in bool)) hitSum {
	var h hitSum
	for _, w := range s.workers {
		in := false
		if w.up {
			wh := w.hitSince(from, now)
			h.addSum(wh, w.name)
			in = wh.ok
		}
		if fed != nil {
			fed(w, in)
		}
	}
	return h
}

// fraction keeps a computed share within 0..1: float error just outside
// is clamped; anything else (NaN, overflow, a real excess) is unknown.
func fraction(v float64) *float64 {
	const eps = 1e-9
	if math.IsNaN(v) || v < -eps || v > 1+eps {
		return nil
	}
	v = min(max(v, 0), 1)
	return &v
}

// clamp01 is fraction for figures that are never null (shares the pool
// counts itself, within 0..1 but for float error).
func clamp01(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return min(max(v, 0), 1)
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
// eventsLate is how much later than its arrival a batch may be stamped.
const eventsLate = 500 * time.Millisecond

func (s *State) eventsArrivingWithin() time.Duration {
	return max(2*s.refresh, 5*time.Second)
}

// eventsArriving: the worker's metrics fail, yet one of its streams
// delivered a batch after the failures began and recently. Such a worker
// is serving traffic — its /metrics is what is broken — so it is not
// "down". A batch from before the first failure proves nothing: a process
// that died had sent its last events just before. Nor does one stamped
// within eventsLate after it: a batch is stamped when kvtop's reader takes
// it, which a reader's pause between wakes (kvevents' WakeEvery, 200ms)
// and the hand-off put after its arrival.
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
		if !last.IsZero() && !last.Before(w.failStart.Add(eventsLate)) && now.Sub(last) <= within {
			return true
		}
	}
	return false
}
