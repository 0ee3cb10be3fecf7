package pool

import (
	"math"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// The hit-rate ladder (issue 26) says why a hit rate is what it is. Of
// the prompt tokens T the engines counted, H hit; the rest, C = T − H,
// were computed. Every block a GPU computes (a store of a full-attention
// group that is not a re-announce) is classified when it is stored on
// worker w, by what kvtop knew at that moment:
//
//   - routing: another up worker held the same hash (a routing that sent
//     the request there would have hit) — from the index, exact;
//   - capacity: w held it before and evicted it, and no other up worker
//     holds it (a bigger cache on w would have hit);
//   - pool capacity: some worker held it before, every one has evicted it;
//   - configuration: no worker holds the hash, but another up worker holds
//     the same root content under another hash (issue 15's fingerprints):
//     the workers hash alike prefixes differently;
//   - new: first sight.
//
// Capacity and pool capacity need the memory of hashes seen (seenHashes):
// exact while it has room, then a hash-chosen sample, each sampled block
// counting 2^level. Generated tokens fill blocks too, almost always new:
// new blocks are counted apart, never in T. Compulsory is C minus the
// avoidable classes; avoidable beyond C (sampling, lost history,
// re-announces not recognised) is unexplained, shown, never hidden in a
// class.

// Ladder counters per worker over the window, in tokens.
const (
	lossRouting = iota
	lossCapacity
	lossPoolCapacity
	lossConfiguration
	ladderNew   // first-sight blocks (prompt or generated)
	ladderStale // predicted by the router on the chosen worker, not cached there
	ladderSlots
)

// ladderWindow sums the classes over the window: the pool's two-figure
// buckets, one pair of classes each (ladderSlots is even).
type ladderWindow [ladderSlots / 2]*buckets

func newLadderWindow(w time.Duration) *ladderWindow {
	var l ladderWindow
	for i := range l {
		l[i] = newBuckets(w)
	}
	return &l
}

func (l *ladderWindow) add(ns int64, k int, tokens float64) {
	if k%2 == 0 {
		l[k/2].add(time.Unix(0, ns), tokens, 0)
	} else {
		l[k/2].add(time.Unix(0, ns), 0, tokens)
	}
}

// sum is each class over the window ending at now.
func (l *ladderWindow) sum(now time.Time, w time.Duration) (v [ladderSlots]float64) {
	if l == nil {
		return v
	}
	for i, b := range l {
		v[2*i], v[2*i+1], _ = b.sum(now, w)
	}
	return v
}

// seenHashes remembers the hashes computed on the pool's GPUs and the
// last two workers that evicted each (a blockSample table: hash → value).
// A value packs evictor ids + 1 (0: none) in bits 0–15 and 16–31.
type seenHashes struct {
	blockSample
	limit int // slots at most (half of them used)
}

// maxLadderWorkers: worker ordinals past this are not remembered as
// evictors (their evictions read as pool capacity).
const maxLadderWorkers = 0xfffe

// DefaultLadderHashes is Limits.LadderHashes when the config says nothing:
// 2^16 slots of 16 bytes (1 MiB), at most 32 768 hashes followed. Small on
// purpose: a table that stays in the CPU's cache costs the index little
// (every computed block looks it up); a busy pool is followed by a sample,
// which estimates its token counts well (thousands of sampled blocks a
// window).
const DefaultLadderHashes = 1 << 16

func newSeenHashes(limit int) *seenHashes {
	if limit <= 0 {
		limit = DefaultLadderHashes
	}
	return &seenHashes{limit: max(1<<bitsOf(limit), minSampleSlots)}
}

// get returns h's value, whether h is followed at the current level,
// and whether it has been seen.
func (t *seenHashes) get(h uint64) (v uint64, followed, ok bool) {
	if !t.sampled(h) {
		return 0, false, false
	}
	i, ok := t.find(slotKey(h))
	if !ok {
		return 0, true, false
	}
	return t.vals[i], true, true
}

// mark is get, and records h as seen when it is followed and new: one
// probe where get then set would take two.
func (t *seenHashes) mark(h uint64) (v uint64, followed, ok bool) {
	if !t.sampled(h) {
		return 0, false, false
	}
	if t.keys != nil {
		if i, found := t.find(slotKey(h)); found {
			return t.vals[i], true, true
		}
	}
	t.set(h, 0)
	return 0, true, false
}

// set records h (when followed), making room first: past its limit the
// table raises its level, keeping only the hashes still sampled.
func (t *seenHashes) set(h, v uint64) {
	if !t.sampled(h) {
		return
	}
	k := slotKey(h)
	if t.keys == nil {
		t.alloc(minSampleSlots)
	}
	i, ok := t.find(k)
	if ok {
		t.vals[i] = v
		return
	}
	if 2*(t.count+1) > len(t.keys) {
		if len(t.keys) < t.limit {
			t.rebuild(2*len(t.keys), func(uint64, uint64) bool { return true })
		} else {
			for 8*t.count > 3*len(t.keys) && t.level < 63 {
				t.level++
				t.rebuild(len(t.keys), func(k, _ uint64) bool { return t.sampled(hashOf(k)) })
			}
		}
		if !t.sampled(h) {
			return
		}
		i, _ = t.find(k)
	}
	t.keys[i], t.vals[i] = k, v
	t.count++
}

// evictedBy reports whether worker ordinal o is one of v's evictors.
func evictedBy(v uint64, o uint16) bool {
	return o != 0 && (uint16(v) == o || uint16(v>>16) == o)
}

// withEvictor records o as v's latest evictor.
func withEvictor(v uint64, o uint16) uint64 {
	if o == 0 || uint16(v) == o {
		return v
	}
	return (v&^0xffffffff | uint64(uint16(v))<<16 | uint64(o))
}

// ladder is the pool's state for the ladder: the seen hashes, the chains
// found to be another hashing of a resident root (their tails, so that a
// continuation of such a chain is configuration too), and the workers not
// up (their blocks are not "on another up worker"), kept as workers go
// down and come back: a block computed while its other holder is down is
// no routing loss, from the moment kvtop knows it is down.
type ladder struct {
	seen        *seenHashes
	configTails map[uint64]int64 // hash → unix ns
	down        []*worker
	downStale   bool // a worker went down or came back since down was listed
}

// maxConfigTails bounds the chains followed as configuration.
const maxConfigTails = 4096

func newLadder(limit int) *ladder {
	return &ladder{seen: newSeenHashes(limit), configTails: map[uint64]int64{}}
}

// ordinal is w's id as an evictor (0: none).
func (w *worker) ordinal() uint16 {
	if w.id < 0 || w.id >= maxLadderWorkers {
		return 0
	}
	return uint16(w.id + 1)
}

// elsewhere reports whether another up worker holds hash key k, given
// that before the store others workers held it (the pool index's count).
func (s *State) elsewhere(k uint64, others int) bool {
	if others <= 0 {
		return false
	}
	l := s.ladder
	if l.downStale {
		s.listDown()
	}
	for _, d := range l.down {
		if d.idx.holds(k) {
			others--
		}
	}
	return others > 0
}

// ladderEvent is what the ladder needs of one BlockStored on a pool
// column: whether it continues (or is) another hashing of a resident root.
type ladderEvent struct {
	config bool
	tokens float64 // per block
	at     int64
	sum    [ladderSlots]float64 // the event's blocks by class, added at its end
}

// ladderStart looks at a live root store before the index takes it:
// another up worker holds its root content under another hash
// (configuration), or its parent ends such a chain.
func (s *State) ladderStart(w *worker, ev *collectors.KVEvent, lead, blockSize int, at int64) ladderEvent {
	le := ladderEvent{tokens: float64(blockSize), at: at}
	l := s.ladder
	switch {
	case lead > 0: // begins with blocks w holds: its own chain
	case ev.HasParent:
		if _, ok := l.configTails[slotKey(ev.Parent)]; ok {
			le.config = true
		}
	case ev.RootContent != 0 && len(ev.Hashes) > 0:
		le.config = s.rootElsewhere(w, ev.RootContent, slotKey(ev.Hashes[0]))
	}
	return le
}

// rootElsewhere: another up worker holds content fp under another hash
// than k, as the fingerprint table last saw it.
func (s *State) rootElsewhere(w *worker, fp, k uint64) bool {
	i, ok := s.fps.idx[fp]
	if !ok {
		return false
	}
	for r := range s.fps.ents[i].refs {
		ref := &s.fps.ents[i].refs[r]
		q := s.pubOf(ref)
		if q == nil || q.w == w || !q.w.up || slotKey(ref.hash) == k || q.hashGen != ref.gen {
			continue
		}
		if q.w.idx.holds(slotKey(ref.hash)) {
			return true
		}
	}
	return false
}

// ladderStore classifies one block computed on w (a store new to w: the
// index's count of other holders before it, others). It runs for every
// live computed block, sampled or not.
func (s *State) ladderStore(w *worker, h uint64, others int, le *ladderEvent) {
	if le.tokens <= 0 {
		return // no block size known yet: no tokens to count
	}
	l := s.ladder
	v, followed, seen := l.seen.mark(h)
	switch {
	case s.elsewhere(slotKey(h), others):
		le.sum[lossRouting] += le.tokens
	case seen && evictedBy(v, w.ordinal()):
		le.sum[lossCapacity] += le.tokens * l.seen.weight()
	case seen:
		le.sum[lossPoolCapacity] += le.tokens * l.seen.weight()
	case le.config:
		// The whole event is another hashing of a resident chain,
		// followed hash or not.
		le.sum[lossConfiguration] += le.tokens
	case followed:
		le.sum[ladderNew] += le.tokens * l.seen.weight()
	}
}

// ladderSeen records a hash stored in a replayed batch: history, not
// traffic, but a later store of it is no first sight.
func (s *State) ladderSeen(h uint64) { s.ladder.seen.mark(h) }

// ladderEnd adds the event's blocks to w's window, one addition a class,
// and notes the tail of a configuration chain (its continuations are
// configuration too).
func (s *State) ladderEnd(w *worker, le *ladderEvent, tail uint64) {
	for k, v := range le.sum {
		if v > 0 {
			if w.ladder == nil {
				w.ladder = newLadderWindow(s.window)
			}
			w.ladder.add(le.at, k, v)
		}
	}
	if !le.config {
		return
	}
	l := s.ladder
	if len(l.configTails) >= maxConfigTails {
		old := le.at - int64(s.window) // tails older than the window
		for k, at := range l.configTails {
			if at < old {
				delete(l.configTails, k)
			}
		}
		if len(l.configTails) >= maxConfigTails {
			clear(l.configTails)
		}
	}
	l.configTails[slotKey(tail)] = le.at
}

// ladderEvict notes that worker w no longer holds hash h (its last copy
// evicted): a later store of h on w is a capacity loss.
func (s *State) ladderEvict(w *worker, h uint64) {
	v, followed, seen := s.ladder.seen.get(h)
	if !followed {
		return
	}
	if !seen {
		v = 0 // stored before kvtop followed it (a replay, a late join)
	}
	s.ladder.seen.set(h, withEvictor(v, w.ordinal()))
}

// settleStale counts, once per joined live record, the tokens the router
// predicted on the chosen worker that the engine did not have: the
// index it routed by was stale.
func (s *State) settleStale(r *record) {
	d, o := r.d, r.o
	if r.staleDone || d == nil || o == nil || d.Backfill || o.Backfill {
		return
	}
	r.staleDone = true
	p := d.Prediction
	if p == nil || p.Matched == nil || o.CachedTokens == nil || r.owner == "" || r.owner != r.chosen {
		return
	}
	var predicted float64
	switch p.Units {
	case "tokens":
		predicted = *p.Matched
	case "blocks":
		if p.BlockSize <= 0 {
			return
		}
		predicted = *p.Matched * float64(p.BlockSize)
	default:
		return // characters predict no tokens
	}
	stale := predicted - float64(*o.CachedTokens)
	if stale <= 0 || math.IsNaN(stale) || math.IsInf(stale, 0) {
		return
	}
	if w := s.workerFor(r.chosen, ""); w != nil {
		if w.ladder == nil {
			w.ladder = newLadderWindow(s.window)
		}
		w.ladder.add(o.At.UnixNano(), ladderStale, stale)
	}
}

// setUp records whether w is up; the ladder lists the workers not up
// again before it next needs them.
func (s *State) setUp(w *worker, up bool) {
	if w.up != up {
		s.ladder.downStale = true
	}
	w.up = up
}

// listDown lists the workers that hold blocks no request could be routed
// to: those not up, and decode workers (a router sends prompts to prefill
// or aggregated workers; a decode worker's blocks are copies it received).
// One that holds none cannot hold a block computed elsewhere.
func (s *State) listDown() {
	l := s.ladder
	l.down, l.downStale = l.down[:0], false
	for _, w := range s.workers {
		if (!w.up || w.role == snapshot.RoleDecode) && w.idx.distinct() > 0 {
			l.down = append(l.down, w)
		}
	}
}

// buildLadder makes a ladder from the engines' hit sum and the classes
// counted over covered seconds of the window.
func buildLadder(hit hitSum, v [ladderSlots]float64, covered float64, sampleRate float64) snapshot.Ladder {
	l := snapshot.Ladder{Routing: v[lossRouting], Capacity: v[lossCapacity], PoolCapacity: v[lossPoolCapacity],
		Configuration: v[lossConfiguration], NewBlocks: v[ladderNew], StaleIndex: v[ladderStale], SampleRate: sampleRate}
	switch {
	case !hit.ok:
		l.Reason = "no prompt and hit token counters in the window"
		if r := hit.reason(); r != "" {
			l.Reason = r
		}
		return l
	case hit.bad != "":
		// The hit rate is null for the same reason: the ladder's first
		// rung is that rate.
		l.Reason = hit.reason()
		return l
	case math.IsInf(hit.queries, 0) || math.IsNaN(hit.queries) || math.IsInf(hit.hits, 0) || math.IsNaN(hit.hits):
		l.Reason = "prompt or hit token counters out of range"
		return l
	case hit.queries <= 0:
		l.Reason = "no prompt tokens in the window"
		return l
	}
	t, h := hit.queries, min(hit.hits, hit.queries)
	l.PromptTokens, l.HitTokens = &t, &h
	computed := t - h
	avoid := [...]float64{l.Routing, l.Configuration, l.Capacity + l.PoolCapacity}
	total := avoid[0] + avoid[1] + avoid[2]
	comp := max(0, computed-total)
	l.Compulsory = &comp
	l.Unexplained = max(0, total-computed)
	// Rungs add the causes in the order, each capped at 1 (an
	// excess is unexplained, shown apart).
	rung := func(extra float64) *float64 { return fraction(min(1, (h+extra)/t)) }
	l.Rungs = snapshot.LadderRungs{Actual: rung(0), PerfectRouting: rung(avoid[0]), ConsistentHashing: rung(avoid[0] + avoid[1])}
	// 1 − compulsory/T, never a float step below the rung before it.
	l.Rungs.EnoughCapacity = fraction(1 - comp/t)
	if e, c := l.Rungs.EnoughCapacity, l.Rungs.ConsistentHashing; e != nil && c != nil && *e < *c {
		l.Rungs.EnoughCapacity = c
	}
	per := func(x float64) *float64 {
		if covered <= 0 {
			return nil
		}
		v := x / covered
		return &v
	}
	share := func(x float64) *float64 { return fraction(min(1, x/t)) }
	l.PerS = snapshot.LadderLosses{Routing: per(l.Routing), Capacity: per(l.Capacity), PoolCapacity: per(l.PoolCapacity),
		Configuration: per(l.Configuration), Compulsory: per(comp)}
	l.Share = snapshot.LadderLosses{Routing: share(l.Routing), Capacity: share(l.Capacity), PoolCapacity: share(l.PoolCapacity),
		Configuration: share(l.Configuration), Compulsory: share(comp)}
	return l
}

// ladderSampleRate is the share of hashes the seen memory follows.
func (s *State) ladderSampleRate() float64 { return 1 / s.ladder.seen.weight() }

// buildLadder fills every worker's ladder and the pool's (over up
// workers, as the pool's hit rate).
func (s *State) buildLadder(snap *snapshot.Snapshot, now time.Time) {
	s.listDown() // a down worker may have emptied since
	from := now.Add(-s.window)
	rate := s.ladderSampleRate()
	var pool [ladderSlots]float64
	var poolHit hitSum // as poolHitSince sums it, from the workers' own
	for i, w := range s.workers {
		hit := w.hitSince(from, now)
		v := w.ladder.sum(now, s.window)
		snap.Workers[i].Ladder = buildLadder(hit, v, hit.covered.Seconds(), rate)
		if w.up {
			poolHit.addSum(hit, w.name)
			for k := range pool {
				pool[k] += v[k]
			}
		}
	}
	snap.Pool.Ladder = buildLadder(poolHit, pool, poolHit.covered.Seconds(), rate)
	// The header's word on the largest loss holds like every verdict.
	l := &snap.Pool.Ladder
	x := s.opt.Thresholds.LadderLossShare
	_, loss, known := l.LargestLoss()
	if known && x > 0 {
		l.LossHigh = s.lossHigh.judge(loss >= x, loss >= s.leave(x), snap.Seq, now, s.hold())
	}
}
