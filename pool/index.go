package pool

import "github.com/kvtop/kvtop/collectors"

// The block index has three levels, each counting distinct resident hashes
// so that every figure in a snapshot is a field read, not a scan:
//
//   - pubIndex: one publisher (worker, rank); a refcount per (medium, KV
//     cache group) column per hash. On the GPU a store of a resident hash
//     is a re-announce (a touch) when its event has no parent (vLLM's
//     reuse reports), a new copy under a parent or when the event says
//     so; an offload tier refcounts its re-announced chunk hashes.
//   - workerIndex: the union over a worker's publishers of the blocks
//     of its pool columns (GPU, full-attention-like groups): the only
//     blocks prefix figures count. While a worker
//     has one publisher that publisher's table is the union; a presence
//     table (hash → publishers holding it) appears with the second one.
//   - poolIndex: hash → number of workers holding it (replicas) and its
//     parent. A hash names the whole prefix ending there, so its parent is
//     the same wherever it is stored: one parent column serves depth
//     resolution for the whole pool.

const (
	hasParentBit = 0x8000
	holderMask   = 0x7fff
	maxRef       = 0xffff
)

type ovKey struct {
	k uint64
	m uint8
}

// maxColumns bounds the (medium, group) refcount columns of one publisher.
const maxColumns = 255

// column describes one (medium, KV cache group) refcount column of a
// publisher's index. Residency is kept per column, so a hybrid model's
// sliding-window groups and an offload tier never mix into the GPU's
// full-attention blocks.
type column struct {
	medium string // "GPU", "CPU", … as published (never folded into GPU)
	group  int32  // group_idx, 0 when absent
	kind   string // kv_cache_spec_kind as published, "" when absent (full attention)
	window int32  // kv_cache_spec_sliding_window, tokens (0: none)
	// blockSize is the tokens per block of this column's events (0 until
	// an event says, and for offload placeholders, which never do).
	blockSize int
	// prefix: a full-attention-like group, whose blocks form prefix
	// chains. pool: prefix on the GPU: the only blocks that feed replicas,
	// depths, ownership and every prefix figure. offload: another medium
	// (refcounted per hash: offload chunks re-announce shared hashes).
	prefix, pool, offload bool
	blocks                int // hashes with a non-zero count in this column
	tier                  int // the publisher's tier of this medium (-1 until known)
}

