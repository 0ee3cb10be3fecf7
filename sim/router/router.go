package router

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/kvcache"
)

// Policy is how the router picks a worker.
type Policy uint8

const (
	// CacheAware sends a request to the worker holding the longest prefix of
	// its blocks (of equal holders, the one that has held it longest),
	// unless that worker's in-flight count exceeds the least loaded one's by
	// more than the threshold (as vllm-router's cache_aware balances load
	// first).
	CacheAware Policy = iota
	// RoundRobin ignores the cache.
	RoundRobin
)

// ParsePolicy parses "cache-aware" or "round-robin".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "cache-aware":
		return CacheAware, nil
	case "round-robin":
		return RoundRobin, nil
	}
	return 0, fmt.Errorf("policy %q is not one of cache-aware, round-robin", s)
}

func (p Policy) String() string { return [...]string{"cache-aware", "round-robin"}[p] }

// Config sets up a router.
type Config struct {
	Name      string   // "r0"
	Workers   []string // worker names (w0, w1, ...)
	URLs      []string // worker base URLs, as vllm-router labels workers
	Policy    Policy
	Threshold int // in-flight difference that overrides the prefix match
	Model     string
	Seed      uint64
	Rate      float64 // requests per virtual second
	Audit     string  // decisions file path ("" = none); with Format dynamo-trace and TraceSink gzip, the sink's prefix
	Now       func() time.Time

	// Format is the decision log written: kvtop (the audit record, the
	// default), dynamo-trace (Dynamo's request_end traces: a line per
	// finished request) or smg (the SGLang model gateway's cache-aware
	// selection lines: a line per decision).
	Format string
	// TraceSink is how Dynamo writes the traces: jsonl (default), gzip or
	// stderr. TraceSchema "agent" names the older schema; and
	// TraceNoBackendActual leaves out the engine's cached count, as Dynamo
	// before backend_actual_cached_tokens did.
	TraceSink            string
	TraceSchema          string
	TraceNoBackendActual bool
	// DynamoID is worker w's Dynamo worker id now (dynamo-trace).
	DynamoID func(w int) uint64
	// WorkerModels is the model each worker serves ("" or nil: Model): a
	// conversation keeps one model, and goes only to its workers.
	WorkerModels []string
	// Decode marks a disaggregated pool's decode workers: the router
	// routes each request to a prefill worker (by its cache and load);
	// the sim hands the decode leg on (sim/pd.go).
	Decode []bool
	// SMGLog is the gateway's log layout: text (default) or json.
	SMGLog string
}

// ticket follows one request from decision to outcome.
type ticket struct {
	id     string
	s      *session
	worker int
	epoch  int

	req       *engine.Request
	received  time.Time // when the router decided (wall clock of the sim)
	rank      int       // the engine the worker gave it (Dispatched)
	predicted int       // tokens the chosen worker holds by the router's index
	branch    string    // the SMG line's branch
}

// Routed is what the router did with one request and what came of it, for
// tests that check a decision log against the sim itself.
type Routed struct {
	Worker, Rank int
	Owner        int    // the worker holding the longest match (Worker unless load sent it elsewhere)
	Reason       string // the kvtop record's: best-match | load-balance | fallback
	Branch       string // the SMG line's ("" in other formats)
	Predicted    int    // tokens the chosen worker held by the router's index
	Matched      int    // tokens of the longest match (the owner's)
	Prompt       int
	Cached       int  // the engine's prefix-cache hit; -1 unknown (pending, rejected, aborted)
	Finished     bool // it ended (done, rejected or aborted)
}

// maxRouted is how many requests Routed remembers.
const maxRouted = 1 << 14

// Router routes the workload to the workers and keeps its own counters.
// Methods other than Snapshot run on the sim's clock goroutine.
type Router struct {
	cfg      Config
	wl       *Workload
	ix       *index
	inflight []int
	down     []bool
	// modelList is the distinct models the workers serve (modelOf).
	modelList []string
	rr        int
	n         int
	epoch     int
	truncate  float64
	rng       *rand.Rand
	audit     *audit
	matched   []int
	deepest   []holdersAt
	// heard is when the index last applied an event batch of each worker
	// (-1: never): a kv-events prediction is as old as that, not as old
	// as the block it matched.
	heard []time.Duration
	// started is when the decision log's sink started (a trace wrapper's
	// timestamp counts from it).
	started time.Time

	mu      sync.Mutex
	m       Metrics
	routed  map[string]*Routed
	routedQ []string // ids in the order routed, oldest first (maxRouted)
}

