package pool

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// request applies one joined request: its decision (naming prefix, "" for
// none) at sec and its outcome right after.
func request(s *State, id, chosen, prefix string, sec float64, ttft, queue *float64) {
	s.Apply(&collectors.Decision{RequestID: id, Chosen: chosen, Prefix: prefix, Source: "log", Format: "kvtop", At: at(sec), TS: at(sec)})
	s.Apply(&collectors.Outcome{RequestID: id, Worker: chosen, HTTPStatus: 200, TTFTMS: ttft, QueueMS: queue,
		Done: bp(true), Source: "log", Format: "kvtop", At: at(sec + 0.1), TS: at(sec + 0.1)})
}

func wantQ(t *testing.T, what string, q snapshot.RequestQuantiles, n int, p50, p95, p99 float64) {
	t.Helper()
	if q.N != n || !eqp(q.P50, &p50) || !eqp(q.P95, &p95) || !eqp(q.P99, &p99) || q.Reason != "" {
		t.Errorf("%s = {p50 %v p95 %v p99 %v n %d %q}, want {%g %g %g n %d}", what, show(q.P50), show(q.P95), show(q.P99), q.N, q.Reason, p50, p95, p99, n)
	}
}

// TestHotVersusRest: hand-built decisions and outcomes with known
// quantiles per class. Nearest rank: the p-th percentile of n samples is
// the ⌈p·n/100⌉-th smallest.
func TestHotVersusRest(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3")
	// w0 overheats: its queue is far above the others'.
	for _, w := range []string{"w0", "w1", "w2", "w3"} {
		q := 1.0
		if w == "w0" {
			q = 20
		}
		s.Apply(scrape(w, at(0), em{Engine: "0", Waiting: f(q), Running: f(4), KVUsage: f(0.5)}))
	}
	// The hot document: block 0x107e5a9c, and one under it.
	const hot, under, cool = "00000000107e5a9c", "00000000107e5a9d", "00000000bbbb0000"
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 0x107e5a9c, 0x107e5a9d)))
	// 28 requests name the hot prefix: TTFT 10, 20, … 280 ms, queue 1…28.
	n := 0
	id := func() string { n++; return fmt.Sprintf("r-%03d", n) }
	for i := 1; i <= 28; i++ {
		request(s, id(), "w0", hot, 1+float64(i)/10, f(float64(10*i)), f(float64(i)))
	}
	s.Snapshot(at(5)) // the hot prefix is listed from now on
	// Two name the block under it: 290 and 300 ms, queue 29, 30.
	request(s, id(), "w0", under, 6, f(290), f(29))
	request(s, id(), "w0", under, 6.1, f(300), f(30))
	// The rest: 25 without a prefix (TTFT 1010 … 1250 ms, 19 with a
	// queue time), 5 on a prefix too cold to be hot (2000 … 2400 ms).
	for i := 1; i <= 25; i++ {
		var q *float64
		if i <= 19 {
			q = f(float64(500 + i))
		}
		request(s, id(), "w1", "", 7+float64(i)/10, f(float64(1000+10*i)), q)
	}
	for i := 0; i < 5; i++ {
		request(s, id(), "w2", cool, 10+float64(i)/10, f(float64(2000+100*i)), nil)
	}
	// Not in any class: history read at start, an outcome whose decision
	// is unknown, a request that ended before the window.
	s.Apply(&collectors.Decision{RequestID: "old", Chosen: "w1", At: at(11), TS: at(11), Backfill: true})
	s.Apply(&collectors.Outcome{RequestID: "old", Worker: "w1", HTTPStatus: 200, TTFTMS: f(99999), At: at(11), Backfill: true})
	s.Apply(&collectors.Outcome{RequestID: "orphan", Worker: "w1", HTTPStatus: 200, TTFTMS: f(99999), At: at(11)})
	snap := s.Snapshot(at(12))

	var hp, cp *snapshot.Prefix
	for i := range snap.Prefixes {
		switch snap.Prefixes[i].ID {
		case hot:
			hp = &snap.Prefixes[i]
		case cool:
			cp = &snap.Prefixes[i]
		}
	}
	if hp == nil || cp == nil || hp.Share < 0.1 || cp.Share >= 0.1 {
		t.Fatalf("prefixes %+v: want %s hot and %s listed but cool", snap.Prefixes, hot, cool)
	}
	// Hot: 10 … 300 ms (n 30): p50 the 15th, p95 the 29th, p99 the 30th.
	wantQ(t, "hot ttft", hp.TTFTMS, 30, 150, 290, 300)
	wantQ(t, "hot queue", hp.QueueMS, 30, 15, 29, 30)
	// The cool prefix alone: 5 requests, below the 20 quantiles need.
	if q := cp.TTFTMS; q.N != 5 || q.P50 != nil || q.Reason != "5 requests in the window, fewer than 20" {
		t.Errorf("cool prefix ttft %+v", q)
	}
	// Rest: 1010 … 1250 (25) and 2000 … 2400 (5), n 30.
	wantQ(t, "rest ttft", snap.Pool.Rest.TTFTMS, 30, 1150, 2300, 2400)
	if q := snap.Pool.Rest.QueueMS; q.N != 19 || q.P95 != nil || q.Reason != "19 requests in the window, fewer than 20" {
		t.Errorf("rest queue %+v: 19 requests, null with the reason", q)
	}
	// On the overheating worker (w0, the hot stream) against the others.
	if w := row(t, snap, "w0"); !w.Overheating {
		t.Fatalf("w0 not overheating: %+v", w)
	}
	wantQ(t, "overheating workers ttft", snap.Pool.OverheatingWorkers.TTFTMS, 30, 150, 290, 300)
	wantQ(t, "other workers ttft", snap.Pool.OtherWorkers.TTFTMS, 30, 1150, 2300, 2400)
	// The overheating alert says it in words.
	a := alertOf(snap, snapshot.AlertOverheating)
	if a == nil || !strings.HasSuffix(a.Text, "; requests away from 0000…: TTFT p95 2.3 s vs 290 ms on the hot stream") {
		t.Fatalf("overheating alert %+v", a)
	}
	// A window later, nothing is left: null with the reason.
	later := s.Snapshot(at(100))
	if q := later.Pool.Rest.TTFTMS; q.N != 0 || q.P50 != nil || q.Reason == "" {
		t.Errorf("a window later: rest %+v, want n 0 and a reason", q)
	}
	if q := later.Pool.OverheatingWorkers.TTFTMS; q.Reason != "no worker is overheating" && !row(t, later, "w0").Overheating {
		t.Errorf("overheating workers %+v", q)
	}
}

// TestNearestRank: the definition, by hand.
func TestNearestRank(t *testing.T) {
	v := func() []float64 { return []float64{15, 20, 35, 40, 50} }
	for _, c := range []struct {
		p    int
		want float64
	}{{5, 15}, {30, 20}, {40, 20}, {50, 35}, {95, 50}, {100, 50}} {
		if got := nearestRank(v(), c.p); got != c.want {
			t.Errorf("p%d of 15 20 35 40 50 = %g, want %g", c.p, got, c.want)
		}
	}
	// 20 samples 1…20 (shuffled): p50 10, p95 19, p99 20.
	x := []float64{7, 19, 3, 11, 20, 1, 14, 5, 17, 9, 2, 16, 12, 8, 4, 18, 6, 13, 10, 15}
	q := sampleQuantiles(x, "none")
	if *q.P50 != 10 || *q.P95 != 19 || *q.P99 != 20 || q.N != 20 {
		t.Errorf("1…20: %+v (p50 %v p95 %v p99 %v)", q, show(q.P50), show(q.P95), show(q.P99))
	}
}
