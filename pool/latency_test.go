package pool

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// hg is a histogram page value: finite bounds and cumulative counts, the
// last count being +Inf (the count).
func hg(bounds []float64, cum ...float64) *collectors.Histogram {
	h := &collectors.Histogram{Count: cum[len(cum)-1]}
	for i, b := range bounds {
		h.Buckets = append(h.Buckets, collectors.Bucket{UpperBound: b, Count: cum[i]})
	}
	h.Buckets = append(h.Buckets, collectors.Bucket{UpperBound: math.Inf(1), Count: h.Count})
	return h
}

var layoutA = []float64{0.1, 0.5, 1}

// ttftPage is an engine page with a TTFT histogram.
func ttftPage(h *collectors.Histogram) em {
	e := counters("", 1, 0, 0)
	e.TTFT = h
	return e
}

// wantLatency checks p50/p95/p99 (ms) and the capped quantiles.
func wantLatency(t *testing.T, what string, l snapshot.Latency, p50, p95, p99 float64, capped ...string) {
	t.Helper()
	if !eqp(l.P50, f(p50)) || !eqp(l.P95, f(p95)) || !eqp(l.P99, f(p99)) || !slices.Equal(l.Capped, append([]string{}, capped...)) {
		t.Errorf("%s: p50 %v p95 %v p99 %v capped %v (reason %q); want %g %g %g capped %v",
			what, show(l.P50), show(l.P95), show(l.P99), l.Capped, l.Reason, p50, p95, p99, capped)
	}
}

// TestQuantilesHandComputed: two scrapes 10 s apart with known bucket
// increases, computed by hand as PromQL's histogram_quantile over the
// window would.
func TestQuantilesHandComputed(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), ttftPage(hg(layoutA, 2, 5, 8, 10))))
	if l := s.Snapshot(at(0)).Workers[0].TTFTMS; l.P95 != nil || l.Reason != "one scrape so far: no increase yet" || l.Observations != nil {
		t.Errorf("after one scrape: %+v", l)
	}
	s.Apply(scrape("w0", at(10), ttftPage(hg(layoutA, 12, 35, 48, 50))))
	// Increases: ≤0.1: 10, (0.1, 0.5]: 20, (0.5, 1]: 10, above 1: 0.
	// p50: rank 20 in (0.1, 0.5]: 0.1 + 0.4 × (20−10)/20 = 0.3 s.
	// p95: rank 38 in (0.5, 1]: 0.5 + 0.5 × (38−30)/10 = 0.9 s.
	// p99: rank 39.6: 0.5 + 0.5 × 9.6/10 = 0.98 s.
	snap := s.Snapshot(at(10))
	w := snap.Workers[0]
	wantLatency(t, "worker", w.TTFTMS, 300, 900, 980)
	wantLatency(t, "engine", w.Engines[0].TTFTMS, 300, 900, 980)
	wantLatency(t, "pool", snap.Pool.TTFTMS, 300, 900, 980)
	if !eqp(w.TTFTMS.Observations, f(40)) || w.TTFTMS.Reason != "" || w.TTFTMS.Merged != "" {
		t.Errorf("observations %v reason %q merged %q", show(w.TTFTMS.Observations), w.TTFTMS.Reason, w.TTFTMS.Merged)
	}
	// The other histograms were never on the page: unknown, and why.
	if w.ITLMS.P50 != nil || w.ITLMS.Reason != "no ITL histogram on its page" || snap.Pool.QueueMS.Reason == "" {
		t.Errorf("itl %+v, pool queue %+v", w.ITLMS, snap.Pool.QueueMS)
	}

	// A reset: the count went down, so the new counts (4 requests, all
	// within 0.1 s) are the increase since the restart. The window then
	// holds ≤0.1: 14, ≤0.5: 34, ≤1: 44, all: 44.
	// p50: rank 22 in (0.1, 0.5]: 0.1 + 0.4 × (22−14)/20 = 0.26 s.
	// p95: rank 41.8 in (0.5, 1]: 0.5 + 0.5 × (41.8−34)/10 = 0.89 s.
	// p99: rank 43.56: 0.5 + 0.5 × 9.56/10 = 0.978 s.
	s.Apply(scrape("w0", at(20), ttftPage(hg(layoutA, 4, 4, 4, 4))))
	wantLatency(t, "after a reset", s.Snapshot(at(20)).Workers[0].TTFTMS, 260, 890, 978)

	// Requests that land above the last finite bound: the rank falls in
	// +Inf and the value is that bound, capped (a floor). Increases this
	// step: ≤0.1: 6, ≤0.5: 6, ≤1: 8, all: 10 (2 above 1 s); with the
	// window's earlier 44: ≤0.1 20, ≤0.5 40, ≤1 52, all 54.
	// p50: rank 27 in (0.1, 0.5]: 0.1 + 0.4 × 7/20 = 0.24 s.
	// p95: rank 51.3 in (0.5, 1]: 0.5 + 0.5 × 11.3/12 ≈ 0.9708 s.
	// p99: rank 53.46 in +Inf: 1 s, capped.
	s.Apply(scrape("w0", at(30), ttftPage(hg(layoutA, 10, 10, 12, 14))))
	wantLatency(t, "a rank in +Inf", s.Snapshot(at(30)).Workers[0].TTFTMS, 240, 970.833, 1000, "p99") // ms to the µs

	// No request for longer than the window: null, with the reason; the
	// measured 0 stays a 0.
	s.Apply(scrape("w0", at(50), ttftPage(hg(layoutA, 10, 10, 12, 14))))
	s.Apply(scrape("w0", at(100), ttftPage(hg(layoutA, 10, 10, 12, 14))))
	l := s.Snapshot(at(100)).Workers[0].TTFTMS
	if l.P50 != nil || l.P95 != nil || l.P99 != nil || l.Reason != "no requests in the window" || !eqp(l.Observations, f(0)) {
		t.Errorf("idle window: %+v", l)
	}
}

