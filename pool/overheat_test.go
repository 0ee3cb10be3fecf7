package pool

import (
	"fmt"
	"testing"
)

func TestLoadSkew(t *testing.T) {
	cases := []struct {
		q           []float64
		maxOverMean *float64
		gini        *float64
	}{
		{nil, nil, nil},
		{[]float64{5}, nil, nil},
		{[]float64{0, 0}, nil, f(0)}, // mean 0: max/mean unknown, all equal: Gini 0
		{[]float64{3, 3, 3, 3}, f(1), f(0)},
		{[]float64{0, 0, 0, 4}, f(4), f(0.75)},                // Σ|xi−xj| = 24 over 2·4²·1
		{[]float64{1, 2, 3, 4}, f(1.6), f(0.25)},              // 20 / (2·16·2.5)
		{[]float64{19, 3, 2, 4}, f(19.0 / 7), f(104.0 / 224)}, // Σ|xi−xj| = 104 over 2·4²·7
	}
	for _, c := range cases {
		sk := loadSkew(c.q)
		if !eqp(sk.MaxOverMean, c.maxOverMean) || !eqp(sk.Gini, c.gini) {
			t.Errorf("skew(%v) = %v %v; want %v %v", c.q, show(sk.MaxOverMean), show(sk.Gini), show(c.maxOverMean), show(c.gini))
		}
	}
}

func TestPoolSkewOverUpWorkers(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3")
	for i, q := range []float64{1, 2, 3, 4} {
		s.Apply(scrape(fmt.Sprint("w", i), at(0), counters("", q, 0, 0)))
	}
	s.Apply(scrape("w4", at(0))) // discovered, no engine: no queue
	s.Apply(failedScrape("w3", at(1), "timeout"))
	snap := s.Snapshot(at(1))
	// w3 is down: skew of 1, 2, 3 → max/mean 1.5, Gini 8/(2·9·2) = 2/9.
	if !eqp(snap.Pool.LoadSkew.MaxOverMean, f(1.5)) || !eqp(snap.Pool.LoadSkew.Gini, f(2.0/9)) {
		t.Fatalf("skew %v %v", show(snap.Pool.LoadSkew.MaxOverMean), show(snap.Pool.LoadSkew.Gini))
	}
}

// TestOverheatingRule switches each condition of the rule on and off at
// its threshold. Defaults: hot share 0.10, worker share 0.60, queue ≥ 2 ×
// median and ≥ 4.
func TestOverheatingRule(t *testing.T) {
	cases := []struct {
		name       string
		total      int        // decisions in all
		onPrefix   int        // of which name the prefix
		onW0       int        // of which went to w0
		queues     [5]float64 // w0..w4
		w0Down     bool
		overheated bool
	}{
		{"all conditions met", 20, 10, 8, [5]float64{19, 2, 3, 3, 4}, false, true},
		{"prefix share just below hot", 200, 19, 19, [5]float64{19, 2, 3, 3, 4}, false, false},
		{"prefix share at hot", 200, 20, 20, [5]float64{19, 2, 3, 3, 4}, false, true},
		{"worker share just below", 100, 100, 59, [5]float64{19, 2, 3, 3, 4}, false, false},
		{"worker share at threshold", 10, 10, 6, [5]float64{19, 2, 3, 3, 4}, false, true},
		{"queue just below 2× median", 20, 10, 8, [5]float64{5.9, 2, 3, 3, 4}, false, false},
		{"queue at 2× median", 20, 10, 8, [5]float64{6, 2, 3, 3, 4}, false, true},
		{"queue below the minimum", 20, 10, 8, [5]float64{3.9, 0, 0, 1, 1}, false, false},
		{"queue at the minimum", 20, 10, 8, [5]float64{4, 0, 0, 1, 1}, false, true},
		{"a down worker does not overheat", 20, 10, 8, [5]float64{19, 2, 3, 3, 4}, true, false},
	}
	const prefix = "9f2c000000000083"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0", "w1", "w2", "w3", "w4")
			for i, q := range c.queues {
				s.Apply(scrape(fmt.Sprint("w", i), at(0), counters("", q, 0, 0)))
			}
			if c.w0Down {
				s.Apply(failedScrape("w0", at(0), "timeout"))
			}
			// The prefix is 131 blocks deep on w0: 2 096 tokens.
			chain := make([]uint64, 131)
			for i := range chain {
				chain[i] = 0x9f2c000000000000 + uint64(i) + 3
			}
			chain[130] = 0x9f2c000000000083
			s.Apply(batch("w0", 0, 0, at(0), stored(0, false, chain...)))
			for i := 0; i < c.total; i++ {
				p, w := "", "w1"
				if i < c.onPrefix {
					p = prefix
					if i < c.onW0 {
						w = "w0"
					}
				}
				s.Apply(decide(fmt.Sprint("r", i), w, p, at(0)))
			}
			snap := s.Snapshot(at(0))
			w0 := row(t, snap, "w0")
			p := snap.Prefixes[0]
			got := p.Overheating != nil && *p.Overheating == "w0"
			if got != c.overheated || w0.Overheating != c.overheated || (w0.State == "overheating") != c.overheated {
				t.Fatalf("prefix.overheating %v, worker %v state %q; want %v (prefix %+v)", p.Overheating, w0.Overheating, w0.State, c.overheated, p)
			}
			if !c.overheated {
				for _, a := range snap.Alerts {
					if a.Kind == "overheating" {
						t.Fatalf("unexpected alert %q", a.Text)
					}
				}
				return
			}
			share := float64(c.onW0) / float64(c.onPrefix)
			if !eqp(w0.HotShare, &share) || snap.Alerts[0].Kind != "overheating" || snap.Alerts[0].Severity != "critical" {
				t.Fatalf("hot share %v, alerts %+v", show(w0.HotShare), snap.Alerts)
			}
			if c.name == "all conditions met" {
				want := "w0 overheating: takes 80% of prefix 9f2c… (2.1k tok, 50% of traffic); queue 19 vs pool median 3"
				if snap.Alerts[0].Text != want {
					t.Fatalf("alert %q\nwant  %q", snap.Alerts[0].Text, want)
				}
				if w1 := row(t, snap, "w1"); !eqp(w1.HotShare, f(0.2)) || w1.Overheating {
					t.Fatalf("w1 hot share %v overheating %v", show(w1.HotShare), w1.Overheating)
				}
			}
		})
	}
}

