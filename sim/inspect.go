package sim

import (
	"time"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/router"
)

// What the sim itself knows, for tests that hold kvtop's view of the pool
// against the truth (kvtop's index must add up to the engines' caches once
// the streams are quiet).

// ResidentBlocks is the number of distinct block hashes engine rank of
// worker w holds in its KV cache now (-1 if there is no such engine).
func (s *Sim) ResidentBlocks(w, rank int) int {
	n := -1
	s.do(func() {
		if w >= 0 && w < len(s.workers) && rank >= 0 && rank < len(s.workers[w].Engines) {
			n = s.workers[w].Engines[rank].Cache().Distinct()
		}
	})
	return n
}

// LastSeq is the seq of the last batch publisher rank of worker w produced
// in its current run (sent live or withheld); ok is false before the first.
func (s *Sim) LastSeq(w, rank int) (seq uint64, ok bool) {
	s.do(func() {
		if w >= 0 && w < len(s.workers) && rank >= 0 && rank < len(s.workers[w].Pubs) {
			if next := s.workers[w].Pubs[rank].NextSeq(); next > 0 {
				seq, ok = next-1, true
			}
		}
	})
	return seq, ok
}

// rootTruth remembers, per root block (a prompt's first block, by its
// hash under the pool's seed: its content), the first worker that
// published it and the hash it published: the sim's own answer to kvtop's
// hash check. Bounded: the workload's roots are a handful of system prompts
// and documents, and past maxRoots new ones are not followed.
type rootTruth struct {
	first    map[uint64]rootSeen
	mismatch rootMismatch
}

type rootSeen struct {
	worker    int
	published uint64
}

// rootMismatch is the first time a worker published a root another worker
// published under another hash (wall clock, as kvtop's).
type rootMismatch struct {
	at   time.Time
	a, b int
	ok   bool
}

const maxRoots = 4096

func newRootTruth() rootTruth { return rootTruth{first: map[uint64]rootSeen{}} }

func (r *rootTruth) saw(w int, events []kvcache.Event, seed uint64) {
	for _, ev := range events {
		if ev.Kind != kvcache.Stored || ev.HasParent || len(ev.Hashes) == 0 || !ev.GPU() || ev.Reused {
			continue
		}
		root := ev.Hashes[0]
		pub := kvcache.ReseedHash(root, seed)
		p, seen := r.first[root]
		switch {
		case !seen && len(r.first) < maxRoots:
			r.first[root] = rootSeen{w, pub}
		case seen && p.worker != w && p.published != pub && !r.mismatch.ok:
			r.mismatch = rootMismatch{at: time.Now(), a: p.worker, b: w, ok: true}
		}
	}
}

// FirstHashMismatch is when a worker first published a prompt's root block
// that worker a had published under another hash (b is the later one): the
// moment kvtop's hash check has its evidence. ok is false before.
func (s *Sim) FirstHashMismatch() (at time.Time, a, b int, ok bool) {
	s.do(func() {
		m := s.roots.mismatch
		at, a, b, ok = m.at, m.a, m.b, m.ok
	})
	return at, a, b, ok
}

// Routed is what the simulated router did with one request and what came
// of it (see router.Routed).
type Routed = router.Routed

// Routed says what the router did with request id, one of its most recent
// 16384: where it went, what the router predicted, what the engine found
// cached. For tests that check a decision log against the sim.
func (s *Sim) Routed(id string) (Routed, bool) { return s.router.Routed(id) }

// DynamoSubscribed reports whether a subscriber listens to every worker's
// ZMQ event plane publisher (event plane dynamo-zmq; false otherwise).
func (s *Sim) DynamoSubscribed() bool {
	ok := false
	s.do(func() {
		if s.dyn != nil && s.dyn.pubs != nil {
			ok = s.dyn.subscribed()
		}
	})
	return ok
}

// DynamoPublishers are worker w's ZMQ event plane publishers, by rank:
// their endpoints and current publisher ids (a restart gives new ids), as
// Dynamo's discovery advertises them (event plane dynamo-zmq; nil
// otherwise).
func (s *Sim) DynamoPublishers(w int) (endpoints []string, ids []uint64) {
	s.do(func() {
		if s.dyn != nil && s.dyn.pubs != nil && w >= 0 && w < len(s.dyn.eps) {
			endpoints = append(endpoints, s.dyn.eps[w]...)
			ids = append(ids, s.dyn.pubIDs[w]...)
		}
	})
	return endpoints, ids
}
