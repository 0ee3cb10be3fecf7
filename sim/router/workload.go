// Package router is the simulated router: a synthetic workload (multi-turn
// chats, shared system prompts of thousands of tokens, RAG documents, think
// times), a routing policy (cache-aware with a load threshold, or
// round-robin), the kvtop audit JSONL it writes, and its vllm-router style
// /metrics. It calls the simulated workers in-process: no HTTP traffic.
package router

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/kvcache"
)

// vocab is the token id range (Qwen's vocabulary size). Token ids are
// synthetic: there is never any text.
const vocab = 151936

type prefix struct {
	tokens []uint32
	hashes []uint64
}

type session struct {
	id        int // in order of start (a trace's agent_context session_id)
	tokens    []uint32
	hashes    []uint64
	turnsLeft int
	rag       bool
	readyAt   time.Duration
}

// Workload generates requests: a Poisson stream at Rate requests per
// (virtual) second. Each arrival continues a conversation whose think time
// is over, or starts a new one: a chat on one of a few long system prompts,
// or a RAG question over a popular document (Zipf), which may itself go on
// for a few turns. The prompt of each turn is the whole conversation so far.
// A hot document (SetHot) adds its own stream of new conversations.
type Workload struct {
	sessions int // conversations started
	rng      *rand.Rand
	hasher   kvcache.Hasher
	systems  []prefix
	docs     [][]uint32
	combos   map[[2]int]*prefix // system prompt + document, hashed once
	ready    readyHeap
	rate     float64
	next     time.Duration // next arrival
	zipf     []float64     // cumulative document popularity

	// A hot document draws its own Poisson stream of new conversations,
	// on top of the rate: a surge of users of one app, whatever the pool.
	hotDoc  int           // index into docs of the hot document, -1 when off
	hotRate float64       // new conversations on it per second
	hotNext time.Duration // next of them

	// ThinkMean is the mean think time between turns.
	ThinkMean time.Duration

	// reportFull is the share of requests that ask for
	// kv_cache_report_mode "full".
	reportFull float64

	// unique is the share of new conversations that begin with a prompt
	// of tokens nobody sent before (no system prompt, no document), and
	// uniqueTurns how many turns they last.
	unique      float64
	uniqueTurns int
}

// NewWorkload builds the prompts of one run from seed.
func NewWorkload(seed uint64, hasher kvcache.Hasher, rate float64) *Workload {
	w := &Workload{
		rng:       rand.New(rand.NewPCG(seed, 0x776f726b)),
		hasher:    hasher,
		combos:    map[[2]int]*prefix{},
		rate:      rate,
		hotDoc:    -1,
		ThinkMean: 4 * time.Second,
	}
	// One system prompt (one app) per 3 requests a second, 4 to 64: a
	// bigger pool serves more apps, and a cache-aware router keeps each
	// app's new chats on the prompt's first holder, which one worker can
	// serve only up to a point.
	for i := 0; i < min(max(4, int(math.Round(rate/3))), 64); i++ {
		t := w.tokens(1500 + w.rng.IntN(2500))
		w.systems = append(w.systems, prefix{tokens: t, hashes: hasher.Extend(nil, t)})
	}
	for i := 0; i < 48; i++ {
		w.docs = append(w.docs, w.tokens(600+w.rng.IntN(2400)))
	}
	// The last document is kept for hot-prefix: nobody asks about it until
	// it suddenly becomes popular.
	var acc float64
	for i := 0; i < len(w.docs)-1; i++ {
		acc += 1 / math.Pow(float64(i+1), 1.1)
		w.zipf = append(w.zipf, acc)
	}
	w.next = w.expGap()
	return w
}

func (w *Workload) tokens(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(w.rng.IntN(vocab))
	}
	return t
}

// SetRate changes the arrival rate from now on (0 stops new arrivals, the
// hot document's too).
func (w *Workload) SetRate(now time.Duration, rate float64) {
	w.rate = rate
	w.next = now + w.expGap()
	if rate <= 0 {
		w.SetHot(now, 0)
	}
}

// Rate is the current arrival rate.
func (w *Workload) Rate() float64 { return w.rate }

// SetHot makes rate new conversations a second, on top of the workload's
// rate, ask about one document that nobody asked about before (rate 0
// turns it off).
func (w *Workload) SetHot(now time.Duration, rate float64) {
	if rate <= 0 {
		w.hotDoc, w.hotRate = -1, 0
		return
	}
	w.hotDoc, w.hotRate = len(w.docs)-1, rate
	w.hotNext = now + gap(w.rng, rate)
}

// SetReportFull makes a share f of requests ask for kv_cache_report_mode
// "full" (0: none).
func (w *Workload) SetReportFull(f float64) { w.reportFull = f }

// SetUnique makes a share f of new conversations begin with a prompt of
// tokens never sent before, and last turns turns (at least one): nothing
// in any cache can serve their first turn (f 0: none).
func (w *Workload) SetUnique(f float64, turns int) { w.unique, w.uniqueTurns = f, max(turns, 1) }

// Unique is the share of new conversations that are unique prompts.
func (w *Workload) Unique() float64 { return w.unique }

// HotRate is the rate of new conversations on the hot document (0: off).
func (w *Workload) HotRate() float64 { return w.hotRate }

