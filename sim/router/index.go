package router

import (
	"math/bits"
	"time"

	"github.com/kvtop/kvtop/sim/kvcache"
)

// MaxWorkers is the most workers one simulated router indexes (one bit each).
const MaxWorkers = 64

type holders struct {
	mask uint64 // workers holding the block
}

type holderKey struct {
	hash   uint64
	worker uint8
}

// index is the router's view of which worker holds which block, fed by the
// workers' KV events (prediction source "kv-events"). A worker holds a block
// while it has more stores than removals of it, on any of its ranks. Extra
// copies (a second store before a removal) are rare and counted aside, so
// the common case costs one map entry per block.
type index struct {
	blocks map[uint64]holders
	extra  map[holderKey]int32
	// since is when each worker started holding each block: ties between
	// equal matches go to the longest holder, so a prefix keeps one home.
	since map[holderKey]time.Duration
}

func newIndex() *index {
	return &index{blocks: map[uint64]holders{}, extra: map[holderKey]int32{}, since: map[holderKey]time.Duration{}}
}

func (ix *index) apply(worker int, events []kvcache.Event, now time.Duration) {
	bit := uint64(1) << uint(worker)
	for i := range events {
		e := &events[i]
		// The router follows the GPU's group 0, and sees through the
		// reports of reused prefixes (they are not new copies).
		if !e.GPU() || e.Reused {
			continue
		}
		switch e.Kind {
		case kvcache.Stored:
			for _, h := range e.Hashes {
				b := ix.blocks[h]
				if b.mask&bit != 0 {
					ix.extra[holderKey{h, uint8(worker)}]++
				} else {
					ix.since[holderKey{h, uint8(worker)}] = now
				}
				b.mask |= bit
				ix.blocks[h] = b
			}
		case kvcache.Removed:
			for _, h := range e.Hashes {
				ix.remove(h, worker, bit)
			}
		case kvcache.Cleared:
			ix.forget(worker)
		}
	}
}

func (ix *index) remove(h uint64, worker int, bit uint64) {
	b, ok := ix.blocks[h]
	if !ok || b.mask&bit == 0 {
		return
	}
	if len(ix.extra) > 0 {
		k := holderKey{h, uint8(worker)}
		if n := ix.extra[k]; n > 0 {
			if n == 1 {
				delete(ix.extra, k)
			} else {
				ix.extra[k] = n - 1
			}
			return
		}
	}
	b.mask &^= bit
	delete(ix.since, holderKey{h, uint8(worker)})
	if b.mask == 0 {
		delete(ix.blocks, h)
	} else {
		ix.blocks[h] = b
	}
}

// forget drops everything the index holds for worker.
func (ix *index) forget(worker int) {
	bit := uint64(1) << uint(worker)
	for h, b := range ix.blocks {
		if b.mask&bit == 0 {
			continue
		}
		b.mask &^= bit
		if b.mask == 0 {
			delete(ix.blocks, h)
		} else {
			ix.blocks[h] = b
		}
	}
	for k := range ix.extra {
		if int(k.worker) == worker {
			delete(ix.extra, k)
		}
	}
	for k := range ix.since {
		if int(k.worker) == worker {
			delete(ix.since, k)
		}
	}
}

// match sets matched[w] to the number of leading blocks of hashes worker w
// holds, judged by the deepest block it holds (a block hash names its whole
// prefix), and deepest[w] to that block's hash and since when w holds it.
// It walks from the deepest block back and stops once every allowed worker
// has been placed (shared system prompts are usually held everywhere).
func (ix *index) match(hashes []uint64, allowed uint64, matched []int, deepest []holdersAt) {
	for i := range matched {
		matched[i] = 0
	}
	left := allowed
	for i := len(hashes) - 1; i >= 0 && left != 0; i-- {
		b, ok := ix.blocks[hashes[i]]
		if !ok {
			continue
		}
		for m := b.mask & left; m != 0; m &= m - 1 {
			w := bits.TrailingZeros64(m)
			matched[w] = i + 1
			deepest[w] = holdersAt{hash: hashes[i], since: ix.since[holderKey{hashes[i], uint8(w)}]}
		}
		left &^= b.mask
	}
}

type holdersAt struct {
	hash  uint64
	since time.Duration
}
