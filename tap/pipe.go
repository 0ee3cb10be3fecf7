package tap

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The slow client rule. Each response is copied by two goroutines: one
// reads the upstream and queues what it read, one writes the queue to the
// client and flushes. While the client keeps up the queue holds one chunk
// for microseconds, so the upstream is never held up by tap. A client that
// falls behind lets the queue grow: up to a reserve of its own (every
// stream may queue that much), then out of a budget shared by all streams,
// up to the stream's cap. Past the cap (or with the shared budget spent)
// the stream is client-slow: the reader waits until the client has taken
// some of the queue — the upstream sees the slow client, as it would
// without tap, and never more than a whole buffer late — and the record
// says so and for how long. Nothing is dropped: a client that keeps
// reading gets every byte, unchanged; memory stays within reserve × streams
// + the shared budget.

// budget is the bytes all streams may queue beyond their reserves.
type budget struct {
	left atomic.Int64
	high atomic.Int64 // the most ever in use, for Stats
	size int64
}

func newBudget(n int64) *budget {
	b := &budget{size: n}
	b.left.Store(n)
	return b
}

func (b *budget) take(n int64) bool {
	for {
		l := b.left.Load()
		if l < n {
			return false
		}
		if b.left.CompareAndSwap(l, l-n) {
			if used := b.size - (l - n); used > b.high.Load() {
				b.high.Store(used) // a racy max: a figure for Stats, not a bound
			}
			return true
		}
	}
}

func (b *budget) give(n int64) { b.left.Add(n) }

type qchunk struct {
	b      []byte
	shared bool      // counted in the shared budget
	at     time.Time // when it was read from the upstream
}

// pipe is one response's queue between its reader and its writer.
type pipe struct {
	reserve, limit int
	shared         *budget

	mu     sync.Mutex
	q      []qchunk
	queued int  // bytes in q and being written
	closed bool // the reader is done
	dead   bool // the writer failed: the client is gone

	data chan struct{} // wakes the writer
	room chan struct{} // wakes the reader

	slow    bool
	stalled time.Duration
}

func newPipe(reserve, limit int, shared *budget) *pipe {
	return &pipe{reserve: reserve, limit: limit, shared: shared, data: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues b (which the pipe now owns), waiting while the client is a
// whole buffer behind. It returns false once the client is gone or ctx is
// done.
func (p *pipe) push(ctx context.Context, b []byte, at time.Time) bool {
	var waitFrom time.Time
	for {
		p.mu.Lock()
		if p.dead {
			p.mu.Unlock()
			return false
		}
		n := len(b)
		ok, shared := false, false
		switch {
		case p.queued+n <= p.reserve || p.queued == 0:
			ok = true // an empty queue always takes a chunk
		case p.queued+n <= p.limit && p.shared.take(int64(n)):
			ok, shared = true, true
		}
		if ok {
			p.q = append(p.q, qchunk{b, shared, at})
			p.queued += n
			if !waitFrom.IsZero() {
				p.stalled += time.Since(waitFrom)
			}
			p.mu.Unlock()
			wake(p.data)
			return true
		}
		p.slow = true
		p.mu.Unlock()
		if waitFrom.IsZero() {
			waitFrom = time.Now()
		}
		select {
		case <-p.room:
		case <-ctx.Done():
			return false
		}
	}
}

// close: the reader has queued everything.
func (p *pipe) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	wake(p.data)
}

// take waits for queued chunks and returns all of them (nil once the
// reader closed and the queue is empty, or ctx is done).
func (p *pipe) take(ctx context.Context, into []qchunk) []qchunk {
	for {
		p.mu.Lock()
		if len(p.q) > 0 {
			into = append(into[:0], p.q...)
			clear(p.q)
			p.q = p.q[:0]
			p.mu.Unlock()
			return into
		}
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil
		}
		select {
		case <-p.data:
		case <-ctx.Done():
			return nil
		}
	}
}

// written releases what the writer has handed to the client.
func (p *pipe) written(cs []qchunk) {
	var shared int64
	n := 0
	for _, c := range cs {
		n += len(c.b)
		if c.shared {
			shared += int64(len(c.b))
		}
	}
	p.shared.give(shared)
	p.mu.Lock()
	p.queued -= n
	p.mu.Unlock()
	wake(p.room)
}

// fail: the client is gone. The queue is dropped and the reader told.
func (p *pipe) fail() {
	p.mu.Lock()
	p.dead = true
	var shared int64
	for _, c := range p.q {
		if c.shared {
			shared += int64(len(c.b))
		}
	}
	p.q = nil
	p.mu.Unlock()
	p.shared.give(shared)
	wake(p.room)
}

// slowness says whether the reader ever waited on the client, and how long.
func (p *pipe) slowness() (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slow, p.stalled
}
