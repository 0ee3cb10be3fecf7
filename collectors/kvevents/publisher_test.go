package kvevents

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/snapshot"
)

// A hand-built KV event publisher speaking the wire format of PROTOCOLS.md
// §1 over real sockets: an XPUB (a PUB that also shows when kvtop's
// subscription has arrived, so no test races the slow-joiner window) and a
// ROUTER answering replay requests from a bounded ring, in the vLLM ≥ 0.26
// layout or the legacy one.
type pubOpts struct {
	topic        string
	replay       bool
	legacy       bool            // legacy 3-frame replay replies
	ring         int             // replay buffer, batches (default 10000)
	port         int             // fixed PUB port (to come back on the same one); 0 = any free
	replayPort   int             // fixed ROUTER port; 0 = any free
	connect      string          // centralized layout: dial kvtop's bound SUB instead of binding
	replayDelay  time.Duration   // stall before answering a replay
	silentReplay bool            // never answer
	replaySkip   map[uint64]bool // seqs left out of replay answers (lost in transit)
	onReplayed   func()          // called once an answer is fully sent
	// replayPace, if set, sends at most this many replies per millisecond,
	// like vLLM's Python loop: a Go loop outruns its own ROUTER's I/O
	// thread, which then drops replies however fast kvtop reads.
	replayPace int
	// replayUnbounded lifts the ROUTER's send high-water mark (vLLM keeps
	// the default 1000): for benchmarks of kvtop's side alone.
	replayUnbounded bool
	tracker         *replayTracker
	// sndhwm is the PUB's send high-water mark (default 100 000): what it
	// holds for a subscriber that does not read, then drops.
	sndhwm int
}

type testPub struct {
	t      testing.TB
	o      pubOpts
	pub    *zmq.Socket // used by the test goroutine only
	Events string      // where kvtop connects
	Replay string
	seq    uint64

	mu   sync.Mutex
	ring []ringEntry

	stop chan struct{}
	done chan struct{}
}

type ringEntry struct {
	seq     uint64
	payload []byte
}

// replayTracker records replay requests across publishers.
type replayTracker struct {
	mu         sync.Mutex
	inFlight   int
	maxInFlite int
	requests   []time.Time
	froms      []uint64 // the seq each request asked from
}

func (r *replayTracker) enter(from uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight++
	r.maxInFlite = max(r.maxInFlite, r.inFlight)
	r.requests = append(r.requests, time.Now())
	r.froms = append(r.froms, from)
}

func (r *replayTracker) asked() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint64(nil), r.froms...)
}

func (r *replayTracker) leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
}

func (r *replayTracker) snapshot() (maxInFlight int, requests []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxInFlite, append([]time.Time(nil), r.requests...)
}

