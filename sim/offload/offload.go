// Package offload is a simulated CPU tier behind an engine's GPU cache, as
// vLLM's connectors publish it (docs/PROTOCOLS.md §1.1): the
// OffloadingConnector, whose CPU blocks are offload keys (a chunk of GPU
// blocks named by its last hash) published as placeholders or as
// self-describing chunks, and LMCache's connector, which publishes its
// stores and never an eviction.
package offload

import "github.com/kvtop/kvtop/sim/kvcache"

// Mode is how the tier publishes.
type Mode uint8

const (
	// Placeholders: vLLM's OffloadingConnector without self-describing
	// events: one BlockStored per key, its hash alone, no tokens, block
	// size 0; evictions one BlockRemoved per step with every key.
	Placeholders Mode = iota + 1
	// Chunks: self-describing events: one BlockStored per chunk with all
	// its block hashes, its tokens and the block size; evictions one
	// BlockRemoved per step with every evicted chunk's hashes. A chunk
	// that begins inside a shared prefix names the shared hashes again.
	Chunks
	// LMCache: its connector publishes each completed store (medium CPU,
	// no group) and never a removal, while its host cache evicts.
	LMCache
)

// Config sizes a tier.
type Config struct {
	Mode Mode
	// ChunkBlocks is GPU blocks per offloaded block (vLLM's
	// block_size_factor; LMCache: 1, its chunk size matched to the
	// block size as routing needs).
	ChunkBlocks int
	Blocks      int // capacity in GPU blocks
}

// BlockBytes is one GPU block of the sim's model: 16 tokens × 128 KiB (an
// 8B model's K and V: 32 layers × 8 KV heads × 128 dims × 2 bytes × 2).
const BlockBytes = 16 << 17

// BlockTransfer is how long one block takes over PCIe (2 MiB at ~25 GB/s).
const BlockTransfer = 84_000 // ns

type entry struct {
	key        uint64
	hashes     []uint64 // the chunk's block hashes
	step       uint64   // the step that last stored or loaded it
	prev, next *entry
}

// Tier is one engine's CPU tier. Not safe for concurrent use.
type Tier struct {
	cfg        Config
	keys       map[uint64]*entry
	head, tail *entry // least recently used first
	// holds counts the resident chunks naming each block hash (Chunks:
	// what a refcounting subscriber holds).
	holds   map[uint64]int
	events  []kvcache.Event
	removed []uint64 // this step's evictions, published as one event
	// step counts TakeEvents: a chunk stored or loaded in the current
	// step is in a transfer, which vLLM never evicts.
	step uint64

	// Stored, Loaded and Evicted count GPU blocks.
	Stored, Loaded, Evicted uint64
}

// New returns an empty tier.
func New(cfg Config) *Tier {
	if cfg.ChunkBlocks < 1 || cfg.Mode == LMCache {
		cfg.ChunkBlocks = 1
	}
	return &Tier{cfg: cfg, keys: map[uint64]*entry{}, holds: map[uint64]int{}}
}

// Config returns the tier's configuration.
func (t *Tier) Config() Config { return t.cfg }

// Chunk is GPU blocks per offloaded block.
func (t *Tier) Chunk() int { return t.cfg.ChunkBlocks }

// Blocks is what a subscriber of the tier's events holds once they are
// all applied: keys for placeholders, distinct block hashes for chunks;
// LMCache's blocks, which its events never say.
func (t *Tier) Blocks() int {
	if t.cfg.Mode == Chunks {
		return len(t.holds)
	}
	return len(t.keys)
}

// Keys is the number of offloaded blocks held.
func (t *Tier) Keys() int { return len(t.keys) }

