package pool

import (
	"math"
	"sort"
	"time"
)

// prefixCounter estimates traffic per prefix with bounded memory: counts
// decay exponentially with time constant = window (a decayed count of a
// steady rate r equals r × window, i.e. "the count over the window"), and
// when the table is full the lighter half is dropped (lossy counting).
//
// Decay costs nothing per update: weights are stored boosted by
// e^((t−t0)/τ), so every entry decays by the same factor and is scaled
// back only when read (or rebased before the boost overflows).
type prefixCounter struct {
	tau   float64 // seconds
	t0    int64   // unix nanos of the boost origin
	init  bool
	total float64 // boosted weight of all traffic (every request, named or not)
	named float64 // boosted weight of traffic credited to some prefix
	idx   map[uint64]int32
	ents  []prefixEnt
	limit int
	buf   []float64 // scratch for pruning
}

type prefixEnt struct {
	key uint64
	id  string // as the source named it; "" → hex of key
	n   float64
	// The first worker is inline: most prefixes are served by one or two
	// workers, and a new entry should not cost an allocation.
	w0   *worker
	n0   float64
	more []wcount
}

type wcount struct {
	w *worker
	n float64
}

func newPrefixCounter(window time.Duration, limit int) *prefixCounter {
	return &prefixCounter{tau: window.Seconds(), idx: map[uint64]int32{}, limit: max(limit, 2)}
}

// rebaseAt keeps boosted weights far from float64 overflow (e^700).
const rebaseAt = 500.0

// weight is the boosted weight of one unit of traffic at t.
func (c *prefixCounter) weight(t time.Time) float64 {
	ns := t.UnixNano()
	if !c.init {
		c.t0, c.init = ns, true
	}
	x := float64(ns-c.t0) / 1e9 / c.tau
	if x > rebaseAt {
		c.rebase(ns)
		x = 0
	}
	return math.Exp(x)
}

func (c *prefixCounter) rebase(ns int64) {
	f := math.Exp(-float64(ns-c.t0) / 1e9 / c.tau)
	c.total *= f
	c.named *= f
	for i := range c.ents {
		e := &c.ents[i]
		e.n *= f
		e.n0 *= f
		for j := range e.more {
			e.more[j].n *= f
		}
	}
	c.t0 = ns
}

// scale turns boosted weights into decayed counts at now.
func (c *prefixCounter) scale(now time.Time) float64 {
	if !c.init {
		return 0
	}
	return math.Exp(-float64(now.UnixNano()-c.t0) / 1e9 / c.tau)
}

func (c *prefixCounter) addTotal(g float64) { c.total += g }

// add credits weight g of traffic under prefix key k to worker w.
func (c *prefixCounter) add(k uint64, id string, w *worker, g float64) {
	i, ok := c.idx[k]
	if !ok {
		if len(c.ents) >= c.limit {
			c.prune()
		}
		i = int32(len(c.ents))
		c.ents = append(c.ents, prefixEnt{key: k, id: id, w0: w})
		c.idx[k] = i
	}
	e := &c.ents[i]
	e.n += g
	c.named += g
	switch {
	case e.w0 == w:
		e.n0 += g
	case e.w0 == nil:
		e.w0, e.n0 = w, g
	default:
		for j := range e.more {
			if e.more[j].w == w {
				e.more[j].n += g
				return
			}
		}
		e.more = append(e.more, wcount{w, g})
	}
}

// prune drops the lighter half of the entries (at least one).
func (c *prefixCounter) prune() {
	c.buf = c.buf[:0]
	for i := range c.ents {
		c.buf = append(c.buf, c.ents[i].n)
	}
	keep := len(c.ents) / 2
	thr := nthLargest(c.buf, keep)
	ties := keep
	for _, e := range c.ents {
		if e.n > thr {
			ties--
		}
	}
	kept := c.ents[:0]
	for _, e := range c.ents {
		switch {
		case e.n > thr:
		case e.n == thr && ties > 0:
			ties--
		default:
			delete(c.idx, e.key)
			continue
		}
		kept = append(kept, e)
	}
	clear(c.ents[len(kept):])
	c.ents = kept
	for i := range c.ents {
		c.idx[c.ents[i].key] = int32(i)
	}
}

