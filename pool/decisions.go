package pool

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// noOutcomeAfter is how long a decision may wait for its outcome before it
// is flagged no_outcome (kvtop clock).
const noOutcomeAfter = 30 * time.Second

// Row flags. no_outcome depends on the clock and is computed per snapshot.
const (
	flagOwnerMismatch uint16 = 1 << iota
	flagPredictionError
	flagTruncated
	flagCharMatch
	flagNoDecision
	flagRetry
	flagError
	flagHTTPError
	flagRecompute
	flagStreamBreak
)

var flagNames = []struct {
	bit  uint16
	name string
}{
	{flagOwnerMismatch, "owner_mismatch"},
	{flagPredictionError, "prediction_error"},
	{flagTruncated, "truncated"},
	{flagCharMatch, "char_match"},
	{flagNoDecision, "no_decision"},
	{flagRetry, "retry"},
	{flagError, "error"},
	{flagHTTPError, "http_error"},
	{flagRecompute, "recompute"},
	{flagStreamBreak, "stream_break"},
}

type jkey struct{ req, att string }

// record is one attempt: its decision, its outcome, or both.
type record struct {
	key    jkey
	d      *collectors.Decision // copied; Prediction and Load copied too
	o      *collectors.Outcome  // copied: the router's (or a log's) outcome
	c      *collectors.Outcome  // copied: the client's, from kvtop tap (clients.go)
	chosen string               // worker names after alias mapping
	owner  string
	decode string    // the decode worker when another one computed the prompt (mapped)
	seen   time.Time // kvtop clock of the decision (or first sighting)
	flags  uint16
	rc     recompute // recomputed prefill (recompute.go)
	// staleDone: its stale-index tokens were counted (ladder.go).
	staleDone bool
	// pkey is the index key of the prefix the decision names (0: none),
	// above the listed prefixes above it when it arrived (hotrest.go).
	pkey  uint64
	above [maxAbove]uint64
	// timedAt is its outcome's time (unix ns) when decision and outcome
	// are joined and neither is a backfill, else 0: what the hot-versus-
	// rest scan of every snapshot reads without touching either.
	timedAt int64
	// clientAt is its client outcome's time (unix ns) unless read as
	// history, else 0 (clients.go); hitCounted: its cached tokens are in
	// the request hit rate (once, from whichever outcome came first).
	clientAt   int64
	hitCounted bool

	// row is the record as the last snapshot showed it, while it is in
	// Snapshot.Decisions.Recent and unchanged (build_decisions.go): nil
	// once it changes or leaves. rowNoOutcome is whether that row carries
	// the clock's no_outcome flag; rowBuild the last build that listed it.
	row          *snapshot.DecisionRow
	rowNoOutcome bool
	rowBuild     uint64
}

// journal joins decisions and outcomes with bounded memory: a ring of the
// most recent attempts (oldest evicted) and counters kept in step with it,
// so a snapshot never scans the journal.
type journal struct {
	limit int
	ring  []*record // circular, oldest at head
	head  int
	n     int
	byKey map[jkey]*record
	// shown are the records the last snapshot listed in Recent, and
	// builds counts the snapshots built: a record that leaves the window
	// drops its row (record.row).
	shown  []*record
	builds uint64

	records, withOutcome, orphans              int
	ownerMismatch, predictionErrors, truncated int
	flaggedTotal                               snapshot.FlaggedTotal // only grows: a record counted when it becomes flagged
	backfill                                   int
}

func newJournal(limit int) *journal {
	return &journal{limit: limit, ring: make([]*record, limit), byKey: map[jkey]*record{}}
}

func attemptKey(req, att string) jkey {
	if att == "" {
		att = "1"
	}
	return jkey{req, att}
}

// get returns the record for k, creating (and evicting the oldest) if new.
func (j *journal) get(k jkey, at time.Time) *record {
	if r := j.byKey[k]; r != nil {
		return r
	}
	if j.n == j.limit {
		old := j.ring[j.head]
		j.count(old, -1)
		delete(j.byKey, old.key)
		j.ring[j.head] = nil
		j.head = (j.head + 1) % j.limit
		j.n--
	}
	r := &record{key: k, seen: at}
	j.ring[(j.head+j.n)%j.limit] = r
	j.n++
	j.byKey[k] = r
	return r
}