// TestPoolLatencyReasonsReadWell: the pool's reason for a histogram no up
// worker exposes takes the article the name is read with ("a ITL
// histogram" was shown).
func TestPoolLatencyReasonsReadWell(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), ttftPage(hg(layoutA, 2, 5, 8, 10))))
	p := s.Snapshot(at(0)).Pool
	for what, c := range map[string]struct{ got, want string }{
		"itl":   {p.ITLMS.Reason, "no up worker exposes an ITL histogram"},
		"e2e":   {p.E2EMS.Reason, "no up worker exposes an e2e histogram"},
		"queue": {p.QueueMS.Reason, "no up worker exposes a queue time histogram"},
	} {
		if c.got != c.want {
			t.Errorf("pool %s reason %q, want %q", what, c.got, c.want)
		}
	}
}

// TestQuantileFirstBucketAndEdges: the first bucket's lower bound is 0,
// or the bound itself when it is ≤ 0 (SGLang's queue time starts at
// le="0.0"); a layout change starts the window over.
func TestQuantileFirstBucketAndEdges(t *testing.T) {
	cases := []struct {
		bounds, cum []float64
		q           float64
		want        float64
		capped      bool
	}{
		{[]float64{0.1, 0.5}, []float64{10, 10, 10}, 0.5, 0.05, false},    // 0 + 0.1 × 5/10
		{[]float64{0, 0.1, 0.5}, []float64{6, 10, 10, 10}, 0.5, 0, false}, // rank 5 among the 6 at exactly 0
		{[]float64{0, 0.1, 0.5}, []float64{0, 10, 10, 10}, 0.5, 0.05, false},
		{[]float64{0.1, 0.5}, []float64{0, 0, 4}, 0.5, 0.5, true},
		// A dip (a scrape race between bucket counters) is held monotonic:
		// rank 6 lies in (0.5, 1] counted from 4, not from 3.
		{[]float64{0.1, 0.5, 1}, []float64{4, 3, 8, 8}, 0.75, 0.75, false},
	}
	for _, c := range cases {
		v, capped := bucketQuantile(c.q, c.bounds, c.cum)
		if !near(v, c.want) || capped != c.capped {
			t.Errorf("quantile(%g, %v, %v) = %g capped %v; want %g %v", c.q, c.bounds, c.cum, v, capped, c.want, c.capped)
		}
	}

	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), ttftPage(hg(layoutA, 2, 5, 8, 10))))
	s.Apply(scrape("w0", at(5), ttftPage(hg(layoutA, 12, 35, 48, 50))))
	// The engine came back with other buckets: nothing counted in the
	// old layout can be added to the new one.
	other := []float64{0.25, 2.5}
	s.Apply(scrape("w0", at(10), ttftPage(hg(other, 1, 2, 2))))
	if l := s.Snapshot(at(10)).Workers[0].TTFTMS; l.P50 != nil || l.Reason != "one scrape so far: no increase yet" {
		t.Errorf("after a layout change: %+v", l)
	}
	s.Apply(scrape("w0", at(15), ttftPage(hg(other, 3, 4, 4))))
	// Increases ≤0.25: 2, ≤2.5: 2: p50 rank 1: 0.125 s.
	wantLatency(t, "new layout", s.Snapshot(at(15)).Workers[0].TTFTMS, 125, 237.5, 247.5)
}

