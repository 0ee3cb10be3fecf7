package pool

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// TestRecentDecisionsSizedByTime: by default Snapshot.Decisions.Recent
// holds the records of the last two minutes at the rate they came, at
// least the newest 500 and at most 5 000; a configured count fixes it.
func TestRecentDecisionsSizedByTime(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		rate  float64 // records per second
		limit int
		want  int
	}{
		{"35/s for four minutes: the last two", 8400, 35, 0, 4200},
		{"100/s: the bound", 20000, 100, 0, snapshot.RecentDecisionsMax},
		{"1/s for ten minutes: the newest 500", 600, 1, 0, RecentDecisionsMin},
		{"fewer than 500 in all: all", 120, 0.1, 0, 120},
		{"a configured count", 8400, 35, 100, 100},
		{"a configured count above the bound", 8400, 35, 8000, 8000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, last := recentState(t, c.n, c.rate, Limits{RecentDecisions: c.limit})
			rs := s.Snapshot(last).Decisions.Recent
			// Records one interval apart: the count in the span is ±1.
			if got := len(rs); got < c.want-1 || got > c.want+1 {
				t.Fatalf("%d recent rows, want %d", got, c.want)
			}
			if want := fmt.Sprintf("chat-%08d-", c.n-1); rs[len(rs)-1].RequestID[:len(want)] != want {
				t.Errorf("newest row %s, want the newest record", rs[len(rs)-1].RequestID)
			}
		})
	}
	// Later, with no new record, the window shrinks back to its floor.
	s, last := recentState(t, 8400, 35, Limits{})
	if got := len(s.Snapshot(last.Add(10 * time.Minute)).Decisions.Recent); got != RecentDecisionsMin {
		t.Errorf("ten minutes later: %d rows, want %d", got, RecentDecisionsMin)
	}
}

// TestDecisionRowsBuiltOncePerChange: a row whose record did not change
// is shared with the last snapshot instead of being built again; an
// outcome arriving, or the clock making a pending decision no_outcome,
// builds it anew; a record that leaves the window drops its row; and no
// later change reaches a snapshot already taken.
func TestDecisionRowsBuiltOncePerChange(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w1"}, {Name: "w2"}}, Limits: Limits{RecentDecisions: 3}})
	for i := 0; i < 3; i++ {
		s.Apply(&collectors.Decision{RequestID: fmt.Sprint("r-", i), Chosen: "w1", Prediction: pred("blocks", "w2", 4), Source: "a.jsonl", At: at(0), TS: at(0)})
	}
	s.Apply(outcome("r-0", "1", "w1", 200, ip(0), bp(true))) // a.jsonl's decisions get outcomes

	first := s.Snapshot(at(1)).Decisions.Recent
	second := s.Snapshot(at(2)).Decisions.Recent
	for i := range first {
		if first[i].Prediction != second[i].Prediction {
			t.Errorf("row %d built again while its record did not change", i)
		}
	}
	if !second[1].Pending || slices.Contains(second[1].Flags, "no_outcome") {
		t.Fatalf("r-1 before its timeout: pending %v, flags %v", second[1].Pending, second[1].Flags)
	}

	// r-1 gets its outcome; r-2 waits past the no_outcome timeout.
	s.Apply(outcome("r-1", "1", "w1", 200, ip(64), bp(true)))
	third := s.Snapshot(at(0).Add(noOutcomeAfter + time.Second)).Decisions.Recent
	if third[0].Prediction != second[0].Prediction {
		t.Error("r-0 built again while it did not change")
	}
	if third[1].Prediction == second[1].Prediction || third[1].Pending || third[1].CachedTokens == nil || *third[1].CachedTokens != 64 {
		t.Errorf("r-1 after its outcome: pending %v, cached %v (a row built anew)", third[1].Pending, third[1].CachedTokens)
	}
	if third[2].Prediction == second[2].Prediction || third[2].Pending || !slices.Contains(third[2].Flags, "no_outcome") {
		t.Errorf("r-2 past the timeout: pending %v, flags %v (a row built anew)", third[2].Pending, third[2].Flags)
	}
	if !second[1].Pending || second[1].CachedTokens != nil || !second[2].Pending || slices.Contains(second[2].Flags, "no_outcome") {
		t.Error("a change reached a snapshot already taken")
	}

	// A newer record pushes r-0 out of the window: it keeps no row.
	s.Apply(&collectors.Decision{RequestID: "r-3", Chosen: "w2", Source: "a.jsonl", At: at(40), TS: at(40)})
	s.Snapshot(at(41))
	if r := s.journal.byKey[attemptKey("r-0", "1")]; r.row != nil {
		t.Error("r-0 left the window but keeps its row")
	}
	if r := s.journal.byKey[attemptKey("r-3", "1")]; r.row == nil {
		t.Error("r-3 is listed but keeps no row")
	}
}
