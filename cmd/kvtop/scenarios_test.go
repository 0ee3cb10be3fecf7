package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/snapshot"
)

// Every scenario of the simulator, end to end: real sockets, real
// collectors, the real pool, checked on the Snapshot the console renders.
// The tests run in parallel (two at a time on two cores): each mostly
// waits on the wall clock. Each test moves the sim's manual clock to just before the scenario's
// fault (its timeline is in sim/scenario), lets it run at a few simulated
// seconds per wall second, and waits for what the operator must see.

// TestScenarioSteady: a healthy pool looks healthy, and stays so.
func TestScenarioSteady(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "steady"}, nil)
	r.run(4)
	s := r.waitFor("a healthy pool", func(s *snapshot.Snapshot) bool {
		for i := range s.Workers {
			if healthy(&s.Workers[i], 1) != "" {
				return false
			}
		}
		return s.Pool.Up == 4 && s.Pool.PrefixHitRate.Tokens != nil && s.Pool.PrefixHitRate.Requests != nil &&
			s.Decisions.WithOutcome > 0
	})
	if *s.Pool.PrefixHitRate.Tokens <= 0 || !s.Pool.IndexComplete || jsonInt(s.Pool, "blocks") <= 0 {
		t.Errorf("pool summary of a healthy pool:\n%s", dump(s))
	}
	// It stays healthy: nothing worth a warning, no errors, while it runs.
	for _, s := range r.watch(2 * time.Second) {
		for _, a := range s.Alerts {
			if a.Severity != "info" {
				t.Fatalf("steady pool: %s alert %q\n%s", a.Severity, a.Text, dump(s))
			}
		}
		for i := range s.Workers {
			if why := healthy(&s.Workers[i], 1); why != "" {
				t.Fatalf("steady pool: %s: %s\n%s", s.Workers[i].Name, why, dump(s))
			}
		}
		if len(s.Errors) > 0 {
			t.Fatalf("steady pool has errors:\n%s", dump(s))
		}
	}
}

// TestScenarioHotPrefix: a surge on one document; its one owner
// overheats, and the snapshot names the worker, the prefix and the queue.
// At 4 workers (the tests' pool) and at 6 (the demo's), where the
// document once landed on two workers and nobody was flagged.
func TestScenarioHotPrefix(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{4, 6} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			t.Parallel()
			checkHotPrefix(t, workers)
		})
	}
}

func checkHotPrefix(t *testing.T, workers int) {
	r := startScenario(t, sim.Options{Scenario: "hot-prefix", Workers: workers}, nil)
	r.jumpTo(19 * time.Second) // hot at 20 s
	r.run(4)
	var hot *snapshot.Prefix
	var w *snapshot.Worker
	s := r.waitFor("a worker overheating on a hot prefix", func(s *snapshot.Snapshot) bool {
		for i := range s.Prefixes {
			if p := &s.Prefixes[i]; p.Overheating != nil && p.Share >= s.Thresholds.HotPrefixShare {
				hot, w = p, workerOf(s, *p.Overheating)
				return w != nil
			}
		}
		return false
	})
	th := s.Thresholds
	if !w.Overheating || w.State != "overheating" {
		t.Errorf("%s overheats on %s but its row says overheating=%v state %q", w.Name, hot.ID, w.Overheating, w.State)
	}
	// One worker owns the document: it alone overheats, on its own.
	if len(hot.OverheatingWorkers) != 1 || hot.OverheatingWorkers[0] != w.Name {
		t.Errorf("overheating workers %v, want %s alone\n%s", hot.OverheatingWorkers, w.Name, dump(s))
	}
	for _, o := range s.Workers {
		if o.Name != w.Name && o.Overheating {
			t.Errorf("%s overheats too: the surge should have one owner\n%s", o.Name, dump(s))
		}
	}
	if share := hot.Workers[w.Name]; share < th.OverheatShare {
		t.Errorf("%s takes %.2f of the hot prefix's traffic, below the %.2f rule", w.Name, share, th.OverheatShare)
	}
	med := upQueueMedian(s)
	if w.Queue == nil || *w.Queue < th.OverheatQueueRatio*med || *w.Queue < th.OverheatMinQueue {
		t.Errorf("%s queue %s is not well above the pool median %g", w.Name, fv(w.Queue), med)
	}
	a := alertOf(s, "overheating", w.Name)
	if a == nil || a.Severity != "critical" || !strings.Contains(a.Text, hot.ID[:4]) || !strings.Contains(a.Text, w.Name+" overheating") {
		t.Errorf("no critical alert naming %s and prefix %s:\n%s", w.Name, hot.ID, dump(s))
	}
	if len(s.Alerts) == 0 || s.Alerts[0].Kind != "overheating" {
		t.Errorf("the overheating alert is not the first line:\n%s", dump(s))
	}
}

