package pool

import (
	"sort"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// The hash-boundary check. Router and workers must agree on how blocks are
// hashed: when the hash seed (vLLM before its deterministic default seeded
// NONE_HASH from the process unless PYTHONHASHSEED was pinned) or the
// prefix-cache hash algorithm differs between workers, the same prefix gets
// different block hashes on each, and an index fed by KV events never
// matches across them: the pool's hit rate falls with no visible cause.
//
// The decoder fingerprints the content of every stored root block (no
// parent: its token ids, block size, LoRA and extra keys, cache_salt
// included; KVEvent.RootContent). The pool keeps, per fingerprint, the
// block hashes the last two publishers stored it under:
//
//   - the same content under different hashes on two workers is a pair
//     mismatch, kept until either worker restarts (a new process may hash
//     otherwise; the evidence starts over);
//   - on one worker before and after a restart (seq back to 0, or a new
//     process seen in metrics), across_restart: its seed is not fixed.
//     Each publisher remembers the roots its process stored (bounded,
//     maxOwnRoots): the table's two refs per content are soon the other
//     workers' in a big pool;
//   - on two DP ranks of one worker, across_ranks (each engine core is a
//     process with its own seed).
//
// Block sizes are part of the content, so workers of different block sizes
// never pair; they are reported as block sizes that differ. Content
// isolated on purpose (another cache_salt, LoRA or extra key) is other
// content: no mismatch. Only GPU stores are compared (an offload tier may
// key blocks its own way). The table is bounded (Limits.Fingerprints):
// when full, the half seen least recently is forgotten and counted.

// fpRef is one publisher's storing of a fingerprint.
type fpRef struct {
	hash uint64
	at   int64  // unix nanos, last seen
	pub  int32  // publisher id (State.pubList); -1 empty
	gen  uint32 // the publisher's hashGen then
}

type fpEnt struct {
	fp   uint64
	refs [2]fpRef
	// agreed: two workers stored it under the same hash (evidence the
	// check compares something).
	agreed bool
}

// maxPairPrefixes bounds the distinct prefixes counted per mismatching
// pair (the count is then a floor).
const maxPairPrefixes = 1024

// maxHashPairs bounds the mismatching pairs kept (a pool where every
// worker hashes its own way has n(n-1)/2 of them; the alert names the odd
// ones out long before).
const maxHashPairs = 512

type pairKey struct{ a, b int32 } // worker ids, a < b (ids are never reused)

// hashPair is the evidence that two workers hash identical prefixes
// differently.
type hashPair struct {
	a, b     *worker // a.id < b.id
	since    time.Time
	genA     uint32 // the workers' hashGen when last seen disagreeing
	genB     uint32
	prefixes map[uint64]struct{}
}

// workerHash is one worker's own findings: across a restart, across ranks.
type workerHash struct {
	at       time.Time // first seen (zero: none)
	gen      uint32    // the worker's hashGen then: reported while it holds
	prefixes int
}

type fingerprints struct {
	idx     map[uint64]int32
	ents    []fpEnt
	limit   int
	dropped uint64 // entries forgotten because the table was full
	agreed  int
	pairs   map[pairKey]*hashPair
	// pairsFull counts mismatches not kept: maxHashPairs reached.
	pairsFull uint64
	buf       []float64
	// blockSizesSince is when the block sizes alert began (alerts.go).
	blockSizesSince time.Time
}

func newFingerprints(limit int) *fingerprints {
	return &fingerprints{idx: map[uint64]int32{}, limit: max(limit, 2), pairs: map[pairKey]*hashPair{}}
}

// fingerprint compares a GPU store of a root block (content fp, block hash
// h) by publisher p with the last storers of the same content.
func (s *State) fingerprint(p *publisher, fp, h uint64, at time.Time) {
	t := s.fps
	ns := at.UnixNano()
	i, ok := t.idx[fp]
	if !ok {
		if len(t.ents) >= t.limit {
			t.prune()
		}
		i = int32(len(t.ents))
		t.ents = append(t.ents, fpEnt{fp: fp, refs: [2]fpRef{{pub: -1}, {pub: -1}}})
		t.idx[fp] = i
	}
	e := &t.ents[i]
	// Which ref this store replaces, best first: its own, an empty one, a
	// current one with the same hash (redundant now), another current one
	// (the older), and last a past process's: it is the only record of
	// what that process hashed, which its publisher compares with when it
	// stores the content again (across_restart); in a pool of many workers
	// the others would push it out before then. One current ref is enough
	// for pairs: each store is compared with the store before it.
	const (
		mine = iota
		empty
		same
		other
		stale
	)
	slot, rank := 0, stale+1
	// Across a restart: the publisher's own memory of its past process,
	// or a ref of it still in the table (a root beyond maxOwnRoots).
	restart := p.ownRoot(fp, h)
	for k := range e.refs {
		r := &e.refs[k]
		kind := other
		switch q := s.pubOf(r); {
		case q == nil:
			kind = empty
		case q == p:
			restart = restart || r.gen != p.hashGen && r.hash != h
			kind = mine
		case q.hashGen != r.gen:
			kind = stale // a past process of another publisher: no evidence about it now
		case r.hash == h:
			if q.w != p.w && !e.agreed {
				e.agreed = true
				t.agreed++
			}
			kind = same
		case q.w == p.w:
			s.hashChanged(&p.w.acrossRanks, p.w, at)
		default:
			s.hashPairSeen(q.w, p.w, fp, at)
		}
		if kind < rank || kind == rank && kind >= other && r.at < e.refs[slot].at {
			slot, rank = k, kind
		}
	}
	e.refs[slot] = fpRef{hash: h, at: ns, pub: p.id, gen: p.hashGen}
	if restart {
		s.hashChanged(&p.w.acrossRestart, p.w, at)
	}
}

// pubOf is the publisher of a ref, nil for an empty one or a forgotten
// worker's.
func (s *State) pubOf(r *fpRef) *publisher {
	if r.pub < 0 {
		return nil
	}
	return s.pubList[r.pub]
}

// hashChanged records one of a worker's own findings (first time since
// its last restart: from then on it counts prefixes).
func (s *State) hashChanged(x *workerHash, w *worker, at time.Time) {
	if x.at.IsZero() || x.gen != w.hashGen {
		*x = workerHash{at: at, gen: w.hashGen}
	}
	x.prefixes++
}

// hashPairSeen records that workers a and b stored content fp under
// different hashes.
func (s *State) hashPairSeen(a, b *worker, fp uint64, at time.Time) {
	t := s.fps
	if a.id > b.id {
		a, b = b, a
	}
	k := pairKey{a.id, b.id}
	pr := t.pairs[k]
	if pr != nil && (pr.genA != a.hashGen || pr.genB != b.hashGen) {
		pr = nil // a restart since: the old evidence is gone (see below)
	}
	if pr == nil {
		if _, had := t.pairs[k]; !had && len(t.pairs) >= maxHashPairs {
			t.pruneStalePairs()
			if len(t.pairs) >= maxHashPairs {
				t.pairsFull++
				return
			}
		}
		pr = &hashPair{a: a, b: b, since: at, genA: a.hashGen, genB: b.hashGen, prefixes: map[uint64]struct{}{}}
		t.pairs[k] = pr
	}
	if len(pr.prefixes) < maxPairPrefixes {
		pr.prefixes[fp] = struct{}{}
	}
}

// pruneStalePairs drops the pairs a restart made stale.
func (t *fingerprints) pruneStalePairs() {
	for k, pr := range t.pairs {
		if pr.stale() {
			delete(t.pairs, k)
		}
	}
}

// stale: either worker restarted since the pair was seen.
func (pr *hashPair) stale() bool { return pr.genA != pr.a.hashGen || pr.genB != pr.b.hashGen }

// forgetHashing drops what a forgotten worker hashed: its pairs, and its
// publishers' refs (nil in pubList reads as empty; ids are not reused, so
// no later publisher inherits them).
func (s *State) forgetHashing(w *worker) {
	for k, pr := range s.fps.pairs {
		if pr.a == w || pr.b == w {
			delete(s.fps.pairs, k)
		}
	}
	for _, p := range w.pubs {
		s.pubList[p.id] = nil
	}
}

// prune forgets the half of the entries seen least recently (at least
// one): amortized O(1) per new fingerprint.
func (t *fingerprints) prune() {
	t.buf = t.buf[:0]
	for i := range t.ents {
		t.buf = append(t.buf, float64(t.ents[i].lastSeen()))
	}
	keep := len(t.ents) / 2
	thr := nthLargest(t.buf, keep)
	ties := keep // how many seen exactly at thr may stay
	for _, e := range t.ents {
		if float64(e.lastSeen()) > thr {
			ties--
		}
	}
	kept := t.ents[:0]
	for _, e := range t.ents {
		switch v := float64(e.lastSeen()); {
		case v > thr:
			kept = append(kept, e)
			continue
		case v == thr && ties > 0:
			ties--
			kept = append(kept, e)
			continue
		}
		delete(t.idx, e.fp)
		t.dropped++
		if e.agreed {
			t.agreed--
		}
	}
	clear(t.ents[len(kept):])
	t.ents = kept
	for i := range t.ents {
		t.idx[t.ents[i].fp] = int32(i)
	}
}

func (e *fpEnt) lastSeen() int64 { return max(e.refs[0].at, e.refs[1].at) }

// restartedHashing: a publisher's process restarted; what it hashed before
// says nothing about how it hashes now, except to itself: its own roots
// are kept to compare with (a process that stored none keeps the ones
// before).
func (s *State) restartedHashing(p *publisher) {
	p.hashGen++
	p.w.hashGen++
	if len(p.roots) > 0 {
		p.prevRoots, p.roots = p.roots, nil
	}
}

// maxOwnRoots bounds the roots a publisher remembers of its own process
// (content → block hash), for the comparison after its restart: a pool's
// roots are its system prompts and shared documents, a few hundred at most
// in the cases seen; past the bound new ones are not remembered. About
// 10 KiB per publisher when full.
const maxOwnRoots = 256

// ownRoot compares a root store with what the publisher's previous
// process stored for the same content (each content once), and remembers
// it. It reports whether the hash changed across the restart.
func (p *publisher) ownRoot(fp, h uint64) bool {
	changed := false
	if old, ok := p.prevRoots[fp]; ok {
		changed = old != h
		delete(p.prevRoots, fp)
	}
	if _, ok := p.roots[fp]; ok || len(p.roots) < maxOwnRoots {
		if p.roots == nil {
			p.roots = make(map[uint64]uint64)
		}
		p.roots[fp] = h
	}
	return changed
}

func (s *State) buildHashMismatch() snapshot.HashMismatch {
	t := s.fps
	out := snapshot.HashMismatch{Pairs: []snapshot.HashPair{}, AcrossRestart: []string{}, AcrossRanks: []string{}, BlockSizes: []snapshot.BlockSizeGroup{},
		Agreeing: t.agreed, Fingerprints: len(t.ents), FingerprintsLimit: t.limit, FingerprintsDropped: t.dropped}
	keys := make([]pairKey, 0, len(t.pairs))
	for k, pr := range t.pairs {
		if !pr.stale() && !pr.a.left() && !pr.b.left() {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].a != keys[j].a {
			return keys[i].a < keys[j].a
		}
		return keys[i].b < keys[j].b
	})
	for _, k := range keys {
		pr := t.pairs[k]
		out.Pairs = append(out.Pairs, snapshot.HashPair{A: pr.a.name, B: pr.b.name, Prefixes: len(pr.prefixes), Since: pr.since})
	}
	bySize := map[int][]string{}
	for _, w := range s.workers {
		if w.left() {
			continue // a worker that left raises no alert (targets.go)
		}
		if x := w.acrossRestart; !x.at.IsZero() && x.gen == w.hashGen {
			out.AcrossRestart = append(out.AcrossRestart, w.name)
		}
		if x := w.acrossRanks; !x.at.IsZero() && x.gen == w.hashGen {
			out.AcrossRanks = append(out.AcrossRanks, w.name)
		}
		if bs := w.eventBlockSize(); bs > 0 {
			bySize[bs] = append(bySize[bs], w.name)
		}
	}
	if len(bySize) > 1 {
		for bs, names := range bySize {
			out.BlockSizes = append(out.BlockSizes, snapshot.BlockSizeGroup{BlockSize: bs, Workers: names})
		}
		// The most common size first: the others are the odd ones out.
		sort.Slice(out.BlockSizes, func(i, j int) bool {
			x, y := out.BlockSizes[i], out.BlockSizes[j]
			if len(x.Workers) != len(y.Workers) {
				return len(x.Workers) > len(y.Workers)
			}
			return x.BlockSize < y.BlockSize
		})
	}
	return out
}
