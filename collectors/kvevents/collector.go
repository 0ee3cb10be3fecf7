package kvevents

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors"
)

// Endpoint is one publisher kvtop connects a SUB to: one per (worker, rank).
type Endpoint struct {
	Worker string
	Rank   int
	Events string // where the publisher's PUB listens, e.g. tcp://10.0.0.5:5557
	Replay string // its ROUTER, "" if it has none
	Topic  string // subscription prefix ("" = everything)
}

// Options configure the collector. Zero durations and counts take the
// defaults.
type Options struct {
	Endpoints []Endpoint // one per (worker, rank): kvtop CONNECTS a SUB to each
	Bind      string     // centralized layout: kvtop BINDS one SUB here ("" = off)
	// Resolve maps the id in a kv@<id>@<model> topic (centralized layout) to
	// a worker, its rank and replay endpoint; nil uses the id as the name.
	Resolve        func(topicID string) (worker string, rank int, replay string)
	ReplayTimeout  time.Duration // default 2s: give up after this long without a reply
	ReplayCooldown time.Duration // default 5s between replays of one publisher
	MaxReplays     int           // concurrent replays, default 4
	HoldBack       int           // live batches held behind a running replay, default 10000
	StatusEvery    time.Duration // min interval between StreamStatus sends per publisher, default 250ms
	Incidents      int           // incidents kept per publisher, default 50
	// Centralized layout bounds: publishers tracked at once (default
	// 4096; batches of more are refused and counted), and how long a
	// publisher may stay silent before it is forgotten (default 10m).
	MaxPublishers int
	IdleEvict     time.Duration
}

// subRcvHWM bounds the messages libzmq queues per SUB before dropping (a
// drop shows up as a seq gap, which replay repairs).
const subRcvHWM = 10000

func (o *Options) defaults() {
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 2 * time.Second
	}
	if o.ReplayCooldown <= 0 {
		o.ReplayCooldown = 5 * time.Second
	}
	if o.MaxReplays <= 0 {
		o.MaxReplays = 4
	}
	if o.HoldBack <= 0 {
		o.HoldBack = 10000
	}
	if o.StatusEvery <= 0 {
		o.StatusEvery = 250 * time.Millisecond
	}
	if o.Incidents <= 0 {
		o.Incidents = 50
	}
	if o.MaxPublishers <= 0 {
		o.MaxPublishers = 4096
	}
	if o.IdleEvict <= 0 {
		o.IdleEvict = 10 * time.Minute
	}
}

// Collector subscribes to KV event streams. It implements
// collectors.Collector.
type Collector struct {
	o Options
}

// New validates the options (endpoint syntax, no duplicate publisher).
func New(o Options) (*Collector, error) {
	o.defaults()
	if len(o.Endpoints) == 0 && o.Bind == "" {
		return nil, fmt.Errorf("kvevents: no event endpoints and no events_bind")
	}
	seen := map[string]bool{}
	for _, ep := range o.Endpoints {
		name := fmt.Sprintf("%s events rank %d", ep.Worker, ep.Rank)
		if ep.Worker == "" {
			return nil, fmt.Errorf("kvevents: endpoint %q has no worker name", ep.Events)
		}
		if err := checkEndpoint(ep.Events, false); err != nil {
			return nil, fmt.Errorf("kvevents: %s: %w", name, err)
		}
		if ep.Replay != "" {
			if err := checkEndpoint(ep.Replay, false); err != nil {
				return nil, fmt.Errorf("kvevents: %s: replay: %w", name, err)
			}
		}
		if seen[name] {
			return nil, fmt.Errorf("kvevents: %s is configured twice", name)
		}
		seen[name] = true
	}
	if o.Bind != "" {
		if err := checkEndpoint(o.Bind, true); err != nil {
			return nil, fmt.Errorf("kvevents: events_bind: %w", err)
		}
	}
	return &Collector{o: o}, nil
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
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{
		o: &c.o, ctx: ctx, zctx: zctx, out: out,
		msgs:    make(chan inMsg, 256),
		results: make(chan *replayChunk, 16),
		sem:     make(chan struct{}, c.o.MaxReplays),
		byTopic: map[topicKey]*stream{},
		resolve: map[string]resolved{},
		gone:    map[topicKey]*tombstone{},
	}
	var readers sync.WaitGroup
	for i, ep := range c.o.Endpoints {
		r.bySrc = append(r.bySrc, newStream(r, &c.o, ep.Worker, ep.Rank, ep.Events, ep.Replay, ep.Topic, true))
		readers.Add(1)
		go func() {
			defer readers.Done()
			r.subscribe(i, ep.Events, false, ep.Topic)
		}()
	}
	if c.o.Bind != "" {
		readers.Add(1)
		go func() {
			defer readers.Done()
			r.subscribe(-1, c.o.Bind, true, "")
		}()
	}
	r.loop()
	cancel()
	readers.Wait()
	r.replays.Wait()
	_ = zctx.Term()
	return nil
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

	bySrc   []*stream // connect mode, by endpoint index
	byTopic map[topicKey]*stream
	resolve map[string]resolved     // by topic id, while it has streams
	gone    map[topicKey]*tombstone // centralized publishers forgotten while idle
	refused [2]refusal              // bad rank, too many publishers
}