// Store offers the tier chunks [from, to) of a sequence (hashes and tokens
// of its full blocks): those it does not hold are stored, evicting the
// least recently used when full, and published.
func (t *Tier) Store(hashes []uint64, tokens []uint32, from, to int) {
	f := t.cfg.ChunkBlocks
	run := -1 // LMCache: first chunk of the current run of new ones
	for c := from; c < to; c++ {
		key := hashes[(c+1)*f-1]
		if t.keys[key] != nil {
			t.flushRun(hashes, tokens, &run, c)
			continue
		}
		if len(t.keys)*f+f > t.cfg.Blocks && !t.evict() {
			t.flushRun(hashes, tokens, &run, c)
			return // full of chunks in transfer: not stored (vLLM skips the store)
		}
		e := &entry{key: key, hashes: append([]uint64(nil), hashes[c*f:(c+1)*f]...), step: t.step}
		t.keys[key] = e
		t.pushTail(e)
		t.Stored += uint64(f)
		switch t.cfg.Mode {
		case Placeholders:
			t.events = append(t.events, kvcache.Event{Kind: kvcache.Stored, Hashes: e.hashes[f-1:],
				Placeholder: true, Tag: kvcache.Tag{Medium: "CPU", Grouped: true}})
		case Chunks:
			for _, h := range e.hashes {
				t.holds[h]++
			}
			ev := kvcache.Event{Kind: kvcache.Stored, Hashes: e.hashes, Tokens: tokens[c*f*kvcache.BlockSize : (c+1)*f*kvcache.BlockSize],
				Tag: kvcache.Tag{Medium: "CPU", Grouped: true, Spec: "full_attention"}}
			if c > 0 {
				ev.Parent, ev.HasParent = hashes[c*f-1], true
			}
			t.events = append(t.events, ev)
		case LMCache:
			if run < 0 {
				run = c
			}
		}
	}
	t.flushRun(hashes, tokens, &run, to)
}

// flushRun publishes LMCache's run of new blocks [*run, end) as one store.
func (t *Tier) flushRun(hashes []uint64, tokens []uint32, run *int, end int) {
	if *run < 0 {
		return
	}
	ev := kvcache.Event{Kind: kvcache.Stored, Hashes: hashes[*run:end], Tokens: tokens[*run*kvcache.BlockSize : end*kvcache.BlockSize],
		Tag: kvcache.Tag{Medium: "CPU"}}
	if *run > 0 {
		ev.Parent, ev.HasParent = hashes[*run-1], true
	}
	t.events = append(t.events, ev)
	*run = -1
}

// evict drops the least recently used chunk, unless it is in a transfer
// (then so are all: the others are more recent).
func (t *Tier) evict() bool {
	e := t.head
	if e == nil || e.step == t.step {
		return false
	}
	t.unlink(e)
	delete(t.keys, e.key)
	t.Evicted += uint64(len(e.hashes))
	switch t.cfg.Mode {
	case Placeholders:
		t.removed = append(t.removed, e.key)
	case Chunks:
		for _, h := range e.hashes {
			if t.holds[h]--; t.holds[h] == 0 {
				delete(t.holds, h)
			}
		}
		t.removed = append(t.removed, e.hashes...)
	}
	return true
}

// Clear forgets everything, publishing nothing (it goes with the
// engine's AllBlocksCleared).
func (t *Tier) Clear() {
	clear(t.keys)
	clear(t.holds)
	t.head, t.tail = nil, nil
	t.removed = nil
}

// Lookup counts the chunks held one after the other from chunk from on,
// up to chunk to (exclusive), in a sequence of those hashes.
func (t *Tier) Lookup(hashes []uint64, from, to int) int {
	f := t.cfg.ChunkBlocks
	n := 0
	for c := from; c < to && t.keys[hashes[(c+1)*f-1]] != nil; c++ {
		n++
	}
	return n
}

// Load reads blocks [from, to) of a sequence back to the GPU: the chunks
// holding them become the most recently used.
func (t *Tier) Load(hashes []uint64, from, to int) {
	f := t.cfg.ChunkBlocks
	for c := from / f; c*f < to; c++ {
		if e := t.keys[hashes[(c+1)*f-1]]; e != nil {
			e.step = t.step
			t.unlink(e)
			t.pushTail(e)
		}
	}
	t.Loaded += uint64(to - from)
}

// TakeEvents returns the events since the last call: the step's
// evictions first (one event), then its stores. They stay valid until the
// tier next changes.
func (t *Tier) TakeEvents(dst []kvcache.Event) []kvcache.Event {
	t.step++
	if len(t.removed) > 0 {
		dst = append(dst, kvcache.Event{Kind: kvcache.Removed, Hashes: t.removed, Tag: kvcache.Tag{Medium: "CPU", Grouped: true}})
		t.removed = nil // the event keeps its slice
	}
	dst = append(dst, t.events...)
	t.events = t.events[:0]
	return dst
}

func (t *Tier) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *Tier) pushTail(e *entry) {
	e.prev = t.tail
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
}
