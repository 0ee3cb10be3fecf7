package pool

import (
	"sort"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Tiers: where a publisher's blocks live. Engines publish stores and
// removals per storage medium (vLLM GPU, CPU, STORAGE; SGLang GPU,
// CPU_PINNED, DISK, EXTERNAL; …). Each medium is a tier of its own, kept
// under the name it was published with: a CPU tier ten times the GPU's
// must never read as GPU cache. Only the GPU tier's full-attention-like
// blocks count in workers' blocks, resident tokens and what is compared
// with GPU capacity and KV use.

// storeOnlyAfter is how many blocks an offload tier stores with no
// removal ever published, its capacity unknown, before kvtop takes its
// publisher for a store-only one (LMCache's multi-process connector
// publishes CPU stores and never a removal): a real tier that evicts has
// shown a removal by then, or is still filling — either way the stores
// alone do not say what it holds.
const storeOnlyAfter = 1 << 16

// tier is one publisher's figures for one medium.
type tier struct {
	medium   string
	locality collectors.Locality // the last one published (FS/OBJ/STORAGE tiers)
	counts   *buckets            // (stored, removed) blocks in live batches
	// stored counts the blocks stored since the last clear (copies
	// included); removals is set once the publisher removed a block of
	// this medium: a tier that removes is never store-only.
	stored   uint64
	removals bool
	// storeOnly: stores and never a removal, past storeOnlyAfter (or what
	// the tier can hold): its blocks are dropped from the index and new
	// ones not indexed (unindexed counts them), since they are not
	// residency. reindexed: a removal came after all, so its residency
	// is being rebuilt from later stores and misses what was dropped.
	storeOnly bool
	reindexed bool
	unindexed uint64
}

// tierOf returns the tier of column m, creating it.
func (p *publisher) tierOf(m int, window time.Duration) *tier {
	c := &p.idx.cols[m]
	if c.tier >= 0 {
		return p.tiers[c.tier]
	}
	for i, t := range p.tiers {
		if t.medium == c.medium {
			c.tier = i
			return t
		}
	}
	t := &tier{medium: c.medium, counts: newBuckets(window)}
	c.tier = len(p.tiers)
	p.tiers = append(p.tiers, t)
	return t
}

// noteStores counts n blocks stored in t, and makes t store-only when it
// has stored past storeOnlyAfter without ever removing.
func (s *State) noteStores(p *publisher, t *tier, n int, live bool, at time.Time) {
	t.stored += uint64(n)
	if live {
		t.counts.add(at, float64(n), 0)
	}
	if t.medium == "GPU" || t.removals || t.storeOnly {
		return
	}
	if c, ok := p.tierCapacity(t); ok {
		if t.stored <= c { // more stores than the tier holds, and no removal
			return
		}
	} else if t.stored < uint64(s.storeOnlyAfter) {
		return
	}
	t.storeOnly = true
	s.index.clearColumns(p.idx, t.medium)
}

// tierCapacity is what tier t can hold, in blocks, where the page says:
// SGLang's host pool (sglang:hicache_host_total_tokens) for its CPU_PINNED
// tier, over the publisher's block size.
func (p *publisher) tierCapacity(t *tier) (uint64, bool) {
	if t.medium != "CPU_PINNED" || p.idx.blockSize <= 0 {
		return 0, false
	}
	for _, e := range []*engine{p.w.engines[strconv.Itoa(p.rank)], p.w.engines[""], p.w.totals} {
		if e != nil && e.off != nil && e.off.hostTotal != nil && *e.off.hostTotal > 0 {
			return uint64(*e.off.hostTotal) / uint64(p.idx.blockSize), true
		}
	}
	return 0, false
}

// noteRemoval counts n blocks removed from t: a tier that removes is not
// store-only (its residency restarts from the stores that follow).
func (p *publisher) noteRemoval(t *tier, n int, live bool, at time.Time) {
	t.removals = true
	if t.storeOnly {
		t.storeOnly, t.reindexed = false, true
	}
	if live {
		t.counts.add(at, 0, float64(n))
	}
}

// clearTiers starts every tier's store count again (the publisher's
// blocks were cleared): what it removed before still says it removes.
func (p *publisher) clearTiers() {
	for _, t := range p.tiers {
		t.stored, t.storeOnly, t.reindexed = 0, false, false
	}
}

// tierSums gathers one medium's figures over publishers.
type tierSums struct {
	medium             string
	locality           collectors.Locality
	blocks, tokens     int
	tokensUnknown      bool // a column holding blocks has no block size
	indexed, storeOnly bool // some publisher's tier is indexed / store-only
	reindexed          bool
	stored, removed    float64
	covered            time.Duration
}

// addPub adds publisher p's tier t.
func (x *tierSums) addPub(p *publisher, t *tier, now time.Time, w time.Duration) {
	if t.locality != collectors.LocalityNone {
		x.locality = t.locality
	}
	if st, rm, cov := t.counts.sum(now, w); cov > 0 {
		x.stored += st
		x.removed += rm
		x.covered = max(x.covered, cov)
	}
	if t.storeOnly {
		x.storeOnly = true
		return
	}
	x.indexed = true
	x.reindexed = x.reindexed || t.reindexed
	for i := range p.idx.cols {
		c := &p.idx.cols[i]
		if c.medium != t.medium || !c.prefix || c.blocks == 0 {
			continue
		}
		x.blocks += c.blocks
		x.tokens += c.blocks * c.blockSize
		x.tokensUnknown = x.tokensUnknown || c.blockSize <= 0
	}
}

func (x *tierSums) merge(y *tierSums) {
	if y.locality != collectors.LocalityNone {
		x.locality = y.locality
	}
	x.indexed = x.indexed || y.indexed
	x.tokensUnknown = x.tokensUnknown || y.tokensUnknown
	x.blocks += y.blocks
	x.tokens += y.tokens
	x.storeOnly = x.storeOnly || y.storeOnly
	x.reindexed = x.reindexed || y.reindexed
	x.stored += y.stored
	x.removed += y.removed
	x.covered = max(x.covered, y.covered)
}

func (x *tierSums) figures() snapshot.Tier {
	t := snapshot.Tier{Medium: x.medium, Locality: x.locality.String(), StoreOnly: x.storeOnly}
	if x.indexed {
		n := x.blocks
		t.Blocks = &n
		if !x.tokensUnknown {
			k := x.tokens
			t.Tokens = &k
		}
	}
	if x.covered > 0 {
		secs := x.covered.Seconds()
		t.StoredPerS, t.RemovedPerS = fp(x.stored/secs), fp(x.removed/secs)
	}
	switch {
	case x.storeOnly && !x.indexed:
		t.Note = "stored, no removals published"
	case x.storeOnly:
		t.Note = "some engines: stored, no removals published (not counted)"
	case x.reindexed:
		t.Note = "removals came after a store-only spell: blocks stored before are not counted"
	case t.Tokens == nil && t.Blocks != nil && *t.Blocks > 0:
		t.Note = "block size not published (offload placeholders)"
	}
	return t
}

// tierList orders tier sums: GPU first, then by medium.
func tierList(m map[string]*tierSums) []snapshot.Tier {
	out := make([]snapshot.Tier, 0, len(m))
	for _, x := range m {
		out = append(out, x.figures())
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Medium, out[j].Medium
		if (a == "GPU") != (b == "GPU") {
			return a == "GPU"
		}
		return a < b
	})
	return out
}

