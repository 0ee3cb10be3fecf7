// Package engine is one simulated engine core (one data-parallel rank of a
// vLLM or SGLang worker): a scheduler with a running limit and a waiting
// queue, chunked prefill under a per-step token budget, a paged KV cache with
// prefix caching, and a timing model in which cached tokens really shorten
// prefill. It runs on a virtual clock and never reads the wall clock, so the
// same inputs give the same steps and the same KV events.
package engine

import (
	"sync"
	"time"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/offload"
)

// Config sizes an engine and sets its timing model.
type Config struct {
	NumBlocks   int // KV cache capacity (vLLM num_gpu_blocks)
	MaxRunning  int // running limit (vLLM max_num_seqs)
	MaxWaiting  int // queue bound; beyond it a request is rejected (HTTP 503)
	TokenBudget int // tokens per step (vLLM max_num_batched_tokens)

	// A step takes StepBase + PrefillPerToken per prefill token computed +
	// DecodePerSeq per decoding request. Cached prompt tokens are not computed.
	StepBase        time.Duration
	PrefillPerToken time.Duration
	DecodePerSeq    time.Duration

	// Buckets are the latency histograms' bounds (zero: vLLM's).
	Buckets Buckets
	// Tiers is what a vLLM main engine runs beside its GPU cache (zero:
	// the plain engine, tiers.go).
	Tiers Tiers
}

// DefaultConfig is a mid-size GPU serving an 8B model, scaled so that a few
// requests per second keep it busy but not saturated.
func DefaultConfig() Config {
	return Config{
		NumBlocks:       4096,
		MaxRunning:      24,
		MaxWaiting:      512,
		TokenBudget:     2048,
		StepBase:        8 * time.Millisecond,
		PrefillPerToken: 60 * time.Microsecond,
		DecodePerSeq:    500 * time.Microsecond,
		Buckets:         VLLMBuckets(),
	}
}

// Request is one generation request as the engine sees it.
type Request struct {
	ID        string
	Tokens    []uint32 // the prompt, then the tokens the model will generate
	Hashes    []uint64 // hashes of every full block of Tokens
	PromptLen int
	OutputLen int           // tokens to generate (>= 1)
	Length    bool          // the output stops at max_tokens: finish_reason "length"
	Arrival   time.Duration // virtual time
	Tag       any           // the submitter's own data
	// ReportFull: the request asks for kv_cache_report_mode "full" (vLLM
	// main reports its reused prefix again; others ignore it).
	ReportFull bool
	// Transfer: a disaggregated pool's decode leg. A prefill worker
	// computed the prompt; the full blocks past this engine's own hit
	// arrive by KV transfer (NIXL), loaded at admission, never computed.
	Transfer bool
}

// Status says how a request ended.
type Status uint8

const (
	Finished Status = iota // generated all its tokens
	Aborted                // the engine restarted under it
)

// Result is what happened to one request.
type Result struct {
	Req          *Request
	Status       Status
	CachedTokens int // prompt tokens served from the prefix cache at first scheduling
	Queue        time.Duration
	TTFT         time.Duration // 0 when no token was produced
	E2E          time.Duration
	FinishReason string
	End          time.Duration
}

type seq struct {
	*Request
	blocks    []int32
	computed  int // tokens whose KV is computed
	scheduled int // tokens being computed in the step in flight
	stored    int // leading blocks committed to the cache
	loaded    int // blocks [stored at admission, loaded) came from the CPU tier, not computed
	generated int
	started   bool
	cached    int
	queue     time.Duration
	ttft      time.Duration
	lastTok   time.Duration // when its latest output token came out
	// tiers.go: sw is its sliding-window group's blocks by position
	// (kvcache none where skipped), off the chunks offered to the CPU
	// tier, external the prompt tokens loaded from it at first scheduling.
	sw       []int32
	off      int
	external int
}

// known is the number of tokens known so far: the prompt plus those generated.
func (s *seq) known() int { return s.PromptLen + s.generated }

