package natsevents

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvtop/kvtop/collectors"
)

// Collector subscribes to Dynamo's KV events on NATS. It implements
// collectors.Collector.
type Collector struct {
	o     Options
	shown string // URL for messages
}

var _ collectors.Collector = (*Collector)(nil)

// New validates the options.
func New(o Options) (*Collector, error) {
	o.defaults()
	if err := o.check(); err != nil {
		return nil, err
	}
	return &Collector{o: o, shown: shownURLs(o.URL)}, nil
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "natsevents" }

// testHookDrop, when set (tests only, before Run), drops the live events
// it returns true for after they are decoded, as a lost message would be.
var testHookDrop func(ev *Event) bool

// inMsg is one received message, decoded off the state goroutine.
type inMsg struct {
	ev        Event
	err       error  // the body is not a RouterEvent (ev keeps what was read)
	fp        uint64 // fingerprint: tells a redelivery from a restarted worker
	size      int
	subject   string
	endpoint  string // the ZMQ endpoint it came from ("" on NATS)
	gen       uint64 // the ZMQ reader it came from
	pubID     uint64 // the ZMQ publisher id frame
	more      bool   // more events of the same message follow
	streamSeq uint64 // JetStream stream sequence, 0 from core NATS
	at        time.Time
}

// connEvent is the NATS connection going down or coming back.
type connEvent struct {
	up       bool
	err      string
	endpoint string // one ZMQ endpoint's link; "" is the NATS connection
	gen      uint64 // the ZMQ reader it came from
	at       time.Time
}

// Run connects and receives until ctx is done. One connection and one
// subscription (or JetStream consumer) serve every worker; a replay of a
// gap runs in a goroutine of its own on the same connection. On the ZMQ
// event plane a SUB reads each configured or discovered endpoint. It
// returns an error only when the discovery cannot run at all.
func (c *Collector) Run(ctx context.Context, out chan<- collectors.Observation) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &runner{
		o: &c.o, ctx: ctx, cancel: cancel, out: out, shown: c.shown,
		msgs:    make(chan inMsg, 1024),
		conns:   make(chan connEvent, 16),
		chunks:  make(chan *replayChunk, 16),
		sem:     make(chan struct{}, c.o.MaxReplays),
		pubs:    map[pubKey]*pub{},
		pending: collectors.NewPending(),
		seed:    maphash.MakeSeed(),
		dropped: &atomic.Uint64{},
		drop:    testHookDrop,
	}
	r.source = "events nats " + c.shown
	for _, w := range c.o.Warnings() {
		r.emit(r.note("config", "%s", w))
	}
	if len(c.o.ZMQ) > 0 || c.o.Discover != nil {
		r.source = "events dynamo-zmq"
		r.zup, r.zrs = map[string]bool{}, map[string]*zreader{}
		r.named, r.gone = map[string]bool{}, map[string]time.Time{}
		r.runZMQ()
		if c.o.Discover != nil {
			r.sets = make(chan Channels, 1)
			r.replays.Add(1)
			go r.discover()
		}
	} else {
		go r.connect()
	}
	r.loop()
	r.replays.Wait()
	r.close()
	if err := r.fatal.Load(); err != nil {
		return fmt.Errorf("event_plane discover %s: %w", c.o.Discover.Name(), *err)
	}
	return nil
}

