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
	// Tokens: Stored: the blocks' token ids, BlockSize per hash; a
	// sliding-window group's reuse report spans blocks it does not name.
	Tokens []uint32
	Tag
	// Placeholder: an offload store that says nothing of its block (vLLM
	// without self-describing events): token_ids [] and block_size 0.
	Placeholder bool
	// Reused marks a reused prefix reported again (kv_cache_report_mode
	// "full"). The sim's own bookkeeping: nothing on the wire says so.
	Reused bool
	// Loaded is, on a Stored, how many of its leading blocks were loaded
	// from a CPU tier rather than computed. The sim's own bookkeeping, as
	// Reused: on the wire a loaded block is stored as a computed one.
	Loaded int
}

// Tag says where an event's blocks live, as vLLM main publishes it. The
// zero Tag is the plain engine's: the GPU, no group_idx or kind written
// (vLLM before KV cache groups were published).
type Tag struct {
	Medium  string // "" is the GPU
	Grouped bool   // group_idx written
	Group   int32
	Spec    string // kv_cache_spec_kind, on stores ("": not written)
	Window  int    // kv_cache_spec_sliding_window, tokens (0: not written)
}

// GPU reports whether the tag is the GPU's group 0: the blocks of the
// engine's prefix cache that routers and the sim's own truth follow.
func (t Tag) GPU() bool { return t.Medium == "" && t.Group == 0 }

const none = -1

type block struct {
	hash       uint64
	hashed     bool
	group      uint8 // the KV cache group whose hash it holds
	ref        int32
	prev, next int32 // free queue links
	dup        int32 // next physical block with the same hash
	inFree     bool
}

// Cache is one engine's paged KV cache. A hybrid model's KV cache groups
// share its blocks (one pool and one free queue, as vLLM's), each group
// with its own hashes (Group).
// Not safe for concurrent use: the
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
	groups     []group
	resident   int // hashed blocks

	events []Event
	arena  []uint64 // backing store for BlockRemoved hashes of the current step
	// Copies counts stores of a hash its group already held: a second
	// physical copy. RootCopies are those in a store without a parent,
	// which on the wire look like a reuse report (vLLM's start at block
	// 0, parent none).
	Copies, RootCopies uint64
}

// group is one KV cache group's hashes: hash → first block holding it.
type group struct {
	cached map[uint64]int32
	tag    Tag // stamped on the group's events
}

// Group is one KV cache group of a cache.
type Group struct {
	c *Cache
	g uint8
}

// New returns a cache of numBlocks empty blocks and one group.
func New(numBlocks int) *Cache {
	c := &Cache{blocks: make([]block, numBlocks), head: none, tail: none, groups: []group{{cached: make(map[uint64]int32, numBlocks)}}}
	for i := range c.blocks {
		c.blocks[i].dup = none
		c.pushTail(int32(i))
	}
	return c
}

// SetTag stamps t on group 0's events from now on.
func (c *Cache) SetTag(t Tag) { c.groups[0].tag = t }

// AddGroup adds a KV cache group whose events carry t.
func (c *Cache) AddGroup(t Tag) Group {
	c.groups = append(c.groups, group{cached: map[uint64]int32{}, tag: t})
	return Group{c, uint8(len(c.groups) - 1)}
}

// Group returns group 0, the one the Cache's own methods use.
func (c *Cache) Group() Group { return Group{c: c} }

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

// Distinct is the number of distinct hashes group 0 holds: a hash cached
// in two physical copies counts once, as a subscriber's refcounted index
// sees it.
func (c *Cache) Distinct() int { return c.Group().Distinct() }

// Match returns how many leading blocks of hashes group 0 holds.
func (c *Cache) Match(hashes []uint64) int { return c.Group().Match(hashes) }

// Acquire references group 0's cached blocks of hashes[:n] (which Match
// must have found) and appends their ids to dst.
func (c *Cache) Acquire(hashes []uint64, n int, dst []int32) []int32 {
	return c.Group().Acquire(hashes, n, dst)
}

// Idle counts the blocks of hashes[:n] (cached in group 0, per Match)
// that no request references: acquiring them takes them out of the free
// queue.
func (c *Cache) Idle(hashes []uint64, n int) int { return c.Group().Idle(hashes, n) }

// Distinct is the number of distinct hashes the group holds.
func (g Group) Distinct() int { return len(g.c.groups[g.g].cached) }

