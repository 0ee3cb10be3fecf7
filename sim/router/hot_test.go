package router

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/kvcache"
)

// TestTiesGoToTheLongestHolder: two workers hold the same prefix; the one
// that has held it longer keeps getting it, even while the other is less
// loaded, until the load threshold overrides the match. Load does not split
// a prefix between equal holders.
func TestTiesGoToTheLongestHolder(t *testing.T) {
	r, path := newRouter(t, CacheAware) // threshold 4
	q := prompt(160, 1)
	r.Observe(2, []kvcache.Event{{Kind: kvcache.Stored, Hashes: q.Hashes[:8]}}, time.Second)
	r.Observe(1, []kvcache.Event{{Kind: kvcache.Stored, Hashes: q.Hashes[:8]}}, 2*time.Second)
	var chosen []int
	for i := 0; i < 7; i++ {
		chosen = append(chosen, r.route(prompt(160, 1)))
	}
	for i, w := range chosen[:5] {
		if w != 2 {
			t.Fatalf("request %d went to w%d (all: %v), want w2, which has held the prefix since 1 s", i, w, chosen)
		}
	}
	// w2 has 5 in flight, w0 none: past the threshold load wins, to the
	// least loaded worker, and the record keeps w2 as the owner.
	if chosen[5] == 2 {
		t.Fatalf("w2 5 in flight vs 0, threshold 4: want load-balance, got %v", chosen)
	}
	recs := records(t, r, path)
	if p := recs[5]["prediction"].(map[string]any); recs[5]["reason"] != "load-balance" || p["owner"] != "w2" {
		t.Errorf("overridden decision %v", recs[5])
	}
	// Once w2 drains, the prefix goes back to it, not to the idle w1.
	for i := 0; i < 5; i++ {
		r.release(&ticket{worker: 2, epoch: r.epoch})
	}
	if w := r.route(prompt(160, 1)); w != 2 {
		t.Errorf("after w2 drained: w%d, want w2 again", w)
	}
	// w2 evicts it: w1 is the only holder now.
	r.Observe(2, []kvcache.Event{{Kind: kvcache.Removed, Hashes: q.Hashes[:8]}}, 3*time.Second)
	if w := r.route(prompt(160, 1)); w != 1 {
		t.Errorf("after w2 evicted the prefix: w%d, want w1", w)
	}
}

// TestFirstRequestsFollowOneHolder: a new document under a system prompt
// every worker holds. Requests for it arrive together, before any worker
// has cached it: they all match only the system prompt, equally on every
// worker, and all go to the same one (its longest holder) instead of being
// spread by load, so the document gets one home.
func TestFirstRequestsFollowOneHolder(t *testing.T) {
	r, _ := newRouter(t, CacheAware)
	r.SetThreshold(64)
	sys := prompt(96, 3) // 6 blocks everyone holds
	for _, w := range []int{1, 0, 2} {
		r.Observe(w, []kvcache.Event{{Kind: kvcache.Stored, Hashes: sys.Hashes}}, time.Duration(w+1)*time.Second)
	}
	// w0 stored it at 1 s, first: it is the longest holder.
	doc := append(append([]uint32(nil), sys.Tokens...), prompt(160, 4).Tokens...)
	hashes := testHasher.Extend(nil, doc)
	seen := map[int]int{}
	for i := 0; i < 10; i++ {
		q := prompt(16, 0)
		q.Tokens, q.Hashes, q.PromptLen = doc, hashes, len(doc)
		seen[r.route(q)]++
	}
	if seen[0] != 10 {
		t.Fatalf("first requests for a new document went to %v, want all 10 on w0", seen)
	}
}

// TestHotStream: a hot document draws its own stream of new conversations,
// on top of the base rate, all on one prefix; off, or at rate 0, it stops.
func TestHotStream(t *testing.T) {
	w := NewWorkload(7, testHasher, 6)
	w.Arrivals(10 * time.Second)
	w.SetHot(10*time.Second, 10)
	hot := w.combo(0, len(w.docs)-1)
	onHot := func(reqs []*engine.Request) (n int) {
		for _, q := range reqs {
			if len(q.Hashes) >= len(hot.hashes) && q.Hashes[len(hot.hashes)-1] == hot.hashes[len(hot.hashes)-1] {
				n++
			}
		}
		return n
	}
	reqs := w.Arrivals(30 * time.Second)
	n, all := onHot(reqs), len(reqs)
	// 20 s: about 200 new hot conversations (Poisson, ±4σ ≈ 57), plus some
	// of their second turns, and the base stream's 120.
	if n < 140 || n > 320 || all-n < 80 || all-n > 170 {
		t.Fatalf("20 s at 6/s + 10/s hot: %d requests, %d on the hot document", all, n)
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Arrival < reqs[i-1].Arrival {
			t.Fatalf("arrivals out of order at %d: %s after %s", i, reqs[i].Arrival, reqs[i-1].Arrival)
		}
	}
	if w.HotRate() != 10 {
		t.Errorf("hot rate %g", w.HotRate())
	}
	w.SetHot(30*time.Second, 0)
	w.Arrivals(35 * time.Second) // second turns already begun drain away
	if n := onHot(w.Arrivals(95 * time.Second)); n != 0 {
		t.Errorf("hot off: %d new requests on the hot document", n)
	}
	w.SetHot(95*time.Second, 10)
	w.SetRate(95*time.Second, 0)
	if reqs := w.Arrivals(200 * time.Second); len(reqs) != 0 || w.HotRate() != 0 {
		t.Errorf("rate 0: %d requests arrived, hot rate %g", len(reqs), w.HotRate())
	}
}

// TestAppsGrowWithTheRate: a busier pool serves more apps (system
// prompts), so no one prompt's home gets more new chats than one worker
// serves; 4 at least, 64 at most.
func TestAppsGrowWithTheRate(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want int
	}{{0, 4}, {12, 4}, {18, 6}, {48, 16}, {1000, 64}} {
		if got := len(NewWorkload(1, testHasher, c.rate).systems); got != c.want {
			t.Errorf("rate %g: %d system prompts, want %d", c.rate, got, c.want)
		}
	}
}