// TestLatencyCountsOverflow: two workers whose counts are each near
// float64's top sum to +Inf in the pool. The pool's figure is unknown, says
// why, and the snapshot still encodes (JSON has no Inf); each worker keeps
// its own figure. Found by FuzzApply (seed c941a86a17082c37).
func TestLatencyCountsOverflow(t *testing.T) {
	s := newTestState("w0", "w1")
	for _, w := range []string{"w0", "w1"} {
		s.Apply(scrape(w, at(0), ttftPage(hg(layoutA, 0, 0, 0, 0))))
		s.Apply(scrape(w, at(10), ttftPage(hg(layoutA, 1e308, 1e308, 1e308, 1e308))))
	}
	snap := s.Snapshot(at(10))
	if _, err := json.Marshal(snap); err != nil {
		t.Fatalf("snapshot does not encode: %v", err)
	}
	pl := snap.Pool.TTFTMS
	if pl.Observations != nil || pl.P95 != nil || pl.Reason != "the bucket counts overflowed" {
		t.Errorf("pool: observations %v p95 %v reason %q", show(pl.Observations), show(pl.P95), pl.Reason)
	}
	if w := snap.Workers[0].TTFTMS; !eqp(w.Observations, f(1e308)) || w.P50 == nil {
		t.Errorf("worker: observations %v p50 %v reason %q", show(w.Observations), show(w.P50), w.Reason)
	}
}

// TestPoolMergesLayouts: the pool's quantile comes from the summed bucket
// increases of its up workers, on the bounds both layouts have; never
// from their quantiles. A down worker is not in it.
func TestPoolMergesLayouts(t *testing.T) {
	s := newTestState("a", "b", "c")
	layoutB := []float64{0.1, 0.25, 1, 2.5}
	s.Apply(scrape("a", at(0), ttftPage(hg(layoutA, 0, 0, 0, 0))))
	s.Apply(scrape("b", at(0), ttftPage(hg(layoutB, 0, 0, 0, 0, 0))))
	s.Apply(scrape("c", at(0), ttftPage(hg(layoutA, 0, 0, 0, 0))))
	s.Apply(scrape("a", at(10), ttftPage(hg(layoutA, 10, 30, 40, 40))))
	s.Apply(scrape("b", at(10), ttftPage(hg(layoutB, 0, 20, 30, 40, 40))))
	s.Apply(scrape("c", at(10), ttftPage(hg(layoutA, 0, 0, 0, 1000))))
	s.Apply(failedScrape("c", at(11), "timeout")) // c is down: its 1000 slow requests stay out
	snap := s.Snapshot(at(11))
	// a alone: p50 0.3 s (above). b alone: rank 20 in (0.1, 0.25]:
	// 0.1 + 0.15 × 20/20 = 0.25 s. Their mean (0.275 s) is not the pool's.
	wantLatency(t, "a", row(t, snap, "a").TTFTMS, 300, 900, 980)
	wantLatency(t, "b", row(t, snap, "b").TTFTMS, 250, 2200, 2440) // p95 rank 38 in (1, 2.5]: 1 + 1.5 × 8/10
	// Common bounds 0.1 and 1: a gives 10, 40, 40 and b 0, 30, 40: the
	// pool has 10, 70, 80. p50: rank 40 in (0.1, 1]: 0.1 + 0.9 × 30/60
	// = 0.55 s; p95 rank 76 and p99 rank 79.2 above 1 s: capped at 1 s.
	p := snap.Pool.TTFTMS
	wantLatency(t, "pool", p, 550, 1000, 1000, "p95", "p99")
	if p.Merged != "2 bucket layouts merged on 2 common bounds" || !eqp(p.Observations, f(80)) {
		t.Errorf("pool merged %q observations %v", p.Merged, show(p.Observations))
	}
	if l := row(t, snap, "c").TTFTMS; l.P50 != nil || l.Reason != "not up" {
		t.Errorf("down worker: %+v", l)
	}
}