// prefixKind reports whether a kv_cache_spec_kind is full-attention-like:
// its blocks hold the whole prefix, so a hit on the last block is a hit on
// all (llm-d's router admits the same three; "" is an older vLLM's single
// full-attention group).
func prefixKind(kind string) bool {
	switch kind {
	case "", "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// isGPU: the medium the engine computes in ("" is an older producer's).
func isGPU(medium string) bool { return medium == "" || medium == "GPU" }

// pubIndex holds one publisher's resident blocks over all columns.
type pubIndex struct {
	t    *table // one uint16 refcount column per (medium, group)
	cols []column
	// poolCols are the columns that feed the worker's and the pool's
	// index (GPU, full-attention-like); primary is the one with the
	// lowest group, whose stores and removals the cache figures follow
	// (-1 while there is none). poolCount is the distinct hashes held in
	// any pool column: the publisher's resident prefix blocks.
	poolCols  []int
	primary   int
	poolCount int
	overflow  map[ovKey]uint32 // refcounts beyond maxRef (never seen in practice)
	// unknownRemovals counts BlockRemoved for hashes not resident here:
	// normal after a late join or lost history, never an error.
	unknownRemovals uint64
	// blockSize is the primary column's tokens per block (prefix depths
	// and resident tokens are in its units); 0 while unknown.
	blockSize int
}

func newPubIndex() *pubIndex {
	p := &pubIndex{t: newTable(1, false)}
	p.cols = []column{{medium: "GPU", prefix: true, pool: true, tier: -1}}
	p.poolCols, p.primary = []int{0}, 0
	return p
}

// column returns the refcount column of (medium, group), creating it (with
// the kind and window the event names) if asked; -1 when absent, or when
// the publisher already names maxColumns.
func (p *pubIndex) column(medium string, group int32, create bool) int {
	gpu := isGPU(medium)
	if gpu && group == 0 {
		return 0 // column 0 is always (GPU, group 0)
	}
	for i := range p.cols {
		c := &p.cols[i]
		if c.group == group && (c.medium == medium || gpu && c.medium == "GPU") {
			return i
		}
	}
	if !create || len(p.cols) >= maxColumns {
		return -1
	}
	if gpu {
		medium = "GPU"
	}
	p.cols = append(p.cols, column{medium: medium, group: group, prefix: true, pool: gpu, offload: !gpu, tier: -1})
	m := p.t.addColumn()
	if gpu {
		p.poolCols = append(p.poolCols, m)
		p.pickPrimary()
	}
	return m
}

// describe sets column m's kind and window from an event that names them,
// while the column holds nothing (a group's kind does not change under a
// running engine; a block already counted stays where it was counted).
func (p *pubIndex) describe(m int, kind string, window int32) {
	c := &p.cols[m]
	if c.kind == kind && c.window == window || c.blocks != 0 {
		return
	}
	c.kind, c.window = kind, window
	c.prefix = prefixKind(kind)
	pool := c.prefix && !c.offload
	if pool == c.pool {
		return
	}
	c.pool = pool
	p.poolCols = p.poolCols[:0]
	for i := range p.cols {
		if p.cols[i].pool {
			p.poolCols = append(p.poolCols, i)
		}
	}
	p.pickPrimary()
}

// pickPrimary makes the pool column of the lowest group primary.
func (p *pubIndex) pickPrimary() {
	p.primary = -1
	for _, m := range p.poolCols {
		if p.primary < 0 || p.cols[m].group < p.cols[p.primary].group {
			p.primary = m
		}
	}
	p.blockSize = 0
	if p.primary >= 0 {
		p.blockSize = p.cols[p.primary].blockSize
	}
}

// setBlockSize records column m's tokens per block.
func (p *pubIndex) setBlockSize(m, bs int) {
	p.cols[m].blockSize = bs
	if m == p.primary {
		p.blockSize = bs
	}
}

func (p *pubIndex) incRef(m, i int, k uint64) (wasZero bool) {
	c := p.t.cols[m]
	switch r := c[i]; r {
	case 0:
		c[i] = 1
		return true
	case maxRef:
		if p.overflow == nil {
			p.overflow = map[ovKey]uint32{}
		}
		p.overflow[ovKey{k, uint8(m)}]++
	default:
		c[i] = r + 1
	}
	return false
}

func (p *pubIndex) decRef(m, i int, k uint64) (nowZero bool) {
	c := p.t.cols[m]
	if c[i] == maxRef && p.overflow != nil {
		key := ovKey{k, uint8(m)}
		if n := p.overflow[key]; n > 0 {
			if n == 1 {
				delete(p.overflow, key)
			} else {
				p.overflow[key] = n - 1
			}
			return false
		}
	}
	c[i]--
	return c[i] == 0
}

func (p *pubIndex) residentAnywhere(i int) bool {
	for _, c := range p.t.cols {
		if c[i] != 0 {
			return true
		}
	}
	return false
}

// poolHeld reports whether slot i is resident in a pool column other than
// except: a hash two full-attention groups both hold counts once.
func (p *pubIndex) poolHeld(i, except int) bool {
	for _, m := range p.poolCols {
		if m != except && p.t.cols[m][i] != 0 {
			return true
		}
	}
	return false
}

// gpuTokens is the tokens of the GPU's full-attention-like blocks (each
// pool column's blocks × its block size); false while a column holding
// blocks has no known block size.
func (p *pubIndex) gpuTokens() (int, bool) {
	n := 0
	for _, m := range p.poolCols {
		c := &p.cols[m]
		if c.blocks == 0 {
			continue
		}
		if c.blockSize <= 0 {
			return 0, false
		}
		n += c.blocks * c.blockSize
	}
	return n, n > 0
}

// residentIn reports whether hash h is resident in column m.
func (p *pubIndex) residentIn(m int, h uint64) bool {
	i := p.t.lookup(slotKey(h))
	return i >= 0 && p.t.cols[m][i] != 0
}

// holds reports whether hash key k is a resident prefix block here.
func (p *pubIndex) holds(k uint64) bool {
	i := p.t.lookup(k)
	return i >= 0 && p.poolHeld(i, -1)
}

// workerIndex is the union of one worker's publishers.
type workerIndex struct {
	pubs     []*pubIndex
	presence *table // hash → publishers holding it; nil while ≤ 1 publisher
}

func (w *workerIndex) addPub(p *pubIndex) {
	w.pubs = append(w.pubs, p)
	if len(w.pubs) == 2 {
		// Second publisher: build the union table from the first.
		w.presence = newTable(1, false)
		first := w.pubs[0]
		for i, k := range first.t.keys {
			if k != 0 && first.poolHeld(i, -1) {
				w.presence.cols[0][w.presence.insert(k)] = 1
			}
		}
	}
}

// distinct is the number of distinct resident prefix hashes over all
// publishers.
func (w *workerIndex) distinct() int {
	if w.presence != nil {
		return w.presence.count
	}
	if len(w.pubs) == 1 {
		return w.pubs[0].poolCount
	}
	return 0
}

func (w *workerIndex) holds(k uint64) bool {
	if w.presence != nil {
		return w.presence.lookup(k) >= 0
	}
	return len(w.pubs) == 1 && w.pubs[0].holds(k)
}

// poolIndex counts replicas and keeps parents, pool-wide.
type poolIndex struct {
	t *table // cols[0]: workers holding the hash | hasParentBit
	// entries is the pool-wide total of per-publisher resident hashes:
	// what drives the index's memory (each is a publisher slot, and at
	// most one pool slot). limit caps it (Limits.IndexBlocks): past it a
	// store of a hash new to its publisher is dropped.
	entries, limit int
	// sink keeps the prefetch loads from being optimized away. It is per
	// index, not global: every pool in a process writes its own.
	sink uint64
	// gained is, after a store, how many other workers held the hash
	// when the store made its worker a holder (-1: it did not, a copy or
	// a touch); lost, after a remove, that the worker no longer holds it.
	// The hit-rate ladder reads both (ladder.go).
	gained int
	lost   bool
}

func newPoolIndex(limit int) *poolIndex { return &poolIndex{t: newTable(1, true), limit: limit} }

func (x *poolIndex) gain(k, parent uint64, hasParent bool) {
	t := x.t
	i, ok := t.find(k)
	if !ok {
		i = t.insert(k)
	}
	c := t.cols[0]
	x.gained = int(c[i] & holderMask)
	if c[i]&holderMask < holderMask {
		c[i]++
	}
	if hasParent && c[i]&hasParentBit == 0 {
		c[i] |= hasParentBit
		t.parents[i] = parent
	}
}

func (x *poolIndex) lose(k uint64) {
	i := x.t.lookup(k)
	if i < 0 {
		return
	}
	c := x.t.cols[0]
	c[i]--
	if c[i]&holderMask == 0 {
		x.t.remove(i)
	}
}

// replicas is the number of workers holding hash key k.
func (x *poolIndex) replicas(k uint64) int {
	i := x.t.lookup(k)
	if i < 0 {
		return 0
	}
	return int(x.t.cols[0][i] & holderMask)
}

func (x *poolIndex) distinct() int { return x.t.count }

// prefetch touches the home slots of a batch of hashes in the publisher's
// and the pool's tables before they are updated. The loads are independent,
// so the CPU overlaps their cache misses; the updates that follow then hit
// cache. With tables larger than the cache this nearly doubles throughput.
func (x *poolIndex) prefetch(p *pubIndex, m int, hashes []uint64) {
	var sink uint64
	pt, xt := p.t, x.t
	for _, h := range hashes {
		sink += touch(pt, xt, m, slotKey(h))
	}
	x.sink = sink
}

// touch loads key k's home slots in a publisher's table pt (medium m) and
// the pool's xt, so that they are in cache when k is applied.
func touch(pt, xt *table, m int, k uint64) uint64 {
	i, j := pt.home(k), xt.home(k)
	return pt.keys[i] + uint64(pt.cols[m][i]) + xt.keys[j] + uint64(xt.cols[0][j])
}

// removalRun is how many of vLLM's one-block BlockRemoved events are
// prefetched at once: enough loads in flight to hide memory latency, few
// enough that the lines are still in cache when the removals reach them.
const removalRun = 32

// prefetchRemovals touches, for the run of one-block BlockRemoved events
// of the same medium starting at evs[i] (up to removalRun of them), their
// home slots, and returns the index past the run. vLLM sends one such
// event per evicted block, so each would otherwise wait for its own cache
// miss: the evicted blocks are the coldest in the index.
func (x *poolIndex) prefetchRemovals(p *pubIndex, m int, evs []collectors.KVEvent, i int) int {
	var sink uint64
	pt, xt := p.t, x.t
	medium, group := evs[i].Medium, evs[i].Group
	end := min(len(evs), i+removalRun)
	j := i
	for ; j < end; j++ {
		ev := &evs[j]
		if ev.Kind != collectors.BlockRemoved || len(ev.Hashes) != 1 || ev.Medium != medium || ev.Group != group {
			break
		}
		sink += touch(pt, xt, m, slotKey(ev.Hashes[0]))
	}
	x.sink = sink
	return j
}

// storeResult says what one stored block did to the index.
type storeResult uint8

const (
	storedNew   storeResult = iota // a new block, or a new copy of one
	reannounced                    // already resident in its column: a touch
	notIndexed                     // new to the publisher while the index is at its limit
)

// store records one stored block on publisher p of worker w, column m.
// A store of a hash the column already holds is a re-announce (vLLM's
// kv_cache_report_mode="full" re-emits reused prefix blocks) and changes
// nothing, unless copies is set: then it is one more copy, refcounted
// (offload chunks re-announce shared hashes and remove each reference; a
// GPU store under a parent, or of origin NEW, is a second physical copy).
func (x *poolIndex) store(w *workerIndex, p *pubIndex, m int, hash, parent uint64, hasParent, copies bool) storeResult {
	x.gained = -1
	k := slotKey(hash)
	i, ok := p.t.find(k)
	if !ok {
		if x.entries >= x.limit && x.limit > 0 {
			return notIndexed
		}
		i = p.t.insert(k)
		x.entries++
	} else if !copies && p.t.cols[m][i] != 0 {
		return reannounced
	}
	if !p.incRef(m, i, k) {
		return storedNew // one more copy of a block already counted
	}
	c := &p.cols[m]
	c.blocks++
	if !c.pool || p.poolHeld(i, m) {
		return storedNew
	}
	p.poolCount++
	if w.presence != nil {
		j, held := w.presence.find(k)
		if !held {
			j = w.presence.insert(k)
		}
		w.presence.cols[0][j]++
		if held {
			return storedNew
		}
	}
	x.gain(k, slotKey(parent), hasParent)
	return storedNew
}

// remove records one removed block; it reports false for a hash (or
// column) that was not resident.
func (x *poolIndex) remove(w *workerIndex, p *pubIndex, m int, hash uint64) bool {
	x.lost = false
	k := slotKey(hash)
	if m < 0 {
		p.unknownRemovals++
		return false
	}
	i := p.t.lookup(k)
	if i < 0 || p.t.cols[m][i] == 0 {
		p.unknownRemovals++
		return false
	}
	if !p.decRef(m, i, k) {
		return true
	}
	c := &p.cols[m]
	c.blocks--
	if c.pool && !p.poolHeld(i, m) {
		p.poolCount--
		x.lost = x.workerLose(w, k)
	}
	if !p.residentAnywhere(i) {
		p.t.remove(i)
		x.entries--
	}
	return true
}

// workerLose drops one publisher's hold of k on worker w; it reports
// whether w holds k no more.
func (x *poolIndex) workerLose(w *workerIndex, k uint64) bool {
	if w.presence != nil {
		j := w.presence.lookup(k)
		if j < 0 {
			return false
		}
		w.presence.cols[0][j]--
		if w.presence.cols[0][j] > 0 {
			return false
		}
		w.presence.remove(j)
	}
	x.lose(k)
	return true
}

// clear drops every block of publisher p (all columns): AllBlocksCleared
// or a publisher restart.
func (x *poolIndex) clear(w *workerIndex, p *pubIndex) {
	for i, k := range p.t.keys {
		if k != 0 && p.poolHeld(i, -1) {
			x.workerLose(w, k)
		}
	}
	x.entries -= p.t.count
	p.t.reset()
	for i := range p.cols {
		p.cols[i].blocks = 0
	}
	p.poolCount = 0
	p.overflow = nil
}

// clearColumns drops the blocks of the columns of one offload medium
// (never a pool column): a store-only tier's stores are not residency.
func (x *poolIndex) clearColumns(p *pubIndex, medium string) {
	var ms []int
	for m := range p.cols {
		if c := &p.cols[m]; c.offload && c.medium == medium {
			ms = append(ms, m)
			c.blocks = 0
		}
	}
	if len(ms) == 0 {
		return
	}
	for i := 0; i < len(p.t.keys); {
		if p.t.keys[i] == 0 {
			i++
			continue
		}
		for _, m := range ms {
			if r := p.t.cols[m][i]; r == maxRef && p.overflow != nil {
				delete(p.overflow, ovKey{p.t.keys[i], uint8(m)})
			}
			p.t.cols[m][i] = 0
		}
		if !p.residentAnywhere(i) {
			p.t.remove(i) // a later key may shift into i: look at it again
			x.entries--
			continue
		}
		i++
	}
}

// maxChain bounds a parent walk (SGLang with page size 1 has one block per
// token, so legitimate chains can be very long). Past cycleCheckAfter
// steps the walk also looks for a cycle, which only corrupt input makes.
const (
	maxChain        = 1 << 21
	cycleCheckAfter = 4096
)

type depthInfo struct {
	blocks int
	orphan bool
}

// depth resolves the chain length (in blocks) of hash key k through
// parents; orphan is set when some ancestor is not resident anywhere (the
// chain is counted up to it). A cyclic chain is an orphan of unknown
// depth. memo is shared across calls within one snapshot.
func (x *poolIndex) depth(k uint64, memo map[uint64]depthInfo) depthInfo {
	var path []uint64
	var onPath map[uint64]bool
	base := depthInfo{}
	cur := k
	for {
		if d, ok := memo[cur]; ok {
			base = d
			break
		}
		i := x.t.lookup(cur)
		if i < 0 {
			base = depthInfo{orphan: true}
			break
		}
		if len(path) >= cycleCheckAfter {
			if onPath == nil {
				onPath = make(map[uint64]bool, len(path))
				for _, p := range path {
					onPath[p] = true
				}
			}
			if onPath[cur] || len(path) >= maxChain {
				for _, p := range path {
					memo[p] = depthInfo{orphan: true}
				}
				return depthInfo{orphan: true}
			}
			onPath[cur] = true
		}
		path = append(path, cur)
		if x.t.cols[0][i]&hasParentBit == 0 {
			break
		}
		cur = x.t.parents[i]
	}
	d := base
	for j := len(path) - 1; j >= 0; j-- {
		d.blocks++
		memo[path[j]] = d
	}
	return d
}