// count adds (sign +1) or removes (−1) a record's contribution.
func (j *journal) count(r *record, sign int) {
	if r.d != nil {
		j.records += sign
		if r.o != nil || r.c != nil {
			j.withOutcome += sign
		}
	} else if r.o != nil || r.c != nil {
		j.orphans += sign
	}
	if r.flags&flagOwnerMismatch != 0 {
		j.ownerMismatch += sign
	}
	if r.flags&flagPredictionError != 0 {
		j.predictionErrors += sign
	}
	if r.flags&flagTruncated != 0 {
		j.truncated += sign
	}
	if (r.d != nil && r.d.Backfill) || (r.d == nil && r.o != nil && r.o.Backfill) || (r.d == nil && r.o == nil && r.c != nil && r.c.Backfill) {
		j.backfill += sign
	}
}

// update recomputes a record's flags and keeps the counters in step.
func (j *journal) update(r *record, change func()) {
	r.row = nil
	j.count(r, -1)
	change()
	was := r.flags
	r.flags = flagsOf(r)
	if added := r.flags &^ was; added != 0 {
		if added&flagOwnerMismatch != 0 {
			j.flaggedTotal.OwnerMismatch++
		}
		if added&flagPredictionError != 0 {
			j.flaggedTotal.PredictionErrors++
		}
		if added&flagTruncated != 0 {
			j.flaggedTotal.Truncated++
		}
	}
	r.timedAt, r.clientAt = 0, 0
	if r.d != nil && r.o != nil && !r.d.Backfill && !r.o.Backfill {
		r.timedAt = r.o.At.UnixNano()
	}
	if r.c != nil && !r.c.Backfill {
		r.clientAt = r.c.At.UnixNano()
	}
	j.count(r, +1)
}

// flagsOf computes the clock-independent flags of a record.
func flagsOf(r *record) uint16 {
	var f uint16
	d, o := r.d, r.o
	var pred *collectors.Prediction
	if d != nil {
		pred = d.Prediction
	}
	if pred != nil && r.owner != "" && r.chosen != "" && r.owner != r.chosen {
		f |= flagOwnerMismatch
	}
	if pred != nil && pred.Units == "chars" {
		f |= flagCharMatch
	}
	// A prediction error: reuse predicted on the worker that got the
	// request, none observed. A prediction for another worker says nothing
	// about the chosen one, so it is never an error here; nor does a
	// character match, which cannot predict token reuse (char_match).
	if pred != nil && pred.Units != "chars" && r.owner != "" && r.owner == r.chosen && pred.Matched != nil && *pred.Matched > 0 &&
		o != nil && o.CachedTokens != nil && *o.CachedTokens == 0 {
		f |= flagPredictionError
	}
	if d == nil && (o != nil || r.c != nil) {
		f |= flagNoDecision
	}
	if (d != nil && d.Reason == "retry") || (o != nil && o.RetryOf != "") {
		f |= flagRetry
	}
	if r.rc.done && r.rc.tokens > 0 {
		f |= flagRecompute
	}
	if o != nil {
		if o.Error != "" {
			f |= flagError
		}
		if o.HTTPStatus >= 400 {
			f |= flagHTTPError
		}
		if r.c == nil && truncated(o) {
			f |= flagTruncated
		}
	}
	return f | clientFlags(r.c)
}

// truncated: HTTP 200 but the client did not see the end of the stream.
// done=false always counts. A missing done counts only in kvtop's own
// format, which always records it; formats that never carry it
// (production-stack, dynamo, llm-d) leave completion unknown, not failed.
func truncated(o *collectors.Outcome) bool {
	if o.HTTPStatus != 200 {
		return false
	}
	if o.Done != nil {
		return !*o.Done
	}
	return o.Format == "kvtop"
}

