package pool

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// root is a BlockStored with no parent whose first block carries a root
// content fingerprint (the decoder's RootContent).
func root(content uint64, hashes ...uint64) collectors.KVEvent {
	ev := stored(0, false, hashes...)
	ev.RootContent = content
	return ev
}

// The ladder classifies every computed block exactly while its memory has
// room, from a scripted pool of three workers (16-token blocks):
//
//	w0: a1–a4 (new), c1 (new) then evicts c1, d1 (new, content 9)
//	w1: a1–a4 while w0 holds them (routing), c1 after w0 evicted it
//	    (pool capacity)
//	w2: b1–b2 (new), evicts and recomputes them (capacity); e1–e2, the
//	    content w0 holds as d1 under another hash (configuration), and
//	    e3 continuing that chain (configuration)
//
// The rungs follow from the engines' prompt and hit tokens.
func TestLadderClassesExact(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	for _, w := range []string{"w0", "w1", "w2"} {
		s.Apply(scrape(w, at(0), counters("0", 0, 0, 0)))
	}
	seq := map[string]uint64{}
	send := func(w string, sec float64, evs ...collectors.KVEvent) {
		seq[w]++
		s.Apply(batch(w, 0, seq[w], at(sec), evs...))
	}
	send("w0", 1, root(1, 0xa1, 0xa2, 0xa3, 0xa4))
	send("w1", 2, root(1, 0xa1, 0xa2, 0xa3, 0xa4)) // routing: w0 holds them
	send("w2", 3, root(2, 0xb1, 0xb2))
	send("w2", 4, removed(0xb1, 0xb2))
	send("w2", 5, root(2, 0xb1, 0xb2)) // capacity: w2 evicted them
	send("w0", 6, root(3, 0xc1))
	send("w0", 7, removed(0xc1))
	send("w1", 8, root(3, 0xc1)) // pool capacity: held by w0, evicted everywhere
	send("w0", 9, root(9, 0xd1))
	send("w2", 10, root(9, 0xe1, 0xe2))      // configuration: content 9 is w0's d1
	send("w2", 11, stored(0xe2, true, 0xe3)) // its continuation

	// Prompt and hit tokens per worker: T and H.
	s.Apply(scrape("w0", at(12), counters("0", 0, 200, 100)))
	s.Apply(scrape("w1", at(12), counters("0", 0, 200, 100)))
	s.Apply(scrape("w2", at(12), counters("0", 0, 300, 100)))
	snap := s.Snapshot(at(12))

	for _, c := range []struct {
		w                                                      string
		routing, capacity, poolCap, config, newTok, compulsory float64
		actual, perfect, consistent, ceiling                   float64
	}{
		// w0: 4+1+1 new blocks = 96 tokens; C = 100, nothing avoidable.
		{"w0", 0, 0, 0, 0, 96, 100, 0.5, 0.5, 0.5, 0.5},
		// w1: routing 64, pool capacity 16; C = 100 → compulsory 20.
		{"w1", 64, 0, 16, 0, 0, 20, 0.5, 0.82, 0.82, 0.9},
		// w2: new 32, capacity 32, configuration 48; C = 200 → 120.
		{"w2", 0, 32, 0, 48, 32, 120, 1.0 / 3, 1.0 / 3, 148.0 / 300, 180.0 / 300},
	} {
		l := row(t, snap, c.w).Ladder
		if l.Reason != "" || l.PromptTokens == nil || l.Compulsory == nil {
			t.Fatalf("%s: ladder unknown: %+v", c.w, l)
		}
		got := []float64{l.Routing, l.Capacity, l.PoolCapacity, l.Configuration, l.NewBlocks, *l.Compulsory}
		want := []float64{c.routing, c.capacity, c.poolCap, c.config, c.newTok, c.compulsory}
		names := []string{"routing", "capacity", "pool_capacity", "configuration", "new_blocks", "compulsory"}
		for i := range got {
			if !near(got[i], want[i]) {
				t.Errorf("%s %s = %v tokens, want %v", c.w, names[i], got[i], want[i])
			}
		}
		r := l.Rungs
		for i, pair := range [][2]*float64{{r.Actual, f(c.actual)}, {r.PerfectRouting, f(c.perfect)}, {r.ConsistentHashing, f(c.consistent)}, {r.EnoughCapacity, f(c.ceiling)}} {
			if !eqp(pair[0], pair[1]) {
				t.Errorf("%s rung %d = %v, want %v", c.w, i, show(pair[0]), *pair[1])
			}
		}
		// actual is today's hit rate, and the rungs only climb.
		if !eqp(r.Actual, row(t, snap, c.w).PrefixHitRate.Tokens) {
			t.Errorf("%s: actual %v is not the hit rate %v", c.w, show(r.Actual), show(row(t, snap, c.w).PrefixHitRate.Tokens))
		}
		if !(*r.Actual <= *r.PerfectRouting && *r.PerfectRouting <= *r.ConsistentHashing && *r.ConsistentHashing <= *r.EnoughCapacity) {
			t.Errorf("%s: rungs not monotonic: %+v", c.w, r)
		}
		if l.SampleRate != 1 || l.Unexplained != 0 {
			t.Errorf("%s: sample rate %v, unexplained %v; want 1 and 0", c.w, l.SampleRate, l.Unexplained)
		}
	}
	// The pool sums the workers: routing 64 of T = 700.
	p := snap.Pool.Ladder
	if p.PromptTokens == nil || *p.PromptTokens != 700 || p.Routing != 64 || p.Capacity != 32 || p.PoolCapacity != 16 || p.Configuration != 48 {
		t.Errorf("pool ladder %+v", p)
	}
	if !eqp(p.Share.Routing, f(64.0/700)) {
		t.Errorf("pool routing share %v, want %v", show(p.Share.Routing), 64.0/700)
	}
	if _, err := json.Marshal(snap); err != nil {
		t.Fatal(err)
	}
}