// TestWorkerLevelHistograms: SGLang counts TTFT per server (no dp_rank)
// and queue time per rank: the worker reads each kind from where it is,
// and a rank says its TTFT is the worker's.
func TestWorkerLevelHistograms(t *testing.T) {
	s := newTestState("w0")
	page := func(t float64, ttft, q0, q1 *collectors.Histogram) *collectors.MetricsScrape {
		e0, e1 := counters("0", 1, 0, 0), counters("1", 1, 0, 0)
		e0.QueueTime, e1.QueueTime = q0, q1
		m := scrape("w0", at(t), e0, e1)
		m.Profile = "sglang"
		m.WorkerTotals = &collectors.EngineMetrics{TTFT: ttft}
		return m
	}
	qb := []float64{0, 0.1, 0.5}
	s.Apply(page(0, hg(layoutA, 0, 0, 0, 0), hg(qb, 0, 0, 0, 0), hg(qb, 0, 0, 0, 0)))
	s.Apply(page(10, hg(layoutA, 10, 30, 40, 40), hg(qb, 0, 10, 10, 10), hg(qb, 0, 0, 10, 10)))
	snap := s.Snapshot(at(10))
	w := row(t, snap, "w0")
	wantLatency(t, "worker ttft (worker-level)", w.TTFTMS, 300, 900, 980)
	// Queue: rank 0 has 10 in (0, 0.1], rank 1 10 in (0.1, 0.5]: the
	// worker's p50 is rank 10 of 20: 0.1 s.
	wantLatency(t, "worker queue (summed ranks)", w.QueueMS, 100, 460, 492)
	if l := w.Engines[0].TTFTMS; l.P50 != nil || l.Reason != "counted for the whole worker, not per engine" {
		t.Errorf("rank 0 ttft: %+v", l)
	}
	wantLatency(t, "rank 1 queue", w.Engines[1].QueueMS, 300, 480, 496)
}

// TestThroughputAcrossReset: token and request rates over the window,
// with a counter reset in it: the new value counts as the increase.
func TestThroughputAcrossReset(t *testing.T) {
	s := newTestState("w0", "w1")
	page := func(prompt, gen, done float64) em {
		e := counters("", 1, 0, 0)
		e.PromptTokens, e.GenerationTokens, e.RequestsFinished = f(prompt), f(gen), f(done)
		return e
	}
	s.Apply(scrape("w0", at(0), page(1000, 100, 10)))
	s.Apply(scrape("w1", at(0), page(0, 0, 0)))
	if w := s.Snapshot(at(0)).Workers[0]; w.TokensPerS.Prompt != nil || w.RequestsPerS != nil {
		t.Errorf("a rate from one scrape: %v %v", show(w.TokensPerS.Prompt), show(w.RequestsPerS))
	}
	s.Apply(scrape("w0", at(10), page(2000, 400, 20)))
	s.Apply(scrape("w0", at(20), page(500, 50, 5))) // restarted: 500, 50, 5 since
	s.Apply(scrape("w1", at(20), page(200, 20, 2)))
	snap := s.Snapshot(at(20))
	w0 := row(t, snap, "w0")
	// (1000 + 500) / 20 s, (300 + 50) / 20 s, (10 + 5) / 20 s.
	if !eqp(w0.TokensPerS.Prompt, f(75)) || !eqp(w0.TokensPerS.Generation, f(17.5)) || !eqp(w0.RequestsPerS, f(0.75)) {
		t.Errorf("w0: prompt %v gen %v req %v", show(w0.TokensPerS.Prompt), show(w0.TokensPerS.Generation), show(w0.RequestsPerS))
	}
	if e := w0.Engines[0]; !eqp(e.TokensPerS.Prompt, f(75)) || !eqp(e.RequestsPerS, f(0.75)) {
		t.Errorf("engine: %v %v", show(e.TokensPerS.Prompt), show(e.RequestsPerS))
	}
	// The pool sums the workers' rates: w1 adds 200/20, 20/20, 2/20.
	if p := snap.Pool; !eqp(p.TokensPerS.Prompt, f(85)) || !eqp(p.TokensPerS.Generation, f(18.5)) || !eqp(p.RequestsPerS, f(0.85)) {
		t.Errorf("pool: %v %v %v", show(p.TokensPerS.Prompt), show(p.TokensPerS.Generation), show(p.RequestsPerS))
	}
}