// TestScenarioEventLoss: w0 skips 8 batches live; kvtop sees the gap,
// replays it, loses nothing, and its index still adds up to w0's cache.
func TestScenarioEventLoss(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "event-loss"}, nil)
	r.jumpTo(14 * time.Second) // the gap opens at 15 s
	r.run(4)
	s := r.waitFor("w0's gap repaired by replay", func(s *snapshot.Snapshot) bool {
		st := streamOf(s, "w0", 0)
		return st != nil && st.Gaps >= 1 && st.State == "live"
	})
	st := streamOf(s, "w0", 0)
	if st.Missing != 8 || st.Replayed != st.Missing || st.Lost != 0 {
		t.Errorf("w0 stream: missing %d replayed %d lost %d, want 8 missing, all replayed\n%s", st.Missing, st.Replayed, st.Lost, dump(s))
	}
	if len(st.History) == 0 || st.History[0].Kind != "gap" || st.History[0].End == nil || st.History[0].Replayed != 8 {
		t.Errorf("w0 history should hold one closed gap with 8 replayed:\n%s", dump(s))
	}
	if w := workerOf(s, "w0"); !w.IndexComplete || w.State != "ok" {
		t.Errorf("w0 after a repaired gap: index complete %v, state %q", w.IndexComplete, w.State)
	}
	checkIndexMatchesSim(t, r)
}

// checkIndexMatchesSim stops the traffic and compares kvtop's blocks per
// stream with the blocks the sim's engines really hold.
func checkIndexMatchesSim(t *testing.T, r *scnRun) {
	t.Helper()
	s := r.quiesce()
	for wi, wc := range r.c.Workers {
		for rank := 0; rank < max(1, wc.DPRanks); rank++ {
			st := streamOf(s, wc.Name, rank)
			if want := r.s.ResidentBlocks(wi, rank); st.Blocks != want {
				t.Errorf("%s rank %d: kvtop indexes %d blocks, the engine holds %d\n%s", wc.Name, rank, st.Blocks, want, dump(s))
			}
		}
	}
}