type runner struct {
	o      *Options
	ctx    context.Context
	cancel context.CancelFunc
	out    chan<- collectors.Observation
	shown  string
	source string

	msgs   chan inMsg
	conns  chan connEvent
	chunks chan *replayChunk
	sem    chan struct{}

	mu   sync.Mutex // guards nc, js, stop (set by the connect goroutine)
	nc   *nats.Conn
	js   jetstream.Stream
	stop func()

	replays sync.WaitGroup
	ids     uint64
	seed    maphash.Seed
	drop    func(*Event) bool // testHookDrop as Run began

	pubs       map[pubKey]*pub
	pending    *collectors.Pending // batches sent to the pool, not yet applied
	zup        map[string]bool     // ZMQ endpoints whose link is up (nil on NATS)
	accPubs    []*pub              // publishers with applied events not sent yet
	connected  bool
	everUp     bool
	refused    uint64 // events of publishers past MaxPublishers
	undecoded  uint64 // messages without a worker or event id
	oversized  uint64
	dropped    *atomic.Uint64 // messages NATS dropped: kvtop was a slow consumer
	toldDrop   uint64
	lastUndec  time.Time
	lastRefuse time.Time

	// The ZMQ event plane's readers, and what discovery said (discover.go).
	zrs          map[string]*zreader // ZMQ endpoints read, configured or discovered
	zgen         uint64              // the last reader's tag
	sets         chan Channels       // discovered sets (nil without discovery)
	fatal        atomic.Pointer[error]
	named        map[string]bool      // worker names kvtop gave (no configured worker answers)
	gone         map[string]time.Time // workers that left when their publishers were withdrawn
	mismatched   uint64               // messages whose publisher id discovery does not advertise
	lastMismatch time.Time
}

// connect dials NATS (retrying until it answers), then subscribes. It runs
// in its own goroutine; what it learns goes to the state goroutine.
func (r *runner) connect() {
	opts, err := r.o.natsOptions()
	if err != nil {
		r.emit(r.note("config", "%v", err))
		return
	}
	opts = append(opts,
		nats.Name("kvtop"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(*nats.Conn) { r.conn(true, "") }),
		nats.ReconnectHandler(func(*nats.Conn) { r.conn(true, "") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			msg := "connection lost"
			if err != nil {
				msg = err.Error()
			}
			r.conn(false, msg)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				return // counted from the subscription's Dropped
			}
			r.emit(r.note("refused", "%s", oneLine(err.Error())))
		}),
	)
	nc, err := nats.Connect(r.o.URL, opts...)
	if err != nil {
		r.emit(r.note(errKind(err), "connect %s: %s", r.shown, oneLine(err.Error())))
		return
	}
	r.mu.Lock()
	r.nc = nc
	r.mu.Unlock()
	if nc.IsConnected() {
		r.conn(true, "")
	}
	if r.o.JetStream != nil {
		r.consumeJetStream(nc)
		return
	}
	sub, err := nc.Subscribe(r.o.Subject, func(m *nats.Msg) { r.handle(m.Data, m.Subject, 0) })
	if err != nil {
		r.emit(r.note("config", "subscribe %q: %s", r.o.Subject, oneLine(err.Error())))
		return
	}
	_ = sub.SetPendingLimits(r.o.PendingMessages, r.o.PendingBytes)
	r.mu.Lock()
	r.stop = func() { _ = sub.Unsubscribe() }
	r.mu.Unlock()
	// nats.go drops what does not fit its pending limits: count it, so the
	// gaps it leaves have a cause on screen.
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
				if n, err := sub.Dropped(); err == nil && n > 0 {
					r.dropped.Store(uint64(n))
				}
			}
		}
	}()
}