// Avoidable tokens beyond what the engines say they computed are shown
// as unexplained, never folded into a class; a worker without prefix
// counters has a ladder with a reason and null figures.
func TestLadderUnexplainedAndUnknown(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(scrape("w0", at(0), counters("0", 0, 0, 0)))
	s.Apply(scrape("w1", at(0), em{Engine: "0", Waiting: f(0)}))
	s.Apply(batch("w1", 0, 1, at(1), root(1, 1, 2, 3, 4)))
	s.Apply(batch("w0", 0, 1, at(2), root(1, 1, 2, 3, 4))) // routing 64
	s.Apply(scrape("w0", at(3), counters("0", 0, 40, 0)))  // C = 40
	s.Apply(scrape("w1", at(3), em{Engine: "0", Waiting: f(0)}))
	snap := s.Snapshot(at(3))
	l := row(t, snap, "w0").Ladder
	if l.Routing != 64 || l.Unexplained != 24 || l.Compulsory == nil || *l.Compulsory != 0 {
		t.Errorf("w0: routing %v, unexplained %v, compulsory %v; want 64, 24, 0", l.Routing, l.Unexplained, show(l.Compulsory))
	}
	if !eqp(l.Rungs.PerfectRouting, f(1)) {
		t.Errorf("perfect routing %v, want 1 (capped)", show(l.Rungs.PerfectRouting))
	}
	u := row(t, snap, "w1").Ladder
	if u.PromptTokens != nil || u.Rungs.Actual != nil || u.Reason == "" {
		t.Errorf("w1 without counters: %+v", u)
	}
}

// Counters the hit rate refuses (hits beyond queries over the window,
// or a hit counter that went backwards) give no ladder either: the same
// reason, no token figures, and a snapshot that still encodes (CI's fuzzer
// found a -Inf hit count here).
func TestLadderRefusesWhatTheHitRateRefuses(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), counters("0", 0, 100, 90)))
	s.Apply(scrape("w0", at(3), counters("0", 0, 120, math.MaxFloat64)))
	snap := s.Snapshot(at(3))
	w := row(t, snap, "w0")
	l := w.Ladder
	if l.PromptTokens != nil || l.HitTokens != nil || l.Compulsory != nil || l.Rungs.Actual != nil {
		t.Errorf("ladder from inconsistent counters: %+v", l)
	}
	if w.PrefixHitRate.Reason == "" || !strings.Contains(l.Reason, w.PrefixHitRate.Reason) {
		t.Errorf("ladder reason %q, hit rate reason %q: want the same", l.Reason, w.PrefixHitRate.Reason)
	}
	if _, err := json.Marshal(snap); err != nil {
		t.Fatal(err)
	}
}

