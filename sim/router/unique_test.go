package router

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
)

// TestUniquePrompts: with unique prompts on, every new conversation opens
// with tokens nobody sent before (no system prompt, no other
// conversation's root), and lasts the turns asked, each turn the whole
// conversation so far; off, conversations open on system prompts again.
func TestUniquePrompts(t *testing.T) {
	w := NewWorkload(3, testHasher, 6)
	w.SetUnique(1, 2)
	systems := map[uint64]bool{}
	for _, p := range w.systems {
		systems[p.hashes[0]] = true
	}
	roots := map[uint64]*session{}
	turns := map[*session][]*engine.Request{}
	for now := time.Duration(0); now < 60*time.Second; now += time.Second {
		for _, q := range w.Arrivals(now) {
			s := q.Tag.(*session)
			turns[s] = append(turns[s], q)
			w.finished(s, true, now)
		}
	}
	second := 0
	for s, qs := range turns {
		first := qs[0]
		if o, ok := roots[first.Hashes[0]]; ok && o != s || systems[first.Hashes[0]] {
			t.Fatalf("a unique conversation opens on a root sent before")
		}
		roots[first.Hashes[0]] = s
		if len(qs) > 2 {
			t.Fatalf("a unique conversation of %d turns, want 2", len(qs))
		}
		if len(qs) == 2 {
			second++
			a, b := qs[0], qs[1]
			if b.PromptLen <= len(a.Tokens) || b.Hashes[len(a.Hashes)-1] != a.Hashes[len(a.Hashes)-1] {
				t.Fatalf("a second turn that does not carry the first: %d tokens after %d", b.PromptLen, len(a.Tokens))
			}
		}
	}
	if len(turns) < 150 || second < len(turns)/2 {
		t.Fatalf("%d unique conversations in a minute at 6/s, %d with a second turn", len(turns), second)
	}
	w.SetUnique(0, 0)
	for _, q := range w.Arrivals(70 * time.Second) {
		if s := q.Tag.(*session); turns[s] == nil && !systems[q.Hashes[0]] {
			t.Fatalf("unique prompts off: a new conversation opens on no system prompt")
		}
	}
}
