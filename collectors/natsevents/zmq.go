package natsevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors/internal/zlink"
)

// Dynamo's ZMQ event plane (docs/PROTOCOLS.md §10.5): each worker's
// publisher binds a PUB; a message is four frames —
//
//	topic        "kv-events" (direct mode)
//	publisher_id 8 bytes, big-endian (random, below 2^53; new per process)
//	sequence     8 bytes, big-endian, from 0 per publisher
//	frame        a version byte (1), a big-endian u32 length, the envelope
//
// the envelope a msgpack map (rmp_serde named) {publisher_id, sequence,
// published_at, topic, payload} that must agree with the id frames, its
// payload a batch of up to 128 RouterEvents. kvtop connects a SUB to each
// endpoint. The event plane keeps no history and has no heartbeat: a gap
// in a worker's event ids is lost (Dynamo's own recovery goes through its
// request plane, which kvtop does not speak), a new publisher is a
// restart (its worker id changes too), and a link is seen go and come
// through libzmq's monitor.

// frameVersion is the event plane frame's version byte.
const frameVersion = 1

// zmqPoll bounds a receive wait: how soon a reader sees shutdown and its
// monitor's events.
const zmqPoll = 100 * time.Millisecond

// runZMQ starts a reader per configured endpoint: they are read until
// kvtop stops (discovered ones come and go, discover.go).
func (r *runner) runZMQ() {
	for _, ep := range r.o.ZMQ {
		if r.zrs[ep] == nil {
			r.startZMQ(ep, nil)
		}
	}
}

// startZMQ starts the reader of one endpoint; pids are the publisher ids
// its messages may carry (nil: any, a configured endpoint).
func (r *runner) startZMQ(ep string, pids map[uint64]string) {
	r.zgen++
	ctx, cancel := context.WithCancel(r.ctx)
	r.zrs[ep] = &zreader{gen: r.zgen, cancel: cancel, pids: pids}
	gen := r.zgen
	r.replays.Add(1)
	go func() {
		defer r.replays.Done()
		r.readZMQ(ctx, ep, gen)
	}()
}

// readZMQ receives from one endpoint until ctx is done (kvtop stops, or
// discovery withdrew the endpoint). gen tags what it sends: a reader's
// messages still queued when it was stopped are not applied.
func (r *runner) readZMQ(ctx context.Context, ep string, gen uint64) {
	fail := func(err error) { r.emit(r.note("config", "zmq %s: %s", ep, oneLine(err.Error()))) }
	zctx, err := zmq.NewContext()
	if err != nil {
		fail(err)
		return
	}
	defer zctx.Term()
	sock, err := zctx.NewSocket(zmq.SUB)
	if err != nil {
		fail(err)
		return
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	_ = sock.SetRcvtimeo(zmqPoll)
	_ = sock.SetReconnectIvl(time.Second)
	// The frame header and the envelope's keys around a payload of
	// MaxMessageBytes: libzmq drops what is over and closes the link.
	maxMsg := int64(r.o.MaxMessageBytes) + 4096
	_ = sock.SetMaxmsgsize(maxMsg)
	if err := sock.SetSubscribe(r.o.Topic); err != nil {
		fail(err)
		return
	}
	link := zlink.New(zctx, sock)
	if link != nil {
		defer link.Close()
	}
	if err := sock.Connect(ep); err != nil {
		fail(err)
		return
	}
	for ctx.Err() == nil {
		now := time.Now()
		if link != nil {
			link.Read(now, func(up bool) bool {
				r.zconn(ep, gen, up)
				return ctx.Err() == nil
			})
			if dead, shook := link.Dead(now); dead {
				// A link libzmq will not redial: almost surely a message over
				// the limit. Connect again; what it carried is a gap.
				if shook {
					r.oversizedZMQ(ep, gen, maxMsg)
				}
				_ = sock.Disconnect(ep)
				_ = sock.Connect(ep)
			}
		}
		frames, err := sock.RecvMessageBytes(0)
		if err != nil {
			if zmq.AsErrno(err) == zmq.ETERM {
				return
			}
			continue // the poll's timeout (EAGAIN), or an interrupted wait
		}
		r.handleZMQ(ep, gen, frames)
	}
}

// zconn reports one endpoint's link going down or coming back.
func (r *runner) zconn(ep string, gen uint64, up bool) {
	select {
	case r.conns <- connEvent{up: up, endpoint: ep, gen: gen, at: time.Now()}:
	case <-r.ctx.Done():
	}
}

func (r *runner) oversizedZMQ(ep string, gen uint64, maxMsg int64) {
	m := inMsg{endpoint: ep, gen: gen, err: errOversized, at: time.Now(), size: int(maxMsg)}
	r.send(m)
}

// errFrames is a message not in the event plane's four frames.
var errFrames = errors.New("not an event plane message")

// handleZMQ checks one message's frames and hands its events on as the
// NATS path does.
func (r *runner) handleZMQ(ep string, gen uint64, frames [][]byte) {
	now := time.Now()
	bad := func(format string, args ...any) {
		m := inMsg{endpoint: ep, gen: gen, err: fmt.Errorf("%w: "+format, append([]any{errFrames}, args...)...), at: now}
		r.send(m)
	}
	switch {
	case len(frames) != 4:
		bad("%d frames, want 4 (topic, publisher id, sequence, frame)", len(frames))
		return
	case string(frames[0]) != r.o.Topic:
		return // a topic that only begins like ours: not ours (SUB filters by prefix)
	case len(frames[1]) != 8 || len(frames[2]) != 8:
		bad("publisher id of %d bytes and sequence of %d, want 8 and 8", len(frames[1]), len(frames[2]))
		return
	}
	f := frames[3]
	if len(f) < 5 || f[0] != frameVersion {
		bad("frame of %d bytes, version %d: want version %d and a length", len(f), first(f), frameVersion)
		return
	}
	body := f[5:]
	if n := binary.BigEndian.Uint32(f[1:5]); int(n) != len(body) {
		bad("frame says %d bytes, carries %d", n, len(body))
		return
	}
	if len(body) > r.o.MaxMessageBytes {
		r.send(inMsg{endpoint: ep, gen: gen, err: errOversized, size: len(body), at: now})
		return
	}
	pub, seq := binary.BigEndian.Uint64(frames[1]), binary.BigEndian.Uint64(frames[2])
	evs, err := DecodeAll(body, nil)
	if len(evs) > 0 && evs[0].Envelope && (evs[0].PublisherID != pub || evs[0].Sequence != seq) {
		bad("envelope says publisher %d sequence %d, frames %d and %d", evs[0].PublisherID, evs[0].Sequence, pub, seq)
		return
	}
	m := inMsg{size: len(body), subject: r.o.Topic, endpoint: ep, gen: gen, pubID: pub, at: now}
	r.sendEach(m, evs, err, maphash.Bytes(r.seed, body))
}

func first(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
