package pool

import (
	"testing"
	"time"
)

func TestCounterWindow(t *testing.T) {
	type sample struct {
		t float64
		v float64
	}
	ramp := func(from, to, step int, per float64) []sample {
		var out []sample
		for s := from; s <= to; s += step {
			out = append(out, sample{float64(s), per * float64(s)})
		}
		return out
	}
	cases := []struct {
		name        string
		samples     []sample
		now         float64
		wantDelta   float64
		wantCovered time.Duration
		wantResets  int
	}{
		{"full window", ramp(0, 60, 1, 10), 60, 600, time.Minute, 0},
		{"only the window counts, not uptime", ramp(0, 180, 1, 10), 180, 600, time.Minute, 0},
		{"partial coverage after start", ramp(30, 60, 1, 10), 60, 300, 30 * time.Second, 0},
		{"reset counts the new value as the increase",
			[]sample{{0, 100}, {10, 110}, {20, 120}, {30, 5}, {40, 15}}, 40, 35, 40 * time.Second, 1},
		{"two resets", []sample{{0, 50}, {10, 60}, {20, 0}, {30, 7}, {40, 2}}, 40, 19, 40 * time.Second, 2},
		{"nothing measured inside the window", ramp(0, 10, 1, 10), 100, 0, 0, 0},
		{"one sample covers nothing", []sample{{5, 42}}, 10, 0, 0, 0},
		{"zero increase is a measured 0", []sample{{0, 7}, {30, 7}, {60, 7}}, 60, 0, time.Minute, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w counterWindow
			resets := 0
			for _, s := range c.samples {
				if w.add(at(s.t), s.v, time.Minute) {
					resets++
				}
			}
			d, cov, ok := w.delta(at(c.now), time.Minute)
			if !ok || !near(d, c.wantDelta) || cov != c.wantCovered || resets != c.wantResets {
				t.Fatalf("delta=%v covered=%v ok=%v resets=%d; want %v %v true %d", d, cov, ok, resets, c.wantDelta, c.wantCovered, c.wantResets)
			}
		})
	}
}

func TestCounterWindowMemoryFollowsWindow(t *testing.T) {
	var w counterWindow
	for s := 0; s < 10000; s++ {
		w.add(at(float64(s)), float64(s), time.Minute)
	}
	if n := len(w.t); n > 62 {
		t.Fatalf("kept %d samples for a 60 s window at 1 s", n)
	}
	var fast counterWindow
	for i := 0; i < 3*maxSamples; i++ {
		fast.add(t0.Add(time.Duration(i)*time.Millisecond), float64(i), time.Hour)
	}
	if n := len(fast.t); n > maxSamples {
		t.Fatalf("kept %d samples, bound is %d", n, maxSamples)
	}
}

func TestBuckets(t *testing.T) {
	b := newBuckets(time.Minute)
	for s := 0; s < 120; s++ {
		b.add(at(float64(s)), 1, 2)
	}
	a, bb, cov := b.sum(at(119.5), time.Minute)
	// Buckets are 1 s wide: the 60 s window ending at 119.5 holds the
	// buckets of seconds 60..119.
	if a != 60 || bb != 120 || cov != time.Minute {
		t.Fatalf("sum = %v %v covered %v; want 60 120 1m", a, bb, cov)
	}
	a, _, cov = b.sum(at(1000), time.Minute)
	if a != 0 || cov != time.Minute {
		t.Fatalf("long after: %v covered %v; want 0 over the full window", a, cov)
	}
	fresh := newBuckets(time.Minute)
	fresh.add(at(10), 5, 0)
	if a, _, cov := fresh.sum(at(20), time.Minute); a != 5 || cov != 10*time.Second {
		t.Fatalf("fresh: %v covered %v; want 5 over 10s", a, cov)
	}
}
