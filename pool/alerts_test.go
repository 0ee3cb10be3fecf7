package pool

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// TestAlertsMostSevereFirst raises one of each alert and checks the words
// and the order.
func TestAlertsMostSevereFirst(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}, {Name: "w1"}, {Name: "w2"}, {Name: "w3"}, {Name: "w5"}, {Name: "w6"}},
		Routers: []RouterSpec{{Name: "r0"}}})
	// w3 overheats on a decision-named prefix; the others are calm.
	for k := 0; k <= 60; k++ {
		x := float64(k)
		for i, name := range []string{"w0", "w1", "w2", "w3", "w5"} {
			q := []float64{2, 3, 3, 19, 4}[i]
			s.Apply(scrape(name, at(x), counters("", q, 100*x, 78*x)))
		}
		s.Apply(routerScrape(at(x), 1000, 10*x, nil))
	}
	s.Apply(failedScrape("w6", at(60), "connection\n  refused"))
	for i := 0; i < 60; i++ { // past the rule's floor (20 requests on the prefix) 31 s later
		w := "w3"
		if i >= 48 {
			w = "w0"
		}
		s.Apply(decide(fmt.Sprint("r", i), w, "9f2c0000000000aa", at(60)))
	}
	// w5 lost history; w1 is replaying a gap; w2 joined late and fails to
	// decode some batches.
	s.Apply(status("w5", 0, snapshot.StreamHistoryLost, at(52),
		collectors.StreamIncident{Kind: "history_lost", FromSeq: 88121, Missing: 1240, Lost: 1240, Start: at(52)}))
	s.Apply(status("w1", 0, snapshot.StreamReplaying, at(59),
		collectors.StreamIncident{Kind: "gap", FromSeq: 500, ToSeq: 520, Missing: 21, Start: at(50)}))
	late := status("w2", 0, snapshot.StreamJoinedLate, at(10))
	late.FirstSeq = 1200
	s.Apply(late)
	late2 := *late
	late2.DecodeErrors, late2.At = 3, at(55)
	s.Apply(&late2)
	s.Apply(&collectors.SourceError{Source: "decisions /var/log/d.jsonl", Kind: "bad_line", Message: "line 9: not JSON", At: at(58)})
	// The router restarts: the pool hit rate collapses.
	s.Apply(routerScrape(at(61), 2000, 0, nil))
	for k := 62; k <= 91; k++ {
		x := float64(k)
		for _, name := range []string{"w0", "w1", "w2", "w3", "w5"} {
			s.Apply(scrape(name, at(x), counters("", map[string]float64{"w3": 19}[name]+2, 100*x, 78*60+52*(x-60))))
		}
	}
	snap := s.Snapshot(at(91))
	var got []string
	for _, a := range snap.Alerts {
		got = append(got, string(a.Severity)+" "+a.Text)
	}
	want := []string{
		"critical w3 overheating: takes 80% of prefix 9f2c… (– tok, 100% of traffic); queue 21 vs pool median 2",
		"critical w5 events: history lost at seq 88121 (1 240 batches) — its index is incomplete since 14:00:52",
		"critical w6 down: connection refused",
		"warning r0 restarted 14:01:01: pool hit 52% vs 78% before; recovering for 30 s",
		"warning w1 events: gap at seq 500–520 (21 batches) being replayed since 14:00:50",
		"warning w2 events: joined late (first seq 1200) — blocks stored before are unknown",
		"warning w2 events: 3 batches could not be decoded in the last 60 s (3 in all)",
		"info decisions: 1 bad lines skipped in the last 60 s (1 in all)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("alerts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFormatting(t *testing.T) {
	cases := []struct{ got, want string }{
		{count(0), "0"}, {count(999), "999"}, {count(1240), "1 240"}, {count(1234567), "1 234 567"},
		{tokens(512), "512"}, {tokens(2096), "2.1k"}, {tokens(1_300_000), "1.3M"},
		{pct(0.834), "83%"}, {pctp(nil), "–"}, {num(3), "3"}, {num(2.5), "2.5"},
		{shortID("9f2c0000"), "9f2c…"}, {shortID("ab"), "ab"},
		{truncate("héllo", 2), "h…"}, {truncate("abc", 5), "abc"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestMemoryBounded feeds ten times each limit and checks every store
// stays within it.
func TestMemoryBounded(t *testing.T) {
	lim := Limits{Errors: 20, Incidents: 5, Decisions: 30, RecentDecisions: 7, Prefixes: 3, PrefixCounters: 40}
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, Limits: lim})
	for i := 0; i < 10*lim.Errors; i++ {
		s.Apply(&collectors.SourceError{Source: fmt.Sprint("src", i), Kind: "parse", Message: "bad", At: at(float64(i))})
	}
	var hist []collectors.StreamIncident
	for i := 0; i < 10*lim.Incidents; i++ {
		hist = append(hist, collectors.StreamIncident{Kind: "gap", FromSeq: uint64(i), Start: at(float64(i))})
	}
	s.Apply(status("w0", 0, snapshot.StreamLive, at(1), hist...))
	for i := 0; i < 10*lim.PrefixCounters; i++ {
		s.Apply(batch("w0", 0, uint64(i), at(1), stored(uint64(1000+i), true, uint64(5000+i))))
		s.Apply(decide(fmt.Sprint("r", i), "w0", fmt.Sprintf("%x", 70000+i), at(1)))
	}
	s.Apply(scrape("w0", at(1), counters("", 3, 0, 0)))
	if n := len(s.Snapshot(at(1)).Prefixes); n != lim.Prefixes {
		t.Fatalf("%d prefixes listed, limit %d", n, lim.Prefixes)
	}
	var snap *snapshot.Snapshot
	for k := 1; k < 10*60; k++ { // ten windows of refreshes
		snap = s.Snapshot(at(float64(k)))
	}
	w := row(t, snap, "w0")
	if len(snap.Errors) != lim.Errors || snap.Errors[0].Source != "src199" || len(w.Streams[0].History) != lim.Incidents ||
		w.Streams[0].History[4].FromSeq != 49 || len(snap.Decisions.Recent) != lim.RecentDecisions || s.journal.n != lim.Decisions ||
		len(s.evPrefix.ents) > lim.PrefixCounters || len(s.decPrefix.ents) > lim.PrefixCounters ||
		len(snap.Pool.Series.Queue) != 61 || len(w.Series.Queue) != 61 {
		t.Fatalf("errors %d, incidents %d, recent %d, journal %d, prefixes %d, counters %d/%d, series %d",
			len(snap.Errors), len(w.Streams[0].History), len(snap.Decisions.Recent), s.journal.n, len(snap.Prefixes),
			len(s.evPrefix.ents), len(s.decPrefix.ents), len(snap.Pool.Series.Queue))
	}
	// Discovery is bounded too: ids past maxWorkers are counted, not added.
	for i := 0; i < maxWorkers+10; i++ {
		s.Apply(batch(fmt.Sprint("10.1.", i/256, ".", i%256, ":8000"), 0, 0, at(1), stored(0, false, 1)))
	}
	if len(s.workers) != maxWorkers || s.ignored != 11 {
		t.Fatalf("%d workers (limit %d), %d ignored", len(s.workers), maxWorkers, s.ignored)
	}
}

// Garbage numbers from a source never reach a snapshot as NaN.
func TestNonFiniteValuesDropped(t *testing.T) {
	s := newTestState("w0")
	nan, inf := math.NaN(), math.Inf(1)
	s.Apply(&collectors.MetricsScrape{Target: "w0", At: at(0), ProcessStart: &nan,
		Engines: []em{{Waiting: &nan, Running: &inf, KVUsage: f(0.5), PrefixQueries: &nan, PrefixHits: f(1)}}})
	s.Apply(&collectors.MetricsScrape{Target: "w0", At: at(1), ProcessStart: &nan,
		Engines: []em{{Waiting: f(2), Running: f(1), KVUsage: f(0.5), PrefixQueries: &inf, PrefixHits: f(2)}}})
	s.Apply(&collectors.Decision{RequestID: "r", Chosen: "w0", Prediction: &collectors.Prediction{Matched: &nan}, At: at(1)})
	s.Apply(&collectors.Outcome{RequestID: "r", Worker: "w0", TTFTMS: &inf, At: at(1)})
	snap := s.Snapshot(at(1))
	if _, err := jsonMarshal(snap); err != nil {
		t.Fatalf("snapshot does not encode: %v", err)
	}
	if w := row(t, snap, "w0"); w.Restarts != 0 || !eqp(w.Queue, f(2)) {
		t.Fatalf("restarts %d queue %v", w.Restarts, show(w.Queue))
	}
}