// buildTiers fills every worker's tiers and groups, and the pool's tiers
// (the workers in the set).
func (s *State) buildTiers(snap *snapshot.Snapshot, now time.Time) {
	pool := map[string]*tierSums{}
	for i, w := range s.workers {
		row := &snap.Workers[i]
		ws := map[string]*tierSums{}
		for _, p := range w.pubs {
			for _, t := range p.tiers {
				x := ws[t.medium]
				if x == nil {
					x = &tierSums{medium: t.medium}
					ws[t.medium] = x
				}
				x.addPub(p, t, now, s.window)
			}
		}
		row.Tiers = tierList(ws)
		row.Groups = w.groups()
		if w.left() {
			continue
		}
		for m, x := range ws {
			y := pool[m]
			if y == nil {
				y = &tierSums{medium: m}
				pool[m] = y
			}
			y.merge(x)
		}
	}
	snap.Pool.Tiers = tierList(pool)
}

// groups are a worker's GPU columns that have seen an event, by group.
func (w *worker) groups() []snapshot.Group {
	out := []snapshot.Group{}
	for _, p := range w.pubs {
		for i := range p.idx.cols {
			c := &p.idx.cols[i]
			if c.medium != "GPU" || c.blocks == 0 && c.blockSize == 0 && c.kind == "" {
				continue
			}
			j := sort.Search(len(out), func(j int) bool { return out[j].Group >= int(c.group) })
			if j == len(out) || out[j].Group != int(c.group) {
				kind := c.kind
				if kind == "" {
					kind = "full_attention"
				}
				out = append(out, snapshot.Group{})
				copy(out[j+1:], out[j:])
				out[j] = snapshot.Group{Group: int(c.group), Kind: kind, Prefix: c.prefix}
			}
			g := &out[j]
			g.Blocks += c.blocks
			if c.blockSize > 0 && g.BlockSize == nil {
				bs := c.blockSize
				g.BlockSize = &bs
			}
			if c.window > 0 && g.SlidingWindow == nil {
				sw := int(c.window)
				g.SlidingWindow = &sw
			}
		}
	}
	return out
}
