package kvevents

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/streamhealth"
	"github.com/kvtop/kvtop/collectors/internal/zlink"
)

// Endpoint is one publisher kvtop connects a SUB to: one per (worker, rank).
type Endpoint struct {
	Worker string
	Rank   int
	Events string // where the publisher's PUB listens, e.g. tcp://10.0.0.5:5557
	Replay string // its ROUTER, "" if it has none
	Topic  string // subscription prefix ("" = everything)
	// FirstSeq is the seq every run of the publisher starts at: 0 (vLLM,
	// SGLang: the default) or 1 (llm-d-inference-sim, some TRT-LLM
	// builds). No seq below it exists: a first batch at FirstSeq is the
	// whole history, and a join replay is asked from FirstSeq.
	FirstSeq uint64
}

// Options configure the collector. Zero durations, counts and sizes take
// the defaults.
type Options struct {
	Endpoints []Endpoint // one per (worker, rank): kvtop CONNECTS a SUB to each
	Bind      string     // centralized layout: kvtop BINDS one SUB here ("" = off)
	// ResolveEndpoint maps the id in a kv@<id>@<model> topic (centralized
	// layout) to its publisher: of the Endpoint, Worker, Rank, Replay and
	// FirstSeq are used ("" Worker, or nil: the id names the worker).
	ResolveEndpoint func(topicID string) Endpoint
	ReplayTimeout   time.Duration // default 2s: give up after this long without progress
	ReplayDeadline  time.Duration // default 30s: a replay exchange never takes longer
	ReplayCooldown  time.Duration // default 5s between replays of one publisher
	MaxReplays      int           // concurrent replays, default 4
	HoldBack        int           // live batches held behind a running replay, default 10000
	StatusEvery     time.Duration // min interval between StreamStatus sends per publisher, default 250ms
	Incidents       int           // incidents kept per publisher, default 50
	// Centralized layout bounds: publishers tracked at once (default
	// 4096; batches of more are refused and counted), and how long a
	// publisher may stay silent before it is forgotten (default 10m).
	MaxPublishers int
	IdleEvict     time.Duration
	// MaxMsgSize is the largest frame (a batch payload) any socket takes,
	// libzmq's ZMQ_MAXMSGSIZE, default 64 MiB. libzmq drops the connection
	// on a bigger one before reading it; kvtop counts it in Oversized.
	MaxMsgSize int64
	// QueueBytes bounds the decoded batches kvtop holds, default 256 MiB.
	// A quarter is for live batches on their way from the SUB readers to
	// the state goroutine (over it a batch is dropped and counted: a gap).
	// The rest is for what replays hold: the live batches held behind them,
	// which may be all of that quarter after drops, and replayed batches
	// not yet applied; at it a replay reader waits for the pool, and a
	// replay with live batches behind it is given up. Either part always
	// takes one batch when empty, however big (up to MaxMsgSize).
	QueueBytes int64
	// WakeEvery is how often at most a SUB reader that keeps up wakes for
	// its socket, default 200ms (negative: at every message). Each wake
	// costs the reader, the state goroutine and the pool a scheduling
	// round and a few cgo calls, so batches that arrive between wakes are
	// taken together: a busy 16-worker pool's ~560 wakes a second become
	// ~80, and its console's CPU fell by a third (docs/PERFORMANCE.md).
	// Events are then up to this much later in the pool: as late as
	// decision lines, which their files' poll (200ms) delays as much, and
	// within the fastest refresh (250ms). A reader that is behind (it took
	// twice its SUB's queue since its last pause) does not pause, and a
	// stream fast enough to fill that queue within a pause (5 120
	// batches/s at the defaults) is paused only as long as that takes:
	// one stream is never capped by the pacing. Link events (connect,
	// disconnect, a redial) end a pause at once.
	WakeEvery time.Duration
	// Dynamic: endpoints come and go while Run runs (Collector.Add,
	// Collector.Remove), as the targets layer follows discovery; New then
	// needs none at start. All of them share one ZMQ context, one state
	// goroutine and the budgets above, however many there are.
	Dynamic bool
}

