package pool

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// buildDecisions reads the journal's counters and its newest rows.
func (s *State) buildDecisions(now time.Time) snapshot.Decisions {
	j := s.journal
	out := snapshot.Decisions{
		Records:          j.records,
		WithOutcome:      j.withOutcome,
		OrphanOutcomes:   j.orphans,
		OwnerMismatch:    j.ownerMismatch,
		PredictionErrors: j.predictionErrors,
		Truncated:        j.truncated,
		FlaggedTotal:     j.flaggedTotal,
		BadLines:         s.badLines,
		Backfill:         j.backfill,
		Sources:          make([]snapshot.DecisionSource, 0, len(s.decSources)),
		Unmapped:         s.unmapped.recent(now, s.window),
	}
	for _, src := range s.decSources {
		c := src
		c.SkippedBy = make(map[string]uint64, len(src.SkippedBy))
		for k, v := range src.SkippedBy {
			c.SkippedBy[k] = v
		}
		out.Sources = append(out.Sources, c)
	}
	expect := func(source string) bool { return s.outcomeSources[source] }
	n := j.recentRows(now, s.opt.Limits.RecentDecisions)
	out.Recent = make([]snapshot.DecisionRow, n)
	for i := range out.Recent {
		r := j.ring[(j.head+j.n-n+i)%j.limit]
		pending, noOutcome := r.pending(now, expect), r.noOutcome(now, expect)
		if r.row == nil || r.row.Pending != pending || r.rowNoOutcome != noOutcome {
			// Built once per change: a row that did not change since the
			// last snapshot shares that one's values (snapshots are
			// immutable), so a busy pool's two minutes of rows cost a copy.
			row := decisionRow(r, now, expect)
			r.row, r.rowNoOutcome = &row, noOutcome
		}
		out.Recent[i] = *r.row
	}
	// Records that left the window drop the row they kept for it.
	j.builds++
	for i := j.n - n; i < j.n; i++ {
		j.ring[(j.head+i)%j.limit].rowBuild = j.builds
	}
	for _, r := range j.shown {
		if r.rowBuild != j.builds {
			r.row = nil
		}
	}
	j.shown = j.shown[:0]
	for i := j.n - n; i < j.n; i++ {
		j.shown = append(j.shown, j.ring[(j.head+i)%j.limit])
	}
	return out
}

// recentRows is how many of the newest records Snapshot.Decisions.Recent
// holds: limit when set, else those of the last RecentDecisionsSpan on
// kvtop's clock, at least RecentDecisionsMin, at most RecentDecisionsMax.
func (j *journal) recentRows(now time.Time, limit int) int {
	if limit > 0 {
		return min(j.n, limit)
	}
	n := min(j.n, RecentDecisionsMin)
	since := now.Add(-RecentDecisionsSpan)
	for n < min(j.n, snapshot.RecentDecisionsMax) && !j.ring[(j.head+j.n-1-n)%j.limit].seen.Before(since) {
		n++
	}
	return n
}

// decisionRow is one attempt as shown: the decision, what happened, flags.
func decisionRow(r *record, now time.Time, expect func(string) bool) snapshot.DecisionRow {
	row := snapshot.DecisionRow{
		RequestID:    r.key.req,
		AttemptID:    r.key.att,
		Chosen:       r.chosen,
		DecodeWorker: r.decode,
		Owner:        r.owner,
		Flags:        r.rowFlags(now, expect),
		Pending:      r.pending(now, expect),
	}
	if d := r.d; d != nil {
		row.At = d.TS
		row.Router, row.RouterVersion, row.Model = d.Router, d.RouterVersion, d.Model
		row.Endpoint, row.Reason, row.Format, row.Prefix = d.Endpoint, d.Reason, d.Format, d.Prefix
		if p := d.Prediction; p != nil {
			row.Matched, row.Total, row.Units = cp(p.Matched), cp(p.Total), p.Units
			row.Prediction = &snapshot.PredictionInfo{
				Source: p.Source, Input: p.Input, Units: p.Units,
				Matched: cp(p.Matched), Total: cp(p.Total), Owner: r.owner, AgeMS: cp(p.AgeMS),
			}
		}
		if l := d.Load; l != nil {
			row.Load = &snapshot.LoadInfo{Kind: l.Kind, Value: cp(l.Value), Scope: l.Scope}
		}
	}
	if o := r.o; o != nil {
		if r.d == nil {
			row.At = o.TS
			row.Format = o.Format
		}
		row.CachedTokens = cpInt(o.CachedTokens)
		row.PromptTokens = cpInt(o.PromptTokens)
		row.QueueMS, row.TTFTMS = cp(o.QueueMS), cp(o.TTFTMS)
		if o.Done != nil {
			v := *o.Done
			row.Done = &v
		}
		row.Outcome = &snapshot.OutcomeInfo{
			At: o.TS, Worker: o.Worker, HTTPStatus: o.HTTPStatus, E2EMS: cp(o.E2EMS),
			FinishReason: o.FinishReason, Error: o.Error, RetryOf: o.RetryOf,
			OutputTokens: cpInt(o.OutputTokens), PrefillMS: cp(o.PrefillMS), ITLMS: cp(o.ITLMS), KVTransferMS: cp(o.KVTransferMS),
		}
	}
	if c := r.c; c != nil {
		row.Client = clientInfo(c)
		if r.d == nil && r.o == nil {
			row.At, row.Format = c.TS, c.Format
		}
		// Whether the stream finished is the client's to say.
		done := c.End == "done"
		row.Done = &done
		if row.TTFTMS == nil {
			row.TTFTMS = cp(c.TTFTMS)
		}
		if row.CachedTokens == nil {
			row.CachedTokens = cpInt(c.CachedTokens)
		}
		if row.PromptTokens == nil {
			row.PromptTokens = cpInt(c.PromptTokens)
		}
	}
	row.Recompute = r.rc.info()
	return row
}

func cpInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
