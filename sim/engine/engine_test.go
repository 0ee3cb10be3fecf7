package engine

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim/kvcache"
)

var hasher = kvcache.NewHasher(1)

// request builds a request whose prompt is prefix + a unique suffix.
func request(id string, prefix []uint32, suffix, out int, at time.Duration, seed uint64) *Request {
	r := rand.New(rand.NewPCG(seed, 2))
	toks := append([]uint32(nil), prefix...)
	for i := 0; i < suffix+out; i++ {
		toks = append(toks, uint32(r.IntN(150000)))
	}
	return &Request{ID: id, Tokens: toks, Hashes: hasher.Extend(nil, toks), PromptLen: len(prefix) + suffix, OutputLen: out, Arrival: at}
}

func tokens(n int, seed uint64) []uint32 {
	r := rand.New(rand.NewPCG(seed, 3))
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(r.IntN(150000))
	}
	return t
}

// runUntilIdle steps the engine until every request ended, checking each
// step's events as a subscriber would.
func runUntilIdle(t *testing.T, e *Engine, v *view) []Result {
	t.Helper()
	var out []Result
	for now := time.Duration(0); now < 10*time.Minute; now += 10 * time.Millisecond {
		e.Run(now, v.apply)
		out = append(out, e.TakeResults()...)
		if !e.busy() {
			return out
		}
	}
	t.Fatal("engine never went idle")
	return nil
}

// view is a subscriber's picture of one engine's cache, from its events.
type view struct {
	t        *testing.T
	resident map[uint64]int
	total    int
	capacity int
	batches  int
}

func newView(t *testing.T, capacity int) *view {
	return &view{t: t, resident: map[uint64]int{}, capacity: capacity}
}

func (v *view) apply(_ time.Duration, evs []kvcache.Event) {
	v.batches++
	for _, e := range evs {
		switch e.Kind {
		case kvcache.Stored:
			if len(e.Tokens) != kvcache.BlockSize*len(e.Hashes) {
				v.t.Fatalf("stored %d hashes with %d tokens", len(e.Hashes), len(e.Tokens))
			}
			if e.HasParent && v.resident[e.Parent] == 0 {
				v.t.Fatalf("stored under parent %x, which is not resident", e.Parent)
			}
			for _, h := range e.Hashes {
				v.resident[h]++
				v.total++
			}
		case kvcache.Removed:
			for _, h := range e.Hashes {
				if v.resident[h] == 0 {
					v.t.Fatalf("removed %x, never stored", h)
				}
				v.resident[h]--
				v.total--
			}
		case kvcache.Cleared:
			clear(v.resident)
			v.total = 0
		}
	}
	if v.total > v.capacity {
		v.t.Fatalf("stored minus removed = %d blocks, cache holds %d", v.total, v.capacity)
	}
}

// TestCachedTokensShortenPrefill: the same long prompt twice, one after the
// other. The second is served from cache (all but the last partial block,
// and vLLM always recomputes the last token), its TTFT is much shorter, and
// the metrics count exactly those tokens as hits.
func TestCachedTokensShortenPrefill(t *testing.T) {
	cfg := DefaultConfig()
	e := New(cfg)
	v := newView(t, cfg.NumBlocks)
	doc := tokens(3000, 1)
	e.Submit(request("a", doc, 40, 20, 0, 1))
	first := runUntilIdle(t, e, v)
	e.Submit(request("b", doc, 40, 20, e.next, 2))
	second := runUntilIdle(t, e, v)
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("results %d, %d", len(first), len(second))
	}
	a, b := first[0], second[0]
	if a.CachedTokens != 0 {
		t.Errorf("first request hit %d tokens in an empty cache", a.CachedTokens)
	}
	if want := 3000 / 16 * 16; b.CachedTokens != want {
		t.Errorf("second request cached %d tokens, want %d (the shared document's full blocks)", b.CachedTokens, want)
	}
	if b.TTFT*3 > a.TTFT {
		t.Errorf("TTFT %v with %d cached tokens vs %v without: cached tokens must shorten prefill", b.TTFT, b.CachedTokens, a.TTFT)
	}
	st := e.Snapshot()
	if st.PrefixHits != float64(b.CachedTokens) || st.PrefixQueries != float64(2*3040) {
		t.Errorf("prefix cache hits %v / queries %v, want %d / %d", st.PrefixHits, st.PrefixQueries, b.CachedTokens, 2*3040)
	}
	if st.PromptTokens != 2*3040 || st.GenerationTokens != 40 || st.Finished[FinishStop] != 2 {
		t.Errorf("prompt %v generation %v finished %v", st.PromptTokens, st.GenerationTokens, st.Finished)
	}
	if st.TTFT.Count != 2 || st.E2E.Count != 2 || st.Queue.Count != 2 || st.ITL.Count != 2*19 {
		t.Errorf("histogram counts %v %v %v %v, want 2 each and 38 ITL (19 tokens after each first)", st.TTFT.Count, st.E2E.Count, st.Queue.Count, st.ITL.Count)
	}
}

