package pool

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func ip(v int) *int                       { return &v }
func bp(v bool) *bool                     { return &v }
func flags(r snapshot.DecisionRow) string { return strings.Join(r.Flags, ",") }

func pred(units, owner string, matched float64) *collectors.Prediction {
	return &collectors.Prediction{Source: "kv-events", Input: "tokens", Units: units, Owner: owner, Matched: f(matched), Total: f(20), AgeMS: f(350)}
}

func outcome(req, att, worker string, status int, cached *int, done *bool) *collectors.Outcome {
	return &collectors.Outcome{RequestID: req, AttemptID: att, Worker: worker, HTTPStatus: status, CachedTokens: cached,
		PromptTokens: ip(320), Done: done, TTFTMS: f(210), QueueMS: f(40), E2EMS: f(2300), FinishReason: "stop", Format: "kvtop", At: at(1), TS: at(1)}
}

func TestDecisionFlags(t *testing.T) {
	dec := func(chosen, reason string, p *collectors.Prediction) *collectors.Decision {
		return &collectors.Decision{RequestID: "r-1", AttemptID: "1", Chosen: chosen, Reason: reason, Prediction: p, At: at(0), TS: at(0), Format: "kvtop"}
	}
	ok := func() *collectors.Outcome { return outcome("r-1", "1", "w1", 200, ip(0), bp(true)) }
	with := func(o *collectors.Outcome, change func(o *collectors.Outcome)) *collectors.Outcome {
		change(o)
		return o
	}
	cases := []struct {
		name string
		d    *collectors.Decision
		o    *collectors.Outcome
		now  float64
		want string
	}{
		{"clean miss is not an error", dec("w1", "load-balance", pred("blocks", "w1", 0)), ok(), 1, ""},
		{"owner mismatch", dec("w1", "load-balance", pred("blocks", "w2", 12)), ok(), 1, "owner_mismatch"},
		{"owner named by URL is the same worker", dec("w1", "best-match", pred("blocks", "http://10.0.0.6:8000", 12)),
			with(ok(), func(o *collectors.Outcome) { o.CachedTokens = ip(192) }), 1, ""},
		{"prediction error", dec("w1", "best-match", pred("blocks", "w1", 12)), ok(), 1, "prediction_error"},
		{"prediction for another worker is not an error", dec("w1", "load-balance", pred("blocks", "w2", 12)), ok(), 1, "owner_mismatch"},
		{"cached unknown: no verdict", dec("w1", "best-match", pred("blocks", "w1", 12)),
			with(ok(), func(o *collectors.Outcome) { o.CachedTokens = nil }), 1, ""},
		{"character match", dec("w1", "best-match", pred("chars", "w1", 0)), ok(), 1, "char_match"},
		{"done=false is truncated", dec("w1", "", nil), with(ok(), func(o *collectors.Outcome) { o.Done = bp(false) }), 1, "truncated"},
		{"kvtop record without done is truncated", dec("w1", "", nil), with(ok(), func(o *collectors.Outcome) { o.Done = nil }), 1, "truncated"},
		{"a format without done leaves it unknown", dec("w1", "", nil),
			with(ok(), func(o *collectors.Outcome) { o.Done, o.Format = nil, "production-stack" }), 1, ""},
		{"an HTTP error is not truncation", dec("w1", "", nil),
			with(ok(), func(o *collectors.Outcome) { o.HTTPStatus, o.Done = 503, bp(false) }), 1, "http_error"},
		{"error", dec("w1", "", nil), with(ok(), func(o *collectors.Outcome) { o.Error = "upstream reset" }), 1, "error"},
		{"retry by reason", dec("w1", "retry", nil), ok(), 1, "retry"},
		{"retry by outcome", dec("w1", "", nil), with(ok(), func(o *collectors.Outcome) { o.RetryOf = "0" }), 1, "retry"},
		{"no outcome yet", dec("w1", "", nil), nil, 29, ""},
		// The log has never produced an outcome: none is missing.
		{"no outcome from a log without outcomes", dec("w1", "", pred("chars", "w2", 3)), nil, 30, "owner_mismatch,char_match"},
		{"a character match predicts no token reuse", dec("w1", "best-match", pred("chars", "w1", 40)), ok(), 1, "char_match"},
		{"no decision", nil, ok(), 1, "no_decision"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewState(Options{Workers: []WorkerSpec{{Name: "w1", Aliases: []string{"http://10.0.0.6:8000"}}, {Name: "w2"}}})
			if c.d != nil {
				s.Apply(c.d)
			}
			if c.o != nil {
				s.Apply(c.o)
			}
			d := s.Snapshot(at(c.now)).Decisions
			if len(d.Recent) != 1 || flags(d.Recent[0]) != c.want {
				t.Fatalf("flags = %q, want %q (%+v)", flags(d.Recent[0]), c.want, d.Recent)
			}
		})
	}
}

