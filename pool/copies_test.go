package pool

import "testing"

// TestCopiesUnderAParent: a resident GPU hash stored again under a parent
// is a second physical copy (a hybrid model recomputes the blocks its
// sliding-window group lost; vLLM's reuse reports never have a parent):
// one removal leaves the other copy resident, and it is no re-announce.
// Stored again without a parent it stays a touch.
func TestCopiesUnderAParent(t *testing.T) {
	s := newTestState("w0")
	s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3)))
	s.Apply(batch("w0", 0, 1, at(2), stored(1, true, 2, 3), removed(3)))
	w := row(t, s.Snapshot(at(3)), "w0")
	if blocksOf(w.Blocks) != 3 || w.Streams[0].Reannounced != 0 {
		t.Fatalf("blocks %d, re-announced %d: the copies under a parent hold 2 and 3 until both are removed",
			blocksOf(w.Blocks), w.Streams[0].Reannounced)
	}
	s.Apply(batch("w0", 0, 2, at(4), removed(3), stored(0, false, 1, 2)))
	w = row(t, s.Snapshot(at(5)), "w0")
	if blocksOf(w.Blocks) != 2 || w.Streams[0].Reannounced != 2 || w.Streams[0].UnknownRemovals != 0 {
		t.Fatalf("blocks %d, re-announced %d, unknown removals %d; want 2, 2 (a parentless re-store), 0",
			blocksOf(w.Blocks), w.Streams[0].Reannounced, w.Streams[0].UnknownRemovals)
	}
}
