package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// The routers' own decision logs end to end: the sim's router writes
// Dynamo's request traces or the SGLang model gateway's lines to a real
// file, kvtop's decisions collector tails it (started on s.Config(), as
// `kvtop sim --write-config` writes it), and every record on the decisions
// screen is held against what the sim itself did with that request.

// fp reads a *float64 for a message.
func fp(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

func ipv(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// TestDynamoTraceDecisions: each trace line is a decision joined to its
// outcome under the configured worker's name (the workers are aliased by
// their Dynamo ids, data-parallel ranks folded), its prediction the
// router's own (the chosen worker's match, in tokens), the engine's cached
// count when the trace carries it and unknown when it does not, and a
// prediction_error exactly where the router predicted reuse the engine did
// not find. For the file sinks' wrapper (plain and gzip segments) and the
// stderr sink's bare record, the current and the older schema.
func TestDynamoTraceDecisions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		o            sim.Options
		backendCount bool
	}{
		{"jsonl", sim.Options{TraceSink: "jsonl", DPRanks: 2}, true},
		{"gzip segments", sim.Options{TraceSink: "gzip"}, true},
		{"stderr, agent schema, no backend count", sim.Options{TraceSink: "stderr", TraceSchema: "agent", TraceNoBackendActual: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Workers, o.Scenario, o.DecisionsFormat, o.Rate = 3, "steady", "dynamo-trace", 30
			r := startScenario(t, o, nil)
			if d := r.c.Decisions; len(d) != 1 || d[0].Format != "dynamo-trace" || !strings.HasPrefix(r.c.Workers[0].Aliases[0], "worker_") {
				t.Fatalf("the sim's config: %+v %+v", d, r.c.Workers[0])
			}
			r.run(4)
			r.waitFor("150 joined records", func(s *snapshot.Snapshot) bool { return s.Decisions.WithOutcome >= 150 })
			// Empty every cache while requests wait in the queues (a burst
			// fills them): those the router sent to a prefix it saw find
			// nothing.
			r.inject(sim.SetRate{Factor: 6})
			r.jumpTo(r.s.Now() + 3*time.Second)
			for w := range 3 {
				for rank := range max(1, o.DPRanks) {
					r.inject(sim.ClearCache{Worker: w, Rank: rank})
				}
			}
			s := r.quiesce()
			s = r.waitFor("every request's trace read", func(s *snapshot.Snapshot) bool {
				return len(s.Decisions.Sources) == 1 && s.Decisions.Sources[0].Lines == uint64(s.Decisions.Records)
			})
			checkTraceRecords(t, r, s, tc.backendCount)
		})
	}
}

func checkTraceRecords(t *testing.T, r *scnRun, s *snapshot.Snapshot, backendCount bool) {
	t.Helper()
	d := s.Decisions
	if src := d.Sources[0]; src.Detected != "dynamo-trace" || src.Bad != 0 || src.Skipped != 0 || src.Decisions != src.Outcomes ||
		src.Decisions != uint64(d.Records) {
		t.Errorf("source %+v, %d records", src, d.Records)
	}
	if d.Records == 0 || d.WithOutcome != d.Records || d.OrphanOutcomes != 0 || len(d.Unmapped) != 0 || d.BadLines != 0 {
		t.Fatalf("decisions: %d records, %d with an outcome, %d orphans, unmapped %v", d.Records, d.WithOutcome, d.OrphanOutcomes, d.Unmapped)
	}
	workers := map[string]bool{}
	for _, w := range s.Workers {
		workers[w.Name] = true
	}
	if len(workers) != 3 {
		t.Errorf("workers %v: a Dynamo id made a worker of its own", workers)
	}
	var matched, errs, cachedHits int
	for i := range d.Recent {
		row := &d.Recent[i]
		truth, ok := r.s.Routed(row.RequestID)
		if !ok {
			t.Fatalf("%s: the sim routed no such request", row.RequestID)
		}
		want := r.c.Workers[truth.Worker].Name
		errFlag := strings.Contains(strings.Join(row.Flags, ","), "prediction_error")
		bad := func(what string) {
			t.Errorf("%s: %s: chosen %s owner %s decode %q, matched %s of %s %s, prompt %s, cached %s, ttft %s, flags %v; sim %+v",
				row.RequestID, what, row.Chosen, row.Owner, row.DecodeWorker, fp(row.Matched), fp(row.Total), row.Units,
				ipv(row.PromptTokens), ipv(row.CachedTokens), fp(row.TTFTMS), row.Flags, truth)
		}
		switch {
		case row.Chosen != want || row.Owner != want || row.DecodeWorker != "" || row.Outcome == nil || row.Outcome.Worker != want:
			bad("workers")
		case row.Format != "dynamo-trace" || row.Units != "tokens" || fp(row.Matched) != fmt.Sprint(truth.Predicted) ||
			fp(row.Total) != fmt.Sprint(truth.Prompt) || ipv(row.PromptTokens) != fmt.Sprint(truth.Prompt):
			bad("prediction")
		case backendCount && ipv(row.CachedTokens) != fmt.Sprint(truth.Cached):
			bad("cached tokens: the engine's")
		case !backendCount && row.CachedTokens != nil:
			bad("cached tokens: the record has only the router's estimate, unknown")
		case errFlag != (backendCount && truth.Predicted > 0 && truth.Cached == 0):
			bad("prediction_error")
		case row.TTFTMS == nil || row.Outcome.E2EMS == nil || *row.TTFTMS > *row.Outcome.E2EMS || math.IsNaN(*row.TTFTMS) ||
			row.Outcome.OutputTokens == nil || row.Outcome.HTTPStatus != 0:
			bad("timings")
		}
		for _, f := range row.Flags {
			if f != "prediction_error" && f != "recompute" {
				bad("flag " + f)
			}
		}
		if truth.Predicted > 0 {
			matched++
		}
		if errFlag {
			errs++
		}
		if truth.Cached > 0 {
			cachedHits++
		}
	}
	t.Logf("%d records: %d predicted reuse, %d prediction errors, %d hit the cache", len(d.Recent), matched, errs, cachedHits)
	if matched == 0 || cachedHits == 0 {
		t.Errorf("no record predicted reuse (%d) or hit the cache (%d): the run shows nothing", matched, cachedHits)
	}
	// The screen's rows are the journal's newest: its count covers them.
	if backendCount && (errs == 0 || d.PredictionErrors < errs) {
		t.Errorf("%d rows flagged prediction_error, the journal counts %d: the cleared caches should have caused some", errs, d.PredictionErrors)
	}
	if !backendCount && d.PredictionErrors != 0 {
		t.Errorf("%d prediction errors without the engine's count", d.PredictionErrors)
	}
}