// TestScenarioReplayOverflow: w3's gap outruns its replay buffer: history
// lost, said loudly, and what kvtop still knows is kept.
func TestScenarioReplayOverflow(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "replay-overflow"}, nil)
	r.jumpTo(19 * time.Second) // the overflow starts at 20 s
	w3 := workerOf(r.waitFor("w3 indexed", func(s *snapshot.Snapshot) bool {
		st := streamOf(s, "w3", 0)
		seq, _ := r.s.LastSeq(3, 0)
		return st.LastSeq != nil && *st.LastSeq == seq
	}), "w3")
	before := blocksOf(w3)
	r.run(4)
	s := r.waitFor("w3's history lost", func(s *snapshot.Snapshot) bool {
		st := streamOf(s, "w3", 0)
		return st.State == "history_lost"
	})
	w, st := workerOf(s, "w3"), streamOf(s, "w3", 0)
	if st.Lost == 0 || st.Gaps != 1 || st.Missing < st.Lost || st.Replayed+st.Lost != st.Missing {
		t.Errorf("w3 stream counts: gaps %d missing %d replayed %d lost %d", st.Gaps, st.Missing, st.Replayed, st.Lost)
	}
	if a := alertOf(s, "history_lost", "w3"); a == nil || a.Severity != "critical" || !strings.Contains(a.Text, "history lost") {
		t.Errorf("no critical 'history lost' alert for w3:\n%s", dump(s))
	}
	if w.IndexComplete || s.Pool.IndexComplete || w.State != "stale" {
		t.Errorf("w3 index complete %v, pool index complete %v, state %q: the loss must show", w.IndexComplete, s.Pool.IndexComplete, w.State)
	}
	// The cache is far from full at this point of the run (nothing evicted),
	// so every block kvtop knew before the loss is still there.
	if b := blocksOf(w); b < before || b <= 0 {
		t.Errorf("w3 blocks %d after the loss, %d before: what kvtop still knows must be kept", b, before)
	}
}

// TestScenarioWorkerRestart: w1 goes down (503), comes back with an empty
// cache and seq from 0; kvtop drops the old blocks and counts the restart.
func TestScenarioWorkerRestart(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "worker-restart"}, nil)
	r.jumpTo(30*time.Second + sim.Quantum) // restarted at 30 s, down 5 s; the clock stops here
	s := r.waitFor("w1 down", func(s *snapshot.Snapshot) bool { return !workerOf(s, "w1").Up })
	w := workerOf(s, "w1")
	if w.Error == nil || !strings.Contains(*w.Error, "503") || w.State != "down" || w.Queue != nil {
		t.Errorf("w1 down: error %s, state %q, queue %s: want the 503, \"down\", no queue", fv(nil), w.State, fv(w.Queue))
	}
	if a := alertOf(s, "down", "w1"); a == nil || a.Severity != "critical" {
		t.Errorf("no critical alert that w1 is down:\n%s", dump(s))
	}
	r.run(4)
	s = r.waitFor("w1 back after its restart", func(s *snapshot.Snapshot) bool {
		w := workerOf(s, "w1")
		st := streamOf(s, "w1", 0)
		return w.Up && w.Restarts >= 1 && st.Restarts >= 1 && st.State == "live"
	})
	if w := workerOf(s, "w1"); w.State != "ok" || w.Error != nil {
		t.Errorf("w1 back: state %q, error %v", w.State, w.Error)
	}
	checkIndexMatchesSim(t, r)
}

// TestScenarioRouterRestart: the router's counters reset; kvtop counts one
// restart, keeps the pre-restart hit rate as the baseline and follows the
// pool back to it.
func TestScenarioRouterRestart(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "router-restart"}, nil)
	r.jumpTo(25 * time.Second) // restart at 30 s
	r.run(4)
	s := r.waitFor("router r0 recovering", func(s *snapshot.Snapshot) bool {
		rt := s.Routers[0]
		return rt.Restarts == 1 && rt.Recovery.State == "recovering"
	})
	rt := s.Routers[0]
	if rt.Recovery.Baseline == nil || *rt.Recovery.Baseline <= 0 || rt.LastRestart == nil {
		t.Errorf("recovering without a baseline or a restart time:\n%s", dump(s))
	}
	if a := alertOf(s, "router_recovering", "r0"); a == nil || !strings.Contains(a.Text, "r0 restarted") {
		t.Errorf("no alert that r0 restarted and is recovering:\n%s", dump(s))
	}
	s = r.waitFor("router r0 recovered", func(s *snapshot.Snapshot) bool { return s.Routers[0].Recovery.State == "recovered" })
	rec := s.Routers[0].Recovery
	if s.Routers[0].Restarts != 1 || rec.Seconds == nil || rec.Baseline == nil || rec.Current == nil ||
		*rec.Current < *rec.Baseline-s.Thresholds.RecoveryTolerance {
		t.Errorf("recovered: %+v restarts %d\n%s", rec, s.Routers[0].Restarts, dump(s))
	}
	t.Logf("router restart: baseline %s, recovered after %s s (current %s)", fv(rec.Baseline), fv(rec.Seconds), fv(rec.Current))
	if alertOf(s, "router_recovering", "r0") != nil {
		t.Errorf("still alerting after recovery:\n%s", dump(s))
	}
}