// consumeJetStream reads the stream through an ordered ephemeral consumer
// (or the configured durable one) from the configured start.
func (r *runner) consumeJetStream(nc *nats.Conn) {
	js, err := jetstream.New(nc)
	if err != nil {
		r.emit(r.note("config", "jetstream: %s", oneLine(err.Error())))
		return
	}
	j := r.o.JetStream
	var st jetstream.Stream
	for {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		st, err = js.Stream(ctx, j.Stream)
		cancel()
		if err == nil {
			break
		}
		r.emit(r.note("config", "jetstream stream %q: %s (retrying)", j.Stream, oneLine(err.Error())))
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
	r.mu.Lock()
	r.js = st
	r.mu.Unlock()
	all, fresh, ago, _ := j.start()
	policy, startTime := jetstream.DeliverAllPolicy, (*time.Time)(nil)
	switch {
	case fresh:
		policy = jetstream.DeliverNewPolicy
	case !all:
		t := time.Now().Add(-ago)
		policy, startTime = jetstream.DeliverByStartTimePolicy, &t
	}
	var filter []string
	if r.o.Subject != "" {
		filter = []string{r.o.Subject}
	}
	var cons jetstream.Consumer
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	if j.Consumer == "" {
		cons, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: filter, DeliverPolicy: policy, OptStartTime: startTime,
		})
	} else {
		// A durable consumer that exists is resumed as it is: it goes on
		// after what it delivered (start applies to a new one only).
		cons, err = st.Consumer(ctx, j.Consumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			cfg := jetstream.ConsumerConfig{
				Durable: j.Consumer, DeliverPolicy: policy, OptStartTime: startTime,
				// No acks: kvtop only reads. Inactive for an hour, the
				// server removes it, as Dynamo does with its own.
				AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Hour,
			}
			if len(filter) == 1 {
				cfg.FilterSubject = filter[0]
			}
			cons, err = st.CreateConsumer(ctx, cfg)
		}
	}
	cancel()
	if err != nil {
		r.emit(r.note("config", "jetstream consumer on %q: %s", j.Stream, oneLine(err.Error())))
		return
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var seq uint64
		if md, err := m.Metadata(); err == nil {
			seq = md.Sequence.Stream
		}
		r.handle(m.Data(), m.Subject(), seq)
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrConnectionClosed) {
			return // the connection's own handlers say it
		}
		r.emit(r.note("replay", "jetstream consumer: %s", oneLine(err.Error())))
	}))
	if err != nil {
		r.emit(r.note("config", "jetstream consume %q: %s", j.Stream, oneLine(err.Error())))
		return
	}
	r.mu.Lock()
	r.stop = func() {
		// A durable consumer's pull request still waiting on the server
		// would take (and, without acks, lose) the next event meant for
		// the next kvtop: stop, wait until stopped, and make sure the
		// server has seen the unsubscribe before the connection closes.
		cc.Stop()
		select {
		case <-cc.Closed():
		case <-time.After(2 * time.Second):
		}
		_ = nc.FlushTimeout(time.Second)
	}
	r.mu.Unlock()
}

// handle decodes one message (on the NATS client's goroutine) and hands it
// to the state goroutine, waiting when that is busy: nats.go buffers
// behind it, within the pending limits, and JetStream waits.
func (r *runner) handle(data []byte, subject string, streamSeq uint64) {
	m := inMsg{size: len(data), subject: subject, streamSeq: streamSeq, at: time.Now()}
	if len(data) > r.o.MaxMessageBytes {
		m.err = errOversized
		r.send(m)
		return
	}
	// A message holds one RouterEvent, or a batch of them (Dynamo 1.3+):
	// each goes to its publisher's machine as if it came alone. Fresh
	// events: their hashes are their own.
	evs, err := DecodeAll(data, nil)
	r.sendEach(m, evs, err, maphash.Bytes(r.seed, data))
}

// sendEach hands the events of one message to the state goroutine, each
// as m with its event (fingerprint fp, the i-th offset by a constant) and
// more set on all but the last; err goes with the last (the event the
// batch broke off at, if it did), or alone when nothing decoded.
func (r *runner) sendEach(m inMsg, evs []Event, err error, fp uint64) {
	if len(evs) == 0 {
		m.err = err
		r.send(m)
		return
	}
	for i := range evs {
		e := m
		e.ev, e.fp, e.more = evs[i], fp+uint64(i)*0x9e3779b97f4a7c15, i < len(evs)-1
		if i == len(evs)-1 {
			e.err = err
		}
		if r.drop != nil && r.drop(&e.ev) {
			continue
		}
		r.send(e)
	}
}

// send hands one decoded message to the state goroutine.
func (r *runner) send(m inMsg) {
	select {
	case r.msgs <- m:
	case <-r.ctx.Done():
	}
}

var errOversized = errors.New("message over the size limit")

func (r *runner) conn(up bool, why string) {
	select {
	case r.conns <- connEvent{up: up, err: why, at: time.Now()}:
	case <-r.ctx.Done():
	}
}

