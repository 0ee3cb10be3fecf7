package pool

import (
	"time"
)

// buildDecisions reads the journal's counters and its newest rows.
func (s *State) buildDecisions(now time.Time) Decisions {
	j := s.journal
	out := Decisions{
		Records:          j.records,
		WithOutcome:      j.withOutcome,
		OrphanOutcomes:   j.orphans,
		OwnerMismatch:    j.ownerMismatch,
		PredictionErrors: j.predictionErrors,
		Truncated:        j.truncated,
		FlaggedTotal:     j.flaggedTotal,
		BadLines:         s.badLines,
		Backfill:         j.backfill,
		Sources:          make([]DecisionSource, 0, len(s.decSources)),
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
	n := min(j.n, s.opt.Limits.RecentDecisions)
	out.Recent = make([]DecisionRow, 0, n)
	for i := j.n - n; i < j.n; i++ {
		out.Recent = append(out.Recent, decisionRow(j.ring[(j.head+i)%j.limit], now, expect))
	}
	return out
}

// decisionRow is one attempt as shown: the decision, what happened, flags.
func decisionRow(r *record, now time.Time, expect func(string) bool) DecisionRow {
	row := DecisionRow{
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
			row.Prediction = &PredictionInfo{
				Source: p.Source, Input: p.Input, Units: p.Units,
				Matched: cp(p.Matched), Total: cp(p.Total), Owner: r.owner, AgeMS: cp(p.AgeMS),
			}
		}
		if l := d.Load; l != nil {
			row.Load = &LoadInfo{Kind: l.Kind, Value: cp(l.Value), Scope: l.Scope}
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
		row.Outcome = &OutcomeInfo{
			At: o.TS, Worker: o.Worker, HTTPStatus: o.HTTPStatus, E2EMS: cp(o.E2EMS),
			FinishReason: o.FinishReason, Error: o.Error, RetryOf: o.RetryOf,
			OutputTokens: cpInt(o.OutputTokens), PrefillMS: cp(o.PrefillMS), ITLMS: cp(o.ITLMS), KVTransferMS: cp(o.KVTransferMS),
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