func (r *runner) loop() {
	now := time.Now()
	for _, s := range r.bySrc {
		s.flush(now, true) // announce every configured publisher as connecting
	}
	tick := time.NewTicker(min(r.o.StatusEvery/2, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case m := <-r.msgs:
			r.handle(m)
		case c := <-r.results:
			c.stream.onChunk(c, time.Now())
		case now := <-tick.C:
			for _, s := range r.bySrc {
				s.tick(now)
			}
			for k, s := range r.byTopic {
				if s.idle(now) {
					r.evict(k, s, now)
				} else {
					s.tick(now)
				}
			}
		}
	}
}

func (r *runner) handle(m inMsg) {
	now := m.at
	switch m.kind {
	case msgConnected:
		r.bySrc[m.src].onConnected(now)
	case msgDisconnected:
		r.bySrc[m.src].onDisconnected(now)
	case msgError:
		r.emit(&collectors.SourceError{Source: r.sourceOf(m.src), Kind: m.errKind, Message: m.text, At: now})
	case msgBad:
		r.emit(&collectors.SourceError{Source: r.sourceOf(m.src), Kind: "decode", Message: m.text, At: now})
		if m.src >= 0 {
			s := r.bySrc[m.src]
			s.st.DecodeErrors++
			s.dirty = true
			s.flush(now, false)
		}
	case msgBatch:
		if s := r.streamFor(m); s != nil {
			s.onBatch(m.b, now)
		}
	}
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
	select {
	case r.out <- o:
	case <-r.ctx.Done():
	}
}

func (r *runner) nextID() uint64 {
	r.ids++
	return r.ids
}

// Replayed batches are handed to the state goroutine in chunks of at most
// this many batches or payload bytes, as they arrive.
const (
	replayChunkBatches = 256
	replayChunkBytes   = 1 << 20
)

// testHookReplayReply, when set (tests only, before Run), is called by a
// replay goroutine after each reply with the batches it holds decoded and
// not yet handed over.
var testHookReplayReply func(pending int)

// launchReplay implements env: the replay runs in its own goroutine with its
// own DEALER, never on the live path; at most MaxReplays run at once. Each
// reply is decoded as it arrives (its raw bytes dropped at once) and handed
// over in small chunks, so a replay of a whole 10 000-batch buffer never
// sits in memory.
func (r *runner) launchReplay(s *stream, j *replayJob) {
	ctx, cancel := context.WithCancel(r.ctx)
	j.cancel = cancel
	fo := fetchOptions{endpoint: s.st.Replay, from: j.from, idle: r.o.ReplayTimeout}
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
		send := func(c *replayChunk) bool {
			select {
			case r.results <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		var pend []inBatch
		var pendBytes int
		var last uint64
		var seen bool
		f := fetchReplay(ctx, r.zctx, fo, func(rr ReplayReply) bool {
			if seen && rr.Seq <= last {
				return true // a repeat: keep seq order
			}
			seen, last = true, rr.Seq
			b, err := DecodeBatch(rr.Payload)
			pend = append(pend, inBatch{seq: rr.Seq, topic: rr.Topic, batch: b, err: err,
				fp: fingerprint(rr.Payload, b), size: len(rr.Payload), at: time.Now()})
			pendBytes += len(rr.Payload)
			if hook != nil {
				hook(len(pend))
			}
			if len(pend) < replayChunkBatches && pendBytes < replayChunkBytes {
				return true
			}
			ok := send(&replayChunk{stream: s, id: id, batches: pend})
			pend, pendBytes = nil, 0
			return ok
		})
		if ctx.Err() != nil {
			return
		}
		send(&replayChunk{stream: s, id: id, batches: pend, done: true, ended: f.ended, err: f.err})
	}()
}

// shortSeq prints a seq frame for messages.
func shortSeq(b []byte) string {
	if len(b) > 8 {
		return strconv.Itoa(len(b)) + " bytes"
	}
	return fmt.Sprintf("%x", b)
}
