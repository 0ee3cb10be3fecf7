package kvcache

// Kind is the tag of a KV cache event.
type Kind uint8

const (
	Stored  Kind = iota + 1 // BlockStored
	Removed                 // BlockRemoved
	Cleared                 // AllBlocksCleared
)

func (k Kind) String() string {
	switch k {
	case Stored:
		return "BlockStored"
	case Removed:
		return "BlockRemoved"
	case Cleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Event is one KV cache event. Slices point into the cache's or the
// request's memory: they stay valid until the cache is next changed after
// TakeEvents returned them.
type Event struct {
	Kind      Kind
	Hashes    []uint64
	Parent    uint64 // valid when HasParent
	HasParent bool
	Tokens    []uint32 // Stored: the blocks' token ids, BlockSize per hash
}

const none = -1

type block struct {
	hash       uint64
	hashed     bool
	ref        int32
	prev, next int32 // free queue links
	dup        int32 // next physical block with the same hash
	inFree     bool
}

// Cache is one engine's paged KV cache. Not safe for concurrent use: the
// engine that owns it drives it from one goroutine.
//
// Blocks are either referenced by running requests or sit in the free queue
// (head = next to be reused). Unreferenced blocks that hold a hash stay
// cached there and can still serve prefix hits until they are reused: that
// reuse is the eviction (BlockRemoved). Like vLLM, the same hash may be cached
// in two physical blocks at once (two requests computed it concurrently);
// each copy is stored and removed on its own.
type Cache struct {
	blocks     []block
	head, tail int32
	free       int // blocks in the free queue
	cached     map[uint64]int32
	resident   int // hashed blocks

	events []Event
	arena  []uint64 // backing store for BlockRemoved hashes of the current step
}

// New returns a cache of numBlocks empty blocks.
func New(numBlocks int) *Cache {
	c := &Cache{blocks: make([]block, numBlocks), head: none, tail: none, cached: make(map[uint64]int32, numBlocks)}
	for i := range c.blocks {
		c.blocks[i].dup = none
		c.pushTail(int32(i))
	}
	return c
}

// NumBlocks is the cache's capacity in blocks (vLLM num_gpu_blocks).
func (c *Cache) NumBlocks() int { return len(c.blocks) }

// Free is the number of blocks a request could get now: empty blocks plus
// unreferenced cached ones.
func (c *Cache) Free() int { return c.free }

// Used is the number of blocks referenced by requests. Used/NumBlocks is
// vLLM's kv_cache_usage_perc.
func (c *Cache) Used() int { return len(c.blocks) - c.free }

// Resident is the number of blocks holding a hash (stored minus removed).
func (c *Cache) Resident() int { return c.resident }

// Distinct is the number of distinct hashes held: a hash cached in two
// physical copies counts once, as a subscriber's refcounted index sees it.
func (c *Cache) Distinct() int { return len(c.cached) }

// Match returns how many leading blocks of hashes are cached.
func (c *Cache) Match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.cached[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Acquire references the cached blocks of hashes[:n] (which Match must have
// found) and appends their ids to dst.
func (c *Cache) Acquire(hashes []uint64, n int, dst []int32) []int32 {
	for _, h := range hashes[:n] {
		id := c.cached[h]
		b := &c.blocks[id]
		if b.ref == 0 {
			c.unlink(id)
		}
		b.ref++
		dst = append(dst, id)
	}
	return dst
}

// Idle counts the blocks of hashes[:n] (cached, per Match) that no request
// references: acquiring them takes them out of the free queue.
func (c *Cache) Idle(hashes []uint64, n int) int {
	k := 0
	for _, h := range hashes[:n] {
		if c.blocks[c.cached[h]].ref == 0 {
			k++
		}
	}
	return k
}

// Allocate takes k blocks from the head of the free queue, evicting the
// cached hash a block still holds, and appends their ids to dst. It returns
// false and changes nothing when fewer than k blocks are free.
func (c *Cache) Allocate(k int, dst []int32) ([]int32, bool) {
	if k > c.free {
		return dst, false
	}
	for i := 0; i < k; i++ {
		id := c.head
		c.unlink(id)
		b := &c.blocks[id]
		if b.hashed {
			c.evict(id)
		}
		b.ref = 1
		dst = append(dst, id)
	}
	return dst, true
}

// Store caches full blocks: ids[i] now holds hashes[i], whose tokens are
// tokens[i*BlockSize:(i+1)*BlockSize]. parent is the hash of the block before
// ids[0] (hasParent false for a prompt's first block). One BlockStored event
// covers them all.
func (c *Cache) Store(ids []int32, hashes []uint64, parent uint64, hasParent bool, tokens []uint32) {
	if len(ids) == 0 {
		return
	}
	for i, id := range ids {
		b := &c.blocks[id]
		b.hash, b.hashed = hashes[i], true
		if first, ok := c.cached[b.hash]; ok {
			b.dup = first
		} else {
			b.dup = none
		}
		c.cached[b.hash] = id
		c.resident++
	}
	c.events = append(c.events, Event{Kind: Stored, Hashes: hashes[:len(ids)], Parent: parent, HasParent: hasParent, Tokens: tokens[:len(ids)*BlockSize]})
}

// Release drops one reference to each block, last block first, so that a
// prefix's tail is evicted before its head (as vLLM frees blocks). Cached
// blocks join the tail of the free queue (least recently used is reused
// first); blocks without a hash go to the head, to be reused before any
// cached block is evicted.
func (c *Cache) Release(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		b := &c.blocks[id]
		b.ref--
		if b.ref > 0 {
			continue
		}
		b.ref = 0
		if b.hashed {
			c.pushTail(id)
		} else {
			c.pushHead(id)
		}
	}
}

// Clear forgets every cached hash (an explicit prefix-cache reset) and emits
// AllBlocksCleared. Referenced blocks stay in use, without a hash.
func (c *Cache) Clear() {
	for i := range c.blocks {
		b := &c.blocks[i]
		b.hashed, b.hash, b.dup = false, 0, none
	}
	clear(c.cached)
	c.resident = 0
	c.events = append(c.events, Event{Kind: Cleared})
}

// TakeEvents returns the events since the last call, oldest first. Their
// buffers are reused: use them before changing the cache again.
func (c *Cache) TakeEvents() []Event {
	ev := c.events
	c.events = c.events[:0]
	c.arena = c.arena[:0]
	return ev
}

func (c *Cache) evict(id int32) {
	b := &c.blocks[id]
	h := b.hash
	// Unlink id from the chain of copies of h.
	if first := c.cached[h]; first == id {
		if b.dup == none {
			delete(c.cached, h)
		} else {
			c.cached[h] = b.dup
		}
	} else {
		for p := first; p != none; p = c.blocks[p].dup {
			if c.blocks[p].dup == id {
				c.blocks[p].dup = b.dup
				break
			}
		}
	}
	b.hashed, b.hash, b.dup = false, 0, none
	c.resident--
	c.arena = append(c.arena, h)
	c.events = append(c.events, Event{Kind: Removed, Hashes: c.arena[len(c.arena)-1:]})
}

func (c *Cache) unlink(id int32) {
	b := &c.blocks[id]
	if !b.inFree {
		return
	}
	if b.prev != none {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next != none {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next, b.inFree = none, none, false
	c.free--
}

func (c *Cache) pushTail(id int32) {
	b := &c.blocks[id]
	b.prev, b.next, b.inFree = c.tail, none, true
	if c.tail != none {
		c.blocks[c.tail].next = id
	} else {
		c.head = id
	}
	c.tail = id
	c.free++
}

func (c *Cache) pushHead(id int32) {
	b := &c.blocks[id]
	b.prev, b.next, b.inFree = none, c.head, true
	if c.head != none {
		c.blocks[c.head].prev = id
	} else {
		c.tail = id
	}
	c.head = id
	c.free++
}