// subHWM bounds the messages libzmq queues per SUB before dropping (a drop
// shows up as a seq gap, which replay repairs). The readers drain it
// continuously into kvtop's own budgeted queue, so it stays short unless
// a reader lags (starved of CPU, decoding big batches). libzmq counts
// messages, not bytes: 10 000 of a hostile publisher's 1 MB batches took 4
// GiB in seconds. So the count follows the budget: the hand-off quarter
// over 64 KiB (a large vLLM step), 1 024 by default — about 100 ms of
// batches at 10 000 a second, and 1 024 × the message size at worst
// (limits.event_message_bytes bounds that size). Never below 256: a burst
// under CPU starvation must not turn into gaps.
func (o *Options) subHWM() int {
	return int(min(max(o.handoffBudget()/subTypicalMsg, minSubHWM), maxHWM))
}

const (
	subTypicalMsg = 64 << 10
	minSubHWM     = 256
	maxHWM        = 10000
)

// handoffMsgs is the capacity of the readers' channel to the state
// goroutine, in messages; QueueBytes bounds it in bytes. It is sized for a
// thousand publishers: a 1 000-worker pool sends ~3 300 batches a second,
// and with 1 024 slots (0.3 s of them) a loaded machine's scheduling
// hiccups dropped a quarter of its live batches (each a gap and a
// replay). 8 192 slots are 2.5 s of such a pool; the buffer (2.2 MB, 272
// bytes a slot) is scanned by every GC. A var so that a test can shrink it.
var handoffMsgs = 8192

func (o *Options) defaults() {
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 2 * time.Second
	}
	if o.ReplayDeadline <= 0 {
		o.ReplayDeadline = 30 * time.Second
	}
	if o.ReplayCooldown <= 0 {
		o.ReplayCooldown = 5 * time.Second
	}
	streamhealth.Bounds{MaxReplays: &o.MaxReplays, HoldBack: &o.HoldBack, Incidents: &o.Incidents,
		MaxPublishers: &o.MaxPublishers, StatusEvery: &o.StatusEvery, IdleEvict: &o.IdleEvict}.Defaults()
	if o.WakeEvery == 0 {
		o.WakeEvery = 200 * time.Millisecond
	}
	if o.MaxMsgSize <= 0 {
		o.MaxMsgSize = 64 << 20
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = 256 << 20
	}
}

// handoffBudget and heldBudget split QueueBytes.
func (o *Options) handoffBudget() int64 { return o.QueueBytes / 4 }
func (o *Options) heldBudget() int64    { return o.QueueBytes - o.QueueBytes/4 }

// Bounds of the DEALER's receive queue (replayHWM).
const (
	minReplayHWM = 16
	maxReplayHWM = 10000
)

// replayHWM is the DEALER's receive high-water mark: libzmq queues at most
// this many replies, each at most MaxMsgSize. The replay reader drains it
// continuously into kvtop's budgeted queue, where a burst of sane sizes
// waits instead; see doc.go for the trade-off.
func (o *Options) replayHWM() int {
	return int(min(max(o.heldBudget()/o.MaxMsgSize, minReplayHWM), maxReplayHWM))
}

// Collector subscribes to KV event streams. It implements
// collectors.Collector.
type Collector struct {
	o Options

	mu     sync.Mutex
	run    *runner // while Run runs
	ran    bool    // Run was called: Add and Remove go to the runner
	seenEP map[string]bool
}

// New validates the options (endpoint syntax, no duplicate publisher).
func New(o Options) (*Collector, error) {
	o.defaults()
	if len(o.Endpoints) == 0 && o.Bind == "" && !o.Dynamic {
		return nil, fmt.Errorf("kvevents: no event endpoints and no events_bind")
	}
	seen := map[string]bool{}
	if err := checkEndpoints(o.Endpoints, seen); err != nil {
		return nil, err
	}
	if o.Bind != "" {
		if err := checkEndpoint(o.Bind, true); err != nil {
			return nil, fmt.Errorf("kvevents: events_bind: %w", err)
		}
	}
	return &Collector{o: o, seenEP: seen}, nil
}