// The events path overheats too, and the pool median ignores down workers.
func TestOverheatingFromEvents(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	for i, q := range []float64{12, 1, 2} {
		s.Apply(scrape(fmt.Sprint("w", i), at(0), counters("", q, 0, 0)))
	}
	s.Apply(batch("w0", 0, 0, at(-5), stored(0, false, 0xa, 0xb)))
	for i := 0; i < 9; i++ {
		s.Apply(batch("w0", 0, uint64(i+1), at(1), stored(0xb, true, uint64(0x100+i))))
	}
	s.Apply(batch("w1", 0, 0, at(1), stored(0xb, true, 0x200)))
	snap := s.Snapshot(at(1))
	if p := snap.Prefixes[0]; p.Overheating == nil || *p.Overheating != "w0" || p.Source != "events" {
		t.Fatalf("prefix = %+v", p)
	}
	if w := row(t, snap, "w0"); w.State != "overheating" || !eqp(w.HotShare, f(0.9)) {
		t.Fatalf("w0 state %q hot %v", w.State, show(w.HotShare))
	}
}

// HOT means one thing in every row: the share of the pool's hottest
// prefix. A worker overheating on another prefix says so in
// OverheatPrefix / OverheatShare, not by changing what its HOT means.
func TestHotShareIsOneMeaning(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3")
	for i, q := range []float64{2, 2, 3, 20} {
		s.Apply(scrape(fmt.Sprint("w", i), at(0), counters("", q, 0, 0)))
	}
	n := 0
	send := func(k int, w, p string) {
		for i := 0; i < k; i++ {
			s.Apply(decide(fmt.Sprint("r", n), w, p, at(0)))
			n++
		}
	}
	// Prefix A (hottest, 60%): spread over w0..w2. Prefix B (40%): 90% on w3.
	send(20, "w0", "00000000000000aa")
	send(20, "w1", "00000000000000aa")
	send(20, "w2", "00000000000000aa")
	send(36, "w3", "00000000000000bb")
	send(4, "w0", "00000000000000bb")
	snap := s.Snapshot(at(0))
	if snap.Prefixes[0].ID != "00000000000000aa" {
		t.Fatalf("hottest = %+v", snap.Prefixes[0])
	}
	w3 := row(t, snap, "w3")
	if !w3.Overheating || !eqp(w3.HotShare, f(0)) || w3.OverheatPrefix == nil || *w3.OverheatPrefix != "00000000000000bb" || !eqp(w3.OverheatShare, f(0.9)) {
		t.Fatalf("w3 hot %v overheating %v on %v share %v; want HOT 0%% of the hottest, overheating 90%% of bb",
			show(w3.HotShare), w3.Overheating, w3.OverheatPrefix, show(w3.OverheatShare))
	}
	if w0 := row(t, snap, "w0"); !eqp(w0.HotShare, f(1.0/3)) || w0.OverheatPrefix != nil || w0.OverheatShare != nil {
		t.Fatalf("w0 hot %v overheat %v %v", show(w0.HotShare), w0.OverheatPrefix, show(w0.OverheatShare))
	}
}