func TestDecisionJoinAndCounters(t *testing.T) {
	s := newTestState("w1", "w2")
	// r-1: attempt "" joins outcome attempt "1"; the example of the issue.
	s.Apply(&collectors.Decision{RequestID: "r-1", Chosen: "w1", Reason: "load-balance", Prediction: pred("blocks", "w2", 12),
		Load: &collectors.Load{Kind: "router-local-counter", Value: f(7), Scope: "router-local"}, Router: "r0", RouterVersion: "1d10e71",
		Model: "qwen3-8b", Endpoint: "/v1/chat/completions", Format: "kvtop", At: at(0), TS: at(0)})
	s.Apply(outcome("r-1", "1", "w1", 200, ip(0), bp(true)))
	// r-2: predicted reuse on the chosen worker, none happened.
	s.Apply(&collectors.Decision{RequestID: "r-2", AttemptID: "1", Chosen: "w2", Prediction: pred("blocks", "w2", 5), At: at(0)})
	s.Apply(outcome("r-2", "1", "w2", 200, ip(0), bp(false)))
	// r-3 attempt 2: retried, outcome pending. The same decision read twice.
	for i := 0; i < 2; i++ {
		s.Apply(&collectors.Decision{RequestID: "r-3", AttemptID: "2", Chosen: "w1", Reason: "retry", At: at(0)})
	}
	// An outcome without a decision, and two bad lines.
	s.Apply(outcome("r-9", "1", "w1", 200, ip(16), bp(true)))
	for i := 0; i < 2; i++ {
		s.Apply(&collectors.SourceError{Source: "decisions /var/log/x.jsonl", Kind: "bad_line", Message: "line 7: invalid JSON", At: at(1)})
	}
	d := s.Snapshot(at(2)).Decisions
	got := [7]int{d.Records, d.WithOutcome, d.OrphanOutcomes, d.OwnerMismatch, d.PredictionErrors, d.Truncated, d.BadLines}
	if got != [7]int{3, 2, 1, 1, 1, 1, 2} {
		t.Fatalf("counters (records, with_outcome, orphans, mismatch, pred errors, truncated, bad lines) = %v", got)
	}
	if len(d.Recent) != 4 || d.Recent[3].RequestID != "r-9" || d.Recent[2].AttemptID != "2" {
		t.Fatalf("recent order = %+v", d.Recent)
	}
	r := d.Recent[0]
	if r.RequestID != "r-1" || r.AttemptID != "1" || r.Chosen != "w1" || r.Owner != "w2" || !eqp(r.Matched, f(12)) ||
		!eqp(r.Total, f(20)) || r.Units != "blocks" || r.CachedTokens == nil || *r.CachedTokens != 0 || !eqp(r.TTFTMS, f(210)) ||
		r.Done == nil || !*r.Done || flags(r) != "owner_mismatch" || !r.At.Equal(at(0)) {
		t.Fatalf("row = %+v", r)
	}
	if r.Prediction == nil || r.Prediction.Source != "kv-events" || !eqp(r.Prediction.AgeMS, f(350)) || r.Load == nil ||
		r.Load.Scope != "router-local" || r.Outcome == nil || r.Outcome.HTTPStatus != 200 || r.Outcome.FinishReason != "stop" ||
		r.RouterVersion != "1d10e71" || r.Endpoint != "/v1/chat/completions" || *r.PromptTokens != 320 || !eqp(r.QueueMS, f(40)) {
		t.Fatalf("row details = %+v", r)
	}
	if d.Recent[1].Flags[0] != "prediction_error" || !slices.Contains(d.Recent[1].Flags, "truncated") {
		t.Fatalf("r-2 flags = %v", d.Recent[1].Flags)
	}
	// The decision for the orphan outcome shows up late: joined.
	s.Apply(&collectors.Decision{RequestID: "r-9", Chosen: "w1", At: at(3)})
	d = s.Snapshot(at(3)).Decisions
	if d.Records != 4 || d.WithOutcome != 3 || d.OrphanOutcomes != 0 || flags(d.Recent[3]) != "" {
		t.Fatalf("after the late decision: %+v", d)
	}
}