// checkEndpoints validates eps, none of them among seen (which it adds
// them to), with a message naming the publisher.
func checkEndpoints(eps []Endpoint, seen map[string]bool) error {
	for _, ep := range eps {
		name := fmt.Sprintf("%s events rank %d", ep.Worker, ep.Rank)
		if ep.Worker == "" {
			return fmt.Errorf("kvevents: endpoint %q has no worker name", ep.Events)
		}
		if err := checkEndpoint(ep.Events, false); err != nil {
			return fmt.Errorf("kvevents: %s: %w", name, err)
		}
		if ep.Replay != "" {
			if err := checkEndpoint(ep.Replay, false); err != nil {
				return fmt.Errorf("kvevents: %s: replay: %w", name, err)
			}
		}
		if seen[name] {
			return fmt.Errorf("kvevents: %s is configured twice", name)
		}
		seen[name] = true
	}
	return nil
}

// ErrStopped is returned by Add once Run has returned.
var ErrStopped = errors.New("kvevents: collector stopped")

// Add starts a stream for each of eps (one per worker and rank) beside
// the others: before Run, or while it runs (then it returns once the
// streams exist, announced as connecting). A (worker, rank) already
// streamed is an error and adds nothing. The streams share the
// collector's ZMQ context, state goroutine and budgets.
func (c *Collector) Add(eps ...Endpoint) error {
	c.mu.Lock()
	r, ran := c.run, c.ran
	if !ran {
		defer c.mu.Unlock()
		if err := checkEndpoints(eps, cloneSet(c.seenEP)); err != nil {
			return err
		}
		_ = checkEndpoints(eps, c.seenEP)
		c.o.Endpoints = append(c.o.Endpoints, eps...)
		return nil
	}
	c.mu.Unlock()
	if r == nil {
		return ErrStopped
	}
	done := make(chan error, 1)
	select {
	case r.ctl <- ctlMsg{add: eps, done: done}:
	case <-r.ctx.Done():
		return ErrStopped
	}
	select {
	case err := <-done:
		return err
	case <-r.ctx.Done():
		return ErrStopped
	}
}