// TestScenarioSlowScrape: w3's /metrics takes 3 s, longer than the
// scrape timeout: it is counted as a timeout; since its events still
// arrive it is shown "no_metrics" with a warning, not down, while the
// other workers are scraped on time all along.
func TestScenarioSlowScrape(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "slow-scrape"}, nil)
	r.jumpTo(10*time.Second + sim.Quantum) // slow from 10 s on
	r.run(2)
	s := r.waitFor("w3's scrape timing out", func(s *snapshot.Snapshot) bool {
		return !workerOf(s, "w3").Up && errorOf(s, "w3 metrics", "timeout") != nil
	})
	s = r.waitFor("w3 shown serving without metrics", func(s *snapshot.Snapshot) bool { return workerOf(s, "w3").State == "no_metrics" })
	if w := workerOf(s, "w3"); w.Error == nil || !strings.Contains(*w.Error, "no answer within") || w.Up {
		t.Errorf("w3 should be not up with the timeout as its error:\n%s", dump(s))
	}
	if a := alertOf(s, "no_metrics", "w3"); a == nil || a.Severity != "warning" || !strings.Contains(a.Text, "its events are still arriving") {
		t.Errorf("no warning that w3's metrics fail while its events arrive:\n%s", dump(s))
	}
	if alertOf(s, "down", "w3") != nil {
		t.Errorf("w3 serves traffic, yet it is alerted down:\n%s", dump(s))
	}
	// While w3's scrapes hang for the whole timeout, the others' go on:
	// between two snapshots none of them is scraped later than the timeout
	// (a scrape loop waiting for w3 would be), and each is scraped several
	// times.
	snaps := r.watch(3 * r.c.ScrapeTimeout / 2)
	for _, name := range []string{"w0", "w1", "w2"} {
		seen := map[time.Time]bool{}
		var prev time.Time
		for _, s := range snaps {
			w := workerOf(s, name)
			if w.LastScrape == nil || !w.Up {
				t.Fatalf("%s lost its scrape while w3 was slow:\n%s", name, dump(s))
			}
			if !prev.IsZero() && w.LastScrape.Sub(prev) >= r.c.ScrapeTimeout {
				t.Errorf("%s: %s between scrapes while w3 hung", name, w.LastScrape.Sub(prev))
			}
			prev = *w.LastScrape
			seen[prev] = true
		}
		if len(seen) < 3 {
			t.Errorf("%s scraped %d times in %s while w3 hung", name, len(seen), 3*r.c.ScrapeTimeout/2)
		}
	}
	if e := errorOf(snaps[len(snaps)-1], "w3 metrics", "timeout"); e == nil || e.Count < 2 {
		t.Errorf("w3's timeouts are not counted as they recur:\n%s", dump(snaps[len(snaps)-1]))
	}
	// Fast again: it comes back.
	r.inject(sim.SlowScrape{Worker: 3})
	r.waitFor("w3 up again", func(s *snapshot.Snapshot) bool { return workerOf(s, "w3").Up })
}

