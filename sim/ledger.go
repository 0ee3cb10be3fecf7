package sim

import (
	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/kvcache"
)

// The sim's own account of why each GPU block an engine computed was
// computed: the classes of kvtop's hit-rate ladder (issue 26), decided by
// the sim from its engines' caches and seeds at the moment of each store.
// Tests hold kvtop's ladder, which sees only the wire, against it. It is
// never published: no event, page or log says any of it.

// LadderTruth is one worker's account since the start of the run, in
// tokens (BlockSize per block), over every rank and restart. A block its
// engine computes (not a prefix hit, not a load from a CPU tier) is, in
// this order:
//
//   - a copy: the worker held it already (two requests computed it at
//     once, or a sibling rank holds it) — no class of the ladder;
//   - routing: another worker hashing with the same seed held it;
//   - capacity: this worker held it before and evicted it;
//   - pool capacity: some worker held it (under this worker's hash)
//     before, and none does now — evicted, or lost to a restart or a
//     cache reset (not an eviction by anyone);
//   - configuration: another worker holds the same content under another
//     seed's hash;
//   - new: first sight.
//
// "Held" is what the engines' caches held at that moment, in the order
// the sim published its batches; seen and evicted go by the hash the
// worker publishes (its seed's), as a subscriber can only know them.
// Generated tokens fill blocks too: they are classified like the rest
// (almost always new).
type LadderTruth struct {
	Routing, Capacity, PoolCapacity, Configuration, New float64
	Copies                                              float64
	// Loaded is tokens stored on the GPU after a load from a CPU tier:
	// stored, not computed (on the wire they look computed).
	Loaded float64
	// PromptTokens and HitTokens are the engines' prefix-cache queries
	// and hits (vllm:prefix_cache_queries and _hits: T and H), summed over
	// restarts.
	PromptTokens, HitTokens float64
	// Exact is false once the memory of hashes seen reached its bound
	// (maxLedgerHashes): hashes first computed after it are not followed.
	Exact bool
}

// Avoidable is the computed tokens a hit could have saved: routing,
// capacity, pool capacity and configuration.
func (t LadderTruth) Avoidable() float64 {
	return t.Routing + t.Capacity + t.PoolCapacity + t.Configuration
}

// Sub is t minus an earlier account u of the same worker: what happened
// between the two.
func (t LadderTruth) Sub(u LadderTruth) LadderTruth {
	return LadderTruth{
		Routing: t.Routing - u.Routing, Capacity: t.Capacity - u.Capacity, PoolCapacity: t.PoolCapacity - u.PoolCapacity,
		Configuration: t.Configuration - u.Configuration, New: t.New - u.New, Copies: t.Copies - u.Copies, Loaded: t.Loaded - u.Loaded,
		PromptTokens: t.PromptTokens - u.PromptTokens, HitTokens: t.HitTokens - u.HitTokens, Exact: t.Exact && u.Exact,
	}
}

// Add is the sum of two accounts (a pool's of its workers').
func (t LadderTruth) Add(u LadderTruth) LadderTruth {
	u.Exact = t.Exact && u.Exact
	u.Routing += t.Routing
	u.Capacity += t.Capacity
	u.PoolCapacity += t.PoolCapacity
	u.Configuration += t.Configuration
	u.New += t.New
	u.Copies += t.Copies
	u.Loaded += t.Loaded
	u.PromptTokens += t.PromptTokens
	u.HitTokens += t.HitTokens
	return u
}

// maxLedgerHashes bounds the ledger's memory of hashes seen (about 40
// bytes each): a test's run computes far fewer.
const maxLedgerHashes = 1 << 21

// ledger keeps the LadderTruth of every worker (Options.Ledger; loop
// goroutine only).
type ledger struct {
	ranks int
	// held is each engine's (worker*ranks + rank) GPU group-0 blocks by
	// the pool's hash (content), with their copies: what its cache holds.
	held []map[uint64]int32
	// seen maps each hash published (a worker's seed's) to the workers
	// that evicted it (bit w).
	seen  map[uint64]uint64
	full  bool
	by    []LadderTruth
	carry []LadderTruth // T and H of engines before their restarts
}

func newLedger(workers, ranks int) *ledger {
	l := &ledger{ranks: ranks, held: make([]map[uint64]int32, workers*ranks), seen: map[uint64]uint64{},
		by: make([]LadderTruth, workers), carry: make([]LadderTruth, workers)}
	for i := range l.held {
		l.held[i] = map[uint64]int32{}
	}
	return l
}