// TestTTFTModel: TTFT grows with the wait in the queue and with the
// uncached prompt tokens to prefill; e2e with the output length; each
// output token after the first is one decode step of ITL.
func TestTTFTModel(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRunning = 1 // one at a time: the others wait
	e := New(cfg)
	v := newView(t, cfg.NumBlocks)
	short, long := request("short", nil, 200, 10, 0, 1), request("long", nil, 4000, 10, 0, 2)
	waited, longer := request("waited", nil, 200, 10, 0, 3), request("longer", nil, 200, 100, 0, 4)
	for _, r := range []*Request{short, long, waited, longer} {
		e.Submit(r)
	}
	res := map[string]Result{}
	for _, r := range runUntilIdle(t, e, v) {
		res[r.Req.ID] = r
	}
	s, l, w, g := res["short"], res["long"], res["waited"], res["longer"]
	// A 4 000-token prefill takes ~20× the 200-token one's compute time.
	if l.TTFT-l.Queue < 10*(s.TTFT-s.Queue) {
		t.Errorf("prefill of 4 000 tokens %v vs of 200 %v: uncached tokens must cost", l.TTFT-l.Queue, s.TTFT-s.Queue)
	}
	// The same prompt length, after two others: the wait is in its TTFT.
	if w.Queue <= s.TTFT+l.TTFT-l.Queue || w.TTFT < w.Queue+(s.TTFT-s.Queue) {
		t.Errorf("waited: queue %v TTFT %v; short TTFT %v, long prefill %v", w.Queue, w.TTFT, s.TTFT, l.TTFT-l.Queue)
	}
	if g.E2E-g.TTFT < 5*(w.E2E-w.TTFT) {
		t.Errorf("100 output tokens after the first took %v, 10 took %v", g.E2E-g.TTFT, w.E2E-w.TTFT)
	}
	st := e.Snapshot()
	if st.ITL.Count != 9+9+9+99 || st.ITL.Sum < (g.E2E-g.TTFT).Seconds() {
		t.Errorf("ITL %v observations, %v s; want 126 covering the decode of each", st.ITL.Count, st.ITL.Sum)
	}
}

// TestRunningLimitAndQueue: more requests than the running limit wait in
// the queue, in order, and their queue time grows.
func TestRunningLimitAndQueue(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRunning = 4
	e := New(cfg)
	v := newView(t, cfg.NumBlocks)
	for i := 0; i < 12; i++ {
		e.Submit(request("r", tokens(100, uint64(i)), 10, 50, 0, uint64(i)))
	}
	e.Run(0, v.apply)
	st := e.Snapshot()
	if st.Running != 4 || st.Waiting != 8 {
		t.Fatalf("running %d waiting %d, want 4 and 8", st.Running, st.Waiting)
	}
	res := runUntilIdle(t, e, v)
	if len(res) != 12 {
		t.Fatalf("%d results", len(res))
	}
	if res[0].Queue != 0 || res[11].Queue <= res[4].Queue || res[4].Queue <= 0 {
		t.Errorf("queue times %v, %v, %v: the later requests must wait longer", res[0].Queue, res[4].Queue, res[11].Queue)
	}
}

// TestPreemption: a cache too small for every running request's decode
// preempts (vLLM's recompute) and still finishes everything; the events
// stay consistent throughout.
func TestPreemption(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 40
	cfg.MaxRunning = 8
	e := New(cfg)
	v := newView(t, cfg.NumBlocks)
	for i := 0; i < 8; i++ {
		e.Submit(request("r", nil, 60, 100, 0, uint64(i)))
	}
	res := runUntilIdle(t, e, v)
	if len(res) != 8 {
		t.Fatalf("%d results", len(res))
	}
	if st := e.Snapshot(); st.Preemptions == 0 || st.GenerationTokens < 800 {
		t.Errorf("preemptions %v, generation tokens %v", st.Preemptions, st.GenerationTokens)
	}
}

// TestHitsAreResidentBlocks: under a shared-prefix workload with
// evictions, every cached token a running request was served is a block the
// event stream says is resident, and the hit counter is the sum of the
// cached tokens the requests report.
func TestHitsAreResidentBlocks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 600
	e := New(cfg)
	v := newView(t, cfg.NumBlocks)
	docs := [][]uint32{tokens(2000, 1), tokens(1500, 2), tokens(2500, 3), tokens(800, 4)}
	r := rand.New(rand.NewPCG(5, 5))
	var hits float64
	checked := 0
	check := func(at time.Duration, evs []kvcache.Event) {
		v.apply(at, evs)
		for _, s := range e.running {
			for _, h := range s.Hashes[:s.cached/kvcache.BlockSize] {
				if v.resident[h] == 0 {
					t.Fatalf("%s was served block %x from cache, but the events say it is not resident", s.ID, h)
				}
				checked++
			}
		}
	}
	for i := 0; i < 200; i++ {
		q := request(fmt.Sprint("r", i), docs[r.IntN(len(docs))], 20+r.IntN(100), 10+r.IntN(50), time.Duration(i)*50*time.Millisecond, uint64(i))
		e.Submit(q)
		for now := q.Arrival; now < q.Arrival+50*time.Millisecond; now += 10 * time.Millisecond {
			e.Run(now, check)
			for _, res := range e.TakeResults() {
				hits += float64(res.CachedTokens)
			}
		}
	}
	for _, res := range runUntilIdle(t, e, v) {
		hits += float64(res.CachedTokens)
	}
	st := e.Snapshot()
	if st.Preemptions == 0 && st.PrefixHits != hits {
		t.Errorf("metrics count %v hit tokens, requests report %v", st.PrefixHits, hits)
	}
	if checked == 0 || v.total != e.cache.Resident() {
		t.Errorf("%d hit blocks checked; subscriber sees %d resident blocks, cache has %d", checked, v.total, e.cache.Resident())
	}
}

