package scenario

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestEveryScenarioHasATimeline(t *testing.T) {
	names := Names()
	if names[len(names)-1] != "tour" || len(names) != 18 {
		t.Fatalf("names %v", names)
	}
	for _, n := range names {
		s, err := Get(n, 4)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if Summary(n) == "" || len(s.Cues) == 0 || s.Cues[0].Phase == "" {
			t.Errorf("%s: no summary or no opening phase", n)
		}
		for i := 1; i < len(s.Cues); i++ {
			if s.Cues[i].At <= s.Cues[i-1].At {
				t.Errorf("%s: cues out of order at %d", n, i)
			}
			if s.Loop > 0 && s.Cues[i].At >= s.Loop {
				t.Errorf("%s: cue at %s after the loop length %s", n, s.Cues[i].At, s.Loop)
			}
		}
	}
	if _, err := Get("nope", 4); err == nil {
		t.Error("unknown scenario accepted")
	}
}

// The tour runs through every fault in about four minutes.
func TestTourCoversEverything(t *testing.T) {
	s, _ := Get("tour", 4)
	if s.Loop < 150*time.Second || s.Loop > 240*time.Second {
		t.Errorf("tour loops every %s, want about 4 minutes at most", s.Loop)
	}
	seen := map[string]bool{}
	for _, c := range s.Cues {
		for _, a := range c.Actions {
			switch a.(type) {
			case HotPrefix:
				seen["hot-prefix"] = true
			case EventLoss:
				seen["event-loss"] = true
			case RouterRestart:
				seen["router-restart"] = true
			case WorkerRestart:
				seen["worker-restart"] = true
				if a.(WorkerRestart).Seed != 0 {
					seen["hash-mismatch"] = true
				}
				if a.(WorkerRestart).Blocks > 0 {
					seen["thrash"] = true
				}
			case ReplayOverflow:
				seen["replay-overflow"] = true
			case SlowScrape:
				seen["slow-scrape"] = true
			case Truncate:
				seen["truncated-streams"] = true
			case Policy:
				if a.(Policy).Name == "round-robin" {
					seen["recompute"] = true
				}
			}
			if a.String() == "" {
				t.Errorf("%T has no description", a)
			}
		}
	}
	if len(seen) != 10 {
		t.Errorf("tour covers %v, want all 10 faults", seen)
	}
	// It ends on the run's own policy, rate, seeds and cache sizes, so the
	// next loop starts as the first.
	last := s.Cues[len(s.Cues)-1].Actions
	restored := map[string]bool{}
	for _, a := range last {
		switch a := a.(type) {
		case Policy:
			restored["policy"] = a == Policy{}
		case SetRate:
			restored["rate"] = a.Factor == 1
		case WorkerRestart:
			restored["cache"] = a.Blocks == 0 && a.Seed == 0
		}
	}
	if !restored["policy"] || !restored["rate"] || !restored["cache"] {
		t.Errorf("the tour's last cue %v does not restore the policy, the rate and the cache", last)
	}
	if w := s.OverflowWorkers(); len(w) != 1 || w[0] != 2 {
		t.Errorf("overflow workers %v, want [2]", w)
	}
	// Worker indexes wrap in a small pool.
	one, _ := Get("tour", 1)
	for _, w := range one.OverflowWorkers() {
		if w != 0 {
			t.Errorf("1-worker tour overflows w%d", w)
		}
	}
}

func TestPlayerLoops(t *testing.T) {
	s, _ := Get("event-loss", 2) // cues at 0 and 15s, loop 30s
	p := NewPlayer(s)
	var got []time.Duration
	for now := time.Duration(0); now <= 70*time.Second; now += 10 * time.Millisecond {
		for range p.Due(now) {
			got = append(got, now)
		}
	}
	want := []time.Duration{0, 15 * time.Second, 30 * time.Second, 45 * time.Second, 60 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("cues at %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cues at %v, want %v", got, want)
		}
	}
	once, _ := Get("slow-scrape", 2)
	p = NewPlayer(once)
	if n := len(p.Due(time.Hour)); n != 2 {
		t.Errorf("a non-looping scenario played %d cues in an hour, want 2", n)
	}
	if n := len(p.Due(2 * time.Hour)); n != 0 {
		t.Errorf("played %d more cues", n)
	}
}

func TestNamesMatchSummaries(t *testing.T) {
	if len(Names()) != len(summaries) {
		t.Fatalf("%d names, %d summaries", len(Names()), len(summaries))
	}
}

// The hot document's surge does not shrink with the pool: at least
// HotRate conversations a second (more than one worker serves), and a fifth
// of the default rate in big pools so it is a hot prefix there too; the
// tour plays the same surge.
func TestHotSurgeBySize(t *testing.T) {
	for _, c := range []struct {
		n    int
		rate float64
	}{{1, HotRate}, {4, HotRate}, {6, HotRate}, {16, 9.6}, {64, 38.4}} {
		for _, name := range []string{"hot-prefix", "tour"} {
			s, _ := Get(name, c.n)
			var on, off *HotPrefix
			for _, cue := range s.Cues {
				for _, a := range cue.Actions {
					if h, ok := a.(HotPrefix); ok && h.Rate > 0 {
						on = &h
					} else if ok {
						off = &h
					}
				}
			}
			if on == nil || off == nil {
				t.Fatalf("%s at %d workers: no surge or it never ends", name, c.n)
			}
			if on.Rate < c.rate-1e-9 || on.Rate > c.rate+1e-9 || on.Threshold != HotThreshold {
				t.Errorf("%s at %d workers: %s; want %g conversations a second, threshold %d", name, c.n, on, c.rate, HotThreshold)
			}
		}
	}
}

