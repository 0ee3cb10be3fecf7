package hostile

import (
	"errors"
	"sync"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// format is every hostile publisher's payload format: vLLM >= 0.24.
var format = wire.Format{Encoding: wire.Map, Hash: wire.HashUint64, Batch: wire.ArrayBatch}

// publisher is a KV event PUB whose seqs the input drives (gaps, restarts,
// oversized batches), with an honest replay ROUTER over a ring of its last
// batches, or none (the input binds a Trickler instead). Send, Skip and
// Restart are called from one goroutine.
type publisher struct {
	Events string // tcp://127.0.0.1:port of the PUB
	Replay string // of the ROUTER, "" without one

	pub  *zmq.Socket
	seq  uint64
	sent uint64 // batches sent live

	mu      sync.Mutex // the ring and counters, shared with the ROUTER goroutine
	ring    *wire.Ring
	replays int

	stop chan struct{}
	done chan struct{}
}

// newPublisher binds a PUB that queues at most hwm batches per subscriber
// (vLLM's is 100 000) and, with ring > 0, a ROUTER serving replays from
// the last ring batches.
func newPublisher(ctx *zmq.Context, ring, hwm int) (*publisher, error) {
	pub, ep, err := bindLoopback(ctx, zmq.PUB)
	if err != nil {
		return nil, err
	}
	_ = pub.SetSndhwm(hwm)
	p := &publisher{Events: ep, pub: pub, stop: make(chan struct{}), done: make(chan struct{})}
	if ring <= 0 {
		close(p.done)
		return p, nil
	}
	rep, rep0, err := bindLoopback(ctx, zmq.ROUTER)
	if err != nil {
		pub.Close()
		return nil, err
	}
	_ = rep.SetSndhwm(0) // a whole ring of replies must fit; the ring bounds it
	p.Replay, p.ring = rep0, wire.NewRing(ring)
	go p.serveReplays(rep)
	return p, nil
}

// Send publishes payload at the next seq (dropped, as vLLM's PUB does,
// when the high-water mark is full) and keeps it for replay.
func (p *publisher) Send(payload []byte) {
	seq := p.seq
	p.seq++
	if p.ring != nil {
		p.mu.Lock()
		p.ring.Push(seq, payload)
		p.mu.Unlock()
	}
	_, err := p.pub.SendMessageDontwait("", wire.Seq8(seq), payload)
	if err == nil || errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
		p.sent++
	}
}

// Skip leaves n seqs out of the live stream: a gap (not in the ring
// either: the batches never existed).
func (p *publisher) Skip(n uint64) { p.seq += n }

// Seq is the next seq.
func (p *publisher) Seq() uint64 { return p.seq }

// Restart is a new publisher process: seq from 0, empty ring.
func (p *publisher) Restart() {
	p.seq = 0
	if p.ring != nil {
		p.mu.Lock()
		p.ring.Reset()
		p.mu.Unlock()
	}
}

// serveReplays answers each request with the ring's batches from the seq
// asked for, then the end marker (v26 layout), as vLLM does.
func (p *publisher) serveReplays(rep *zmq.Socket) {
	defer close(p.done)
	defer rep.Close()
	poller := zmq.NewPoller()
	poller.Add(rep, zmq.POLLIN)
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		if ready, err := poller.Poll(100 * time.Millisecond); err != nil || len(ready) == 0 {
			continue
		}
		f, err := rep.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			continue
		}
		id, from, err := wire.ParseRequest(f)
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.replays++
		var replies [][][]byte
		p.ring.From(from, func(seq uint64, payload []byte) {
			replies = append(replies, wire.V26.Reply("", seq, payload))
		})
		p.mu.Unlock()
		for _, r := range append(replies, wire.V26.End()) {
			_, _ = rep.SendMessageDontwait(id, r[0], r[1], r[2], r[3])
		}
	}
}

// Replays is how many replay requests the ROUTER served.
func (p *publisher) Replays() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.replays
}

func (p *publisher) close() {
	close(p.stop)
	<-p.done
	p.pub.Close()
}

// hashes returns n distinct block hashes of stream id, from index first
// on (a hash never repeats across ids or indexes below 2^40).
func hashes(id uint8, first uint64, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(id)<<56 | (first+uint64(i))&(1<<40-1) | 1<<55
	}
	return hs
}

// storedBatch is one batch of events BlockStored events of 16 blocks each
// (with their token ids), storing hs in order, then a BlockRemoved of rm.
func storedBatch(hs []uint64, perEvent int, rm []uint64) []byte {
	tokens := make([]uint32, perEvent*kvcache.BlockSize)
	for i := range tokens {
		tokens[i] = uint32(1000 + i)
	}
	var evs []kvcache.Event
	for i := 0; i < len(hs); i += perEvent {
		j := min(i+perEvent, len(hs))
		ev := kvcache.Event{Kind: kvcache.Stored, Hashes: hs[i:j], Tokens: tokens[:(j-i)*kvcache.BlockSize]}
		if i > 0 {
			ev.Parent, ev.HasParent = hs[i-1], true
		}
		evs = append(evs, ev)
	}
	if len(rm) > 0 {
		evs = append(evs, kvcache.Event{Kind: kvcache.Removed, Hashes: rm})
	}
	return format.AppendBatch(nil, unixNow(), evs, 0)
}

// removedBatch is one BlockRemoved of hs: cheap to build, costly to hold
// (kvtop decodes every hash).
func removedBatch(hs []uint64) []byte {
	return format.AppendBatch(nil, unixNow(), []kvcache.Event{{Kind: kvcache.Removed, Hashes: hs}}, 0)
}

func unixNow() float64 {
	t := time.Now()
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}