// TestSMGDecisions: the gateway's lines (text and --log-json) are
// decisions under the configured worker's name (the line names the
// worker's URL), keyed by the request id of the span they are logged in;
// each branch is the reason the sim had, a tree match owned by the chosen
// worker, and its ratio the sim's longest match over the prompt. The log
// has no outcomes: no record waits for one or is flagged for lacking it.
func TestSMGDecisions(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"text", "json"} {
		t.Run(layout, func(t *testing.T) {
			r := startScenario(t, sim.Options{Workers: 3, Scenario: "steady", DecisionsFormat: "smg", SMGLog: layout, Rate: 30},
				func(c *config.Config) {
					if c.Decisions[0].Format != "smg" {
						t.Fatalf("the sim's config: %+v", c.Decisions)
					}
					c.Decisions[0].Format = "auto" // detected per line
				})
			r.run(4)
			r.waitFor("150 records", func(s *snapshot.Snapshot) bool { return s.Decisions.Records >= 150 })
			r.run(0)
			s := r.waitFor("every line read", func(s *snapshot.Snapshot) bool {
				return len(s.Decisions.Sources) == 1 && s.Decisions.Sources[0].Lines == uint64(s.Decisions.Records)
			})
			d := s.Decisions
			if src := d.Sources[0]; src.Detected != "smg" || src.Bad != 0 || src.Skipped != 0 || src.Outcomes != 0 {
				t.Errorf("source %+v", src)
			}
			if d.WithOutcome != 0 || len(d.Unmapped) != 0 {
				t.Errorf("%d with an outcome, unmapped %v", d.WithOutcome, d.Unmapped)
			}
			reasons := map[string]string{"tree_match": "best-match", "spill": "load-balance", "min_load_fallback": "fallback"}
			seen := map[string]int{}
			for i := range d.Recent {
				row := &d.Recent[i]
				truth, ok := r.s.Routed(row.RequestID)
				if !ok {
					t.Fatalf("%s: the sim routed no such request", row.RequestID)
				}
				want := r.c.Workers[truth.Worker].Name
				ratio := float64(float32(min(truth.Matched, truth.Prompt)) / float32(truth.Prompt))
				owner := ""
				if truth.Branch == "tree_match" {
					owner = want
				}
				if row.Chosen != want || row.Reason != reasons[truth.Branch] || row.Owner != owner || row.Units != "ratio" ||
					row.Matched == nil || math.Abs(*row.Matched-ratio) > 1e-12 || row.Pending || len(row.Flags) != 0 ||
					row.Model != sim.Model || row.Format != "smg" {
					t.Errorf("%s: row %+v (matched %s), sim %+v (ratio %v)", row.RequestID, *row, fp(row.Matched), truth, ratio)
				}
				seen[truth.Branch]++
			}
			if seen["tree_match"] == 0 || seen["min_load_fallback"] == 0 {
				t.Errorf("branches seen %v: want matches and fallbacks", seen)
			}
		})
	}
}
