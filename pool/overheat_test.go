package pool

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/snapshot"
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
			// Twice each count: the rule's floor is 20 requests on the
			// prefix; the shares are the case's.
			for i := 0; i < 2*c.total; i++ {
				p, w := "", "w1"
				if i < 2*c.onPrefix {
					p = prefix
					if i < 2*c.onW0 {
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
				// Still overheating 5 s later: the alert is as old as that,
				// not stamped anew at each refresh.
				s.Apply(scrape("w0", at(5), counters("", 19, 0, 0)))
				for i := 0; i < 20; i++ {
					s.Apply(decide(fmt.Sprint("later", i), "w0", prefix, at(5)))
				}
				later := s.Snapshot(at(5))
				if a := later.Alerts[0]; a.Kind != "overheating" || !a.Since.Equal(at(0)) {
					t.Fatalf("5 s later the alert %q is since %v, want since %v", a.Text, a.Since, at(0))
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
	for i := 0; i < 18; i++ { // past the rule's floor: 20 stores under the prefix
		s.Apply(batch("w0", 0, uint64(i+1), at(1), stored(0xb, true, uint64(0x100+i))))
	}
	s.Apply(batch("w1", 0, 0, at(1), stored(0xb, true, 0x200)))
	s.Apply(batch("w1", 0, 1, at(1), stored(0xb, true, 0x201)))
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

// TestOverheatingOwners: a hot prefix's owners are the fewest workers that
// together take ≥ 60% of its traffic; when they are at most max(1, ⌊up/3⌋),
// each owner whose queue passes overheats. The prefix takes 75% of the
// traffic in every case (60 of 80 decisions).
func TestOverheatingOwners(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		onW     map[string]int     // the prefix's 60 decisions, per worker
		queues  map[string]float64 // others queue 0
		down    string
		want    []string // overheating workers, heaviest first
		alert   string
	}{
		{name: "one owner at 60%", workers: 6, onW: map[string]int{"w0": 36, "w1": 24},
			queues: map[string]float64{"w0": 20}, want: []string{"w0"},
			alert: "w0 overheating: takes 60% of prefix 9f2c… (2.1k tok, 75% of traffic); queue 20 vs pool median 0"},
		{name: "two owners 50/50 in 6 workers, both queueing", workers: 6, onW: map[string]int{"w0": 30, "w2": 30},
			queues: map[string]float64{"w0": 24, "w2": 16}, want: []string{"w0", "w2"},
			alert: "w0, w2 overheating: take 100% of prefix 9f2c… (2.1k tok, 75% of traffic); queues 24, 16 vs pool median 0"},
		{name: "two owners 51/49 in 4 workers: a third of 4 is 1 owner", workers: 4, onW: map[string]int{"w0": 31, "w2": 29},
			queues: map[string]float64{"w0": 24, "w2": 16}},
		{name: "two owners, only one queueing", workers: 6, onW: map[string]int{"w0": 30, "w2": 30},
			queues: map[string]float64{"w0": 24, "w2": 3.9}, want: []string{"w0"},
			alert: "w0 overheating: takes 50% of prefix 9f2c… (2.1k tok, 75% of traffic); queue 24 vs pool median 0"},
		{name: "owner below 60% with a light second owner", workers: 6, onW: map[string]int{"w0": 35, "w1": 25},
			queues: map[string]float64{"w0": 20}, want: []string{"w0"}},
		{name: "two owners, second just below 2× the median", workers: 6, onW: map[string]int{"w0": 30, "w2": 30},
			queues: map[string]float64{"w0": 24, "w2": 9.9, "w1": 5, "w3": 5, "w4": 5, "w5": 5}, want: []string{"w0"}},
		{name: "two owners, second at 2× the median", workers: 6, onW: map[string]int{"w0": 30, "w2": 30},
			queues: map[string]float64{"w0": 24, "w2": 10, "w1": 5, "w3": 5, "w4": 5, "w5": 5}, want: []string{"w0", "w2"}},
		{name: "three owners 33% in 6 workers: two reach 60%, the third ties with them", workers: 6,
			onW: map[string]int{"w0": 20, "w2": 20, "w4": 20}, queues: map[string]float64{"w0": 30, "w2": 30, "w4": 30},
			want:  []string{"w0", "w2", "w4"},
			alert: "w0, w2, w4 overheating: take 100% of prefix 9f2c… (2.1k tok, 75% of traffic); queues 30, 30, 30 vs pool median 15"},
		{name: "three owners 40/30/30 in 6 workers: the tie counts the third in", workers: 6,
			onW: map[string]int{"w0": 24, "w2": 18, "w4": 18}, queues: map[string]float64{"w0": 30, "w2": 30, "w4": 30},
			want: []string{"w0", "w2", "w4"}},
		{name: "four owners 25% in 6 workers: three needed for 60%, more than 2", workers: 6,
			onW: map[string]int{"w0": 15, "w1": 15, "w2": 15, "w3": 15}, queues: map[string]float64{"w0": 30, "w1": 30, "w2": 30, "w3": 30}},
		{name: "two owners 50/50 in 6 workers, queues below the minimum", workers: 6, onW: map[string]int{"w0": 30, "w2": 30},
			queues: map[string]float64{"w0": 3.9, "w2": 3.9}},
		{name: "three owners 33% in 9 workers", workers: 9, onW: map[string]int{"w0": 20, "w2": 20, "w4": 20},
			queues: map[string]float64{"w0": 30, "w2": 28, "w4": 26}, want: []string{"w0", "w2", "w4"},
			alert: "w0, w2, w4 overheating: take 100% of prefix 9f2c… (2.1k tok, 75% of traffic); queues 30, 28, 26 vs pool median 0"},
		{name: "a down owner counts as an owner but does not overheat", workers: 9, onW: map[string]int{"w0": 30, "w2": 30},
			queues: map[string]float64{"w0": 24, "w2": 16}, down: "w2", want: []string{"w0"}},
		{name: "16 workers: one heavy owner and three light ones reach 60%", workers: 16,
			onW:    map[string]int{"w1": 27, "w3": 3, "w5": 3, "w7": 3, "w9": 3, "w11": 3, "w13": 3, "w15": 3, "w0": 3, "w2": 3, "w4": 3, "w6": 3},
			queues: map[string]float64{"w1": 42}, want: []string{"w1"}},
	}
	const prefix = "9f2c000000000083"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var names []string
			for i := 0; i < c.workers; i++ {
				names = append(names, fmt.Sprint("w", i))
			}
			s := newTestState(names...)
			for _, n := range names {
				s.Apply(scrape(n, at(0), counters("", c.queues[n], 0, 0)))
			}
			if c.down != "" {
				s.Apply(failedScrape(c.down, at(0), "timeout"))
			}
			// The prefix is 131 blocks deep on w0: 2 096 tokens.
			chain := make([]uint64, 131)
			for i := range chain {
				chain[i] = 0x9f2c000000000000 + uint64(i) + 3
			}
			s.Apply(batch("w0", 0, 0, at(0), stored(0, false, chain...)))
			n := 0
			// Heaviest worker first, so that ties keep the workers' order.
			for _, w := range names {
				for k := 0; k < c.onW[w]; k++ {
					s.Apply(decide(fmt.Sprint("r", n), w, prefix, at(0)))
					n++
				}
			}
			for ; n < 80; n++ {
				s.Apply(decide(fmt.Sprint("r", n), names[len(names)-1], "", at(0)))
			}
			snap := s.Snapshot(at(0))
			p := snap.Prefixes[0]
			if p.ID != prefix || !near(p.Share, 0.75) {
				t.Fatalf("prefix %s share %v, want %s at 75%%", p.ID, p.Share, prefix)
			}
			got := p.OverheatingWorkers
			if fmt.Sprint(got) != fmt.Sprint(append([]string{}, c.want...)) {
				t.Fatalf("overheating workers %v, want %v (prefix workers %v)", got, c.want, p.Workers)
			}
			if len(c.want) == 0 {
				if p.Overheating != nil {
					t.Errorf("prefix.overheating = %s with no overheating worker", *p.Overheating)
				}
			} else if p.Overheating == nil || *p.Overheating != c.want[0] {
				t.Errorf("prefix.overheating = %v, want the heaviest %s", p.Overheating, c.want[0])
			}
			over := map[string]bool{}
			for _, w := range c.want {
				over[w] = true
			}
			for _, name := range names {
				w := row(t, snap, name)
				if w.Overheating != over[name] || (w.State == "overheating") != over[name] {
					t.Errorf("%s overheating %v state %q, want overheating %v", name, w.Overheating, w.State, over[name])
				}
				if over[name] && (w.OverheatPrefix == nil || *w.OverheatPrefix != prefix || !eqp(w.OverheatShare, f(float64(c.onW[name])/60))) {
					t.Errorf("%s overheats on %v with share %v, want %s at %d/60", name, w.OverheatPrefix, show(w.OverheatShare), prefix, c.onW[name])
				}
			}
			var alerts []string
			for _, a := range snap.Alerts {
				if a.Kind == "overheating" {
					alerts = append(alerts, a.Text)
					if a.Severity != "critical" || a.Subject != strings.Join(c.want, ", ") {
						t.Errorf("alert %s subject %q, want critical about %v", a.Severity, a.Subject, c.want)
					}
				}
			}
			if len(alerts) != min(len(c.want), 1) {
				t.Fatalf("overheating alerts %q, want one line for %v", alerts, c.want)
			}
			if c.alert != "" && alerts[0] != c.alert {
				t.Errorf("alert %q\nwant  %q", alerts[0], c.alert)
			}
			if len(alerts) > 0 && snap.Alerts[0].Kind != "overheating" {
				t.Errorf("the overheating alert is not the first line: %+v", snap.Alerts)
			}
		})
	}
}