// TestScenarioTruncatedStreams: requests that end HTTP 200 without done
// are counted and flagged, never taken for completed ones.
func TestScenarioTruncatedStreams(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "truncated-streams"}, nil)
	r.run(4)
	var row *snapshot.DecisionRow
	s := r.waitFor("truncated rows", func(s *snapshot.Snapshot) bool {
		for i := range s.Decisions.Recent {
			for _, f := range s.Decisions.Recent[i].Flags {
				if f == "truncated" {
					row = &s.Decisions.Recent[i]
				}
			}
		}
		return row != nil && s.Decisions.Truncated > 0
	})
	if row.Outcome == nil || row.Outcome.HTTPStatus != 200 || row.Done == nil || *row.Done {
		t.Errorf("truncated row %s: outcome %+v done %v", row.RequestID, row.Outcome, row.Done)
	}
	if d := s.Decisions; d.Truncated > d.WithOutcome || d.WithOutcome == 0 {
		t.Errorf("decisions: %d truncated of %d with an outcome", d.Truncated, d.WithOutcome)
	}
}

// TestScenarioTour: the demo's tour plays its phases in order, and the
// first two show on the snapshot.
func TestScenarioTour(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the tour repeats other scenarios")
	}
	r := startScenario(t, sim.Options{Scenario: "tour"}, nil)
	r.jumpTo(20*time.Second + sim.Quantum)
	if ph := r.s.Phase(); !strings.HasPrefix(ph, "hot-prefix") {
		t.Errorf("phase at 20 s: %q", ph)
	}
	r.run(4)
	r.waitFor("a hot prefix", func(s *snapshot.Snapshot) bool {
		return len(s.Prefixes) > 0 && s.Prefixes[0].Share >= 2*s.Thresholds.HotPrefixShare
	})
	r.jumpTo(50*time.Second + sim.Quantum)
	if ph := r.s.Phase(); !strings.HasPrefix(ph, "event-loss") {
		t.Errorf("phase at 50 s: %q", ph)
	}
	r.run(4)
	s := r.waitFor("w0's gap replayed", func(s *snapshot.Snapshot) bool {
		st := streamOf(s, "w0", 0)
		return st.Gaps == 1 && st.Replayed == 8 && st.State == "live"
	})
	if st := streamOf(s, "w0", 0); st.Lost != 0 {
		t.Errorf("tour event-loss lost %d\n%s", st.Lost, dump(s))
	}
}

// TestEventInNextSnapshot: an event published by the sim is in the first
// snapshot built after kvtop applied it, in full: its seq and its effect
// arrive together, never a refresh apart.
func TestEventInNextSnapshot(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "steady", Workers: 3}, nil)
	r.jumpTo(10 * time.Second)
	before := r.quiesce()
	if b := blocksOf(workerOf(before, "w2")); b <= 0 {
		t.Fatalf("w2 holds no blocks before the reset\n%s", dump(before))
	}
	r.inject(scenario.ClearCache{Worker: 2})
	seq, _ := r.s.LastSeq(2, 0)
	var first *snapshot.Snapshot
	var last *snapshot.Snapshot // the last one without it
	end := time.Now().Add(scnDeadline)
	for first == nil && time.Now().Before(end) {
		s := r.e.Pool.Latest()
		if st := streamOf(s, "w2", 0); st.LastSeq != nil && *st.LastSeq >= seq {
			first = s
		} else {
			last = s
			time.Sleep(time.Millisecond)
		}
	}
	if first == nil {
		t.Fatalf("the AllBlocksCleared batch (seq %d) never arrived\n%s", seq, dump(last))
	}
	if b, st := blocksOf(workerOf(first, "w2")), streamOf(first, "w2", 0); b != 0 || st.Blocks != 0 {
		t.Errorf("snapshot #%d has w2's seq %d but still %d blocks: the reset lags its own batch\n%s", first.Seq, seq, b, dump(first))
	}
	if last != nil && first.Seq != last.Seq+1 {
		t.Logf("snapshots #%d..#%d were published while polling", last.Seq, first.Seq)
	}
	if age := streamOf(first, "w2", 0).LastMessageAgeS; age != nil {
		t.Logf("the reset reached kvtop %.0f ms before the snapshot that shows it (refresh %s)", *age*1000, r.c.Refresh)
	}
	for _, name := range []string{"w0", "w1"} {
		if blocksOf(workerOf(first, name)) != blocksOf(workerOf(before, name)) {
			t.Errorf("%s's blocks changed with w2's reset", name)
		}
	}
}