func (s *State) applyDecision(d *collectors.Decision) {
	c := *d
	if d.Prediction != nil {
		p := *d.Prediction
		p.Matched, p.Total, p.AgeMS = finite(p.Matched), finite(p.Total), finite(p.AgeMS)
		c.Prediction = &p
	}
	if d.Load != nil {
		l := *d.Load
		l.Value = finite(l.Value)
		c.Load = &l
	}
	c.Candidates = nil // not shown; not worth the memory

	chosen := s.decisionWorker(d.Chosen, d.Source, d.At)
	chosenName := d.Chosen
	if chosen != nil {
		chosenName = chosen.name
	}
	owner := ""
	if d.Prediction != nil && d.Prediction.Owner != "" {
		owner = s.workerName(d.Prediction.Owner)
	}
	// The decode worker of a disaggregated request is a worker too (found
	// like the chosen one); named on the record only when it is another
	// worker than the chosen (a rank of the same worker is not).
	decode := ""
	if d.DecodeWorker != "" {
		decode = d.DecodeWorker
		if w := s.decisionWorker(d.DecodeWorker, d.Source, d.At); w != nil {
			decode = w.name
		}
		if decode == chosenName || (chosen == nil && foldRank(decode) == foldRank(chosenName)) {
			decode = ""
		}
	}

	j := s.journal
	r := j.get(attemptKey(d.RequestID, d.AttemptID), d.At)
	repeat := r.d != nil
	j.update(r, func() {
		r.d = &c
		r.chosen, r.owner, r.decode = chosenName, owner, decode
		r.seen = d.At
		if !repeat {
			s.measureRecompute(r, d, chosen) // the index as it is now, at decision time
			if d.Prefix != "" {
				_, r.pkey = prefixKey(d.Prefix)
				r.above = s.listedAbove(r.pkey)
			}
		}
		s.settleRecompute(r, d.At)
	})
	s.settleStale(r)
	if r.o != nil {
		s.outcomeFor(d.Source)
	}
	if repeat || d.Backfill {
		// The same decision read twice is not new traffic; nor is history
		// read from the log at start (kept for the journal only).
		return
	}
	g := s.decPrefix.weight(d.At)
	s.decPrefix.addTotal(g)
	if d.Prefix != "" {
		id, k := prefixKey(d.Prefix)
		s.decPrefix.add(k, id, chosen, g)
	}
}

// decisionWorker resolves the worker a decision chose. Decisions discover
// workers only when none are configured: with a configured pool, a name
// that maps to no worker (worker_123 for w0..w3) would make a ghost row,
// so it is counted and named in an alert instead.
func (s *State) decisionWorker(name, source string, at time.Time) *worker {
	if name == "" {
		return nil
	}
	if len(s.opt.Workers) == 0 {
		origin := "decisions"
		if source != "" {
			origin += " " + source
		}
		return s.workerFor(name, origin)
	}
	w := s.workerFor(name, "")
	if w == nil {
		s.unmapped.note(foldRank(name), at)
	}
	return w
}

// outcomeFor records that decisions from source get outcomes, so a
// decision from it without one is worth a no_outcome flag.
func (s *State) outcomeFor(source string) {
	if !s.outcomeSources[source] && len(s.outcomeSources) < maxSources {
		s.outcomeSources[source] = true
	}
}

// copyOutcome copies an outcome for the journal, its numbers made finite
// and its worker named as the pool names it (a Dynamo trace names it
// worker_<id>, a router by URL).
func (s *State) copyOutcome(o *collectors.Outcome) *collectors.Outcome {
	c := *o
	c.PromptTokens, c.CachedTokens, c.OutputTokens = cpInt(o.PromptTokens), cpInt(o.CachedTokens), cpInt(o.OutputTokens)
	c.Breaks, c.PromptChars = cpInt(o.Breaks), cpInt(o.PromptChars)
	if o.Done != nil {
		v := *o.Done
		c.Done = &v
	}
	c.QueueMS, c.TTFTMS, c.E2EMS = finite(o.QueueMS), finite(o.TTFTMS), finite(o.E2EMS)
	c.PrefillMS, c.ITLMS, c.KVTransferMS = finite(o.PrefillMS), finite(o.ITLMS), finite(o.KVTransferMS)
	c.TTFBMS, c.MaxGapMS = finite(o.TTFBMS), finite(o.MaxGapMS)
	c.Worker = s.workerName(o.Worker)
	return &c
}

// countHit adds a request's cached tokens to the windowed request hit
// rate, once per request whichever of its outcomes (router's, client's)
// says it first; history read at start stays out.
func (s *State) countHit(r *record, o *collectors.Outcome) {
	if o.CachedTokens == nil || o.Backfill || r.hitCounted {
		return
	}
	r.hitCounted = true
	hit := 0.0
	if *o.CachedTokens > 0 {
		hit = 1
	}
	s.outcomes.add(o.At, hit, 1)
	if w := s.workerFor(o.Worker, ""); w != nil {
		w.outcomes.add(o.At, hit, 1)
	}
}