// The memory of hashes seen stays within its limit: past it, a hash-
// chosen sample is followed, each sampled block counting for the ones it
// stands for, and the ladder says its sample rate.
func TestLadderMemoryBounded(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Limits: Limits{LadderHashes: 1 << 10}})
	s.Apply(scrape("w0", at(0), counters("0", 0, 0, 0)))
	const n = 64 << 10
	for i := 0; i < n; i += 16 {
		hs := make([]uint64, 16)
		for j := range hs {
			hs[j] = mix64(uint64(i + j + 1))
		}
		s.Apply(batch("w0", 0, uint64(i/16+1), at(1), root(0, hs...), removed(hs...)))
	}
	if got := len(s.ladder.seen.keys); got > 1<<10 {
		t.Fatalf("seen table grew to %d slots past its limit of 1024", got)
	}
	s.Apply(scrape("w0", at(2), counters("0", 0, 16*n, 0)))
	l := s.Snapshot(at(2)).Workers[0].Ladder
	if l.SampleRate >= 1 || l.SampleRate <= 0 {
		t.Fatalf("sample rate %v, want below 1", l.SampleRate)
	}
	// New blocks are estimated from the sample: within 20% of the truth.
	if want := float64(16 * n); l.NewBlocks < 0.8*want || l.NewBlocks > 1.2*want {
		t.Errorf("new blocks %v tokens, want about %v", l.NewBlocks, want)
	}
}

// Stale index: tokens the router predicted on the chosen worker that the
// engine did not have, from joined decisions, once per record.
func TestLadderStaleIndex(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), counters("0", 0, 0, 0)))
	pred := func(matched float64) *collectors.Prediction {
		return &collectors.Prediction{Units: "blocks", BlockSize: 16, Owner: "w0", Matched: f(matched)}
	}
	cached := func(n int) *int { return &n }
	s.Apply(&collectors.Decision{RequestID: "r1", Chosen: "w0", At: at(1), Prediction: pred(10), Source: "a"})
	s.Apply(&collectors.Outcome{RequestID: "r1", Worker: "w0", CachedTokens: cached(96), At: at(2), Source: "a"})
	s.Apply(&collectors.Outcome{RequestID: "r1", Worker: "w0", CachedTokens: cached(96), At: at(2), Source: "a"}) // repeated
	s.Apply(&collectors.Decision{RequestID: "r2", Chosen: "w0", At: at(1), Prediction: pred(2), Source: "a"})
	s.Apply(&collectors.Outcome{RequestID: "r2", Worker: "w0", CachedTokens: cached(64), At: at(2), Source: "a"}) // more than predicted
	s.Apply(scrape("w0", at(3), counters("0", 0, 100, 50)))
	if got := s.Snapshot(at(3)).Workers[0].Ladder.StaleIndex; got != 160-96 {
		t.Errorf("stale index %v tokens, want 64", got)
	}
}

// A block another worker holds is a routing loss only while that worker
// is up, from the scrape that says so: no snapshot in between (the list
// of down workers once waited for the next one).
func TestLadderDownWorkerBetweenSnapshots(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	for _, w := range []string{"w0", "w1", "w2"} {
		s.Apply(scrape(w, at(0), counters("0", 0, 0, 0)))
	}
	s.Snapshot(at(0))
	s.Apply(batch("w0", 0, 1, at(1), root(1, 0xa1, 0xa2)))
	s.Apply(failedScrape("w0", at(2), "connection refused"))
	s.Apply(batch("w1", 0, 1, at(3), root(1, 0xa1, 0xa2))) // w0 holds them, but is down
	s.Apply(scrape("w0", at(4), counters("0", 0, 0, 0)))
	s.Apply(batch("w2", 0, 1, at(5), root(1, 0xa1, 0xa2))) // w0 is back: routing
	for _, w := range []string{"w1", "w2"} {
		s.Apply(scrape(w, at(6), counters("0", 0, 100, 0)))
	}
	snap := s.Snapshot(at(6))
	if l := row(t, snap, "w1").Ladder; l.Routing != 0 {
		t.Errorf("w1 computed what only a down worker held: routing %v tokens, want 0", l.Routing)
	}
	if l := row(t, snap, "w2").Ladder; l.Routing != 32 {
		t.Errorf("w2 computed what up workers held: routing %v tokens, want 32", l.Routing)
	}
}