// TestJoinedLate: kvtop starts on a pool that has been publishing longer
// than its replay buffers reach back: every stream says it joined late,
// the index is incomplete, and an alert says why.
func TestJoinedLate(t *testing.T) {
	t.Parallel()
	r := startScenarioLate(t, sim.Options{Workers: 3, ReplayBuffer: 64}, nil, 10*time.Second)
	r.run(4)
	s := r.waitFor("every stream joined late", func(s *snapshot.Snapshot) bool {
		for _, w := range s.Workers {
			if w.Streams[0].State != "joined_late" || w.State != "stale" || !w.Up {
				return false
			}
		}
		return true
	})
	for _, w := range s.Workers {
		if a := alertOf(s, "joined_late", w.Name); a == nil || a.Severity != "warning" {
			t.Errorf("no joined-late warning for %s:\n%s", w.Name, dump(s))
		}
		if st := w.Streams[0]; st.Gaps != 0 || st.Lost != 0 || blocksOf(&w) <= 0 {
			t.Errorf("%s: a late join is not a gap or a loss of anything kvtop had (gaps %d lost %d), and blocks since are kept (%d)", w.Name, st.Gaps, st.Lost, blocksOf(&w))
		}
	}
	if s.Pool.IndexComplete {
		t.Errorf("pool index complete after a late join:\n%s", dump(s))
	}
}

// TestIdlePublisherBlocksUnknown: kvtop starts on a pool that published
// for 10 s and has been idle since (the sim's clock stands still): every
// stream connects and delivers nothing. The engines hold blocks kvtop
// cannot know of: each worker's blocks are null (they read 0), and its
// index and the pool's are not complete (they read complete), with the
// reason. Once traffic resumes, the first batch shows the late join, the
// replay recovers the history, and the index is complete and matches
// the engines' caches.
func TestIdlePublisherBlocksUnknown(t *testing.T) {
	t.Parallel()
	r := startScenarioLate(t, sim.Options{Workers: 3}, nil, 10*time.Second)
	for i := range r.c.Workers {
		if r.s.ResidentBlocks(i, 0) == 0 {
			t.Fatalf("w%d holds no blocks after 10 s of traffic: nothing to test", i)
		}
	}
	time.Sleep(4 * r.c.Refresh) // idle, connected: what kvtop says of it
	s := r.e.Pool.Latest()
	for i, w := range s.Workers {
		if st := w.Streams[0]; st.State != "live" || st.Batches != 0 {
			t.Fatalf("%s: stream %s with %d batches, want connected and idle\n%s", w.Name, st.State, st.Batches, dump(s))
		}
		if w.IndexComplete || blocksOf(&w) != -1 || !strings.Contains(w.Reason, "no KV events yet: resident blocks unknown") {
			t.Errorf("%s (idle publisher, %d blocks in its cache): index complete %v, blocks %d, reason %q; want not complete, unknown (null), said",
				w.Name, r.s.ResidentBlocks(i, 0), w.IndexComplete, blocksOf(&w), w.Reason)
		}
	}
	if s.Pool.IndexComplete || jsonInt(s.Pool, "blocks") != -1 {
		t.Errorf("pool: index complete %v, blocks %d; want not complete, unknown\n%s", s.Pool.IndexComplete, jsonInt(s.Pool, "blocks"), dump(s))
	}
	r.run(4)
	r.waitFor("every worker's history replayed", func(s *snapshot.Snapshot) bool {
		for _, w := range s.Workers {
			if st := w.Streams[0]; !w.IndexComplete || st.State != "live" || st.Batches == 0 {
				return false
			}
		}
		return s.Pool.IndexComplete
	})
	checkIndexMatchesSim(t, r)
}