// Engine is one engine core. Step methods are called from one goroutine;
// Snapshot may be called from any.
type Engine struct {
	cfg    Config
	cache  *kvcache.Cache
	sw     kvcache.Group // the sliding-window group, when hybrid
	hybrid bool
	host   *offload.Tier // the CPU tier, or nil
	events []kvcache.Event
	truth  Truth
	// loads and stores are the blocks the step being scheduled moves
	// between the GPU and the CPU tier.
	loads, stores int
	waiting       []*seq // FIFO; preempted requests go back to the front
	running       []*seq
	next          time.Duration // when the next step starts
	inStep        bool
	results       []Result

	mu sync.Mutex // guards st against Snapshot
	st Stats
}

// New returns an idle engine with an empty cache.
func New(cfg Config) *Engine {
	e := &Engine{cfg: cfg}
	e.build()
	return e
}

// build makes the engine's caches and metrics new from its configuration.
func (e *Engine) build() {
	e.cache = kvcache.New(e.cfg.NumBlocks)
	e.st = newStats(e.cfg.NumBlocks, e.cfg.Buckets)
	e.st.Tiers = e.cfg.Tiers
	e.buildTiers()
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Cache exposes the KV cache (read-only use: tests and the router's view).
func (e *Engine) Cache() *kvcache.Cache { return e.cache }

// Load is the number of requests the engine holds (running + waiting).
func (e *Engine) Load() int { return len(e.running) + len(e.waiting) }

// Score is vLLM's data-parallel load score: waiting*4 + running.
func (e *Engine) Score() int { return 4*len(e.waiting) + len(e.running) }

// Submit queues r. It returns false, and counts a rejection, when the
// waiting queue is full.
func (e *Engine) Submit(r *Request) bool {
	if len(e.waiting) >= e.cfg.MaxWaiting {
		e.mu.Lock()
		e.st.Rejected++
		e.mu.Unlock()
		return false
	}
	if !e.busy() && e.next < r.Arrival {
		e.next = r.Arrival
	}
	e.waiting = append(e.waiting, &seq{Request: r})
	e.mu.Lock()
	e.st.Waiting = len(e.waiting)
	e.mu.Unlock()
	return true
}

func (e *Engine) busy() bool { return e.inStep || len(e.waiting) > 0 }

// Run executes every step that starts at or before until. emit receives the
// KV events of each step that has any (one batch per step); the events are
// valid only during the call. Finished requests are collected for TakeResults.
func (e *Engine) Run(until time.Duration, emit func(at time.Duration, events []kvcache.Event)) {
	for e.busy() && e.next <= until {
		at := e.next
		e.step(at)
		if ev := e.takeEvents(); len(ev) > 0 && emit != nil {
			e.truth.Events += uint64(len(ev))
			emit(at, ev)
		}
	}
	if !e.busy() && e.next < until {
		e.next = until
	}
}

// TakeResults returns the requests that ended since the last call.
func (e *Engine) TakeResults() []Result {
	r := e.results
	e.results = nil
	return r
}

// step completes the step in flight (if any) and schedules the next one.
func (e *Engine) step(now time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inStep {
		e.complete(now)
	}
	e.loads = 0
	prefill, decode := e.schedule(now)
	e.inStep = prefill+decode > 0
	e.noteTransfers()
	switch {
	case e.inStep:
		e.next = now + e.cfg.StepBase + time.Duration(prefill)*e.cfg.PrefillPerToken + time.Duration(decode)*e.cfg.DecodePerSeq +
			time.Duration(e.loads)*offload.BlockTransfer
	case len(e.waiting) > 0 && e.waiting[0].Arrival > now:
		e.next = e.waiting[0].Arrival // idle until the next request arrives
	case len(e.waiting) > 0:
		e.next = now + e.cfg.StepBase // cannot happen with sane sizes; never spin
	}
	e.st.Running, e.st.Waiting = len(e.running), len(e.waiting)
	e.st.UsedBlocks, e.st.Resident = e.cache.Used(), e.cache.Resident()
}

// complete applies the step that ends at now: computed tokens, one sampled
// token per request whose known tokens are all computed, finished requests.
func (e *Engine) complete(now time.Duration) {
	keep := e.running[:0]
	for _, s := range e.running {
		s.computed += s.scheduled
		s.scheduled = 0
		if s.computed == s.known() {
			s.generated++
			e.st.GenerationTokens++
			if s.generated == 1 {
				s.ttft = now - s.Arrival
				e.st.TTFT.Observe(s.ttft)
				e.st.PromptTokens += float64(s.PromptLen)
				e.st.PromptBySource[SourceCacheHit] += float64(s.cached - s.external)
				e.st.PromptBySource[SourceExternal] += float64(s.external)
				e.st.PromptBySource[SourceCompute] += float64(s.PromptLen - s.cached)
			} else {
				// One decode step per token: its gap is the step time,
				// longer the more requests share the batch.
				e.st.ITL.Observe(now - s.lastTok)
			}
			s.lastTok = now
			if s.generated >= s.OutputLen {
				e.finish(s, now)
				continue
			}
		}
		keep = append(keep, s)
	}
	clear(e.running[len(keep):])
	e.running = keep
}

func (e *Engine) finish(s *seq, now time.Duration) {
	e.cache.Release(s.blocks)
	s.blocks = nil
	e.releaseWindow(s)
	reason := FinishStop
	if s.Length {
		reason = FinishLength
	}
	e.st.Finished[reason]++
	e.st.E2E.Observe(now - s.Arrival)
	e.results = append(e.results, Result{
		Req: s.Request, Status: Finished, CachedTokens: s.cached, Queue: s.queue, TTFT: s.ttft,
		E2E: now - s.Arrival, FinishReason: FinishReasons[reason], End: now,
	})
}

// schedule picks the work of the step starting at now: running requests
// first (preempting from the back when blocks run out), then waiting ones in
// order while the running limit, the token budget and the cache allow.
func (e *Engine) schedule(now time.Duration) (prefill, decode int) {
	budget := e.cfg.TokenBudget
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.known()-s.computed, budget)
		for !e.allocate(s, n) {
			last := len(e.running) - 1
			e.preempt(last)
			if last == i {
				break
			}
		}
		if i >= len(e.running) || e.running[i] != s {
			break // s itself was preempted: nothing left to run after it
		}
		e.run(s, n, &budget, &prefill, &decode)
	}
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxRunning && budget > 0 {
		s := e.waiting[0]
		if s.Arrival > now {
			break // submitted ahead of its arrival time within a clock quantum
		}
		// vLLM always computes at least the last known token.
		maxHit := min((s.known()-1)/kvcache.BlockSize, len(s.Hashes))
		m := e.hit(s, maxHit)
		ext := e.external(s, m, maxHit)
		if s.Transfer {
			ext = maxHit - m
		}
		computed := (m + ext) * kvcache.BlockSize
		n := min(s.known()-computed, budget)
		need := blocksFor(computed+n) - m
		if need+e.cache.Idle(s.Hashes, m)+e.windowNeed(s, m, need) > e.cache.Free() {
			break
		}
		s.blocks = e.cache.Acquire(s.Hashes, m, s.blocks[:0])
		e.acquireWindow(s, m) // before any allocation can evict its blocks
		s.blocks, _ = e.cache.Allocate(need, s.blocks)
		e.growWindow(s, need)
		if s.Transfer {
			e.transfer(ext)
		} else {
			e.load(s, m, ext)
		}
		s.computed, s.stored, s.loaded = computed, m, m+ext
		e.st.PrefixQueries += float64(s.known())
		e.st.PrefixHits += float64(m * kvcache.BlockSize)
		if !s.started {
			s.started, s.cached, s.queue = true, computed, now-s.Arrival
			s.external = ext * kvcache.BlockSize
			e.st.Queue.Observe(s.queue)
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		e.run(s, n, &budget, &prefill, &decode)
	}
	return prefill, decode
}

// run schedules n tokens of s in this step and caches the blocks they fill.
func (e *Engine) run(s *seq, n int, budget, prefill, decode *int) {
	s.scheduled = n
	*budget -= n
	if n == 1 && s.generated > 0 {
		*decode++
	} else {
		*prefill += n
	}
	full := min((s.computed+n)/kvcache.BlockSize, len(s.Hashes))
	if full > s.stored {
		var parent uint64
		if s.stored > 0 {
			parent = s.Hashes[s.stored-1]
		}
		bs := kvcache.BlockSize
		e.cache.Store(s.blocks[s.stored:full], s.Hashes[s.stored:full], parent, s.stored > 0, s.Tokens[s.stored*bs:full*bs])
		if n := min(s.loaded, full) - s.stored; n > 0 {
			e.cache.MarkLoaded(n)
		}
		e.truth.Stored += uint64(full - s.stored)
		if e.hybrid {
			e.sw.Store(s.sw[s.stored:full], s.Hashes[s.stored:full], parent, s.stored > 0, s.Tokens[s.stored*bs:full*bs])
		}
		s.stored = full
	}
	e.offer(s, full)
}

// allocate gives s the blocks to hold n more tokens.
func (e *Engine) allocate(s *seq, n int) bool {
	e.slideWindow(s)
	need := blocksFor(s.computed+n) - len(s.blocks)
	if need <= 0 {
		return true
	}
	if e.hybrid && 2*need > e.cache.Free() {
		return false // group 1 takes as many new blocks as group 0
	}
	var ok bool
	s.blocks, ok = e.cache.Allocate(need, s.blocks)
	if ok {
		e.growWindow(s, need)
	}
	return ok
}

// preempt frees running[i]'s blocks and puts it back at the front of the
// queue; it will recompute its prompt and generated tokens (vLLM's
// recompute preemption).
func (e *Engine) preempt(i int) {
	s := e.running[i]
	e.cache.Release(s.blocks)
	s.blocks = s.blocks[:0]
	e.releaseWindow(s)
	s.computed, s.scheduled, s.stored = 0, 0, 0
	e.running = append(e.running[:i], e.running[i+1:]...)
	e.waiting = append([]*seq{s}, e.waiting...)
	e.st.Preemptions++
}

func blocksFor(tokens int) int { return (tokens + kvcache.BlockSize - 1) / kvcache.BlockSize }

// Reset restarts the engine: every request it holds is aborted (returned),
// the cache is new and empty, the metrics start from zero.
func (e *Engine) Reset(now time.Duration) []Result {
	var out []Result
	for _, s := range append(e.running, e.waiting...) {
		out = append(out, Result{Req: s.Request, Status: Aborted, CachedTokens: s.cached, Queue: s.queue, TTFT: s.ttft,
			E2E: now - s.Arrival, FinishReason: FinishReasons[FinishAbort], End: now})
	}
	e.mu.Lock()
	e.build()
	e.running, e.waiting, e.inStep, e.next = nil, nil, false, now
	e.truth = Truth{}
	e.mu.Unlock()
	return out
}

// SetBlocks sizes the cache the next Reset creates (0: the default): a
// process restarted with another share of its GPU memory for the KV cache.
func (e *Engine) SetBlocks(n int) {
	if n <= 0 {
		n = DefaultConfig().NumBlocks
	}
	e.mu.Lock()
	e.cfg.NumBlocks = n
	e.mu.Unlock()
}

// ClearCache is an explicit prefix-cache reset: AllBlocksCleared is emitted
// with the next step's events (or by Flush when idle).
func (e *Engine) ClearCache() {
	e.cache.Clear() // every group
	if e.host != nil {
		// The connector's tier is reset with the prefix cache: subscribers
		// drop every tier of an engine on AllBlocksCleared.
		e.host.Clear()
	}
	e.mu.Lock()
	e.st.Resident = 0
	e.mu.Unlock()
}

// Flush returns events produced outside a step (ClearCache while idle).
func (e *Engine) Flush() []kvcache.Event {
	ev := e.takeEvents()
	e.truth.Events += uint64(len(ev))
	return ev
}

// Snapshot returns a copy of the engine's metrics.
func (e *Engine) Snapshot() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.clone()
}

// transfer receives ext blocks of a decode leg's prompt from its prefill
// worker as it is admitted: the step waits for them, as for a CPU tier's
// load, and they count as external_kv_transfer prompt tokens.
func (e *Engine) transfer(ext int) {
	if ext <= 0 {
		return
	}
	e.loads += ext
	e.st.TransferBlocks += float64(ext)
	e.st.Transfers++
}
