package pool

import (
	"fmt"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Hot versus the rest. The win of a dominant hot stream can hide the
// starvation of everything else when only pool figures are published, so
// the requests are measured by class, from the decisions joined to their
// outcomes over the window (outcome time on kvtop's clock; history read at
// start left out; an outcome without its decision has no prefix and is in
// no class):
//
//   - the requests of each listed prefix: those whose decision names it,
//     or names a block under it (the listed prefixes above it are found
//     through the index's parents when the decision arrives: up to
//     maxAbove of them, within maxHotWalk blocks);
//   - the rest: requests under no hot prefix (share ≥ hot_prefix_share);
//   - requests on overheating workers, and on the others.
//
// For each class, TTFT and queue time (ms, as the outcome records them):
// exact nearest-rank quantiles of the samples — the smallest value with at
// least q·n samples at or below it, the ⌈q·n⌉-th smallest — with n. The
// journal bounds the samples (limits.decisions). Below minQuantileSamples a
// quantile is null with the reason.

// minQuantileSamples is the fewest requests a class needs for quantiles.
const minQuantileSamples = 20

// maxHotWalk bounds the parent walk from a decision's prefix to a hot one.
const maxHotWalk = 4096

// maxAbove is how many listed prefixes above its own a record keeps.
const maxAbove = 3

// listedAbove are the keys of the prefixes of the last snapshot's list on
// the chain above prefix key k (nearest first; 0 fills the rest).
func (s *State) listedAbove(k uint64) (out [maxAbove]uint64) {
	if k == 0 || s.hot.n == 0 {
		return out
	}
	x := s.index
	found := 0
	for cur, n := k, 0; n < maxHotWalk && found < maxAbove; n++ {
		i := x.t.lookup(cur)
		if i < 0 || x.t.cols[0][i]&hasParentBit == 0 {
			break
		}
		cur = x.t.parents[i]
		if s.hot.has(cur) {
			out[found] = cur
			found++
		}
	}
	return out
}

// classSamples collects one class's values.
type classSamples struct{ ttft, queue []float64 }

// add takes a request's values; a negative time cannot be true and is
// left out.
func (c *classSamples) add(o outcomeVals) {
	if o.ttft != nil && *o.ttft >= 0 {
		c.ttft = append(c.ttft, *o.ttft)
	}
	if o.queue != nil && *o.queue >= 0 {
		c.queue = append(c.queue, *o.queue)
	}
}

type outcomeVals struct{ ttft, queue *float64 }

// buildHotRest fills the request latency of each listed prefix (keys in
// the order of snap.Prefixes), of the rest and of the requests on
// overheating workers against the others.
func (s *State) buildHotRest(snap *snapshot.Snapshot, keys []uint64, now time.Time) {
	n := len(keys) + 3
	if cap(s.classes) < n {
		s.classes = make([]classSamples, n)
	}
	cls := s.classes[:n]
	for i := range cls {
		cls[i].ttft, cls[i].queue = cls[i].ttft[:0], cls[i].queue[:0]
	}
	rest, over, other := &cls[len(keys)], &cls[len(keys)+1], &cls[len(keys)+2]
	pos := make(map[uint64]int, len(keys))
	for i, k := range keys {
		pos[k] = i
	}
	overheating := map[string]bool{}
	for i := range snap.Workers {
		if snap.Workers[i].Overheating {
			overheating[snap.Workers[i].Name] = true
		}
	}
	thr := s.opt.Thresholds.HotPrefixShare
	from, to := now.Add(-s.window).UnixNano(), now.UnixNano()
	j := s.journal
	for i := 0; i < j.n; i++ {
		r := j.ring[(j.head+i)%j.limit]
		if t := r.timedAt; t == 0 || t <= from || t > to { // joined, no backfill, outcome in the window
			continue
		}
		v := outcomeVals{r.o.TTFTMS, r.o.QueueMS}
		if v.ttft == nil && v.queue == nil {
			continue
		}
		hot := false
		for _, key := range [1 + maxAbove]uint64{r.pkey, r.above[0], r.above[1], r.above[2]} {
			if key == 0 {
				continue
			}
			if c, ok := pos[key]; ok {
				cls[c].add(v)
				hot = hot || snap.Prefixes[c].Share >= thr
			}
		}
		if !hot {
			rest.add(v)
		}
		if overheating[r.chosen] {
			over.add(v)
		} else {
			other.add(v)
		}
	}
	for i := range keys {
		p := &snap.Prefixes[i]
		p.TTFTMS = sampleQuantiles(cls[i].ttft, "no joined request under this prefix in the window")
		p.QueueMS = sampleQuantiles(cls[i].queue, "no joined request under this prefix with a queue time in the window")
	}
	ps := &snap.Pool
	ps.Rest = classLatency(rest, "no joined request outside the hot prefixes in the window")
	if len(overheating) == 0 {
		ps.OverheatingWorkers = snapshot.RequestLatency{TTFTMS: snapshot.RequestQuantiles{Reason: "no worker is overheating"},
			QueueMS: snapshot.RequestQuantiles{Reason: "no worker is overheating"}}
	} else {
		ps.OverheatingWorkers = classLatency(over, "no joined request on the overheating workers in the window")
	}
	ps.OtherWorkers = classLatency(other, "no joined request on the other workers in the window")
}

func classLatency(c *classSamples, none string) snapshot.RequestLatency {
	return snapshot.RequestLatency{TTFTMS: sampleQuantiles(c.ttft, none), QueueMS: sampleQuantiles(c.queue, none)}
}

// sampleQuantiles are the nearest-rank p50, p95 and p99 of v (reordered), or
// null with the reason below minQuantileSamples.
func sampleQuantiles(v []float64, none string) snapshot.RequestQuantiles {
	out := snapshot.RequestQuantiles{N: len(v)}
	switch {
	case len(v) == 0:
		out.Reason = none
		return out
	case len(v) < minQuantileSamples:
		out.Reason = fmt.Sprintf("%d requests in the window, fewer than %d", len(v), minQuantileSamples)
		return out
	}
	out.P50, out.P95, out.P99 = fp(nearestRank(v, 50)), fp(nearestRank(v, 95)), fp(nearestRank(v, 99))
	return out
}

// nearestRank is the p-th percentile of v by nearest rank: the ⌈p·n/100⌉-th
// smallest value (selection, not a sort: O(n)). v is reordered.
func nearestRank(v []float64, p int) float64 {
	n := len(v)
	r := (p*n + 99) / 100 // ⌈p·n/100⌉, at least 1
	return nthLargest(v, n-r+1)
}