// TestDeterministic: the same submissions give the same steps and events.
func TestDeterministic(t *testing.T) {
	run := func() [][]uint64 {
		e := New(DefaultConfig())
		var seen [][]uint64
		doc := tokens(1000, 9)
		for i := 0; i < 30; i++ {
			e.Submit(request("r", doc, 50, 30, time.Duration(i)*20*time.Millisecond, uint64(i)))
		}
		for now := time.Duration(0); now < time.Minute; now += 10 * time.Millisecond {
			e.Run(now, func(at time.Duration, evs []kvcache.Event) {
				for _, ev := range evs {
					seen = append(seen, append([]uint64{uint64(at), uint64(ev.Kind)}, ev.Hashes...))
				}
			})
		}
		return seen
	}
	a, b := run(), run()
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("two identical runs differ (%d vs %d events)", len(a), len(b))
	}
}

// TestReset: a restart aborts every request and starts from nothing.
func TestReset(t *testing.T) {
	e := New(DefaultConfig())
	for i := 0; i < 3; i++ {
		e.Submit(request("r", tokens(500, 1), 10, 500, 0, uint64(i)))
	}
	e.Run(time.Second, nil)
	aborted := e.Reset(time.Second)
	if len(aborted) != 3 || aborted[0].Status != Aborted || aborted[0].FinishReason != "abort" {
		t.Fatalf("aborted %+v", aborted)
	}
	st := e.Snapshot()
	if st.Running != 0 || st.PromptTokens != 0 || st.GenerationTokens != 0 || e.Cache().Resident() != 0 {
		t.Errorf("after reset: %+v, resident %d", st, e.Cache().Resident())
	}
}

func TestRejectWhenQueueFull(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxWaiting = 2
	e := New(cfg)
	ok := 0
	for i := 0; i < 5; i++ {
		if e.Submit(request("r", nil, 20, 5, 0, uint64(i))) {
			ok++
		}
	}
	if ok != 2 || e.Snapshot().Rejected != 3 {
		t.Fatalf("accepted %d, rejected %v; want 2 and 3", ok, e.Snapshot().Rejected)
	}
}

// A decode leg (P/D) receives its prompt's full blocks by transfer: they
// are external_kv_transfer prompt tokens, looked up but not hit, never
// computed, so its first token comes far sooner than a prefill's; the same
// prompt again hits the blocks it received.
func TestTransferIsNotComputed(t *testing.T) {
	cfg := DefaultConfig()
	doc := tokens(3000, 5)
	prefill := New(cfg)
	v := newView(t, cfg.NumBlocks)
	prefill.Submit(request("p", doc, 40, 1, 0, 1))
	p := runUntilIdle(t, prefill, v)

	e := New(cfg)
	d := request("d", doc, 40, 20, 0, 1)
	d.Transfer = true
	e.Submit(d)
	dv := newView(t, cfg.NumBlocks)
	got := runUntilIdle(t, e, dv)
	st := e.Snapshot()
	blocks := 3039 / 16 // full blocks before the last known token
	if len(got) != 1 || st.PromptBySource[SourceExternal] != float64(blocks*16) || st.PrefixHits != 0 || st.TransferBlocks != float64(blocks) {
		t.Fatalf("results %d, external %v, hits %v, transferred blocks %v; want %d external tokens, no hits", len(got), st.PromptBySource[SourceExternal], st.PrefixHits, st.TransferBlocks, blocks*16)
	}
	if got[0].TTFT*4 > p[0].TTFT {
		t.Errorf("decode leg TTFT %v vs the prefill's %v: transferred blocks must not be computed", got[0].TTFT, p[0].TTFT)
	}
	again := request("d2", doc, 40, 20, e.next, 1)
	again.Transfer = true
	e.Submit(again)
	runUntilIdle(t, e, dv)
	if st2 := e.Snapshot(); st2.PrefixHits != float64(blocks*16) || st2.TransferBlocks != float64(blocks) {
		t.Errorf("the same prompt again: hits %v, transferred blocks %v; want its %d blocks hit, none transferred", st2.PrefixHits, st2.TransferBlocks, blocks)
	}
}