func newTestPub(t testing.TB, o pubOpts) *testPub {
	t.Helper()
	if o.ring == 0 {
		o.ring = 10000
	}
	if o.sndhwm == 0 {
		o.sndhwm = 100000
	}
	if o.tracker == nil {
		o.tracker = &replayTracker{}
	}
	p := &testPub{t: t, o: o, stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if p.pub, err = zmq.NewSocket(zmq.XPUB); err != nil {
		t.Fatal(err)
	}
	_ = p.pub.SetLinger(0)
	_ = p.pub.SetSndhwm(p.o.sndhwm)
	// Every subscription is passed up, even one the XPUB already has: a
	// subscriber that comes back may be seen before its old link is gone.
	_ = p.pub.SetXpubVerbose(1)
	if o.connect != "" {
		if err := p.pub.Connect(o.connect); err != nil {
			t.Fatal(err)
		}
	} else {
		p.Events = bindLoopback(t, p.pub, o.port)
	}
	if o.replay {
		router, err := zmq.NewSocket(zmq.ROUTER)
		if err != nil {
			t.Fatal(err)
		}
		_ = router.SetLinger(0)
		if o.replayUnbounded {
			_ = router.SetSndhwm(0)
		}
		p.Replay = bindLoopback(t, router, o.replayPort)
		go p.serve(router)
	} else {
		close(p.done)
	}
	t.Cleanup(p.close)
	return p
}

// bindLoopback binds to 127.0.0.1 (port 0: any free one) and returns the
// endpoint.
func bindLoopback(t testing.TB, s *zmq.Socket, port int) string {
	t.Helper()
	addr := "tcp://127.0.0.1:*"
	if port != 0 {
		addr = fmt.Sprintf("tcp://127.0.0.1:%d", port)
	}
	var err error
	for try := 0; try < 50; try++ { // a just-closed port can take a moment to free
		if err = s.Bind(addr); err == nil {
			ep, err := s.GetLastEndpoint()
			if err != nil {
				t.Fatal(err)
			}
			return ep
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("bind %s: %v", addr, err)
	return ""
}

func portOf(t *testing.T, ep string) int {
	t.Helper()
	var port int
	if _, err := fmt.Sscanf(ep[strings.LastIndexByte(ep, ':')+1:], "%d", &port); err != nil {
		t.Fatalf("port of %q: %v", ep, err)
	}
	return port
}

// waitSubscribed blocks until a subscriber's subscription reached the XPUB:
// from then on nothing published is lost to the slow-joiner window.
func (p *testPub) waitSubscribed() {
	p.t.Helper()
	poller := zmq.NewPoller()
	poller.Add(p.pub, zmq.POLLIN)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		polled, err := poller.Poll(100 * time.Millisecond)
		if err != nil {
			p.t.Fatal(err)
		}
		if len(polled) == 0 {
			continue
		}
		msg, err := p.pub.RecvBytes(0)
		if err != nil {
			p.t.Fatal(err)
		}
		if len(msg) > 0 && msg[0] == 1 {
			return
		}
	}
	p.t.Fatal("no subscriber reached the publisher within 10s")
}

func seq8(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func (p *testPub) remember(seq uint64, payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ring = append(p.ring, ringEntry{seq, payload})
	if over := len(p.ring) - p.o.ring; over > 0 {
		p.ring = p.ring[over:] // the old backing array is freed on the next growth
	}
}

// publish sends the next seq.
func (p *testPub) publish(payload []byte) uint64 {
	p.t.Helper()
	return p.sendAt(p.seq, payload)
}

// drop buffers the next seq for replay without sending it: what a PUB
// high-water-mark drop looks like from the subscriber.
func (p *testPub) drop(payload []byte) uint64 {
	seq := p.seq
	p.remember(seq, payload)
	p.seq++
	return seq
}

// sendAt sends an explicit seq (a duplicate, or a restarted counter).
func (p *testPub) sendAt(seq uint64, payload []byte) uint64 {
	p.t.Helper()
	p.remember(seq, payload)
	if _, err := p.pub.SendMessage(p.o.topic, seq8(seq), payload); err != nil {
		p.t.Fatal(err)
	}
	p.seq = seq + 1
	return seq
}

// resend sends a seq again exactly as before (a redelivery).
func (p *testPub) resend(seq uint64) {
	p.t.Helper()
	p.mu.Lock()
	var payload []byte
	for _, e := range p.ring {
		if e.seq == seq {
			payload = e.payload
		}
	}
	p.mu.Unlock()
	if _, err := p.pub.SendMessage(p.o.topic, seq8(seq), payload); err != nil {
		p.t.Fatal(err)
	}
}

// serve answers replay requests ["", seq8] on the ROUTER (its own goroutine).
func (p *testPub) serve(router *zmq.Socket) {
	defer close(p.done)
	defer router.Close()
	poller := zmq.NewPoller()
	poller.Add(router, zmq.POLLIN)
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		polled, err := poller.Poll(20 * time.Millisecond)
		if err != nil || len(polled) == 0 {
			continue
		}
		frames, err := router.RecvMessageBytes(0)
		if err != nil || len(frames) != 3 || len(frames[1]) != 0 || len(frames[2]) != 8 {
			continue
		}
		if p.o.silentReplay {
			continue
		}
		from := binary.BigEndian.Uint64(frames[2])
		p.o.tracker.enter(from)
		select {
		case <-p.stop:
			return
		case <-time.After(p.o.replayDelay):
		}
		p.mu.Lock()
		ring := append([]ringEntry(nil), p.ring...)
		p.mu.Unlock()
		id := frames[0]
		sentN := 0
		for _, e := range ring {
			if e.seq < from || p.o.replaySkip[e.seq] {
				continue
			}
			if sentN++; p.o.replayPace > 0 && sentN%p.o.replayPace == 0 {
				time.Sleep(time.Millisecond)
			}
			if p.o.legacy {
				_, err = router.SendMessage(id, "", seq8(e.seq), e.payload)
			} else {
				_, err = router.SendMessage(id, "", p.o.topic, seq8(e.seq), e.payload)
			}
		}
		p.o.tracker.leave() // before the end marker: the next replay can only start after it
		if p.o.legacy {
			_, err = router.SendMessage(id, "", seq8(EndSeq), "")
		} else {
			_, err = router.SendMessage(id, "", "", seq8(EndSeq), "")
		}
		_ = err
		if p.o.onReplayed != nil {
			p.o.onReplayed()
		}
	}
}

// relink drops the PUB's TCP links and binds again on the same port, once
// kvtop has seen the disconnect: the process (seq counter, replay buffer)
// lives on. This is a network blip, not a restart.
func (p *testPub) relink(h *harness, worker string) {
	p.t.Helper()
	var port int
	if _, err := fmt.Sscanf(p.Events[strings.LastIndexByte(p.Events, ':')+1:], "%d", &port); err != nil {
		p.t.Fatal(err)
	}
	p.pub.Close()
	h.waitState(worker, 0, snapshot.StreamDisconnected)
	var err error
	if p.pub, err = zmq.NewSocket(zmq.XPUB); err != nil {
		p.t.Fatal(err)
	}
	_ = p.pub.SetLinger(0)
	_ = p.pub.SetSndhwm(p.o.sndhwm)
	bindLoopback(p.t, p.pub, port)
	p.waitSubscribed()
	h.waitState(worker, 0, snapshot.StreamLive)
}

// close stops the publisher like a dying process: sockets gone, no goodbye.
func (p *testPub) close() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
	p.pub.Close()
}
