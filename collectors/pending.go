package collectors

import (
	"context"
	"sync/atomic"
	"unsafe"
)

// Pending counts the bytes of the event batches a collector has handed to
// the pool and the pool has not applied yet. The pool's input channel is
// bounded by count (a burst of small batches needs room); a publisher of
// megabyte batches would fill that count with gigabytes, so the collector
// also waits for Room before it sends a batch, bounded by bytes.
type Pending struct {
	bytes atomic.Int64
	room  chan struct{}
}

// NewPending returns an empty count.
func NewPending() *Pending { return &Pending{room: make(chan struct{}, 1)} }

// Bytes is what is pending now.
func (p *Pending) Bytes() int64 { return p.bytes.Load() }

// Room waits until fewer than budget bytes are pending, or ctx ends (then
// false). A batch larger than the budget still goes alone: the bound is
// budget plus one batch.
func (p *Pending) Room(ctx context.Context, budget int64) bool {
	for p.bytes.Load() >= budget {
		select {
		case <-p.room:
		case <-ctx.Done():
			return false
		}
	}
	// Wake-ups coalesce in one slot: pass one on, so that a second
	// sender waiting here sees the room too.
	select {
	case p.room <- struct{}{}:
	default:
	}
	return true
}

// Send sends o to the pool, given up only when ctx ends. An event batch
// first waits for Room under budget and is held until the pool applies
// it; the other observations go as they are.
func (p *Pending) Send(ctx context.Context, out chan<- Observation, o Observation, budget int64) {
	if b, ok := o.(*EventBatch); ok {
		if !p.Room(ctx, budget) {
			return
		}
		p.Hold(b)
	}
	select {
	case out <- o:
	case <-ctx.Done():
	}
}

// Hold counts b as pending until the pool applies it (EventBatch.Applied).
func (p *Pending) Hold(b *EventBatch) {
	b.pending, b.cost = p, b.Cost()
	p.bytes.Add(b.cost)
}

// Applied is called by the pool once it has applied the batch: its bytes
// are no longer pending. A batch nobody held (a journal's) does nothing.
func (b *EventBatch) Applied() {
	p := b.pending
	if p == nil {
		return
	}
	b.pending = nil
	p.bytes.Add(-b.cost)
	select {
	case p.room <- struct{}{}:
	default:
	}
}

// Cost is the memory the batch holds, as the pool's input holds it: the
// batch, its events and their hashes (strings are shared with the
// collector's interned names, not counted).
func (b *EventBatch) Cost() int64 {
	n := int64(unsafe.Sizeof(*b)) + int64(cap(b.Events))*int64(unsafe.Sizeof(KVEvent{}))
	for i := range b.Events {
		n += 8 * int64(cap(b.Events[i].Hashes))
	}
	return n
}
