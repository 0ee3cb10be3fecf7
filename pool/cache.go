package pool

import (
	"math"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Eviction pressure and thrash, per engine (publisher), worker and pool,
// from the KV events of live batches (replayed history is indexed but is
// not traffic of now), GPU blocks only (the tier capacity is counted in):
//
//   - stored/s and removed/s: blocks in BlockStored and BlockRemoved events
//     over the window;
//   - residency of removed blocks: from the store to the removal of one
//     block, on kvtop's clock (p50 and mean);
//   - thrash: stores of a block hash this publisher removed within the
//     window before: prefill recomputed because the cache evicted it (the
//     recompute across workers is recompute.go's), as blocks/s and as a
//     share of the stored blocks.
//
// Residency and thrash need a time per block. Keeping one for every
// resident block would cost 4 to 11 bytes per block of the index (one more
// column in a table 38 to 75 % full), so they are sampled instead: a block
// is followed when the top `level` bits of its mixed hash are zero. The
// level starts at 0 (every block) and rises by one whenever the
// publisher's table (maxSampleSlots) is full of live entries, so memory is
// bounded whatever the cache size, and each sampled event counts 2^level.
// Sampling by hash is consistent: a block followed at its removal is
// followed when it is stored again.

// Window slots of the cache figures: 3 s each in a 60 s window.
const cacheSlots = 20

// Residency histogram: bucket i holds residencies below resBase × 2^(i/2)
// (half-octave steps from 50 ms to about 7 days), the last one everything
// above. p50 is interpolated inside its bucket on the log scale.
const (
	nResBuckets = 48
	resBase     = 0.05 // seconds
)

// resBound is the upper bound of residency bucket i (seconds).
func resBound(i int) float64 { return resBase * math.Exp2(float64(i+1)/2) }

func resBucket(sec float64) int {
	if sec < resBase {
		return 0
	}
	i := int(2 * math.Log2(sec/resBase))
	return min(i, nResBuckets-1)
}

type cacheSlot struct {
	epoch                   int64
	stored, removed, thrash float64 // blocks (thrash weighted by the sample)
	resW, resSum            float64 // sampled removals with a known store time (weighted), their residency (s × weight)
	resN                    float64 // those removals, unweighted
	res                     [nResBuckets]float32
}

// cacheWindow is one publisher's window of cache figures.
type cacheWindow struct {
	width int64 // nanos per slot
	first int64 // first live batch, unix nanos
	slots [cacheSlots + 1]cacheSlot
}

func newCacheWindow(w time.Duration) *cacheWindow {
	return &cacheWindow{width: max(int64(w)/cacheSlots, 1)}
}

// slot returns the slot of ns, reset when it held an older epoch.
func (c *cacheWindow) slot(ns int64) *cacheSlot {
	if c.first == 0 || ns < c.first {
		c.first = ns
	}
	e := ns / c.width
	sl := &c.slots[int(uint64(e)%uint64(len(c.slots)))]
	if sl.epoch != e {
		*sl = cacheSlot{epoch: e}
	}
	return sl
}

// cacheSums are a scope's figures over the window.
type cacheSums struct {
	stored, removed, thrash float64
	resW, resSum, resN      float64
	res                     [nResBuckets]float64
	covered                 time.Duration
	seen                    bool
}

// add sums c's slots inside the window ending at now into x.
func (c *cacheWindow) add(x *cacheSums, now time.Time, w time.Duration) {
	if c == nil || c.first == 0 {
		return
	}
	ns := now.UnixNano()
	lo, hi := (ns-int64(w))/c.width, ns/c.width
	for i := range c.slots {
		sl := &c.slots[i]
		if sl.epoch <= lo || sl.epoch > hi {
			continue
		}
		x.stored += sl.stored
		x.removed += sl.removed
		x.thrash += sl.thrash
		if sl.resW > 0 {
			x.resW += sl.resW
			x.resSum += sl.resSum
			x.resN += sl.resN
			for j, v := range sl.res {
				x.res[j] += float64(v)
			}
		}
	}
	// The slots cover from the start of the oldest one in the window (or
	// the first batch) to now.
	cov := time.Duration(ns - max((lo+1)*c.width, c.first))
	x.covered = max(x.covered, min(max(cov, 0), w))
	x.seen = true
}

// blockSample follows the sampled blocks of one publisher: an open-
// addressing table (linear probing, backward-shift deletion) of hash →
// the time it was stored, or removed (low bit set).
type blockSample struct {
	keys  []uint64
	vals  []uint64 // unix nanos << 1 | removed
	count int
	level uint8
	shift uint8
}

const (
	minSampleSlots = 64
	// maxSampleSlots bounds one publisher's table: 8192 slots of 16 bytes
	// (128 KiB), at most half of them used.
	maxSampleSlots = 1 << 13
)

// sampled reports whether hash h is followed at the current level.
func (b *blockSample) sampled(h uint64) bool {
	if b.level == 0 {
		return true
	}
	return mix64(h)>>(64-b.level) == 0
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (b *blockSample) home(k uint64) int {
	return int((k * 0x9e3779b97f4a7c15) >> b.shift)
}

// find returns the slot of k (slotKey'd), or the empty slot where it goes.
func (b *blockSample) find(k uint64) (int, bool) {
	if b.keys == nil {
		return -1, false
	}
	mask := len(b.keys) - 1
	for i := b.home(k); ; i = (i + 1) & mask {
		switch b.keys[i] {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (b *blockSample) alloc(n int) {
	b.keys, b.vals = make([]uint64, n), make([]uint64, n)
	b.shift = uint8(64 - bitsOf(n))
	b.count = 0
}

func bitsOf(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// put sets k's value, making room first (it may raise the level: then
// put reports false when k is no longer sampled).
func (b *blockSample) put(k, v uint64, now int64, window time.Duration) bool {
	if b.keys == nil {
		b.alloc(minSampleSlots)
	}
	i, ok := b.find(k)
	if ok {
		b.vals[i] = v
		return true
	}
	if 2*(b.count+1) > len(b.keys) {
		b.makeRoom(now, window)
		if !b.sampled(hashOf(k)) {
			return false
		}
		i, _ = b.find(k)
	}
	b.keys[i], b.vals[i] = k, v
	b.count++
	return true
}

// makeRoom grows the table; at its bound it forgets removals older than
// the window and, if that is not enough, raises the level (halving what is
// followed).
func (b *blockSample) makeRoom(now int64, window time.Duration) {
	if len(b.keys) < maxSampleSlots {
		b.rebuild(2*len(b.keys), func(uint64, uint64) bool { return true })
		return
	}
	expired := func(_ uint64, v uint64) bool {
		return v&1 == 0 || now-int64(v>>1) <= int64(window)
	}
	b.rebuild(len(b.keys), expired)
	for 8*b.count > 3*len(b.keys) && b.level < 63 {
		b.level++
		b.rebuild(len(b.keys), func(k, v uint64) bool { return b.sampled(hashOf(k)) })
	}
}

// rebuild re-inserts the entries keep accepts into a table of n slots.
func (b *blockSample) rebuild(n int, keep func(k, v uint64) bool) {
	keys, vals := b.keys, b.vals
	b.alloc(n)
	for i, k := range keys {
		if k == 0 || !keep(k, vals[i]) {
			continue
		}
		j, _ := b.find(k)
		b.keys[j], b.vals[j] = k, vals[i]
		b.count++
	}
}

// del removes slot i (backward shift: lookups never meet tombstones).
func (b *blockSample) del(i int) {
	mask := len(b.keys) - 1
	hole := i
	for j := (i + 1) & mask; b.keys[j] != 0; j = (j + 1) & mask {
		h := b.home(b.keys[j])
		if (j-h)&mask >= (j-hole)&mask {
			b.keys[hole], b.vals[hole] = b.keys[j], b.vals[j]
			hole = j
		}
	}
	b.keys[hole], b.vals[hole] = 0, 0
	b.count--
}

func (b *blockSample) reset() { *b = blockSample{} }

// weight is what one sampled event stands for.
func (b *blockSample) weight() float64 { return math.Exp2(float64(b.level)) }

// cacheBatch accumulates one batch's figures for one publisher.
type cacheBatch struct {
	stored, removed int
	thrash          float64
	sl              *cacheSlot // the batch's slot, once a residency is recorded
}

// trackStore notes a live GPU store of h by p at ns.
func (p *publisher) trackStore(x *cacheBatch, h uint64, ns int64, window time.Duration) {
	x.stored++
	b := &p.sample
	if !b.sampled(h) {
		return
	}
	k := slotKey(h)
	if i, ok := b.find(k); ok {
		if v := b.vals[i]; v&1 == 1 && ns-int64(v>>1) <= int64(window) {
			x.thrash += b.weight()
		}
	}
	b.put(k, uint64(ns)<<1, ns, window)
}

// trackRemove notes a live GPU removal of h by p at ns.
func (p *publisher) trackRemove(x *cacheBatch, h uint64, ns int64, window time.Duration) {
	x.removed++
	b := &p.sample
	if !b.sampled(h) {
		return
	}
	k := slotKey(h)
	if i, ok := b.find(k); ok {
		if v := b.vals[i]; v&1 == 0 {
			if x.sl == nil {
				x.sl = p.cache.slot(ns)
			}
			w := b.weight()
			r := max(float64(ns-int64(v>>1)), 0) / 1e9
			x.sl.resW += w
			x.sl.resN++
			x.sl.resSum += w * r
			x.sl.res[resBucket(r)] += float32(w)
		}
	}
	b.put(k, uint64(ns)<<1|1, ns, window)
}

// forget drops what is known of h: a replayed store or removal happened at
// a time kvtop does not know.
func (p *publisher) forget(h uint64) {
	b := &p.sample
	if !b.sampled(h) {
		return
	}
	if i, ok := b.find(slotKey(h)); ok {
		b.del(i)
	}
}

// flush adds a batch's counts to its slot.
func (p *publisher) flushCache(x *cacheBatch, ns int64) {
	if x.stored == 0 && x.removed == 0 && x.sl == nil {
		if p.cache.first == 0 {
			p.cache.slot(ns) // a live batch without GPU blocks: measured zeros from now on
		}
		return
	}
	sl := x.sl
	if sl == nil {
		sl = p.cache.slot(ns)
	}
	sl.stored += float64(x.stored)
	sl.removed += float64(x.removed)
	sl.thrash += x.thrash
}

// cacheScope sums the figures of several publishers and engines.
type cacheScope struct {
	sums     cacheSums
	rate     float64 // lowest sample rate
	hasPub   bool
	capacity int
	capKnown bool
	resident int
	resKnown bool
}

func (c *cacheScope) addPub(p *publisher, now time.Time, w time.Duration) {
	if !c.hasPub || p.sampleRate() < c.rate {
		c.rate = p.sampleRate()
	}
	c.hasPub = true
	p.cache.add(&c.sums, now, w)
	if n, ok := p.idx.gpuTokens(); ok {
		c.resident += n
		c.resKnown = true
	} else if p.batches > 0 && p.idx.poolCount == 0 {
		c.resKnown = true // nothing resident: 0 tokens whatever the size
	}
}

func (p *publisher) sampleRate() float64 { return 1 / p.sample.weight() }

func (c *cacheScope) addCapacity(blocks *float64, blockSize int) {
	if blocks == nil || *blocks <= 0 || blockSize <= 0 || *blocks > 1<<40 {
		return
	}
	c.capacity += int(*blocks) * blockSize
	c.capKnown = true
}

func (c *cacheScope) merge(o *cacheScope) {
	if o.hasPub {
		if !c.hasPub || o.rate < c.rate {
			c.rate = o.rate
		}
		c.hasPub = true
	}
	x, y := &c.sums, &o.sums
	x.stored += y.stored
	x.removed += y.removed
	x.thrash += y.thrash
	x.resW += y.resW
	x.resSum += y.resSum
	x.resN += y.resN
	for i := range x.res {
		x.res[i] += y.res[i]
	}
	x.covered = max(x.covered, y.covered)
	x.seen = x.seen || y.seen
	if o.capKnown {
		c.capacity += o.capacity
		c.capKnown = true
	}
	if o.resKnown {
		c.resident += o.resident
		c.resKnown = true
	}
}

func (c *cacheScope) figures() snapshot.Cache {
	var out snapshot.Cache
	if c.capKnown {
		n := c.capacity
		out.CapacityTokens = &n
	}
	if c.resKnown {
		n := c.resident
		out.ResidentTokens = &n
	}
	if !c.hasPub {
		return out
	}
	out.SampleRate = fp(c.rate)
	x := &c.sums
	if !x.seen || x.covered <= 0 {
		return out
	}
	secs := x.covered.Seconds()
	out.StoredPerS, out.RemovedPerS = fp(x.stored/secs), fp(x.removed/secs)
	out.ThrashPerS = fp(x.thrash / secs)
	if x.stored > 0 {
		out.ThrashShare = fraction(min(x.thrash/x.stored, 1))
	}
	if x.resW > 0 {
		out.ResidencyS.Mean = fp(x.resSum / x.resW)
		p50, capped := histQuantile(x.res[:], 0.5)
		out.ResidencyS.P50, out.ResidencyS.Capped = fp(p50), capped
		out.ResidencyS.Samples = int(x.resN)
	}
	return out
}

// histQuantile is the q-quantile of the residency histogram h (weights per
// bucket), interpolated geometrically inside its bucket; capped when it
// falls in the last, open one (its lower bound is returned: a floor).
func histQuantile(h []float64, q float64) (float64, bool) {
	total := 0.0
	for _, v := range h {
		total += v
	}
	rank, acc := q*total, 0.0
	for i, v := range h {
		if v <= 0 || acc+v < rank {
			acc += v
			continue
		}
		lo := 0.0
		if i > 0 {
			lo = resBound(i - 1)
		}
		if i == len(h)-1 {
			return lo, true
		}
		hi := resBound(i)
		f := (rank - acc) / v
		if lo == 0 {
			return hi * f, false
		}
		return lo * math.Pow(hi/lo, f), false
	}
	return resBound(len(h) - 2), true
}

// buildCache fills the cache figures of every engine, worker and the pool.
func (s *State) buildCache(snap *snapshot.Snapshot, now time.Time) {
	var pool cacheScope
	for i, w := range s.workers {
		row := &snap.Workers[i]
		var ws cacheScope
		matched := make([]bool, len(w.pubs))
		for j := range row.Engines {
			er := &row.Engines[j]
			var es cacheScope
			if e := w.engines[er.Engine]; e != nil {
				es.addCapacity(e.gpuBlock, engineBlockSize(e, w))
			}
			for k, p := range w.pubs {
				if !matched[k] && engineOf(p, row.Engines) == j {
					matched[k] = true
					es.addPub(p, now, s.window)
				}
			}
			er.Cache = es.figures()
			ws.merge(&es) // a worker not up keeps its capacity too: the cache is still there
		}
		for k, p := range w.pubs {
			if !matched[k] {
				ws.addPub(p, now, s.window)
			}
		}
		if len(row.Engines) == 0 && w.totals != nil {
			ws.addCapacity(w.totals.gpuBlock, w.totals.blockSz)
		}
		row.Cache = ws.figures()
		pool.merge(&ws)
	}
	snap.Pool.Cache = pool.figures()
}

// engineBlockSize is an engine's tokens per block: its geometry, else the
// worker's events'.
func engineBlockSize(e *engine, w *worker) int {
	if e.blockSz > 0 {
		return e.blockSz
	}
	return w.eventBlockSize()
}

// engineOf is the engine row a publisher's rank belongs to (vLLM's engine
// label and SGLang's dp_rank are the rank; a page without the label is
// rank 0's), -1 when none.
func engineOf(p *publisher, engines []snapshot.Engine) int {
	name := strconv.Itoa(p.rank)
	for j := range engines {
		if engines[j].Engine == name || engines[j].Engine == "" && p.rank == 0 && len(engines) == 1 {
			return j
		}
	}
	return -1
}

// cacheSeries are a worker's cache figures over the window, one point per
// refresh while known.
type cacheSeries struct {
	removed, thrash, resident series
}

// appendCacheSeries adds this refresh's cache points and gives the
// snapshot its series.
func (s *State) appendCacheSeries(snap *snapshot.Snapshot, now time.Time) {
	for i, w := range s.workers {
		row := &snap.Workers[i]
		cs := &w.cseries
		cs.removed.addIf(now, row.Cache.RemovedPerS, s.window)
		cs.thrash.addIf(now, row.Cache.ThrashPerS, s.window)
		var res *float64
		if r := row.Cache.ResidentTokens; r != nil {
			res = fp(float64(*r))
		}
		cs.resident.addIf(now, res, s.window)
		rs := &row.Series
		copySeries([]*[]snapshot.Point{&rs.RemovedPerS, &rs.ThrashPerS, &rs.ResidentTokens}, []*series{&cs.removed, &cs.thrash, &cs.resident})
	}
}
