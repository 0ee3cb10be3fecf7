package pool

import "github.com/kvtop/kvtop/collectors"

// The block index has three levels, each counting distinct resident hashes
// so that every figure in a snapshot is a field read, not a scan:
//
//   - pubIndex: one publisher (worker, rank); a refcount per medium per
//     hash (vLLM stores physical copies without dedup, so a hash stored
//     twice and removed once is still resident).
//   - workerIndex: the union over a worker's publishers. While a worker
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

// maxMedia bounds the storage media (refcount columns) of one publisher.
const maxMedia = 255

// pubIndex holds one publisher's resident blocks over all media.
type pubIndex struct {
	t         *table // one uint16 refcount column per medium
	media     []string
	perMedium []int
	overflow  map[ovKey]uint32 // refcounts beyond maxRef (never seen in practice)
	// unknownRemovals counts BlockRemoved for hashes not resident here:
	// normal after a late join or lost history, never an error.
	unknownRemovals uint64
	blockSize       int
}

func newPubIndex() *pubIndex {
	return &pubIndex{t: newTable(1, false), media: []string{"GPU"}, perMedium: []int{0}}
}

// column returns the refcount column of medium, creating it if asked.
func (p *pubIndex) column(medium string, create bool) int {
	if medium == "" || medium == "GPU" {
		return 0
	}
	for i, m := range p.media {
		if m == medium {
			return i
		}
	}
	if !create || len(p.media) >= maxMedia {
		return -1
	}
	p.media = append(p.media, medium)
	p.perMedium = append(p.perMedium, 0)
	return p.t.addColumn()
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
		first := w.pubs[0].t
		for _, k := range first.keys {
			if k != 0 {
				w.presence.cols[0][w.presence.insert(k)] = 1
			}
		}
	}
}

// distinct is the number of distinct resident hashes over all publishers.
func (w *workerIndex) distinct() int {
	if w.presence != nil {
		return w.presence.count
	}
	if len(w.pubs) == 1 {
		return w.pubs[0].t.count
	}
	return 0
}

func (w *workerIndex) holds(k uint64) bool {
	if w.presence != nil {
		return w.presence.lookup(k) >= 0
	}
	return len(w.pubs) == 1 && w.pubs[0].t.lookup(k) >= 0
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
}

func newPoolIndex(limit int) *poolIndex { return &poolIndex{t: newTable(1, true), limit: limit} }

func (x *poolIndex) gain(k, parent uint64, hasParent bool) {
	t := x.t
	i, ok := t.find(k)
	if !ok {
		i = t.insert(k)
	}
	c := t.cols[0]
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
	medium := evs[i].Medium
	end := min(len(evs), i+removalRun)
	j := i
	for ; j < end; j++ {
		ev := &evs[j]
		if ev.Kind != collectors.BlockRemoved || len(ev.Hashes) != 1 || ev.Medium != medium {
			break
		}
		sink += touch(pt, xt, m, slotKey(ev.Hashes[0]))
	}
	x.sink = sink
	return j
}

// store records one stored block on publisher p of worker w. It reports
// false when the block was not indexed: new to p while the index is at
// its limit (a copy of a block p already holds is still counted).
func (x *poolIndex) store(w *workerIndex, p *pubIndex, m int, hash, parent uint64, hasParent bool) bool {
	k := slotKey(hash)
	i, ok := p.t.find(k)
	if !ok {
		if x.entries >= x.limit && x.limit > 0 {
			return false
		}
		i = p.t.insert(k)
		x.entries++
	}
	if p.incRef(m, i, k) {
		p.perMedium[m]++
	}
	if ok {
		return true // already resident on this publisher (another medium or copy)
	}
	pk := slotKey(parent)
	if w.presence != nil {
		j, held := w.presence.find(k)
		if !held {
			j = w.presence.insert(k)
		}
		w.presence.cols[0][j]++
		if held {
			return true
		}
	}
	x.gain(k, pk, hasParent)
	return true
}

// remove records one removed block; it reports false for a hash (or
// medium) that was not resident.
func (x *poolIndex) remove(w *workerIndex, p *pubIndex, m int, hash uint64) bool {
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
	p.perMedium[m]--
	if p.residentAnywhere(i) {
		return true
	}
	p.t.remove(i)
	x.entries--
	x.workerLose(w, k)
	return true
}

func (x *poolIndex) workerLose(w *workerIndex, k uint64) {
	if w.presence != nil {
		j := w.presence.lookup(k)
		if j < 0 {
			return
		}
		w.presence.cols[0][j]--
		if w.presence.cols[0][j] > 0 {
			return
		}
		w.presence.remove(j)
	}
	x.lose(k)
}

// clear drops every block of publisher p (all media): AllBlocksCleared or
// a publisher restart.
func (x *poolIndex) clear(w *workerIndex, p *pubIndex) {
	for _, k := range p.t.keys {
		if k != 0 {
			x.workerLose(w, k)
		}
	}
	x.entries -= p.t.count
	p.t.reset()
	for i := range p.perMedium {
		p.perMedium[i] = 0
	}
	p.overflow = nil
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