// New returns a router with an empty index.
func New(cfg Config, hasher kvcache.Hasher) (*Router, error) {
	if len(cfg.Workers) == 0 || len(cfg.Workers) > MaxWorkers {
		return nil, fmt.Errorf("router: %d workers, want 1..%d", len(cfg.Workers), MaxWorkers)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := len(cfg.Workers)
	r := &Router{
		cfg: cfg, wl: NewWorkload(cfg.Seed, hasher, cfg.Rate), ix: newIndex(),
		inflight: make([]int, n), down: make([]bool, n),
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x726f757465)),
		matched: make([]int, n), deepest: make([]holdersAt, n), heard: make([]time.Duration, n),
	}
	r.forgetHeard()
	r.m = newMetrics(n, cfg.Now())
	r.m.Policy = cfg.Policy
	r.routed, r.started = map[string]*Routed{}, cfg.Now()
	var err error
	if r.cfg.Format, err = ParseFormat(cfg.Format); err != nil {
		return nil, err
	}
	if r.cfg.TraceSink, err = ParseSink(cfg.TraceSink); err != nil {
		return nil, err
	}
	switch {
	case cfg.SMGLog != "" && cfg.SMGLog != "text" && cfg.SMGLog != "json":
		return nil, fmt.Errorf("smg log %q is not one of text, json", cfg.SMGLog)
	case cfg.TraceSchema != "" && cfg.TraceSchema != "v1" && cfg.TraceSchema != "agent":
		return nil, fmt.Errorf("trace schema %q is not one of v1, agent", cfg.TraceSchema)
	case r.cfg.Format == FormatDynamoTrace && cfg.DynamoID == nil:
		return nil, fmt.Errorf("router: dynamo-trace needs the workers' Dynamo ids")
	}
	if cfg.Audit != "" {
		a, err := openAudit(cfg.Audit, r.cfg.Format == FormatDynamoTrace && r.cfg.TraceSink == SinkGzip)
		if err != nil {
			return nil, fmt.Errorf("router: decisions file: %w", err)
		}
		r.audit = a
	}
	return r, nil
}

// Routed says what the router did with request id (one of the last
// maxRouted). Safe from any goroutine.
func (r *Router) Routed(id string) (Routed, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.routed[id]
	if !ok {
		return Routed{}, false
	}
	return *x, true
}

// remember records a request's routing (clock goroutine).
func (r *Router) remember(id string, x Routed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.routedQ) == maxRouted {
		delete(r.routed, r.routedQ[0])
		r.routedQ = r.routedQ[1:]
	}
	r.routed[id] = &x
	r.routedQ = append(r.routedQ, id)
}

// settle records how a request ended.
func (r *Router) settle(t *ticket, cached int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x := r.routed[t.id]; x != nil {
		x.Rank, x.Cached, x.Finished = t.rank, cached, true
	}
}

// Dispatched records the engine (data-parallel rank) the worker gave the
// request: Dynamo's traces name it.
func (r *Router) Dispatched(q *engine.Request, rank int) {
	if t, ok := q.Tag.(*ticket); ok {
		t.rank = rank
	}
}

// Workload is the router's request generator.
func (r *Router) Workload() *Workload { return r.wl }

// SetPolicy changes how the router picks workers from the next request on.
func (r *Router) SetPolicy(p Policy) {
	r.cfg.Policy = p
	r.mu.Lock()
	r.m.Policy = p // for /metrics, read on its own goroutine
	r.mu.Unlock()
}

// Policy is the policy in force.
func (r *Router) Policy() Policy { return r.cfg.Policy }

// SetThreshold changes the load threshold of the cache-aware policy.
func (r *Router) SetThreshold(t int) { r.cfg.Threshold = t }