func (s *State) applyOutcome(o *collectors.Outcome) {
	if o.Observer == collectors.ObserverClient {
		s.applyClientOutcome(o)
		return
	}
	c := s.copyOutcome(o)
	s.outcomeFor(o.Source)
	j := s.journal
	r := j.get(attemptKey(o.RequestID, o.AttemptID), o.At)
	s.countHit(r, o)
	j.update(r, func() {
		r.o = c
		s.settleRecompute(r, o.At)
	})
	s.settleStale(r)
	if r.d != nil {
		s.outcomeFor(r.d.Source)
	}
}

// maxSources bounds the per-source tables (decision logs are configured:
// a handful).
const maxSources = 256

func (s *State) applyDecisionSource(d *collectors.DecisionSource) {
	c := snapshot.DecisionSource{
		Source: d.Source, Format: d.Format, Detected: d.Detected, Lines: d.Lines, Decisions: d.Decisions,
		Outcomes: d.Outcomes, Bad: d.Bad, Skipped: d.Skipped, Waiting: d.Waiting, At: d.At,
		SkippedBy: make(map[string]uint64, len(d.SkippedBy)),
	}
	for k, v := range d.SkippedBy {
		c.SkippedBy[k] = v
	}
	for i := range s.decSources {
		if s.decSources[i].Source == d.Source {
			s.decSources[i] = c
			return
		}
	}
	if len(s.decSources) < maxSources {
		s.decSources = append(s.decSources, c)
	}
}

// unmappedNames counts worker names from a source that map to no
// configured worker, bounded, for an info alert.
type unmappedNames struct {
	last map[string]time.Time
	n    map[string]int
}

const maxUnmapped = 64

func (u *unmappedNames) note(name string, at time.Time) {
	if u.last == nil {
		u.last, u.n = map[string]time.Time{}, map[string]int{}
	}
	if _, ok := u.last[name]; !ok && len(u.last) >= maxUnmapped {
		return
	}
	u.n[name]++
	if at.After(u.last[name]) {
		u.last[name] = at
	}
}

// recent lists the names seen within w before now, sorted.
func (u *unmappedNames) recent(now time.Time, w time.Duration) []string {
	out := []string{}
	for name, t := range u.last {
		if now.Sub(t) <= w {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// prefixKey parses a prefix named by a router (hex, maybe 0x-prefixed,
// maybe 32 bytes) into the index key: its last 8 bytes, as the KV event
// decoder keys bytes hashes. A name that is not hex gets a stable key of
// its own (it will not match the index: depth and replicas stay unknown).
func prefixKey(s string) (id string, key uint64) {
	id = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"))
	h := id
	if len(h) > 16 {
		h = h[len(h)-16:]
	}
	if v, err := strconv.ParseUint(h, 16, 64); err == nil && h != "" {
		return id, slotKey(v)
	}
	// FNV-1a of the name, with the top bit set to keep it apart from
	// small numeric keys.
	var x uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= 1099511628211
	}
	return s, slotKey(x | 1<<63)
}

// rowFlags names the record's flags, adding the clock-dependent
// no_outcome, in the documented order. no_outcome needs expect: outcomes
// are known to exist for this record's source (a log of decisions only
// would otherwise flag every row).
func (r *record) rowFlags(now time.Time, expect func(source string) bool) []string {
	out := []string{}
	for _, f := range flagNames {
		if r.flags&f.bit != 0 {
			out = append(out, f.name)
		}
		if f.bit == flagCharMatch && r.noOutcome(now, expect) {
			out = append(out, "no_outcome")
		}
	}
	return out
}

// noOutcome: the decision waited for its outcome longer than
// noOutcomeAfter, from a log known to record outcomes.
func (r *record) noOutcome(now time.Time, expect func(source string) bool) bool {
	return r.d != nil && r.o == nil && now.Sub(r.seen) >= noOutcomeAfter && expect(r.d.Source)
}

// pending: the decision waits for its outcome and may still get one (it is
// younger than noOutcomeAfter, from a log known to record outcomes).
func (r *record) pending(now time.Time, expect func(source string) bool) bool {
	return r.d != nil && r.o == nil && now.Sub(r.seen) < noOutcomeAfter && expect(r.d.Source)
}