// holds reports whether worker w holds pool hash h on any rank.
func (l *ledger) holds(w int, h uint64) bool {
	for r := 0; r < l.ranks; r++ {
		if l.held[w*l.ranks+r][h] > 0 {
			return true
		}
	}
	return false
}

// elsewhere reports whether a worker other than w whose seed is (same)
// or is not (!same) w's holds pool hash h.
func (l *ledger) elsewhere(w int, h uint64, seeds []uint64, same bool) bool {
	for o := range l.by {
		if o != w && (seeds[o] == seeds[w]) == same && l.holds(o, h) {
			return true
		}
	}
	return false
}

// saw applies one engine step's events (pool hashes, before any reseed),
// in the order the engine made them.
func (l *ledger) saw(w, rank int, events []kvcache.Event, seeds []uint64) {
	e := l.held[w*l.ranks+rank]
	bs := float64(kvcache.BlockSize)
	t := &l.by[w]
	for i := range events {
		ev := &events[i]
		if !ev.GPU() || ev.Reused {
			continue
		}
		switch ev.Kind {
		case kvcache.Stored:
			for j, h := range ev.Hashes {
				if j < ev.Loaded {
					t.Loaded += bs
					l.note(kvcache.ReseedHash(h, seeds[w]))
				} else {
					l.computed(w, h, seeds)
				}
				e[h]++
			}
		case kvcache.Removed:
			for _, h := range ev.Hashes {
				switch n := e[h]; {
				case n > 1:
					e[h] = n - 1
				case n == 1:
					delete(e, h)
					if !l.holds(w, h) {
						p := kvcache.ReseedHash(h, seeds[w])
						if v, ok := l.seen[p]; ok {
							l.seen[p] = v | 1<<uint(w)
						}
					}
				}
			}
		case kvcache.Cleared:
			clear(e) // a reset, not an eviction
		}
	}
}

// computed classifies one block worker w computed (pool hash h).
func (l *ledger) computed(w int, h uint64, seeds []uint64) {
	bs := float64(kvcache.BlockSize)
	t := &l.by[w]
	p := kvcache.ReseedHash(h, seeds[w])
	evictors, seen := l.seen[p]
	switch {
	case l.holds(w, h):
		t.Copies += bs
	case l.elsewhere(w, h, seeds, true):
		t.Routing += bs
	case seen && evictors&(1<<uint(w)) != 0:
		t.Capacity += bs
	case seen:
		t.PoolCapacity += bs
	case l.elsewhere(w, h, seeds, false):
		t.Configuration += bs
	default:
		t.New += bs
	}
	if !seen {
		l.note(p)
	}
}

// note remembers published hash p as seen, while there is room.
func (l *ledger) note(p uint64) {
	if _, ok := l.seen[p]; ok {
		return
	}
	if len(l.seen) >= maxLedgerHashes {
		l.full = true
		return
	}
	l.seen[p] = 0
}

// restart forgets what worker w's engines hold (their caches are about
// to start empty: a reset, not an eviction) and carries their prefix
// counters over the restart.
func (l *ledger) restart(w int, engines []*engine.Engine) {
	for r, e := range engines {
		st := e.Snapshot()
		l.carry[w].PromptTokens += st.PrefixQueries
		l.carry[w].HitTokens += st.PrefixHits
		clear(l.held[w*l.ranks+r])
	}
}

// truth is worker w's account now.
func (l *ledger) truth(w int, engines []*engine.Engine) LadderTruth {
	t := l.by[w]
	t.PromptTokens, t.HitTokens = l.carry[w].PromptTokens, l.carry[w].HitTokens
	for _, e := range engines {
		st := e.Snapshot()
		t.PromptTokens += st.PrefixQueries
		t.HitTokens += st.PrefixHits
	}
	t.Exact = !l.full
	return t
}

// LadderTruth is worker w's own account of why its engines computed the
// blocks they computed since the start of the run (ok false: no such
// worker, or the run was started without Options.Ledger). For tests; never
// published.
func (s *Sim) LadderTruth(w int) (t LadderTruth, ok bool) {
	s.do(func() {
		if s.ledger == nil || w < 0 || w >= len(s.workers) {
			return
		}
		t, ok = s.ledger.truth(w, s.workers[w].Engines), true
	})
	return t, ok
}

// PoolLadderTruth is every worker's LadderTruth summed (ok false without
// Options.Ledger).
func (s *Sim) PoolLadderTruth() (t LadderTruth, ok bool) {
	s.do(func() {
		if s.ledger == nil {
			return
		}
		t.Exact, ok = true, true
		for w := range s.workers {
			t = t.Add(s.ledger.truth(w, s.workers[w].Engines))
		}
	})
	return t, ok
}