// TestSimVariants: the other wire dialects and layouts the sim speaks give
// a healthy, complete picture too.
func TestSimVariants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		o      sim.Options
		tweak  func(*config.Config)
		prerun time.Duration // simulated time before kvtop starts
		engine string
		// wantLate: every stream joined late without a replay to fill it,
		// so the pool is healthy but for the streams' state.
		wantLate bool
		check    func(t *testing.T, r *scnRun, s *snapshot.Snapshot)
	}{
		{name: "sglang", o: sim.Options{Engine: "sglang", Workers: 3}, engine: "sglang"},
		{name: "dp2", o: sim.Options{DPRanks: 2, Workers: 3}, engine: "vllm", check: func(t *testing.T, r *scnRun, s *snapshot.Snapshot) {
			for _, w := range s.Workers {
				if len(w.Engines) != 2 || w.Engines[0].Engine != "0" || w.Engines[1].Engine != "1" {
					t.Errorf("%s: engines %+v, want ranks 0 and 1", w.Name, w.Engines)
				}
				for _, e := range w.Engines {
					if e.Queue == nil || e.NumGPUBlocks == nil || e.HitTokens == nil {
						t.Errorf("%s engine %s: queue %s blocks %s hit %s", w.Name, e.Engine, fv(e.Queue), fv(e.NumGPUBlocks), fv(e.HitTokens))
					}
				}
			}
			// A gap on one rank is that rank's alone, and replay repairs it.
			r.inject(sim.EventLoss{Worker: 1, Rank: 1, Batches: 5})
			s = r.waitFor("w1 rank 1's gap replayed", func(s *snapshot.Snapshot) bool {
				st := streamOf(s, "w1", 1)
				return st.Gaps == 1 && st.State == "live"
			})
			if a, b := streamOf(s, "w1", 1), streamOf(s, "w1", 0); a.Replayed != 5 || a.Lost != 0 || b.Gaps != 0 {
				t.Errorf("w1: rank 1 replayed %d lost %d, rank 0 gaps %d\n%s", a.Replayed, a.Lost, b.Gaps, dump(s))
			}
			checkIndexMatchesSim(t, r)
		}},
		{name: "sglang-dp2", o: sim.Options{Engine: "sglang", DPRanks: 2, Workers: 3}, engine: "sglang", check: func(t *testing.T, r *scnRun, s *snapshot.Snapshot) {
			for _, w := range s.Workers {
				if len(w.Engines) != 2 {
					t.Errorf("%s: engines %+v, want dp ranks 0 and 1", w.Name, w.Engines)
				}
			}
			checkIndexMatchesSim(t, r)
		}},
		{name: "array-bytes-legacy-replay", o: sim.Options{Encoding: "array", Hash: "bytes", ReplayLayout: "legacy", Scenario: "event-loss", Workers: 3},
			engine: "vllm", check: func(t *testing.T, r *scnRun, _ *snapshot.Snapshot) {
				r.jumpTo(15*time.Second + sim.Quantum)
				r.run(4)
				s := r.waitFor("w0's gap replayed (legacy layout)", func(s *snapshot.Snapshot) bool {
					st := streamOf(s, "w0", 0)
					return st.Gaps == 1 && st.State == "live"
				})
				if st := streamOf(s, "w0", 0); st.Replayed != 8 || st.Lost != 0 {
					t.Errorf("legacy replay: replayed %d lost %d\n%s", st.Replayed, st.Lost, dump(s))
				}
				checkIndexMatchesSim(t, r)
			}},
		{name: "no-replay-endpoint", o: sim.Options{Scenario: "event-loss", Workers: 3}, engine: "vllm",
			tweak: func(c *config.Config) {
				for i := range c.Workers {
					c.Workers[i].Replay = ""
				}
			},
			check: func(t *testing.T, r *scnRun, _ *snapshot.Snapshot) {
				r.jumpTo(15*time.Second + sim.Quantum)
				r.run(4)
				s := r.waitFor("w0's gap, lost without a replay endpoint", func(s *snapshot.Snapshot) bool {
					return streamOf(s, "w0", 0).State == "history_lost"
				})
				st := streamOf(s, "w0", 0)
				if st.Gaps != 1 || st.Missing != 8 || st.Lost != 8 || st.Replayed != 0 {
					t.Errorf("w0 without replay: gaps %d missing %d lost %d replayed %d", st.Gaps, st.Missing, st.Lost, st.Replayed)
				}
				if len(st.History) == 0 || !strings.Contains(st.History[0].Note, "no replay endpoint") {
					t.Errorf("the gap does not say why it was not repaired:\n%s", dump(s))
				}
				if a := alertOf(s, "history_lost", "w0"); a == nil || workerOf(s, "w0").IndexComplete {
					t.Errorf("no history-lost alert, or w0's index still complete:\n%s", dump(s))
				}
			}},
		{name: "joined-late-no-replay", o: sim.Options{Workers: 3}, prerun: 5 * time.Second, engine: "vllm",
			tweak: func(c *config.Config) {
				for i := range c.Workers {
					c.Workers[i].Replay = ""
				}
			},
			// healthy() wants every stream live: a late join without replay
			// is not, so this case checks its own signal.
			wantLate: true,
			check: func(t *testing.T, r *scnRun, s *snapshot.Snapshot) {
				for _, w := range s.Workers {
					st := w.Streams[0]
					if len(st.History) != 1 || st.History[0].Kind != "joined_late" {
						t.Fatalf("%s: history %+v, want one late join", w.Name, st.History)
					}
					// The batches before the first one seen are all unknown.
					if in := st.History[0]; in.FromSeq != 0 || in.Missing != in.ToSeq+1 || in.Missing == 0 {
						t.Errorf("%s joined late at seq %d: incident says seqs %d–%d, %d unknown", w.Name, in.ToSeq+1, in.FromSeq, in.ToSeq, in.Missing)
					}
					if a := alertOf(s, "joined_late", w.Name); a == nil {
						t.Errorf("no joined-late alert for %s", w.Name)
					}
				}
			}},
		{name: "joined-late-replayed", o: sim.Options{Workers: 3}, prerun: 10 * time.Second, engine: "vllm",
			check: func(t *testing.T, r *scnRun, s *snapshot.Snapshot) {
				for _, w := range s.Workers {
					// Every seq from 0 applied once: the replay filled the join.
					if st := w.Streams[0]; st.Missing != 0 || st.LastSeq == nil || st.Batches != *st.LastSeq+1 || len(st.History) != 0 {
						t.Errorf("%s joined late and replayed from 0: missing %d, %d batches up to seq %s, history %+v",
							w.Name, st.Missing, st.Batches, fv(nil), st.History)
					}
				}
				checkIndexMatchesSim(t, r)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startScenarioLate(t, tc.o, tc.tweak, tc.prerun)
			r.run(4)
			ranks := max(1, tc.o.DPRanks)
			s := r.waitFor("a healthy pool", func(s *snapshot.Snapshot) bool {
				for i := range s.Workers {
					w := &s.Workers[i]
					if tc.wantLate {
						if w.Streams[0].State != "joined_late" || !w.Up || w.Engine != tc.engine {
							return false
						}
						continue
					}
					if healthy(w, ranks) != "" || w.Engine != tc.engine {
						return false
					}
				}
				return s.Pool.PrefixHitRate.Tokens != nil && s.Decisions.WithOutcome > 0
			})
			if tc.check != nil {
				tc.check(t, r, s)
			}
		})
	}
}