func (r *runner) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != nil {
		r.stop()
	}
	if r.nc != nil {
		r.nc.Close()
	}
}

// loop is the state goroutine: it owns every publisher's machine and
// sends observations in apply order.
func (r *runner) loop() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastEvict := time.Now()
	for {
		select {
		case <-r.ctx.Done():
			return
		case m := <-r.msgs:
			r.onMsg(m)
			if !m.more {
				r.flushAll()
			}
		case c := <-r.conns:
			r.onConn(c)
			r.flushAll()
		case set := <-r.sets:
			r.onSet(set)
			r.flushAll()
		case c := <-r.chunks:
			if p := r.pubs[c.key]; p != nil {
				p.onChunk(c, time.Now())
			}
			r.flushAll()
		case now := <-tick.C:
			r.flushAll()
			for _, p := range r.pubs {
				p.flush(now, false)
			}
			if d := r.dropped.Load(); d > r.toldDrop {
				r.emit(r.note("too_large", "kvtop fell behind: NATS dropped %d message(s) for it (slow consumer); their events show as gaps", d-r.toldDrop))
				r.toldDrop = d
			}
			if now.Sub(lastEvict) >= time.Second {
				lastEvict = now
				r.evictIdle(now)
			}
		}
	}
}

// flushAll sends every publisher's applied events: a message's end.
func (r *runner) flushAll() {
	for i, p := range r.accPubs {
		p.flushAcc()
		r.accPubs[i] = nil
	}
	r.accPubs = r.accPubs[:0]
}

func (r *runner) onConn(c connEvent) {
	if c.endpoint != "" {
		r.onLink(c)
		return
	}
	if c.up == r.connected {
		return
	}
	r.connected = c.up
	if c.up {
		if r.everUp {
			r.emit(r.note("refused", "reconnected to %s", r.shown))
		}
		r.everUp = true
	} else {
		r.emit(r.note("refused", "disconnected from %s: %s (nats.go reconnects)", r.shown, oneLine(c.err)))
	}
	for _, p := range r.sorted() {
		p.setConnected(c.up, c.at)
	}
}

// onLink is one ZMQ endpoint's link going down or coming back: the
// publishers it carries follow.
func (r *runner) onLink(c connEvent) {
	if zr := r.zrs[c.endpoint]; zr == nil || zr.gen != c.gen {
		return // a reader stopped since (its endpoint withdrawn)
	}
	if r.zup[c.endpoint] == c.up {
		return
	}
	r.zup[c.endpoint] = c.up
	if !c.up {
		r.emit(r.note("refused", "link to %s lost (libzmq reconnects)", c.endpoint))
	}
	for _, p := range r.sorted() {
		if p.St.Endpoint == c.endpoint {
			p.setConnected(c.up, c.at)
		}
	}
}

