package sim_test

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim"
)

// TestResidentBlocksAndLastSeq: the truth tests hold kvtop against. The
// seq is the one on the wire (the replay's last batch), the blocks drop to
// 0 on a cache reset, and out-of-range engines say so.
func TestResidentBlocksAndLastSeq(t *testing.T) {
	s := startSim(t, sim.Options{Workers: 2, DPRanks: 2, Seed: 3})
	if _, ok := s.LastSeq(0, 0); ok {
		t.Fatal("a seq before anything was published")
	}
	advance(t, s, 5*time.Second)
	zc := zctx(t)
	for w, ep := range s.Endpoints().Workers {
		for rank := range ep.Replay {
			seq, ok := s.LastSeq(w, rank)
			rep := replay(t, zc, ep.Replay[rank], 0)
			if !ok || len(rep) < 2 || uint64(len(rep)-2) != seq {
				t.Errorf("w%d rank %d: LastSeq %d (%v), the replay holds seqs 0..%d", w, rank, seq, ok, len(rep)-2)
			}
			if n := s.ResidentBlocks(w, rank); n <= 0 {
				t.Errorf("w%d rank %d holds %d blocks after 5 s of traffic", w, rank, n)
			}
		}
	}
	if err := s.Inject(sim.ClearCache{Worker: 1, Rank: 1}); err != nil {
		t.Fatal(err)
	}
	if n := s.ResidentBlocks(1, 1); n != 0 {
		t.Errorf("w1 rank 1 holds %d blocks after a reset", n)
	}
	if n := s.ResidentBlocks(1, 0); n == 0 {
		t.Error("the reset of rank 1 emptied rank 0 too")
	}
	if s.ResidentBlocks(2, 0) != -1 || s.ResidentBlocks(0, 2) != -1 {
		t.Error("no such engine: want -1")
	}
}
