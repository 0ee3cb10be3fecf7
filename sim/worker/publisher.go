package worker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// BindError is a port the sim could not bind (usually: it is in use).
type BindError struct {
	Addr string // host:port
	What string // e.g. "w0 events rank 0"
	Err  error
}

func (e *BindError) Error() string {
	if isAddrInUse(e.Err) {
		return fmt.Sprintf("port %s (%s) is already in use", e.Addr, e.What)
	}
	return fmt.Sprintf("cannot bind %s (%s): %v", e.Addr, e.What, e.Err)
}

func (e *BindError) Unwrap() error { return e.Err }

func isAddrInUse(err error) bool {
	return err != nil && (errors.Is(err, zmq.EADDRINUSE) || strings.Contains(strings.ToLower(err.Error()), "address already in use"))
}

// Publisher is one engine core's KV event publisher: a PUB socket for live
// batches and a ROUTER socket serving replays from a bounded ring, as vLLM's
// ZmqEventPublisher does. Used only from the sim's clock goroutine.
type Publisher struct {
	pub, rep *zmq.Socket
	Events   string // tcp://host:port the PUB is bound to
	Replay   string // tcp://host:port the ROUTER is bound to
	topic    string
	format   wire.Format
	layout   wire.Layout
	ring     *wire.Ring
	seq      uint64
	withhold int // batches to keep out of the live stream (still replayable)
	buf      []byte

	Sent, Withheld, Replays, BadRequests uint64
}

// bindPair binds a PUB on pubPort and a ROUTER on repPort of host (0 = a
// free port chosen by the system).
func bindPair(ctx *zmq.Context, host string, pubPort, repPort int, what string) (pub, rep *zmq.Socket, pubEP, repEP string, err error) {
	pub, pubEP, err = bindSocket(ctx, zmq.PUB, host, pubPort, what+" events")
	if err != nil {
		return nil, nil, "", "", err
	}
	rep, repEP, err = bindSocket(ctx, zmq.ROUTER, host, repPort, what+" replay")
	if err != nil {
		pub.Close()
		return nil, nil, "", "", err
	}
	return pub, rep, pubEP, repEP, nil
}

func bindSocket(ctx *zmq.Context, t zmq.Type, host string, port int, what string) (*zmq.Socket, string, error) {
	s, err := ctx.NewSocket(t)
	if err != nil {
		return nil, "", err
	}
	s.SetLinger(0)
	if t == zmq.PUB {
		s.SetSndhwm(100000) // vLLM's default
	} else {
		s.SetSndhwm(0) // a whole ring of replies must fit; the ring bounds it
	}
	p := "*"
	if port > 0 {
		p = strconv.Itoa(port)
	}
	if err := s.Bind("tcp://" + net.JoinHostPort(host, p)); err != nil {
		s.Close()
		return nil, "", &BindError{Addr: net.JoinHostPort(host, p), What: what, Err: err}
	}
	ep, err := s.GetLastEndpoint()
	if err != nil {
		s.Close()
		return nil, "", err
	}
	return s, ep, nil
}

func portOf(endpoint string) int {
	i := strings.LastIndexByte(endpoint, ':')
	p, _ := strconv.Atoi(endpoint[i+1:])
	return p
}

// Publish sends one batch live (unless withheld) and keeps it for replay.
func (p *Publisher) Publish(ts float64, events []kvcache.Event, rank int) error {
	p.buf = p.format.AppendBatch(p.buf[:0], ts, events, rank)
	payload := append([]byte(nil), p.buf...)
	seq := p.seq
	p.seq++
	p.ring.Push(seq, payload)
	if p.withhold > 0 {
		// The batch is lost on the way (as when a PUB high-water mark drops
		// it): the subscriber sees a seq gap; replay still has it.
		p.withhold--
		p.Withheld++
		return nil
	}
	p.Sent++
	_, err := p.pub.SendMessageDontwait([]byte(p.topic), wire.Seq8(seq), payload)
	if errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
		return nil // the high-water mark is full: the batch is dropped, as with vLLM
	}
	return err
}

// Withhold keeps the next n batches out of the live stream.
func (p *Publisher) Withhold(n int) { p.withhold += n }

// RingCap is the replay buffer's capacity in batches.
func (p *Publisher) RingCap() int { return p.ring.Cap() }

// NextSeq is the seq the next batch will carry.
func (p *Publisher) NextSeq() uint64 { return p.seq }

// Restart is a new publisher process: seq from 0, empty replay buffer.
func (p *Publisher) Restart() {
	p.seq, p.withhold = 0, 0
	p.ring.Reset()
}

// ServeReplays answers every pending replay request: each buffered batch
// with seq >= the requested one, oldest first, then the end marker. A
// malformed request is dropped without a reply (and counted), as vLLM does.
func (p *Publisher) ServeReplays() {
	for {
		msg, err := p.rep.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return // EAGAIN: nothing pending
		}
		id, from, err := wire.ParseRequest(msg)
		if err != nil {
			p.BadRequests++
			continue
		}
		p.Replays++
		p.ring.From(from, func(seq uint64, payload []byte) {
			p.send(id, p.layout.Reply(p.topic, seq, payload))
		})
		p.send(id, p.layout.End())
	}
}

func (p *Publisher) send(id []byte, frames [][]byte) {
	parts := make([]interface{}, 0, len(frames)+1)
	parts = append(parts, id)
	for _, f := range frames {
		parts = append(parts, f)
	}
	p.rep.SendMessageDontwait(parts...)
}

func (p *Publisher) close() {
	if p.pub != nil {
		p.pub.Close()
	}
	if p.rep != nil {
		p.rep.Close()
	}
}