// TestOwners: the set itself, on decayed counts whose sums are inexact.
func TestOwners(t *testing.T) {
	w := []*worker{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}}
	cases := []struct {
		n       []float64 // per worker, heaviest first
		k, with int       // fewest workers for 60%; owners with the ties
	}{
		{[]float64{0.6, 0.4}, 1, 1},
		{[]float64{0.3, 0.3, 0.2, 0.2}, 2, 2}, // 0.3 + 0.3 is 60%, float rounding or not
		{[]float64{0.1 * 3, 0.1 * 3, 0.1 * 2, 0.1 * 2}, 2, 2},
		{[]float64{0.4, 0.3, 0.3}, 2, 3}, // the third ties with the second
		{[]float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, 2, 3},
		{[]float64{0.59, 0.39, 0.01, 0.01}, 2, 2},
		{[]float64{0.25, 0.25, 0.25, 0.25}, 3, 4},
	}
	for _, c := range cases {
		var ws []wcount
		total := 0.0
		for i, n := range c.n {
			ws = append(ws, wcount{w[i], n * 7})
			total += n * 7
		}
		if k, set := owners(ws, total, 0.6); k != c.k || len(set) != c.with {
			t.Errorf("owners(%v) = %d, %d with ties; want %d, %d", c.n, k, len(set), c.k, c.with)
		}
	}
	// Traffic to workers kvtop cannot name counts in the total, owns nothing.
	if k, set := owners([]wcount{{nil, 5}, {w[0], 4}, {w[1], 1}}, 10, 0.6); k != 0 || set != nil {
		t.Errorf("owners with 50%% unnamed = %d %v, want none", k, set)
	}
	if got := snapshot.MaxOwners(0); got != 1 || snapshot.MaxOwners(5) != 1 || snapshot.MaxOwners(6) != 2 || snapshot.MaxOwners(16) != 5 {
		t.Errorf("MaxOwners 0,5,6,16 = %d %d %d %d", got, snapshot.MaxOwners(5), snapshot.MaxOwners(6), snapshot.MaxOwners(16))
	}
}