// nthLargest returns the k-th largest value (1-based) of v, reordering v.
// Quickselect: pruning must stay O(n) on the event hot path.
func nthLargest(v []float64, k int) float64 {
	if k <= 0 {
		return math.Inf(1)
	}
	lo, hi := 0, len(v)-1
	target := k - 1
	for lo < hi {
		p := v[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for v[i] > p {
				i++
			}
			for v[j] < p {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case target <= j:
			hi = j
		case target >= i:
			lo = i
		default:
			return v[target]
		}
	}
	return v[target]
}

// minPrefixRequests is the decayed traffic (≈ one request within the
// window) below which a prefix is not listed at all.
const minPrefixRequests = 0.5

// prefixTraffic is one entry read out at a snapshot, in decayed counts.
type prefixTraffic struct {
	key     uint64
	id      string
	n       float64
	share   float64
	workers []wcount // decayed counts per worker, heaviest first
}

// top returns the k heaviest prefixes at now, heaviest first, with their
// share of all traffic.
func (c *prefixCounter) top(now time.Time, k int) []prefixTraffic {
	if k <= 0 || len(c.ents) == 0 || c.total <= 0 {
		return nil
	}
	// One pass keeping the k best indexes in ascending order: most entries
	// fail the first comparison.
	best := make([]int32, 0, k)
	for i := range c.ents {
		n := c.ents[i].n
		if len(best) == k && n <= c.ents[best[0]].n {
			continue
		}
		if len(best) == k {
			copy(best, best[1:])
			best = best[:k-1]
		}
		j := sort.Search(len(best), func(j int) bool { return c.ents[best[j]].n >= n })
		best = append(best, 0)
		copy(best[j+1:], best[j:])
		best[j] = int32(i)
	}
	f := c.scale(now)
	out := make([]prefixTraffic, 0, len(best))
	for i := len(best) - 1; i >= 0; i-- {
		e := &c.ents[best[i]]
		if e.n*f < minPrefixRequests {
			break // no traffic left in the window: not hot, whatever its old share
		}
		t := prefixTraffic{key: e.key, id: e.id, n: e.n * f, share: e.n / c.total}
		if e.w0 != nil {
			t.workers = append(t.workers, wcount{e.w0, e.n0 * f})
		}
		for _, m := range e.more {
			t.workers = append(t.workers, wcount{m.w, m.n * f})
		}
		sort.SliceStable(t.workers, func(a, b int) bool { return t.workers[a].n > t.workers[b].n })
		out = append(out, t)
	}
	return out
}

// decayedNamed is the traffic credited to prefixes at now, in decayed
// counts (≈ requests over the window).
func (c *prefixCounter) decayedNamed(now time.Time) float64 { return c.named * c.scale(now) }

// hotSet holds the keys of the last snapshot's top prefixes, with a
// 1024-bit filter so the per-block check on the event path is one load.
type hotSet struct {
	bits [16]uint64
	keys map[uint64]struct{}
	n    int
}

func (h *hotSet) set(keys []uint64) {
	h.bits = [16]uint64{}
	h.keys = make(map[uint64]struct{}, len(keys))
	for _, k := range keys {
		b := (k * 0x9e3779b97f4a7c15) >> 54
		h.bits[b>>6] |= 1 << (b & 63)
		h.keys[k] = struct{}{}
	}
	h.n = len(h.keys)
}

func (h *hotSet) has(k uint64) bool {
	b := (k * 0x9e3779b97f4a7c15) >> 54
	if h.bits[b>>6]&(1<<(b&63)) == 0 {
		return false
	}
	_, ok := h.keys[k]
	return ok
}