func (w *Workload) expGap() time.Duration { return gap(w.rng, w.rate) }

// gap is the time to the next arrival of a Poisson stream of rate per second.
func gap(rng *rand.Rand, rate float64) time.Duration {
	if rate <= 0 {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
}

// Arrivals returns the requests arriving before until, in arrival order.
func (w *Workload) Arrivals(until time.Duration) []*engine.Request {
	var out []*engine.Request
	for {
		hot := w.hotDoc >= 0 && w.hotNext < w.next
		switch {
		case hot && w.hotNext < until:
			out = append(out, w.turn(w.hotSession(), w.hotNext))
			w.hotNext += gap(w.rng, w.hotRate)
		case !hot && w.next < until:
			out = append(out, w.turn(w.pick(w.next), w.next))
			w.next += w.expGap()
		default:
			return out
		}
	}
}

// hotSession is a new conversation about the hot document. One app, one
// system prompt: the whole surge shares one prefix.
func (w *Workload) hotSession() *session {
	return w.start(w.combo(0, w.hotDoc), true, 1+w.rng.IntN(2))
}

// pick returns a conversation whose user is back from thinking, or a new one.
func (w *Workload) pick(now time.Duration) *session {
	for len(w.ready) > 0 && w.ready[0].readyAt <= now {
		s := heap.Pop(&w.ready).(*session)
		if now-s.readyAt < time.Minute { // users who waited longer left
			return s
		}
	}
	// Drawn only for a share below 1: runs without unique prompts keep
	// their random sequence.
	if w.unique >= 1 || w.unique > 0 && w.rng.Float64() < w.unique {
		// As long as a chat's opening turn with its system prompt.
		return w.start(&prefix{tokens: w.tokens(1500 + w.rng.IntN(2500))}, false, w.uniqueTurns)
	}
	sys := w.rng.IntN(len(w.systems))
	if w.rng.Float64() < 0.5 {
		return w.start(&w.systems[sys], false, 2+w.rng.IntN(5))
	}
	return w.start(w.combo(sys, w.zipfDoc()), true, 1+w.rng.IntN(3))
}

// start begins a conversation on prefix p.
func (w *Workload) start(p *prefix, rag bool, turns int) *session {
	// The conversation's own copy: later turns append to it.
	w.sessions++
	return &session{
		id:        w.sessions,
		tokens:    append(make([]uint32, 0, len(p.tokens)+2048), p.tokens...),
		hashes:    append(make([]uint64, 0, len(p.hashes)+128), p.hashes...),
		turnsLeft: turns, rag: rag,
	}
}

func (w *Workload) zipfDoc() int {
	x := w.rng.Float64() * w.zipf[len(w.zipf)-1]
	for i, c := range w.zipf {
		if x <= c {
			return i
		}
	}
	return len(w.zipf) - 1
}

func (w *Workload) combo(sys, doc int) *prefix {
	k := [2]int{sys, doc}
	if p, ok := w.combos[k]; ok {
		return p
	}
	s := &w.systems[sys]
	t := append(append([]uint32(nil), s.tokens...), w.docs[doc]...)
	p := &prefix{tokens: t, hashes: w.hasher.Extend(append([]uint64(nil), s.hashes...), t)}
	w.combos[k] = p
	return p
}

// turn appends a user message to s and the answer the model will give, and
// returns the request. Its prompt is the whole conversation so far.
func (w *Workload) turn(s *session, now time.Duration) *engine.Request {
	user, out, maxTokens := 30+w.rng.IntN(170), 60+w.rng.IntN(240), 256
	if s.rag {
		user, out = 15+w.rng.IntN(60), 30+w.rng.IntN(150)
	}
	s.tokens = append(s.tokens, w.tokens(user)...)
	promptLen := len(s.tokens)
	length := out >= maxTokens
	out = min(out, maxTokens)
	s.tokens = append(s.tokens, w.tokens(out)...)
	s.hashes = w.hasher.Extend(s.hashes, s.tokens)
	s.turnsLeft--
	// Drawn only for a share below 1: runs without full reports keep
	// their random sequence.
	full := w.reportFull >= 1 || w.reportFull > 0 && w.rng.Float64() < w.reportFull
	return &engine.Request{
		Tokens: s.tokens[:len(s.tokens):len(s.tokens)], Hashes: s.hashes[:len(s.hashes):len(s.hashes)],
		PromptLen: promptLen, OutputLen: out, Length: length, Arrival: now, Tag: s, ReportFull: full,
	}
}

// finished schedules the conversation's next turn after a think time, or
// ends it (it had no turns left, or the request failed: the user gave up).
func (w *Workload) finished(s *session, ok bool, end time.Duration) {
	if s == nil || !ok || s.turnsLeft <= 0 {
		return
	}
	think := time.Duration(w.rng.ExpFloat64() * float64(w.ThinkMean))
	s.readyAt = end + min(think, 30*time.Second)
	heap.Push(&w.ready, s)
	if len(w.ready) > 4096 { // bound memory under absurd rates
		heap.Pop(&w.ready)
	}
}

type readyHeap []*session

func (h readyHeap) Len() int           { return len(h) }
func (h readyHeap) Less(i, j int) bool { return h[i].readyAt < h[j].readyAt }
func (h readyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)        { *h = append(*h, x.(*session)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}