func TestDecisionJournalBounded(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w1"}, {Name: "w2"}}, Limits: Limits{Decisions: 50, RecentDecisions: 10}})
	for i := 0; i < 500; i++ {
		req := fmt.Sprint("r-", i)
		s.Apply(&collectors.Decision{RequestID: req, Chosen: "w1", Prediction: pred("blocks", []string{"w1", "w2"}[i%2], 4), At: at(0)})
		if i%3 != 0 {
			s.Apply(outcome(req, "", "w1", 200, ip(0), bp(i%5 != 0)))
		}
	}
	// A late outcome for a decision long evicted is an orphan.
	s.Apply(outcome("r-0", "1", "w1", 200, ip(0), bp(true)))
	j := s.journal
	if j.n != 50 || len(j.byKey) != 50 {
		t.Fatalf("journal holds %d records (%d keys), limit 50", j.n, len(j.byKey))
	}
	d := s.Snapshot(at(1)).Decisions
	if len(d.Recent) != 10 || d.Recent[9].RequestID != "r-0" || d.Recent[8].RequestID != "r-499" {
		t.Fatalf("recent = %d rows, last %q", len(d.Recent), d.Recent[len(d.Recent)-1].RequestID)
	}
	// Counters must equal a recount of what is kept.
	var recount [6]int
	for i := 0; i < j.n; i++ {
		r := j.ring[(j.head+i)%j.limit]
		if r.d != nil {
			recount[0]++
			if r.o != nil {
				recount[1]++
			}
		} else {
			recount[2]++
		}
		for k, bit := range []uint16{flagOwnerMismatch, flagPredictionError, flagTruncated} {
			if r.flags&bit != 0 {
				recount[3+k]++
			}
		}
	}
	got := [6]int{d.Records, d.WithOutcome, d.OrphanOutcomes, d.OwnerMismatch, d.PredictionErrors, d.Truncated}
	if got != recount || d.OrphanOutcomes != 1 || d.Records != 49 {
		t.Fatalf("counters %v, recount %v", got, recount)
	}
	// The totals count every record that became flagged, evicted or
	// not: the odd requests predicted w2 and went to w1 (250); the even
	// ones predicted reuse on w1 and got 0 cached tokens, those with an
	// outcome (250 − 84 multiples of 6); done=false on the multiples of 5
	// with an outcome (100 − 34 multiples of 15).
	if want := (snapshot.FlaggedTotal{OwnerMismatch: 250, PredictionErrors: 166, Truncated: 66}); d.FlaggedTotal != want {
		t.Errorf("flagged totals %+v, want %+v (the journal keeps %d, %d, %d)", d.FlaggedTotal, want, d.OwnerMismatch, d.PredictionErrors, d.Truncated)
	}
}