// Threshold is the current load threshold.
func (r *Router) Threshold() int { return r.cfg.Threshold }

// SetTruncate makes a fraction of streams end without their final chunk:
// HTTP 200 but not done.
func (r *Router) SetTruncate(f float64) { r.truncate = f }

// SetDown marks a worker unreachable (restarting): it gets no requests and
// its circuit breaker shows open.
func (r *Router) SetDown(w int, down bool) {
	r.down[w] = down
	r.mu.Lock()
	r.m.CBState[w] = 0
	if down {
		r.m.CBState[w] = 1
	}
	r.mu.Unlock()
}

// Observe feeds a worker's KV events into the router's index.
func (r *Router) Observe(w int, events []kvcache.Event, now time.Duration) {
	r.ix.apply(w, events, now)
	r.heard[w] = max(r.heard[w], now)
}

func (r *Router) forgetHeard() {
	for i := range r.heard {
		r.heard[i] = -1
	}
}

// Forget drops what the index believes a worker holds (it restarted).
func (r *Router) Forget(w int) { r.ix.forget(w) }

// Restart is a router restart: its index, in-flight counts and counters
// start from nothing, with a new process start time.
func (r *Router) Restart() {
	r.epoch++
	r.ix = newIndex()
	r.forgetHeard()
	clear(r.inflight)
	r.mu.Lock()
	cb := append([]float64(nil), r.m.CBState...)
	r.m = newMetrics(len(r.cfg.Workers), r.cfg.Now())
	r.m.CBState, r.m.Policy = cb, r.cfg.Policy
	r.mu.Unlock()
}

// Arrival is one request and where it goes.
type Arrival struct {
	Req    *engine.Request
	Worker int
}

// Route takes the workload's arrivals before until and routes each.
func (r *Router) Route(until time.Duration) []Arrival {
	reqs := r.wl.Arrivals(until)
	out := make([]Arrival, 0, len(reqs))
	for _, q := range reqs {
		out = append(out, Arrival{Req: q, Worker: r.route(q)})
	}
	return out
}

func (r *Router) allowed() uint64 {
	var m uint64
	for w, d := range r.down {
		if !d && !r.decode(w) {
			m |= 1 << uint(w)
		}
	}
	return m
}