// onMsg routes one message to its publisher's machine.
func (r *runner) onMsg(m inMsg) {
	where := shortText([]byte(m.subject))
	if m.endpoint != "" {
		where = m.endpoint
		zr := r.zrs[m.endpoint]
		if zr == nil || zr.gen != m.gen {
			return // a reader stopped since: its endpoint was withdrawn
		}
		if zr.pids != nil && m.err != errOversized && !errors.Is(m.err, errFrames) {
			if _, ok := zr.pids[m.pubID]; !ok {
				if !m.more {
					r.mismatch(m, zr) // counted once a message
				}
				return
			}
		}
	}
	if m.err == errOversized {
		r.oversized++
		r.emit(r.note("too_large", "a message of %d bytes on %s is over %d bytes (max_message_bytes): not decoded (%d so far); its event shows as a gap",
			m.size, where, r.o.MaxMessageBytes, r.oversized))
		return
	}
	if errors.Is(m.err, errFrames) {
		r.undecoded++
		if m.at.Sub(r.lastUndec) >= time.Second {
			r.lastUndec = m.at
			r.emit(r.note("decode", "a message from %s is not Dynamo's event plane (%d so far): %s", where, r.undecoded, oneLine(m.err.Error())))
		}
		return
	}
	if !m.ev.HasWorker || !m.ev.HasID {
		r.undecoded++
		if m.at.Sub(r.lastUndec) >= time.Second {
			r.lastUndec = m.at
			r.emit(r.note("decode", "a message on %s is not a Dynamo RouterEvent (%d so far): %s",
				where, r.undecoded, oneLine(errText(m.err))))
		}
		return
	}
	name := ""
	if r.o.Resolve != nil {
		name = r.o.Resolve(m.ev.WorkerID)
	}
	if name == "" {
		name = workerName(m.ev.WorkerID)
		if r.named != nil {
			r.named[name] = true
		}
	}
	k := pubKey{name: name, rank: m.ev.Rank}
	p := r.pubs[k]
	if p == nil {
		if len(r.pubs) >= r.o.MaxPublishers {
			r.refused++
			if m.at.Sub(r.lastRefuse) >= time.Second {
				r.lastRefuse = m.at
				r.emit(r.note("too_large", "more than %d publishers (worker, dp_rank): events of %s rank %d refused (%d so far)",
					r.o.MaxPublishers, name, m.ev.Rank, r.refused))
			}
			return
		}
		if r.gone != nil {
			r.rejoin(name, m.at)
		}
		p = newPub(r, k, m.subject, m.at)
		up := r.connected || m.streamSeq > 0
		if m.endpoint != "" {
			p.St.Endpoint, up = m.endpoint, true // a message came: the link is up
		}
		p.setConnected(up, m.at)
		r.pubs[k] = p
	}
	if m.endpoint != "" {
		// A publisher's rank may move to another endpoint (a new
		// publisher of the same worker): its messages say where it is.
		p.St.Endpoint, p.pubID = m.endpoint, m.pubID
	}
	p.onMsg(m, m.at)
}

func errText(err error) string {
	if err == nil {
		return "no worker_id or event_id"
	}
	return err.Error()
}

// evictIdle forgets publishers silent for IdleEvict: Dynamo gives a
// restarted worker a new id, so old ids would pile up. The last status
// says so; the pool keeps the blocks it had.
func (r *runner) evictIdle(now time.Time) {
	for k, p := range r.pubs {
		if p.job == nil && now.Sub(p.St.LastMessage) > r.o.IdleEvict {
			p.evicted = true
			inc := p.Incident("disconnected", p.last, p.last, now)
			inc.End = now
			inc.Note = fmt.Sprintf("no event for %s: the worker is gone (Dynamo gives a restarted worker a new id) or idle; forgotten", r.o.IdleEvict)
			p.flush(now, true)
			delete(r.pubs, k)
		}
	}
	r.forget(now)
}

func (r *runner) sorted() []*pub {
	out := make([]*pub, 0, len(r.pubs))
	for _, p := range r.pubs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].key.name != out[j].key.name {
			return out[i].key.name < out[j].key.name
		}
		return out[i].key.rank < out[j].key.rank
	})
	return out
}

// emit sends one observation, blocking (the pool must not lose one), given
// up only on shutdown. Safe from any goroutine.
func (r *runner) emit(o collectors.Observation) {
	// What waits for the pool is bounded in bytes too (as kvevents does):
	// past PendingBytes this waits, and nats.go's own queue, bounded,
	// takes the backlog and then drops (a slow consumer).
	r.pending.Send(r.ctx, r.out, o, int64(r.o.PendingBytes))
}

func (r *runner) note(kind, format string, args ...any) *collectors.SourceError {
	return &collectors.SourceError{Source: r.source, Kind: kind, Message: fmt.Sprintf(format, args...), At: time.Now()}
}

func (r *runner) nextID() uint64 {
	r.ids++
	return r.ids
}

func errKind(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "Authorization") || strings.Contains(s, "authentication"):
		return "config"
	case strings.Contains(s, "tls") || strings.Contains(s, "x509"):
		return "tls"
	case strings.Contains(s, "timeout"):
		return "timeout"
	}
	return "refused"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