// no_outcome is flagged only for decisions from a log that produces
// outcomes (by itself, or joined from another log); a log of decisions
// only would otherwise flag every row.
func TestNoOutcomeOnlyWhereOutcomesExist(t *testing.T) {
	s := newTestState("w1")
	dec := func(id, src string) *collectors.Decision {
		return &collectors.Decision{RequestID: id, Chosen: "w1", Source: src, Format: "kvtop", At: at(0), TS: at(0)}
	}
	// a.jsonl logs decisions and outcomes; b.jsonl decisions only; c.jsonl
	// decisions whose outcomes come from another log (the gateway's).
	s.Apply(dec("a-1", "a.jsonl"))
	s.Apply(dec("a-2", "a.jsonl"))
	o := outcome("a-1", "1", "w1", 200, ip(16), bp(true))
	o.Source = "a.jsonl"
	s.Apply(o)
	s.Apply(dec("b-1", "b.jsonl"))
	s.Apply(dec("c-1", "c.jsonl"))
	s.Apply(dec("c-2", "c.jsonl"))
	o = outcome("c-1", "1", "w1", 200, ip(16), bp(true))
	o.Source = "gateway.jsonl"
	s.Apply(o)
	got := map[string]string{}
	for _, r := range s.Snapshot(at(40)).Decisions.Recent {
		got[r.RequestID] = flags(r)
	}
	want := map[string]string{"a-1": "", "a-2": "no_outcome", "b-1": "", "c-1": "", "c-2": "no_outcome"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s flags %q, want %q", id, got[id], w)
		}
	}
}

// Lines read from what the log held at start are history: in the journal
// (joins, rows), never in the request hit rate, the decision-named hot
// prefixes or the bad-lines alert of the current window.
func TestBackfillIsHistoryNotTraffic(t *testing.T) {
	s := newTestState("w0", "w1")
	for i := 0; i < 50; i++ {
		d := decide(fmt.Sprint("old-", i), "w0", "9f2c0000000000aa", at(1))
		d.Backfill = true
		s.Apply(d)
		o := outcome(fmt.Sprint("old-", i), "1", "w0", 200, ip(0), bp(true))
		o.Backfill = true
		s.Apply(o)
	}
	s.Apply(&collectors.SourceError{Source: "decisions d.jsonl", Kind: "bad_line", Message: "byte 10: not JSON", Backfill: true, At: at(1)})
	// Live: 3 requests, all hits, on another prefix.
	for i := 0; i < 3; i++ {
		s.Apply(decide(fmt.Sprint("new-", i), "w1", "0000000000000bbb", at(2)))
		s.Apply(outcome(fmt.Sprint("new-", i), "1", "w1", 200, ip(64), bp(true)))
	}
	snap := s.Snapshot(at(2))
	d := snap.Decisions
	if d.Records != 53 || d.WithOutcome != 53 || d.Backfill != 50 || d.BadLines != 1 {
		t.Fatalf("journal: records %d with outcome %d backfill %d bad lines %d; want 53 53 50 1", d.Records, d.WithOutcome, d.Backfill, d.BadLines)
	}
	if !eqp(snap.Pool.PrefixHitRate.Requests, f(1)) || row(t, snap, "w0").PrefixHitRate.Requests != nil {
		t.Fatalf("request hit: pool %v w0 %v; want 1 (3 live hits) and unknown", show(snap.Pool.PrefixHitRate.Requests), show(row(t, snap, "w0").PrefixHitRate.Requests))
	}
	for _, p := range snap.Prefixes {
		if p.ID == "9f2c0000000000aa" {
			t.Fatalf("a backfilled prefix is hot: %+v", p)
		}
	}
	if a := alertOf(snap, "bad_lines"); a != nil {
		t.Fatalf("a backfilled bad line alerted: %+v", a)
	}
}