// The tour shows the tiers too: LMCache, both offload event forms and full
// reports on some workers, a hybrid canary between two restarts; every
// worker ends the loop on the mode it began it with, so the next loop
// restarts nobody.
func TestTourShowsTheTiers(t *testing.T) {
	for _, n := range []int{1, 2, 4, 6} {
		s, _ := Get("tour", n)
		modes := map[int]string{} // at the start of the loop
		final := map[int]string{} // after the last cue
		seen := map[string]bool{}
		full := false
		for i, c := range s.Cues {
			for _, a := range c.Actions {
				switch a := a.(type) {
				case Tiers:
					if a.Worker >= n {
						t.Errorf("%d workers: %s", n, a)
					}
					if i == 0 {
						modes[a.Worker] = a.Mode
					}
					final[a.Worker] = a.Mode
					seen[a.Mode] = true
				case ReportFull:
					if a.Fraction > 0 {
						seen["report-full"] = true
					}
					full = a.Fraction > 0
				}
			}
		}
		for w, m := range final {
			if modes[w] != m {
				t.Errorf("%d workers: w%d begins the tour with %q and ends it with %q", n, w, modes[w], m)
			}
		}
		if full {
			t.Errorf("%d workers: the tour ends with full reports on", n)
		}
		want := []string{ModeHybrid, "report-full"}
		if n >= 4 {
			want = append(want, ModeLMCache, ModeOffload, ModeChunks)
		}
		for _, m := range want {
			if !seen[m] {
				t.Errorf("%d workers: the tour never shows %s (%v)", n, m, seen)
			}
		}
	}
}

// The ladder walks through the hit-rate ladder's losses one phase each,
// and ends with every worker back on the pool's seed and its whole cache,
// on the run's policy and rate, so that the next loop starts as the first.
func TestLadderPhases(t *testing.T) {
	for _, n := range []int{1, 4, 6} {
		s, err := Get("ladder", n)
		if err != nil {
			t.Fatal(err)
		}
		var phases []string
		for _, c := range s.Cues {
			phases = append(phases, strings.SplitN(c.Phase, ":", 2)[0])
		}
		if got := strings.Join(phases, " "); got != "compulsory configuration routing capacity steady" {
			t.Fatalf("%d workers: phases %q", n, got)
		}
		if s.Loop <= s.Cues[len(s.Cues)-1].At {
			t.Errorf("%d workers: loop %s ends before the last cue", n, s.Loop)
		}
		seeds := map[uint64]bool{}
		restarted := make([]map[string]WorkerRestart, len(s.Cues))
		unique, policy, rate := Unique{}, Policy{}, SetRate{Factor: 1}
		for i, c := range s.Cues {
			restarted[i] = map[string]WorkerRestart{}
			for _, a := range c.Actions {
				switch a := a.(type) {
				case WorkerRestart:
					if a.Worker < 0 || a.Worker >= n {
						t.Errorf("%d workers: %s", n, a)
					}
					restarted[i][fmt.Sprint(a.Worker)] = a
				case Unique:
					unique = a
				case Policy:
					policy = a
				case SetRate:
					rate = a
				}
			}
			switch phases[i] {
			case "compulsory":
				if unique.Share != 1 || unique.Turns > 1 || policy.Name != "" {
					t.Errorf("compulsory phase: %v under %v", unique, policy)
				}
			case "configuration":
				for _, r := range restarted[i] {
					if r.Seed == 0 || seeds[r.Seed] {
						t.Errorf("configuration phase: %s: want a seed of its own", r)
					}
					seeds[r.Seed] = true
				}
				if len(restarted[i]) != n || unique.Share != 1 || unique.Turns != 2 || policy.Name != "" {
					t.Errorf("configuration phase: %d restarts, %v, %v", len(restarted[i]), unique, policy)
				}
			case "routing":
				if len(restarted[i]) != n || unique.Share != 0 || policy.Name != "round-robin" || rate.Factor != 1 {
					t.Errorf("routing phase: %d restarts, %v, %v, %v", len(restarted[i]), unique, policy, rate)
				}
			case "capacity":
				for _, r := range restarted[i] {
					if r.Blocks != LadderBlocks || r.Seed != 0 {
						t.Errorf("capacity phase: %s", r)
					}
				}
				if len(restarted[i]) != n || policy.Name != "" {
					t.Errorf("capacity phase: %d restarts, %v", len(restarted[i]), policy)
				}
			case "steady":
				for _, r := range restarted[i] {
					if r.Blocks != 0 || r.Seed != 0 {
						t.Errorf("last phase: %s, want the whole cache and the pool's seed", r)
					}
				}
				if len(restarted[i]) != n || unique.Share != 0 || policy.Name != "" || rate.Factor != 1 {
					t.Errorf("last phase: %d restarts, %v, %v, %v", len(restarted[i]), unique, policy, rate)
				}
			}
		}
	}
}