// models are the distinct models the workers serve, in worker order.
func (r *Router) models() []string {
	var out []string
	seen := map[string]bool{}
	for w := range r.cfg.Workers {
		m := r.workerModel(w)
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// workerModel is the model worker w serves.
func (r *Router) workerModel(w int) string {
	if w < len(r.cfg.WorkerModels) && r.cfg.WorkerModels[w] != "" {
		return r.cfg.WorkerModels[w]
	}
	return r.cfg.Model
}

// modelOf is a conversation's model: its id picks one of the models.
func (r *Router) modelOf(s *session) string {
	if r.modelList == nil {
		r.modelList = r.models()
	}
	return r.modelList[s.id%len(r.modelList)]
}

// serving is the workers that serve model.
func (r *Router) serving(model string) uint64 {
	var m uint64
	for w := range r.cfg.Workers {
		if r.workerModel(w) == model {
			m |= 1 << uint(w)
		}
	}
	return m
}

// decode reports whether w is a decode worker (never routed to).
func (r *Router) decode(w int) bool { return w < len(r.cfg.Decode) && r.cfg.Decode[w] }

// route picks a worker for q and writes the decision record.
func (r *Router) route(q *engine.Request) int {
	r.n++
	t := &ticket{id: fmt.Sprintf("req-%07d", r.n), s: q.Tag.(*session), worker: -1, epoch: r.epoch, req: q, received: r.cfg.Now()}
	q.ID, q.Tag = t.id, t
	model := r.modelOf(t.s)
	allowed := r.allowed() & r.serving(model)
	if allowed == 0 {
		// Every worker is down: the router still tries one (and fails).
		for w := range r.down {
			if !r.decode(w) && r.workerModel(w) == model {
				allowed |= 1 << uint(w)
			}
		}
	}
	total := q.PromptLen / kvcache.BlockSize
	r.ix.match(q.Hashes[:total], allowed, r.matched, r.deepest)

	least := r.leastLoaded(allowed)
	owner := least
	for w := range r.matched {
		if allowed&(1<<uint(w)) != 0 && r.betterMatch(w, owner) {
			owner = w
		}
	}
	chosen, reason := owner, "best-match"
	switch {
	case r.cfg.Policy == RoundRobin:
		chosen, reason = r.nextRR(allowed), "load-balance"
	case r.matched[owner] == 0:
		owner, chosen, reason = least, least, "fallback"
	case r.inflight[owner]-r.inflight[least] > r.cfg.Threshold && float64(r.inflight[owner]) > 1.5*float64(r.inflight[least]):
		chosen, reason = least, "load-balance"
	}
	t.worker = chosen

	now := q.Arrival
	d := decisionRec{
		Kind: "decision", TS: stamp(r.cfg.Now()), RequestID: t.id, AttemptID: "1",
		Router: r.cfg.Name, RouterVersion: "kvtop-sim", Model: model, Pool: "default", Endpoint: "/v1/chat/completions",
		Prediction: prediction{Source: "kv-events", Input: "tokens", Units: "blocks", Matched: r.matched[owner], Total: total,
			Owner: r.cfg.Workers[owner], BlockSize: kvcache.BlockSize},
		Chosen: r.cfg.Workers[chosen], Reason: reason,
		Load: loadRec{Kind: "inflight", Value: r.inflight[chosen], Scope: "router-local"},
	}
	if r.matched[owner] > 0 {
		deep := r.deepest[owner]
		d.Prefix = fmt.Sprintf("%016x", deep.hash)
		// The prediction's age is how far the index lags the owner's
		// event stream; a block stored long ago and still held is news
		// of now, not a stale prediction.
		if h := r.heard[owner]; h >= 0 {
			age := max(now-h, 0).Milliseconds()
			d.Prediction.AgeMS = &age
		}
	}
	for w, name := range r.cfg.Workers {
		if allowed&(1<<uint(w)) == 0 {
			continue
		}
		score := 0.0
		if total > 0 {
			score = math.Round(float64(r.matched[w])/float64(total)*1000) / 1000
		}
		d.Candidates = append(d.Candidates, candidate{Worker: name, Score: score, Matched: r.matched[w], Load: r.inflight[w]})
	}
	t.predicted = r.matched[chosen] * kvcache.BlockSize
	switch {
	case r.cfg.Format == FormatSMG:
		r.writeSMG(t, owner, t.received)
	case r.cfg.Format == FormatDynamoTrace:
		// Written when the request ends (writeTrace).
	case r.cfg.Policy == RoundRobin:
		// A cache-blind router predicts nothing and scores no one. The
		// sim still writes the prefix (what its index knew the pool held,
		// from the events), so kvtop can measure from its own index what
		// the choice recomputed: the record says what was known, not
		// what the router used.
		r.audit.write(blindRec{decisionRec: d, Prediction: noPrediction{Source: "none", Input: "none"}, Candidates: nil})
	default:
		r.audit.write(d)
	}
	r.remember(t.id, Routed{Worker: chosen, Owner: owner, Reason: reason, Branch: t.branch, Predicted: t.predicted,
		Matched: r.matched[owner] * kvcache.BlockSize, Prompt: q.PromptLen, Cached: -1})

	r.inflight[chosen]++
	r.mu.Lock()
	r.m.Processed[chosen]++
	r.m.Decisions[chosen]++
	r.m.Running[chosen] = float64(r.inflight[chosen])
	r.mu.Unlock()
	return chosen
}

// betterMatch says whether w is a better owner than o: it holds more of the
// prompt, or as much and has held it longer (as a tree router's first
// tenant keeps a prefix: requests that arrive together, or after the load
// threshold sent one elsewhere, do not split a prefix between its holders
// by load). Equal on both, the less loaded wins.
func (r *Router) betterMatch(w, o int) bool {
	if r.matched[w] != r.matched[o] {
		return r.matched[w] > r.matched[o]
	}
	if r.matched[w] > 0 && r.deepest[w].since != r.deepest[o].since {
		return r.deepest[w].since < r.deepest[o].since
	}
	return r.inflight[w] < r.inflight[o]
}

// leastLoaded is the allowed worker with the fewest in-flight requests; ties
// rotate so that an idle pool is spread evenly.
func (r *Router) leastLoaded(allowed uint64) int {
	n := len(r.inflight)
	best := -1
	for k := 0; k < n; k++ {
		w := (r.n + k) % n
		if allowed&(1<<uint(w)) == 0 {
			continue
		}
		if best < 0 || r.inflight[w] < r.inflight[best] {
			best = w
		}
	}
	return best
}

func (r *Router) nextRR(allowed uint64) int {
	n := len(r.inflight)
	for k := 0; k < n; k++ {
		w := r.rr % n
		r.rr++
		if allowed&(1<<uint(w)) != 0 {
			return w
		}
	}
	return 0
}

// Rejected records that the chosen worker refused the request (HTTP 503:
// its queue was full, or it is restarting).
func (r *Router) Rejected(q *engine.Request, reason string) {
	t := q.Tag.(*ticket)
	r.release(t)
	switch r.cfg.Format {
	case FormatKvtop:
		r.audit.write(outcomeRec{Kind: "outcome", TS: stamp(r.cfg.Now()), RequestID: t.id, AttemptID: "1",
			Worker: r.cfg.Workers[t.worker], HTTPStatus: 503, Error: &reason})
	case FormatDynamoTrace:
		r.writeTrace(t, nil, r.cfg.Now())
	}
	r.settle(t, -1)
	r.wl.finished(t.s, false, q.Arrival)
}

// Done records what happened to a request the worker took.
func (r *Router) Done(res engine.Result) {
	t := res.Req.Tag.(*ticket)
	r.release(t)
	aborted := res.Status == engine.Aborted
	// HTTP 200, but the stream stopped before its last chunk (the same
	// draw in every format, so that they all route alike).
	truncated := !aborted && r.rng.Float64() < r.truncate
	ok := !aborted && !truncated
	cached := res.CachedTokens
	if aborted {
		cached = -1
	}
	switch r.cfg.Format {
	case FormatKvtop:
		o := outcomeRec{Kind: "outcome", TS: stamp(r.cfg.Now()), RequestID: t.id, AttemptID: "1", Worker: r.cfg.Workers[t.worker]}
		prompt := res.Req.PromptLen
		switch {
		case aborted:
			// The worker restarted under the request: the connection dropped.
			o.HTTPStatus = 502
			msg := "upstream connection reset (worker restarted)"
			o.Error = &msg
			o.E2EMS = ms(res.E2E)
		case truncated:
			// No finish_reason, no [DONE], no usage.
			o.HTTPStatus = 200
			o.QueueMS, o.TTFTMS, o.E2EMS = ms(res.Queue), ms(res.TTFT), ms(res.E2E)
		default:
			o.HTTPStatus, o.Done = 200, true
			o.PromptTokens, o.CachedTokens = &prompt, &res.CachedTokens
			o.QueueMS, o.TTFTMS, o.E2EMS = ms(res.Queue), ms(res.TTFT), ms(res.E2E)
			reason := res.FinishReason
			o.FinishReason = &reason
		}
		r.audit.write(o)
	case FormatDynamoTrace:
		r.writeTrace(t, &res, r.cfg.Now())
	}
	r.settle(t, cached)
	r.wl.finished(t.s, ok, res.End)
}

func (r *Router) release(t *ticket) {
	if t.epoch != r.epoch || t.worker < 0 {
		return // routed by the router's previous life: it lost track
	}
	r.inflight[t.worker]--
	r.mu.Lock()
	r.m.Running[t.worker] = float64(r.inflight[t.worker])
	r.mu.Unlock()
}

// Flush writes buffered audit records to the file.
func (r *Router) Flush() error { return r.audit.flush(r.cfg.Now(), false) }

// Close flushes and closes the decisions file.
func (r *Router) Close() error { return r.audit.close() }

// Inflight is the router-local in-flight count per worker.
func (r *Router) Inflight() []int { return append([]int(nil), r.inflight...) }