// Dynamo names data-parallel rank r > 0 "worker_<id>/dp<r>": the same
// worker. With workers configured, a decision naming none of them makes
// no ghost row but an alert; with none configured, decisions discover.
func TestDecisionWorkerNames(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"worker_7"}}, {Name: "w1"}}})
	s.Apply(decide("r-1", "worker_7", "", at(0)))
	s.Apply(decide("r-2", "worker_7/dp3", "", at(0)))
	s.Apply(decide("r-3", "worker_123", "", at(0)))
	s.Apply(decide("r-4", "worker_123/dp1", "", at(0)))
	snap := s.Snapshot(at(1))
	if len(snap.Workers) != 2 {
		t.Fatalf("workers = %d, want the 2 configured (no ghost rows)", len(snap.Workers))
	}
	var chosen []string
	for _, r := range snap.Decisions.Recent {
		chosen = append(chosen, r.Chosen)
	}
	if got := strings.Join(chosen, ","); got != "w0,w0,worker_123,worker_123/dp1" {
		t.Fatalf("chosen = %s", got)
	}
	a := alertOf(snap, "unmapped_worker")
	if a == nil || a.Text != "decisions name worker_123, which is no configured worker: add it to aliases" {
		t.Fatalf("alert = %+v", a)
	}

	bare := NewState(Options{})
	bare.Apply(&collectors.Decision{RequestID: "r-1", Chosen: "worker_7", Source: "/var/log/dyn.jsonl", At: at(0)})
	bare.Apply(&collectors.Decision{RequestID: "r-2", Chosen: "worker_7/dp1", Source: "/var/log/dyn.jsonl", At: at(0)})
	snap = bare.Snapshot(at(1))
	if len(snap.Workers) != 1 || snap.Workers[0].Name != "worker_7" || snap.Workers[0].Reason != "discovered from decisions /var/log/dyn.jsonl" {
		t.Fatalf("discovered = %+v", snap.Workers)
	}
}

// Each decision log's reading state reaches the snapshot, so an empty
// decisions screen can say why.
func TestDecisionSourcesInSnapshot(t *testing.T) {
	s := newTestState("w0")
	s.Apply(&collectors.DecisionSource{Source: "/var/log/dyn.jsonl", Format: "auto", Lines: 10, Skipped: 10,
		SkippedBy: map[string]uint64{"no request id": 10}, At: at(0)})
	s.Apply(&collectors.DecisionSource{Source: "/var/log/x.jsonl", Format: "kvtop", Waiting: true, At: at(0)})
	upd := &collectors.DecisionSource{Source: "/var/log/dyn.jsonl", Format: "auto", Lines: 1240, Skipped: 1240,
		SkippedBy: map[string]uint64{"no request id": 1240}, At: at(1)}
	s.Apply(upd)
	upd.SkippedBy["no request id"] = 1 // the collector's map is its own
	snap := s.Snapshot(at(2))
	src := snap.Decisions.Sources
	if len(src) != 2 || src[0].Source != "/var/log/dyn.jsonl" || src[0].Lines != 1240 || src[0].SkippedBy["no request id"] != 1240 ||
		!src[1].Waiting || src[1].Format != "kvtop" {
		t.Fatalf("sources = %+v", src)
	}
}

// A decision still waiting for its outcome is pending until the no_outcome
// timeout, then flagged no_outcome; once the outcome arrives it is
// neither. A log that never records outcomes has no pending rows: its
// outcome figures are unknown, not on their way.
func TestPendingUntilNoOutcome(t *testing.T) {
	s := newTestState("w1")
	dec := func(id, src string, sec float64) *collectors.Decision {
		return &collectors.Decision{RequestID: id, Chosen: "w1", Source: src, Format: "kvtop", At: at(sec), TS: at(sec)}
	}
	o := outcome("a-0", "1", "w1", 200, ip(16), bp(true))
	o.Source = "a.jsonl"
	s.Apply(dec("a-0", "a.jsonl", 0))
	s.Apply(o)
	s.Apply(dec("a-1", "a.jsonl", 1))
	s.Apply(dec("b-1", "b.jsonl", 1))
	cases := []struct {
		now         float64
		wantPending map[string]bool
		wantFlags   map[string]string
	}{
		{2, map[string]bool{"a-0": false, "a-1": true, "b-1": false}, map[string]string{"a-1": "", "b-1": ""}},
		{30.9, map[string]bool{"a-1": true}, map[string]string{"a-1": ""}},
		{31, map[string]bool{"a-1": false}, map[string]string{"a-1": "no_outcome"}},
	}
	for _, c := range cases {
		got := map[string]pendingRow{}
		for _, r := range s.Snapshot(at(c.now)).Decisions.Recent {
			got[r.RequestID] = pendingRow{r.Pending, flags(r)}
		}
		for id, want := range c.wantPending {
			if got[id].pending != want {
				t.Errorf("at %v s: %s pending %v, want %v", c.now, id, got[id].pending, want)
			}
		}
		for id, want := range c.wantFlags {
			if got[id].flags != want {
				t.Errorf("at %v s: %s flags %q, want %q", c.now, id, got[id].flags, want)
			}
		}
	}
	o = outcome("a-1", "1", "w1", 200, ip(0), bp(true))
	o.Source = "a.jsonl"
	s.Apply(o)
	for _, r := range s.Snapshot(at(32)).Decisions.Recent {
		if r.RequestID == "a-1" && (r.Pending || flags(r) != "") {
			t.Errorf("a-1 with its outcome: pending %v flags %q", r.Pending, flags(r))
		}
	}
}