// Remove stops every stream of worker: its SUB readers and replays end,
// what they held is given back to the budgets, and once Remove returns
// no observation of those streams is sent any more (a target that left
// says nothing after its leaving). Unknown workers are ignored.
func (c *Collector) Remove(worker string) {
	c.mu.Lock()
	r, ran := c.run, c.ran
	if !ran {
		defer c.mu.Unlock()
		kept := c.o.Endpoints[:0]
		for _, ep := range c.o.Endpoints {
			if ep.Worker == worker {
				delete(c.seenEP, fmt.Sprintf("%s events rank %d", ep.Worker, ep.Rank))
				continue
			}
			kept = append(kept, ep)
		}
		c.o.Endpoints = kept
		return
	}
	c.mu.Unlock()
	if r == nil {
		return
	}
	done := make(chan error, 1)
	select {
	case r.ctl <- ctlMsg{remove: worker, done: done}:
	case <-r.ctx.Done():
		return
	}
	select {
	case <-done:
	case <-r.ctx.Done():
	}
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ctlMsg asks the state goroutine to add or remove streams.
type ctlMsg struct {
	add    []Endpoint
	remove string
	done   chan error
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "kvevents" }

// Run receives until ctx is done. Every socket lives in one goroutine: a
// reader per SUB (decodes off the state goroutine), a goroutine per replay
// (its own DEALER), and one state goroutine (this one) that owns every
// publisher's seq machine and sends observations in apply order.
func (c *Collector) Run(ctx context.Context, out chan<- collectors.Observation) error {
	zctx, err := zmq.NewContext()
	if err != nil {
		return fmt.Errorf("kvevents: zmq context: %w", err)
	}
	// libzmq allows 1 024 sockets a context by default: a pool of a
	// thousand workers (a SUB each, a DEALER per replay) failed with "too
	// many open files". Raise it as far as this libzmq accepts.
	for n := 1 << 16; n > 1024; n /= 2 {
		if zctx.SetMaxSockets(n) == nil {
			break
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{
		o: &c.o, ctx: ctx, zctx: zctx, out: out,
		pending: collectors.NewPending(),
		msgs:    make(chan inMsg, handoffMsgs),
		results: make(chan *replayChunk, 16),
		ctl:     make(chan ctlMsg),
		sem:     make(chan struct{}, c.o.MaxReplays),
		bySrc:   map[int]*stream{},
		byTopic: map[topicKey]*stream{},
		resolve: map[string]resolved{},
		gone:    map[topicKey]*tombstone{},
	}
	r.bindRd = &subReader{src: -1, ctx: ctx, cancel: func() {}}
	c.mu.Lock()
	c.run, c.ran = r, true
	for _, ep := range c.o.Endpoints {
		r.start(ep)
	}
	c.mu.Unlock()
	if c.o.Bind != "" {
		r.readers.Add(1)
		go func() {
			defer r.readers.Done()
			r.subscribe(r.bindRd, c.o.Bind, true, "")
		}()
	}
	r.loop()
	c.mu.Lock()
	c.run = nil
	c.mu.Unlock()
	cancel()
	r.readers.Wait()
	r.replays.Wait()
	_ = zctx.Term()
	return nil
}

// start opens the stream of one endpoint and its SUB reader (state
// goroutine, or Run before it).
func (r *runner) start(ep Endpoint) *stream {
	src := r.nextSrc
	r.nextSrc++
	s := newStream(r, r.o, ep.Worker, ep.Rank, ep.Events, ep.Replay, ep.Topic, ep.FirstSeq, true)
	ctx, cancel := context.WithCancel(r.ctx)
	s.rd = &subReader{src: src, ctx: ctx, cancel: cancel}
	r.bySrc[src] = s
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		r.subscribe(s.rd, ep.Events, false, ep.Topic)
	}()
	return s
}

// control adds or removes streams (state goroutine).
func (r *runner) control(m ctlMsg, now time.Time) {
	if m.remove != "" {
		for src, s := range r.bySrc {
			if s.St.Worker != m.remove {
				continue
			}
			s.rd.cancel()
			if j := s.job; j != nil {
				if j.cancel != nil {
					j.cancel() // its goroutine gives back what it holds
				}
				// Chunks already on their way find no job and give
				// theirs back (onChunk).
				r.held.Add(-s.heldBytes)
				s.job, s.held, s.heldBytes = nil, nil, 0
			}
			delete(r.bySrc, src)
		}
		m.done <- nil
		return
	}
	seen := map[string]bool{}
	for _, s := range r.bySrc {
		seen[s.source] = true
	}
	if err := checkEndpoints(m.add, seen); err != nil {
		m.done <- err
		return
	}
	for _, ep := range m.add {
		r.start(ep).flush(now, true)
	}
	m.done <- nil
}

// runner is the state of one Run.
type runner struct {
	o       *Options
	ctx     context.Context
	zctx    *zmq.Context
	out     chan<- collectors.Observation
	msgs    chan inMsg
	results chan *replayChunk
	sem     chan struct{} // bounds concurrent replays across publishers
	replays sync.WaitGroup
	ids     uint64
	ctl     chan ctlMsg
	readers sync.WaitGroup

	// Bytes of decoded batches (batchCost) kvtop holds, against the two
	// halves of QueueBytes: handoff is what the readers have sent and the
	// state goroutine not yet taken; held is what replays hold (the live
	// batches behind them, replayed batches not yet applied).
	handoff atomic.Int64
	held    atomic.Int64
	// pending is what was sent to the pool and it has not applied yet,
	// bounded by the hand-off quarter too (emit).
	pending *collectors.Pending
	bindRd  *subReader // the bound SUB's reader (its drops)
	nextSrc int        // the next endpoint index: never reused
	// shedding: makeRoom is giving replays up (state goroutine only).
	shedding bool

	bySrc     map[int]*stream // connect mode, by endpoint index (removed ones are gone)
	byTopic   map[topicKey]*stream
	resolve   map[string]resolved     // by topic id, while it has streams
	gone      map[topicKey]*tombstone // centralized publishers forgotten while idle
	refused   [2]refusal              // bad rank, too many publishers
	bindDrops refusal                 // the bound SUB's drops reported so far
}

// testHookHandle, when set (tests only, before Run), is called by the state
// goroutine before it handles each message from a reader (chunk false) or
// replay chunk (true): a slow pool.
var testHookHandle func(chunk bool)

// testHookTick, when set (tests only, before Run), is called at each of the
// state goroutine's ticks, busy when it is the fast one.
var testHookTick func(busy bool)

func (r *runner) loop() {
	now := time.Now()
	for src := range r.nextSrc {
		r.bySrc[src].flush(now, true) // announce every configured publisher as connecting, in order
	}
	// The tick matters only while a stream owes a status held back by
	// StatusEvery or waits out a replay cooldown, and only an input makes
	// one do so: after a tick that finds neither, it slows to idleTick
	// (readers' drops and idle publishers need no finer), and the next
	// input speeds it up again. An idle pool's state goroutine wakes once a
	// second instead of ten times.
	fast := min(r.o.StatusEvery/2, 100*time.Millisecond)
	tick := time.NewTicker(fast)
	defer tick.Stop()
	busy := true
	input := func() {
		if !busy {
			tick.Reset(fast)
			busy = true
		}
	}
	hook := testHookHandle
	for {
		select {
		case <-r.ctx.Done():
			return
		case m := <-r.msgs:
			if hook != nil {
				hook(false)
			}
			r.handle(m)
			input()
		case m := <-r.ctl:
			r.control(m, time.Now())
			input()
		case c := <-r.results:
			if hook != nil {
				hook(true)
			}
			c.stream.onChunk(c, time.Now())
			input()
		case now := <-tick.C:
			if testHookTick != nil {
				testHookTick(busy)
			}
			if !r.tick(now) && busy {
				tick.Reset(idleTick)
				busy = false
			}
		}
	}
}

// idleTick is the state goroutine's tick while no stream owes anything.
const idleTick = time.Second

// tick counts the readers' drops, starts replays whose cooldown has
// passed, sends held-back statuses and evicts idle publishers. It reports
// whether a stream still owes a status or waits to replay.
func (r *runner) tick(now time.Time) bool {
	r.countDrops(now)
	owes := false
	for _, s := range r.bySrc {
		owes = s.tick(now) || owes
	}
	for k, s := range r.byTopic {
		if s.idle(now) {
			r.evict(k, s, now)
		} else {
			owes = s.tick(now) || owes
		}
	}
	return owes
}

func (r *runner) handle(m inMsg) {
	now := m.at
	if m.src >= 0 && r.bySrc[m.src] == nil { // its endpoint was removed
		if m.kind == msgBatch {
			r.handoff.Add(-m.b.cost)
		}
		return
	}
	switch m.kind {
	case msgConnected:
		r.bySrc[m.src].onConnected(now)
	case msgDisconnected:
		r.bySrc[m.src].onDisconnected(now)
	case msgOversized:
		r.bySrc[m.src].onOversized(now)
	case msgError:
		r.emit(&collectors.SourceError{Source: r.sourceOf(m.src), Kind: m.errKind, Message: m.text, At: now})
	case msgBad:
		r.emit(&collectors.SourceError{Source: r.sourceOf(m.src), Kind: "decode", Message: m.text, At: now})
		if m.src >= 0 {
			s := r.bySrc[m.src]
			s.St.DecodeErrors++
			s.Dirty = true
			s.flush(now, false)
		}
	case msgBatch:
		r.handoff.Add(-m.b.cost)
		if s := r.streamFor(m); s != nil {
			s.onBatch(m.b, now)
		}
	}
}

// countDrops copies the readers' drop counts into the streams' status; the
// bound SUB's drops, which no stream can own, are said as an error.
func (r *runner) countDrops(now time.Time) {
	for _, s := range r.bySrc {
		if n := s.rd.drops.Load(); n != s.St.Dropped {
			s.onDropped(n, now)
		}
	}
	if n := r.bindRd.drops.Load(); n != r.bindDrops.n && (r.bindDrops.said.IsZero() || now.Sub(r.bindDrops.said) >= refusalEvery) {
		r.bindDrops.n, r.bindDrops.said = n, now
		r.emit(&collectors.SourceError{Source: "events bind " + r.o.Bind, Kind: "too_large", At: now,
			Message: dropMessage(n, r.o.handoffBudget())})
	}
}

// dropMessage says why live batches were dropped.
func dropMessage(n uint64, budget int64) string {
	return fmt.Sprintf("kvtop fell behind: %d live batch(es) dropped so far, its event queue was over %s; they show as gaps, which replay repairs",
		n, zlink.MiB(budget))
}

func (r *runner) sourceOf(src int) string {
	if src >= 0 {
		return r.bySrc[src].source
	}
	return "events bind " + r.o.Bind
}

// emit implements env: blocking send (the pool must not lose an
// observation), abandoned only on shutdown.
func (r *runner) emit(o collectors.Observation) {
	// What waits in the pool's input is bounded by bytes too: while the
	// pool is behind, this waits, the readers' hand-off fills and they
	// drop (counted, a gap replay repairs) instead of growing.
	r.pending.Send(r.ctx, r.out, o, r.o.handoffBudget())
}

func (r *runner) nextID() uint64 {
	r.ids++
	return r.ids
}

// holdBytes implements env: n bytes more (negative: fewer) held for
// replays.
func (r *runner) holdBytes(n int64) {
	v := r.held.Add(n)
	if hook := testHookHeld; hook != nil && n > 0 {
		hook(v)
	}
}

// testHookHeld, when set (tests only, before Run), is called by the state
// goroutine with the bytes held for replays after it held a live batch.
var testHookHeld func(bytes int64)

// makeRoom implements env: replays are given up, the publisher holding the
// most first, until n more bytes fit what replays may hold (or nothing is
// left to give up: the rest is replayed batches on their way, which the
// replays themselves keep within the budget).
func (r *runner) makeRoom(n int64, now time.Time) {
	if r.shedding {
		return // giving a replay up applies held batches, which may hold again
	}
	r.shedding = true
	defer func() { r.shedding = false }()
	for r.held.Load()+n > r.o.heldBudget() {
		s := r.mostHeld()
		if s == nil {
			return
		}
		s.abandon(now, fmt.Sprintf("replay given up: replays would hold over %s (%d live batches, %s, behind this one)",
			zlink.MiB(r.o.heldBudget()), len(s.held), zlink.MiB(s.heldBytes)))
		s.flush(now, false)
	}
}

// tryAdd adds n to a unless that takes it over limit. empty: n always fits
// when a is 0 (a batch bigger than the whole budget still goes through,
// alone).
func tryAdd(a *atomic.Int64, n, limit int64, empty bool) bool {
	for {
		v := a.Load()
		if v+n > limit && !(empty && v == 0) {
			return false
		}
		if a.CompareAndSwap(v, v+n) {
			return true
		}
	}
}

// mostHeld is the publisher with a replay job holding the most bytes.
func (r *runner) mostHeld() *stream {
	var best *stream
	pick := func(s *stream) {
		if s.job != nil && s.heldBytes > 0 && (best == nil || s.heldBytes > best.heldBytes) {
			best = s
		}
	}
	for _, s := range r.bySrc {
		pick(s)
	}
	for _, s := range r.byTopic {
		pick(s)
	}
	return best
}

// Replayed batches are handed to the state goroutine in chunks of at most
// this many batches or bytes (batchCost), as they arrive.
const (
	replayChunkBatches = 256
	replayChunkBytes   = 1 << 20
)

// testHookReplayReply, when set (tests only, before Run), is called by a
// replay goroutine after each reply with the replayed bytes kvtop holds
// (every replay, and the live batches held behind them).
var testHookReplayReply func(held int64)

// errReplayFull stops a replay whose batches would take what replays hold
// over its budget.
var errReplayFull = errors.New("replay stopped: kvtop's replay queue is full")

// launchReplay implements env: the replay runs in its own goroutine with its
// own DEALER, never on the live path; at most MaxReplays run at once. Each
// reply is decoded as it arrives (its raw bytes dropped at once) and handed
// over in small chunks. The goroutine does not wait on the state goroutine
// while replies arrive and what replays hold is within its budget: chunks
// it cannot hand over yet wait in its queue (counted in held), so libzmq's
// queue stays short however slow the pool. At the budget it waits for its
// own batches to be applied; if the budget is held by others, it stops.
func (r *runner) launchReplay(s *stream, j *replayJob) {
	ctx, cancel := context.WithCancel(r.ctx)
	j.cancel = cancel
	fo := fetchOptions{endpoint: s.St.Replay, from: j.from, idle: r.o.ReplayTimeout, deadline: r.o.ReplayDeadline,
		maxMsg: r.o.MaxMsgSize, hwm: r.o.replayHWM()}
	fo.upTo = j.to + uint64(r.o.HoldBack) // also fill gaps among the held batches
	if fo.upTo < j.to {
		fo.upTo = EndSeq - 1
	}
	id := j.id
	hook := testHookReplayReply
	r.replays.Add(1)
	go func() {
		defer r.replays.Done()
		defer cancel()
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-r.sem }()
		var ready []*replayChunk // cut, not yet taken by the state goroutine
		var cur []inBatch
		var curBytes int64
		chunkBytes := min(replayChunkBytes, r.o.heldBudget()/8) // a chunk never fills the budget alone
		cut := func() {
			if len(cur) > 0 {
				ready = append(ready, &replayChunk{stream: s, id: id, batches: cur})
				cur, curBytes = nil, 0
			}
		}
		// Replies are taken raw as they arrive (a copy, their bytes counted
		// in held) and decoded one at a time between reads, so a burst
		// never waits in libzmq behind the decoder.
		var raw []ReplayReply
		var dec decoder
		decode := func() {
			rr := raw[0]
			raw[0] = ReplayReply{}
			raw = raw[1:]
			b, err := dec.decode(rr.Payload)
			cost := batchCost(len(rr.Topic), &b)
			r.held.Add(cost - rawCost(rr))
			cur = append(cur, inBatch{seq: rr.Seq, topic: rr.Topic, batch: b, err: err,
				fp: fingerprint(rr.Payload, b), cost: cost, at: time.Now()})
			curBytes += cost
			if hook != nil {
				hook(r.held.Load())
			}
			if len(cur) >= replayChunkBatches || curBytes >= chunkBytes {
				cut()
			}
		}
		send := func() {
			for len(ready) > 0 {
				select {
				case r.results <- ready[0]:
					ready[0] = nil
					ready = ready[1:]
				default:
					return
				}
			}
		}
		fo.work = func(quiet bool) bool {
			if len(raw) > 0 {
				decode()
			}
			if quiet {
				cut() // a trickle: hand over what came, not only full chunks
			}
			send()
			return len(raw) > 0
		}
		// room waits, when what replays hold is at its budget, for the
		// state goroutine to apply this replay's own batches (meanwhile
		// the publisher's buffers fill, as they would behind any slow
		// reader). false: the pool took nothing for ReplayTimeout (or the
		// budget is held by others: live batches behind replays), or
		// shutdown.
		room := func(n int64) bool {
			for len(raw) > 0 {
				decode()
			}
			cut()
			stuck := time.NewTimer(r.o.ReplayTimeout) // a pool that takes nothing for that long
			defer stuck.Stop()
			if len(ready) > 0 {
				select {
				case r.results <- ready[0]:
					ready[0] = nil
					ready = ready[1:]
					return true
				case <-stuck.C:
					return false
				case <-ctx.Done():
					return false
				}
			}
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for r.held.Load()+n > r.o.heldBudget() {
				select {
				case <-tick.C:
				case <-stuck.C:
					return false
				case <-ctx.Done():
					return false
				}
			}
			return true
		}
		full := false
		f := fetchReplay(ctx, r.zctx, fo, func(rr ReplayReply) bool {
			for !tryAdd(&r.held, rawCost(rr), r.o.heldBudget(), true) {
				if !room(rawCost(rr)) {
					full = ctx.Err() == nil
					return false
				}
			}
			raw = append(raw, rr)
			return true
		})
		if ctx.Err() != nil { // given up, or shutdown: nothing more is wanted
			for _, rr := range raw {
				r.held.Add(-rawCost(rr))
			}
			cut()
			for _, c := range ready {
				r.held.Add(-c.cost())
			}
			return
		}
		for len(raw) > 0 {
			decode()
		}
		if full {
			f.err = fmt.Errorf("%w (over %s held for replays)", errReplayFull, zlink.MiB(r.o.heldBudget()))
		}
		cut()
		ready = append(ready, &replayChunk{stream: s, id: id, done: true, f: f})
		for i, c := range ready {
			select {
			case r.results <- c:
			case <-ctx.Done():
				for _, c := range ready[i:] {
					r.held.Add(-c.cost())
				}
				return
			}
		}
	}()
}

// rawCost is what a replay reply costs before it is decoded.
func rawCost(rr ReplayReply) int64 {
	return int64(msgOverhead + len(rr.Topic) + len(rr.Payload))
}

// shortSeq prints a seq frame for messages.
func shortSeq(b []byte) string {
	if len(b) > 8 {
		return strconv.Itoa(len(b)) + " bytes"
	}
	return fmt.Sprintf("%x", b)
}
