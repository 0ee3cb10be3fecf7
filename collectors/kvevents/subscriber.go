package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors/internal/zlink"
)

// inMsg is what a SUB reader hands the state goroutine.
type inMsg struct {
	src     int // endpoint index; -1 for the bound (centralized) SUB
	kind    msgKind
	b       inBatch
	text    string // msgBad / msgError
	errKind string // msgError
	at      time.Time
}

type msgKind uint8

const (
	msgBatch msgKind = iota
	msgBad           // a message that is not [topic, seq8, payload]
	msgConnected
	msgDisconnected
	msgOversized // libzmq dropped the link for good: a message over MaxMsgSize
	msgError     // socket trouble (bad endpoint, bind failure)
)

// msgOverhead is what an inMsg costs beside its batch's events.
const msgOverhead = int(unsafe.Sizeof(inMsg{}))

// batchCost is what keeping one decoded batch costs: what the decoder
// allocated for it (it keeps no byte of the payload) and the message.
func batchCost(topicLen int, b *Batch) int64 {
	return int64(msgOverhead + topicLen + b.Mem)
}

// parseLive turns the frames of one live message into a batch, decoded
// with d (the reader's own).
func parseLive(src int, frames [][]byte, d *decoder, at time.Time) inMsg {
	m := inMsg{src: src, at: at}
	if len(frames) != 3 {
		m.kind, m.text = msgBad, fmt.Sprintf("live message has %d frames, want [topic, seq, payload]", len(frames))
		return m
	}
	if len(frames[1]) != 8 {
		m.kind, m.text = msgBad, fmt.Sprintf("live message seq frame is %s, want 8 bytes", shortSeq(frames[1]))
		return m
	}
	b, err := d.decode(frames[2])
	m.b = inBatch{
		seq: binary.BigEndian.Uint64(frames[1]), topic: d.topicOf(frames[0]),
		batch: b, err: err, fp: fingerprint(frames[2], b), cost: batchCost(len(frames[0]), &b), at: at,
	}
	return m
}

// subReader is one SUB reader's identity and lifetime: its endpoint index, a
// context that ends with the collector or when its endpoint is removed
// (Collector.Remove), and the live batches it dropped over budget.
type subReader struct {
	src    int // endpoint index; -1 for the bound (centralized) SUB
	ctx    context.Context
	cancel context.CancelFunc
	drops  atomic.Uint64
	dec    decoder // used by the reader goroutine only
}