type pendingRow struct {
	pending bool
	flags   string
}

// TestDisaggregatedRecord: a Dynamo trace names the prefill worker (the
// chosen one, whose cache the router predicted) and the decode worker; the
// record shows both under the pool's names, its outcome's worker too, and
// flags a predicted reuse the engine did not find. A decode worker that is
// a rank of the chosen one is the same worker: not named.
func TestDisaggregatedRecord(t *testing.T) {
	trace := func(req, decode string, cached *int) (*collectors.Decision, *collectors.Outcome) {
		d := &collectors.Decision{RequestID: req, Chosen: "worker_11", DecodeWorker: decode, Format: "dynamo-trace", At: at(0), TS: at(0),
			Prediction: &collectors.Prediction{Source: "kv-events", Input: "tokens", Units: "tokens", Matched: f(512), Total: f(1024), Owner: "worker_11"}}
		o := &collectors.Outcome{RequestID: req, Worker: "worker_11", PromptTokens: ip(1024), CachedTokens: cached, TTFTMS: f(95),
			OutputTokens: ip(40), PrefillMS: f(80), ITLMS: f(7.5), KVTransferMS: f(12.7), Format: "dynamo-trace", At: at(0), TS: at(0.4)}
		return d, o
	}
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w1", Aliases: []string{"worker_11"}}, {Name: "w2", Aliases: []string{"worker_22"}}}})
	for _, x := range []struct {
		req, decode string
		cached      *int
	}{{"r-disagg", "worker_22/dp1", ip(0)}, {"r-rank", "worker_11/dp3", ip(512)}, {"r-unknown", "worker_22", nil}} {
		d, o := trace(x.req, x.decode, x.cached)
		s.Apply(d)
		s.Apply(o)
	}
	rows := s.Snapshot(at(1)).Decisions.Recent
	if len(rows) != 3 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	r := rows[0]
	if r.Chosen != "w1" || r.DecodeWorker != "w2" || r.Owner != "w1" || flags(r) != "prediction_error" || r.Outcome == nil ||
		r.Outcome.Worker != "w1" || *r.Outcome.OutputTokens != 40 || *r.Outcome.ITLMS != 7.5 || *r.Outcome.PrefillMS != 80 ||
		*r.Outcome.KVTransferMS != 12.7 || r.Format != "dynamo-trace" {
		t.Errorf("disaggregated row %+v outcome %+v", r, r.Outcome)
	}
	if r := rows[1]; r.DecodeWorker != "" || flags(r) != "" {
		t.Errorf("a rank of the chosen worker as decode worker: %+v", r)
	}
	// The engine's count unknown: no verdict on the prediction.
	if r := rows[2]; r.DecodeWorker != "w2" || flags(r) != "" || r.CachedTokens != nil {
		t.Errorf("cached unknown: %+v", r)
	}

	// Without configured workers both workers are found from the records.
	s = NewState(Options{})
	d, o := trace("r-1", "worker_22/dp1", ip(0))
	s.Apply(d)
	s.Apply(o)
	snap := s.Snapshot(at(1))
	var names []string
	for _, w := range snap.Workers {
		names = append(names, w.Name)
	}
	if slices.Sort(names); strings.Join(names, ",") != "worker_11,worker_22" || snap.Decisions.Recent[0].DecodeWorker != "worker_22" {
		t.Errorf("workers %v, row %+v", names, snap.Decisions.Recent[0])
	}
}