// TestLatencyJSON: the contract's keys, milliseconds as numbers, null
// when unknown.
func TestLatencyJSON(t *testing.T) {
	s := newTestState("w0")
	s.Apply(scrape("w0", at(0), ttftPage(hg(layoutA, 0, 0, 0, 0))))
	s.Apply(scrape("w0", at(10), ttftPage(hg(layoutA, 10, 30, 40, 40))))
	b, err := json.Marshal(s.Snapshot(at(10)))
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{
		// merged and reason are stable keys (README), there when they do
		// not apply: one bucket layout, every value known.
		`"ttft_ms":{"p50":300,"p95":900,"p99":980,"capped":[],"observations":40,"covered_s":10,"merged":"","reason":""}`,
		`"itl_ms":{"p50":null,"p95":null,"p99":null,"capped":[],"observations":null,"covered_s":0,"merged":"","reason":"no ITL histogram on its page"}`,
		`"tokens_per_s":{"prompt":null,"generation":null},"requests_per_s":null`,
		`"recompute":{"tokens_per_s":null,"share":null,"requests":0,"not_measurable":0,"measured":0}`,
		`"ttft_p95_ms":[{"t":"2026-09-05T14:00:10Z","v":900}]`,
	} {
		if !strings.Contains(js, want) {
			t.Errorf("JSON lacks %s\n%s", want, js)
		}
	}
	// pool, worker, engine; queue_ms also in the pool's request classes
	// (rest, overheating_workers, other_workers: hotrest.go).
	for key, n := range map[string]int{`"queue_ms"`: 6, `"e2e_ms"`: 3} {
		if strings.Count(js, key) != n {
			t.Errorf("%s appears %d times, want %d", key, strings.Count(js, key), n)
		}
	}
}

// TestOverheatQuotesTTFT: the overheating alert puts the worker's TTFT
// p95 beside the pool's.
func TestOverheatQuotesTTFT(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3", "w4")
	queues := []float64{19, 2, 3, 3, 4}
	slow := hg(layoutA, 0, 0, 10, 20) // p95 above 1 s: capped
	fast := hg(layoutA, 10, 10, 10, 10)
	for i, q := range queues {
		e := counters("", q, 0, 0)
		e.TTFT = hg(layoutA, 0, 0, 0, 0)
		s.Apply(scrape(fmt.Sprint("w", i), at(0), e))
		e.TTFT = fast
		if i == 0 {
			e.TTFT = slow
		}
		s.Apply(scrape(fmt.Sprint("w", i), at(10), e))
	}
	for i := 0; i < 40; i++ { // past the rule's floor of 20 requests on the prefix
		w := "w0"
		if i%5 == 4 {
			w = fmt.Sprint("w", 1+i%4)
		}
		s.Apply(&collectors.Decision{RequestID: fmt.Sprint("r", i), Chosen: w, Prefix: "9f2c000000000083", At: at(10)})
	}
	snap := s.Snapshot(at(10))
	a := snap.Alerts[0]
	// The pool: 40 fast, 10 in (0.5, 1], 10 above: p95 rank 57 above 1 s.
	if a.Kind != "overheating" || !strings.HasSuffix(a.Text, "; TTFT p95 ≥1.0 s vs pool ≥1.0 s") {
		t.Fatalf("alert %q", a.Text)
	}
	// 400 more fast requests on w1: the pool's p95 (rank 437 of 460) is
	// in the first bucket, 0.1 × 437/440 s, far below w0's.
	e := counters("", 2, 0, 0)
	e.TTFT = hg(layoutA, 410, 410, 410, 410)
	s.Apply(scrape("w1", at(11), e))
	if a := s.Snapshot(at(11)).Alerts[0]; !strings.HasSuffix(a.Text, "; TTFT p95 ≥1.0 s vs pool 99 ms") {
		t.Fatalf("alert %q", a.Text)
	}
}