// subscribe owns one SUB socket until rd.ctx is done. It waits in Go's
// netpoller (fdwait.go), not in zmq_poll; its monitor, which has a
// goroutine of its own (watchLinkEvents), wakes it when libzmq closed the
// link for good.
func (r *runner) subscribe(rd *subReader, endpoint string, bind bool, topic string) {
	src := rd.src
	report := func(kind, text string) {
		r.send(rd, inMsg{src: src, kind: msgError, errKind: kind, text: text, at: time.Now()})
	}
	sock, err := r.zctx.NewSocket(zmq.SUB)
	if err != nil {
		report("config", fmt.Sprintf("SUB socket: %v", err))
		return
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	_ = sock.SetRcvhwm(r.o.subHWM())
	if err := sock.SetMaxmsgsize(r.o.MaxMsgSize); err != nil {
		report("config", fmt.Sprintf("max message size %d: %v", r.o.MaxMsgSize, err))
		return
	}
	if err := sock.SetSubscribe(topic); err != nil {
		report("config", fmt.Sprintf("subscribe %q: %v", topic, err))
		return
	}
	fr := newFrameReader(sock)
	defer fr.close() // before the socket's
	wt, err := newReadyWaiter(sock)
	if err != nil {
		report("config", fmt.Sprintf("SUB socket: %v", err))
		return
	}
	defer wt.close()
	defer context.AfterFunc(rd.ctx, wt.wake)()
	pace := newPacer(r.o.WakeEvery, r.o.subHWM())
	// redials carries a link libzmq closed for good, and whether it had
	// completed its handshake, from the monitor's goroutine.
	var redials chan bool
	// links carries the monitor's connects and disconnects; the reader
	// sends them on after draining what its socket holds, so a batch
	// received before a disconnect is handed over before it (as one
	// poll of both sockets did).
	var links chan inMsg
	if !bind {
		// The monitor is what turns a dead worker into "disconnected":
		// silence alone is not death (there is no heartbeat). It also
		// sees a link libzmq closed for good (link.go).
		if link := zlink.New(r.zctx, sock); link != nil {
			redials, links = make(chan bool, 1), make(chan inMsg, 16)
			mctx, stop := context.WithCancel(rd.ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.watchLinkEvents(mctx, src, link, links, redials, func() { wt.wake(); pace.poke() })
			}()
			defer func() { stop(); <-done }() // the monitor closes before the socket
		}
		if err := sock.Connect(endpoint); err != nil {
			report("config", fmt.Sprintf("connect %s: %v", endpoint, err))
			return
		}
	} else if !r.bindRetrying(rd, sock, endpoint, report) {
		return
	}
	for {
		t0, checks := time.Now(), 0
		err := wt.waitInput(sock, func() bool {
			checks++ // a second check: it waited for input
			return rd.ctx.Err() != nil || len(redials) > 0 || len(links) > 0
		})
		pace.waited(time.Since(t0), checks > 1)
		if rd.ctx.Err() != nil {
			return
		}
		if err != nil {
			report("config", fmt.Sprintf("SUB socket: %v", err))
			return
		}
		if hook := testHookDrain; hook != nil {
			hook()
		}
		full := false
		if len(links) > 0 {
			n, ok := r.drain(rd, fr, 1<<20)
			if !ok || !r.forward(rd, links) {
				return
			}
			pace.took(n)
		} else {
			n, ok := r.drain(rd, fr, drainMax)
			if !ok {
				return
			}
			pace.took(n)
			full = n == drainMax
		}
		select {
		case shook := <-redials:
			if !r.redial(rd, sock, fr, endpoint, shook) {
				return
			}
		default:
		}
		if !full && !pace.wait(rd.ctx) {
			return
		}
		wt.until(time.Time{}) // what woke it was read above, or is seen by the next check
	}
}

// drainMax is the most messages a reader takes in one wake before it
// looks at its link events again.
const drainMax = 256

// pacer spaces a reader's wakes at least every apart (WakeEvery), so the
// batches that arrive meanwhile are taken in one wake. The pause ends
// early on shutdown or at a poke, which the monitor's goroutine gives after
// each link event or redial it hands the reader (one given before the
// pause began ends it at once).
//
// A pause ends on a grid of every shared by all readers of the process
// (multiples of every since the zero time), not every after the reader's
// own last wake: the readers of a busy pool then wake together, and the
// state goroutine and the pool take all their batches in one wake too.
// Spaced by their own clocks, 16 readers woke the process 80 times a
// second, each wake a cascade of hand-offs through three goroutines.
//
// A pause must never leave a fast stream behind. While a reader pauses
// its messages wait in libzmq (subHWM of them, then in TCP and in the
// publisher's queue), and a reader that paused after every catch-up spent
// most of its time paused on a fast stream, its backlog growing until the
// publisher dropped (issue 23: offered 60 000 small batches/s, one stream
// was read at 46 000/s on 0.6 of a core, 30 000 seqs missing). So, with
// fill the SUB's queue (subHWM, 1 024 messages by default):
//
//   - a reader that took twice fill (at least a drain, drainMax) since its
//     last pause is behind: libzmq filled its queue again while it read,
//     and more waits in TCP and the publisher. It does not pause;
//   - otherwise it pauses at most as long as its stream takes to bring
//     fill, at the rate the messages taken since its last pause arrived.
//     The time it spent waiting for input does not count (nothing piled
//     up meanwhile), nor does the message that ended that wait, so a burst
//     after a quiet spell reads as fast and a lone message as nothing;
//   - a count of fewer than minRate messages may be a lull, not a rate:
//     within a grid period of a larger count that shortened a pause, that
//     pause is the longest it takes, and a lone message within a grid
//     period of the reader being behind does not pause at all. A fast
//     publisher stalls now and then; one message after a stall does not
//     make its stream slow.
//
// A stream of a few batches a grid tick (a busy vLLM engine sends tens a
// second) still wakes its reader on the grid: only a stream faster than
// fill a tick (5 120 batches/s at the defaults) wakes it more often, once
// per fill messages. Each wake costs the process dozens of context
// switches (the reader, the state goroutine, the pool and libzmq's I/O
// thread each wake a thread), so the pause is as long as the queue allows:
// a stream of 20 000 small batches/s cost 12 % more CPU per batch than
// with grid pauses when a pause took half the queue, 8 % with all of it.
type pacer struct {
	every time.Duration
	fill  int       // messages a pause may let pile up
	last  time.Time // the last wake: a pause ended or none was needed
	t     *time.Timer
	poked chan struct{}

	// Since the last plan, at mark: messages taken, time spent waiting for
	// input, and whether a message ended such a wait.
	mark  time.Time
	n     int
	idle  time.Duration
	woken bool
	// The last pause a count of minRate or more shortened, and when (zero:
	// its stream was found slow since); the last plan that found the
	// reader behind.
	fast     time.Duration
	fastAt   time.Time
	behindAt time.Time

	received uint64 // every message taken (testHookPause)
}

// newPacer paces wakes at every; a pause lets at most about fill messages
// pile up (the SUB's queue).
func newPacer(every time.Duration, fill int) *pacer {
	p := &pacer{every: every, fill: max(fill, 1), poked: make(chan struct{}, 1)} // the first wake never pauses
	if every > 0 {
		p.t = time.NewTimer(time.Hour)
		p.t.Stop()
	}
	return p
}

// took counts n messages taken by a drain.
func (p *pacer) took(n int) {
	p.n += n
	p.received += uint64(n)
}

// waited counts d spent waiting for input; input ended the wait if woken.
func (p *pacer) waited(d time.Duration, woken bool) {
	p.idle += d
	p.woken = p.woken || woken
}

// poke ends the current or next pause (any goroutine).
func (p *pacer) poke() {
	select {
	case p.poked <- struct{}{}:
	default:
	}
}

// plan decides the pause at now from what was counted since the last
// plan: how long, and whether it is the grid's (else shortened for a fast
// stream, or none).
func (p *pacer) plan(now time.Time) (d time.Duration, grid bool) {
	taken, rate, active := p.n, p.n, now.Sub(p.mark)-p.idle
	if p.woken {
		rate-- // the message that ended the wait says nothing of the rate
	}
	p.mark, p.n, p.idle, p.woken = now, 0, 0, false
	if taken >= max(drainMax, 2*p.fill) {
		p.behindAt = now
		return 0, false
	}
	// The grid's next point after the last wake. Truncate works on the
	// wall clock, which may step back: never more than every.
	next := p.last.Truncate(p.every).Add(p.every)
	d = min(next.Sub(now), p.every)
	if d <= 0 {
		return 0, false
	}
	recent := func(t time.Time) bool { return now.Sub(t) >= 0 && now.Sub(t) < p.every }
	fill := d
	switch {
	case rate >= minRate:
		if fill = min(d, p.fillTime(active, rate)); fill < d {
			p.fast, p.fastAt = fill, now
		} else {
			p.fastAt = time.Time{} // a slow stream: no lull to bridge
		}
	case rate > 0:
		fill = min(d, p.fillTime(active, rate))
		if recent(p.fastAt) {
			fill = min(fill, p.fast)
		}
	case recent(p.behindAt):
		return 0, false
	case recent(p.fastAt):
		fill = min(d, p.fast)
	}
	return fill, fill == d
}

// fillTime is how long a stream that brought rate messages over active
// takes to bring fill.
func (p *pacer) fillTime(active time.Duration, rate int) time.Duration {
	if active <= 0 {
		return 0
	}
	return time.Duration(float64(active) * float64(p.fill) / float64(rate))
}

// minRate is the fewest messages a plan takes as its stream's rate: fewer,
// within a grid period of a larger count, may be a lull.
const minRate = drainMax / 8

// testHookPause, when set (tests only, before Run), is called by a paced
// reader before each pause: its length, whether it is the grid's, and how
// many messages the reader has taken so far.
var testHookPause func(d time.Duration, grid bool, received uint64)

// wait pauses as plan says; false on shutdown.
func (p *pacer) wait(ctx context.Context) bool {
	if p.t == nil {
		return ctx.Err() == nil
	}
	if d, grid := p.plan(time.Now()); d > 0 {
		if hook := testHookPause; hook != nil {
			hook(d, grid, p.received)
		}
		p.t.Reset(d)
		select {
		case <-p.t.C:
		case <-p.poked:
			p.t.Stop()
		case <-ctx.Done():
			p.t.Stop()
			return false
		}
	}
	p.last = time.Now()
	return true
}

// forward sends the monitor's link events on to the state goroutine.
func (r *runner) forward(rd *subReader, links chan inMsg) bool {
	for {
		select {
		case m := <-links:
			if !r.send(rd, m) {
				return false
			}
		default:
			return true
		}
	}
}

// watchLinkEvents reads a SUB's monitor until ctx is done: connects and
// disconnects go to the SUB's goroutine (links), and so does a link libzmq
// will not redial (redials); each then wakes it. It owns link.Monitor().
func (r *runner) watchLinkEvents(ctx context.Context, src int, link *zlink.Watch, links chan<- inMsg, redials chan<- bool, wake func()) {
	defer link.Close()
	wt, err := newReadyWaiter(link.Monitor())
	if err != nil {
		return // the SUB works without disconnect reports
	}
	defer wt.close()
	defer context.AfterFunc(ctx, wt.wake)()
	for {
		err := wt.waitInput(link.Monitor(), func() bool { return ctx.Err() != nil })
		if ctx.Err() != nil || err != nil {
			return
		}
		if !link.Read(time.Now(), func(up bool) bool {
			kind := msgConnected
			if !up {
				kind = msgDisconnected
			}
			select {
			case links <- inMsg{src: src, kind: kind, at: time.Now()}:
				wake()
				return true
			case <-ctx.Done():
				return false
			}
		}) {
			return
		}
		if dead, shook := link.Dead(time.Now()); dead {
			select {
			case redials <- shook:
			default: // one redial is already asked for
			}
			wake()
		}
		// A disconnect not yet redialled is checked again at its grace.
		wt.until(link.Deadline())
	}
}

// drain receives up to n messages without waiting and hands them over; it
// never blocks on a busy state goroutine (libzmq's queue must stay short):
// a batch that does not fit the hand-off budget is dropped and counted.
// It returns how many it received (n: the socket may hold more), false on
// shutdown.
// testHookDrain, when set (tests only, before Run), is called by each SUB
// reader before it drains its socket: a reader starved of CPU.
var testHookDrain func()

func (r *runner) drain(rd *subReader, fr *frameReader, n int) (int, bool) {
	src := rd.src
	budget := r.o.handoffBudget()
	defer fr.release()
	// A batch over the budget waits for the state goroutine to take what
	// is before it, up to WakeEvery a drain in all: a reader may leave
	// messages in libzmq's queue that long anyway (its pause), so this
	// costs no more memory, and a burst taken after a pause is not
	// dropped for arriving all at once.
	patience := max(r.o.WakeEvery, 0)
	fits := func(cost int64) bool {
		for {
			if v := r.handoff.Load(); v == 0 || v+cost <= budget {
				return true
			}
			if patience <= 0 || rd.ctx.Err() != nil {
				return false
			}
			time.Sleep(time.Millisecond)
			patience -= time.Millisecond
		}
	}
	// A full channel waits out the same patience: readers on the shared
	// grid hand over their drains at the same moment, and a thousand
	// publishers' bursts after a pause must not be dropped for that.
	handOff := func(m inMsg) bool {
		select {
		case r.msgs <- m:
			return true
		default:
		}
		if patience <= 0 {
			return false
		}
		start := time.Now()
		t := time.NewTimer(patience)
		defer t.Stop()
		defer func() { patience -= time.Since(start) }()
		select {
		case r.msgs <- m:
			return true
		case <-t.C:
		case <-rd.ctx.Done():
		}
		return false
	}
	for k := 0; k < n; k++ {
		frames, err := fr.next()
		if err != nil {
			return k, true
		}
		if len(frames) == 3 && !fits(int64(len(frames[2]))) {
			rd.drops.Add(1) // plainly over: not even decoded
			continue
		}
		m := parseLive(src, frames, &rd.dec, time.Now())
		if m.kind != msgBatch {
			if !r.send(rd, m) {
				return k, false
			}
			continue
		}
		if !fits(m.b.cost) || !tryAdd(&r.handoff, m.b.cost, budget, true) {
			rd.drops.Add(1)
			continue
		}
		if hook := testHookHandoff; hook != nil {
			hook(r.handoff.Load())
		}
		if !handOff(m) {
			r.handoff.Add(-m.b.cost)
			rd.drops.Add(1)
		}
	}
	return n, true
}

// handshakeRetry paces kvtop's redials of a peer whose ZMTP handshake
// failed (libzmq itself would never redial it).
const handshakeRetry = 5 * time.Second

// testHookHandoff, when set (tests only, before Run), is called by a reader
// with the hand-off bytes accounted after it added a batch.
var testHookHandoff func(bytes int64)

// redial connects the SUB again after libzmq closed its link for good, and
// says why. The messages received before it are handed over first.
func (r *runner) redial(rd *subReader, sock *zmq.Socket, fr *frameReader, endpoint string, shook bool) bool {
	src := rd.src
	if _, ok := r.drain(rd, fr, 1<<20); !ok {
		return false
	}
	m := inMsg{src: src, kind: msgOversized, at: time.Now()}
	if !shook {
		m.kind, m.errKind = msgError, "config"
		m.text = fmt.Sprintf("the ZMTP handshake with %s failed (not a ZMQ publisher?): libzmq would not redial it; kvtop tries again in %v",
			endpoint, handshakeRetry)
	}
	if !r.send(rd, m) {
		return false
	}
	if !shook { // a peer that is not ZMTP fails again at once: do not spin
		select {
		case <-rd.ctx.Done():
			return false
		case <-time.After(handshakeRetry):
		}
	}
	_ = sock.Disconnect(endpoint)
	if err := sock.Connect(endpoint); err != nil {
		r.send(rd, inMsg{src: src, kind: msgError, errKind: "config", text: fmt.Sprintf("connect %s again: %v", endpoint, err), at: time.Now()})
		return false
	}
	return true
}

// bindRetrying binds the centralized SUB, retrying every second while the
// address is unavailable (another process may still hold it).
func (r *runner) bindRetrying(rd *subReader, sock *zmq.Socket, endpoint string, report func(kind, text string)) bool {
	for {
		err := sock.Bind(endpoint)
		if err == nil {
			return true
		}
		report("bind", fmt.Sprintf("bind %s: %v (retrying)", endpoint, err))
		select {
		case <-rd.ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// send hands a message to the state goroutine; false on shutdown or once
// the reader's endpoint was removed.
func (r *runner) send(rd *subReader, m inMsg) bool {
	select {
	case r.msgs <- m:
		return true
	case <-rd.ctx.Done():
		return false
	}
}