// Match returns how many leading blocks of hashes the group holds.
func (g Group) Match(hashes []uint64) int {
	m := g.c.groups[g.g].cached
	for i, h := range hashes {
		if _, ok := m[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Holds reports whether the group holds hash h.
func (g Group) Holds(h uint64) bool {
	_, ok := g.c.groups[g.g].cached[h]
	return ok
}

// Acquire references the group's blocks of hashes[:n] (all held) and
// appends their ids to dst.
func (g Group) Acquire(hashes []uint64, n int, dst []int32) []int32 {
	c, m := g.c, g.c.groups[g.g].cached
	for _, h := range hashes[:n] {
		id := m[h]
		b := &c.blocks[id]
		if b.ref == 0 {
			c.unlink(id)
		}
		b.ref++
		dst = append(dst, id)
	}
	return dst
}

// Idle counts the group's blocks of hashes[:n] (all held) that no request
// references.
func (g Group) Idle(hashes []uint64, n int) int {
	c, m := g.c, g.c.groups[g.g].cached
	k := 0
	for _, h := range hashes[:n] {
		if c.blocks[m[h]].ref == 0 {
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

// Store caches full blocks in group 0 (Group.Store).
func (c *Cache) Store(ids []int32, hashes []uint64, parent uint64, hasParent bool, tokens []uint32) {
	c.Group().Store(ids, hashes, parent, hasParent, tokens)
}

// Holds reports whether group 0 holds hash h.
func (c *Cache) Holds(h uint64) bool { return c.Group().Holds(h) }

// Report is group 0's Group.Report.
func (c *Cache) Report(hashes []uint64, tokens []uint32) { c.Group().Report(hashes, tokens) }

// Store caches full blocks: ids[i] now holds hashes[i], whose tokens are
// tokens[i*BlockSize:(i+1)*BlockSize]. parent is the hash of the block before
// ids[0] (hasParent false for a prompt's first block). One BlockStored event
// covers them all.
func (g Group) Store(ids []int32, hashes []uint64, parent uint64, hasParent bool, tokens []uint32) {
	if len(ids) == 0 {
		return
	}
	c, gr := g.c, &g.c.groups[g.g]
	for i, id := range ids {
		b := &c.blocks[id]
		b.hash, b.hashed, b.group = hashes[i], true, g.g
		if first, ok := gr.cached[b.hash]; ok {
			b.dup = first
			c.Copies++
			if !hasParent {
				c.RootCopies++
			}
		} else {
			b.dup = none
		}
		gr.cached[b.hash] = id
		c.resident++
	}
	c.events = append(c.events, Event{Kind: Stored, Hashes: hashes[:len(ids)], Parent: parent, HasParent: hasParent,
		Tokens: tokens[:len(ids)*BlockSize], Tag: gr.tag})
}

// MarkLoaded says that the first n blocks of the latest event (a Store)
// were loaded from a CPU tier, not computed (Event.Loaded).
func (c *Cache) MarkLoaded(n int) {
	if k := len(c.events); k > 0 && c.events[k-1].Kind == Stored {
		c.events[k-1].Loaded = min(n, len(c.events[k-1].Hashes))
	}
}

// Report appends a store event for blocks the group already holds (vLLM's
// kv_cache_report_mode "full": a reused prefix reported again, parent
// none); nothing in the cache changes.
func (g Group) Report(hashes []uint64, tokens []uint32) {
	if len(hashes) > 0 {
		g.c.events = append(g.c.events, Event{Kind: Stored, Hashes: hashes, Tokens: tokens, Tag: g.c.groups[g.g].tag, Reused: true})
	}
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

// Clear forgets every cached hash of every group (an explicit prefix-cache
// reset) and emits AllBlocksCleared. Referenced blocks stay in use,
// without a hash.
func (c *Cache) Clear() {
	for i := range c.blocks {
		b := &c.blocks[i]
		b.hashed, b.hash, b.dup = false, 0, none
	}
	for i := range c.groups {
		clear(c.groups[i].cached)
	}
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
	gr := &c.groups[b.group]
	// Unlink id from the chain of copies of h.
	if first := gr.cached[h]; first == id {
		if b.dup == none {
			delete(gr.cached, h)
		} else {
			gr.cached[h] = b.dup
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
	t := gr.tag
	t.Spec, t.Window = "", 0 // removals carry no kind
	c.events = append(c.events, Event{Kind: Removed, Hashes: c.arena[len(c.arena)-1:], Tag: t})
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
