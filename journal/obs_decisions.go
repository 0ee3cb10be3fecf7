package journal

import (
	"slices"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// A decision log's observations: a routing decision (tag 'd'), an
// outcome ('o') and the log's reading state ('q').
func init() {
	register(tagDecision, (*encoder).decision, (*decoder).decision).catchUp =
		backfill(func(v *collectors.Decision) bool { return v.Backfill })
	register(tagOutcome, (*encoder).outcome, (*decoder).outcome).catchUp =
		backfill(func(v *collectors.Outcome) bool { return v.Backfill })
	register(tagDecSrc, (*encoder).decisionSource, (*decoder).decisionSource)
}

func (e *encoder) decision(v *collectors.Decision) {
	w := e.beginAt(tagDecision, v.At)
	w.tm(v.TS)
	w.str(v.RequestID)
	for _, s := range []string{v.AttemptID, v.Router, v.RouterVersion, v.Model, v.Pool, v.Endpoint} {
		w.sym(s)
	}
	if p := v.Prediction; p != nil {
		w.byte1(1)
		w.sym(p.Source)
		w.sym(p.Input)
		w.sym(p.Units)
		w.fp(p.Matched)
		w.fp(p.Total)
		w.sym(p.Owner)
		w.iv(int64(p.BlockSize))
		w.fp(p.AgeMS)
	} else {
		w.byte1(0)
	}
	w.sym(v.Chosen)
	w.sym(v.Reason)
	if l := v.Load; l != nil {
		w.byte1(1)
		w.sym(l.Kind)
		w.fp(l.Value)
		w.sym(l.Scope)
	} else {
		w.byte1(0)
	}
	w.sym(v.Prefix)
	w.count(len(v.Candidates), v.Candidates == nil)
	for _, c := range v.Candidates {
		w.sym(c.Worker)
		w.fp(c.Score)
		w.fp(c.Matched)
		w.fp(c.Load)
	}
	w.sym(v.Format)
	w.sym(v.Source)
	w.flag(v.Backfill)
	w.sym(v.DecodeWorker) // added after the first release: a reader stops before it on older journals
	e.end()
}

func (e *encoder) outcome(v *collectors.Outcome) {
	w := e.beginAt(tagOutcome, v.At)
	w.tm(v.TS)
	w.str(v.RequestID)
	w.sym(v.AttemptID)
	w.sym(v.Worker)
	w.iv(int64(v.HTTPStatus))
	w.ip(v.PromptTokens)
	w.ip(v.CachedTokens)
	w.fp(v.QueueMS)
	w.fp(v.TTFTMS)
	w.fp(v.E2EMS)
	w.sym(v.FinishReason)
	w.bp(v.Done)
	w.sym(v.Error)
	w.str(v.RetryOf)
	w.sym(v.Format)
	w.sym(v.Source)
	w.flag(v.Backfill)
	// Added after the first release (Dynamo's request traces): older
	// journals end before them.
	w.ip(v.OutputTokens)
	w.fp(v.PrefillMS)
	w.fp(v.ITLMS)
	w.fp(v.KVTransferMS)
	// Added with kvtop tap (issue 28): older journals end before them.
	w.sym(v.Observer)
	w.sym(v.End)
	w.fp(v.TTFBMS)
	w.fp(v.MaxGapMS)
	w.ip(v.Breaks)
	w.ip(v.PromptChars)
	w.flag(v.ClientSlow)
	e.end()
}

func (e *encoder) decisionSource(v *collectors.DecisionSource) {
	w := e.beginAt(tagDecSrc, v.At)
	w.sym(v.Source)
	w.sym(v.Format)
	w.sym(v.Detected)
	for _, n := range []uint64{v.Lines, v.Decisions, v.Outcomes, v.Bad, v.Skipped} {
		w.uv(n)
	}
	w.count(len(v.SkippedBy), v.SkippedBy == nil)
	keys := make([]string, 0, len(v.SkippedBy))
	for k := range v.SkippedBy {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.sym(k)
		w.uv(v.SkippedBy[k])
	}
	w.flag(v.Waiting)
	e.end()
}

func (d *decoder) decision(at time.Time) *collectors.Decision {
	r := &d.r
	v := &collectors.Decision{At: at}
	v.TS = r.tm()
	v.RequestID = r.str()
	for _, s := range []*string{&v.AttemptID, &v.Router, &v.RouterVersion, &v.Model, &v.Pool, &v.Endpoint} {
		*s = r.sym()
	}
	if r.flag() {
		p := &collectors.Prediction{}
		p.Source = r.sym()
		p.Input = r.sym()
		p.Units = r.sym()
		p.Matched = r.fp()
		p.Total = r.fp()
		p.Owner = r.sym()
		p.BlockSize = r.int()
		p.AgeMS = r.fp()
		v.Prediction = p
	}
	v.Chosen = r.sym()
	v.Reason = r.sym()
	if r.flag() {
		v.Load = &collectors.Load{Kind: r.sym(), Value: r.fp(), Scope: r.sym()}
	}
	v.Prefix = r.sym()
	if n, isNil := r.count(4); !isNil {
		v.Candidates = make([]collectors.Candidate, n)
		for i := range v.Candidates {
			v.Candidates[i] = collectors.Candidate{Worker: r.sym(), Score: r.fp(), Matched: r.fp(), Load: r.fp()}
		}
	}
	v.Format = r.sym()
	v.Source = r.sym()
	v.Backfill = r.flag()
	if len(r.b) > 0 && r.err == nil { // a journal recorded before it ends here
		v.DecodeWorker = r.sym()
	}
	return v
}

func (d *decoder) outcome(at time.Time) *collectors.Outcome {
	r := &d.r
	v := &collectors.Outcome{At: at}
	v.TS = r.tm()
	v.RequestID = r.str()
	v.AttemptID = r.sym()
	v.Worker = r.sym()
	v.HTTPStatus = r.int()
	v.PromptTokens = r.ip()
	v.CachedTokens = r.ip()
	v.QueueMS = r.fp()
	v.TTFTMS = r.fp()
	v.E2EMS = r.fp()
	v.FinishReason = r.sym()
	v.Done = r.bp()
	v.Error = r.sym()
	v.RetryOf = r.str()
	v.Format = r.sym()
	v.Source = r.sym()
	v.Backfill = r.flag()
	if len(r.b) > 0 && r.err == nil { // a journal recorded before them ends here
		v.OutputTokens = r.ip()
		v.PrefillMS = r.fp()
		v.ITLMS = r.fp()
		v.KVTransferMS = r.fp()
	}
	if len(r.b) > 0 && r.err == nil { // a journal recorded before kvtop tap ends here
		v.Observer = r.sym()
		v.End = r.sym()
		v.TTFBMS = r.fp()
		v.MaxGapMS = r.fp()
		v.Breaks = r.ip()
		v.PromptChars = r.ip()
		v.ClientSlow = r.flag()
	}
	return v
}

func (d *decoder) decisionSource(at time.Time) *collectors.DecisionSource {
	r := &d.r
	v := &collectors.DecisionSource{At: at}
	v.Source = r.sym()
	v.Format = r.sym()
	v.Detected = r.sym()
	for _, n := range []*uint64{&v.Lines, &v.Decisions, &v.Outcomes, &v.Bad, &v.Skipped} {
		*n = r.uv()
	}
	if n, isNil := r.count(2); !isNil {
		v.SkippedBy = make(map[string]uint64, n)
		for i := 0; i < n && r.err == nil; i++ {
			k := r.sym()
			v.SkippedBy[k] = r.uv()
		}
	}
	v.Waiting = r.flag()
	return v
}
