package sim

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
