package pool

import (
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Recomputed prefill: the prompt tokens a request's chosen worker computed
// although a longer cached prefix of the same request sat on another up
// worker when the router decided. Per request whose decision and outcome
// kvtop joined:
//
//	recomputed = max(0, min(best resident prefix elsewhere, prompt) − cached tokens on the chosen worker)
//
// in tokens. "Resident elsewhere" is measured when the decision arrives:
//
//  1. From the router's prediction, when its units are blocks or tokens
//     (blocks × the block size the record gives, else the holder's): the
//     owner's match when the owner is another up worker, and every other
//     up candidate's match. When the owner is the chosen worker and no
//     candidate says more, the router saw no longer prefix elsewhere: 0.
//  2. Else from kvtop's own block index, when the record names the hash
//     of the deepest matched block (`prefix`): walking from it to the
//     root, the deepest block another up worker holds, × its block size.
//     This is how a cache-blind router's requests are measured: it
//     predicts nothing, but its log can say which prefix the request had.
//  3. Else the request is not measurable (a character match, or no
//     prediction and no prefix): counted apart, never guessed.
//
// The cached tokens are the outcome's cached_tokens (what the engine
// reused); an outcome without them is not measurable either. Failed
// requests (an error, HTTP ≥ 400) computed nothing worth counting and are
// left out. Records read from what a log held at start (backfill) are in
// the journal but not in the windowed figures.

// recompute is one record's measurement.
type recompute struct {
	measured bool // elsewhere is known
	// why the record is not measurable ("" while measured or not yet
	// looked at).
	why       string
	elsewhere int    // tokens of the best resident prefix on another up worker
	other     string // that worker ("" when none holds a longer prefix)
	source    string // "prediction" or "index"
	tokens    int    // recomputed tokens, once done
	settled   bool   // joined (once)
	done      bool   // tokens computed: joined, measured, not failed
}

// Sources of "resident elsewhere".
const (
	rcPrediction = "prediction"
	rcIndex      = "index"
)

// maxRecomputeWalk bounds the parent walk from a decision's prefix: a
// longer chain is measured from its deepest maxRecomputeWalk blocks (a
// floor, never an overstatement).
const maxRecomputeWalk = 4096

// recomputeWindows are the windowed sums of one scope (a worker, or the
// pool): time slots over the window, like buckets, each with every sum a
// snapshot reads, so reading them is one pass.
type recomputeWindows struct {
	width int64
	slots []rcSlot
	seen  bool
	// since is when the first decision arrived (pool's windows only):
	// rates are over the part of the window kvtop has watched decisions,
	// the same span for every worker, so theirs add up to the pool's.
	since time.Time
}

// rcSlot is one slot's sums.
type rcSlot struct {
	epoch int64
	rcSums
}

type rcSums struct {
	tokens, measured  float64 // recomputed tokens, measured requests
	shareTok, prompt  float64 // the same, of measured requests with a known prompt
	recomputing, notM float64 // requests that recomputed, requests not measurable
}

func newRecomputeWindows(w time.Duration) *recomputeWindows {
	return &recomputeWindows{width: max(int64(w)/bucketsPerWindow, 1), slots: make([]rcSlot, bucketsPerWindow+1)}
}

// add counts one request's sums in the slot of at.
func (r *recomputeWindows) add(at time.Time, x rcSums) {
	e := at.UnixNano() / r.width
	sl := &r.slots[int(uint64(e)%uint64(len(r.slots)))]
	if sl.epoch != e || !r.seen {
		*sl = rcSlot{epoch: e}
	}
	r.seen = true
	sl.tokens += x.tokens
	sl.measured += x.measured
	sl.shareTok += x.shareTok
	sl.prompt += x.prompt
	sl.recomputing += x.recomputing
	sl.notM += x.notM
}

// sums totals the slots in the window ending at now.
func (r *recomputeWindows) sums(now time.Time, w time.Duration) rcSums {
	var out rcSums
	if !r.seen {
		return out
	}
	ns := now.UnixNano()
	lo, hi := (ns-int64(w))/r.width, ns/r.width
	for i := range r.slots {
		if sl := &r.slots[i]; sl.epoch > lo && sl.epoch <= hi {
			out.tokens += sl.tokens
			out.measured += sl.measured
			out.shareTok += sl.shareTok
			out.prompt += sl.prompt
			out.recomputing += sl.recomputing
			out.notM += sl.notM
		}
	}
	return out
}

// measureRecompute sets r.rc from the decision d (its candidates still
// attached) and the state at its arrival.
func (s *State) measureRecompute(r *record, d *collectors.Decision, chosen *worker) {
	rc := recompute{}
	p := d.Prediction
	switch {
	case p != nil && (p.Units == "blocks" || p.Units == "tokens") && (p.Owner != "" || len(d.Candidates) > 0):
		rc = s.fromPrediction(p, d.Candidates, chosen)
	case d.Prefix != "" && d.Backfill:
		rc.why = "read from the log's history at start: the index no longer shows the moment of the decision"
	case d.Prefix != "":
		rc = s.fromIndex(d.Prefix, chosen)
	case p != nil && p.Units == "chars":
		rc.why = "the router matched characters, not tokens or blocks"
	case p != nil && (p.Units == "blocks" || p.Units == "tokens"):
		rc.why = "the prediction names no owner or candidates"
	default:
		rc.why = "no prediction and no prefix in the record"
	}
	r.rc = rc
	if !d.Backfill && s.recomp.since.IsZero() {
		s.recomp.since = d.At
	}
}

// fromPrediction: the best match on another up worker, in tokens.
func (s *State) fromPrediction(p *collectors.Prediction, cands []collectors.Candidate, chosen *worker) recompute {
	rc := recompute{source: rcPrediction, measured: true}
	best, bestW := 0.0, (*worker)(nil)
	consider := func(name string, m *float64) {
		if m == nil || *m <= best {
			return
		}
		w := s.workerFor(name, "")
		if w == nil || w == chosen || !w.up {
			return
		}
		best, bestW = *m, w
	}
	consider(p.Owner, p.Matched)
	for _, c := range cands {
		consider(c.Worker, c.Matched)
	}
	if bestW == nil {
		return rc // nothing longer elsewhere, as the router saw it
	}
	tokens := best
	if p.Units == "blocks" {
		bs := p.BlockSize
		if bs <= 0 {
			bs = bestW.eventBlockSize()
		}
		if bs <= 0 {
			return recompute{why: "the prediction counts blocks and no block size is known"}
		}
		tokens *= float64(bs)
	}
	rc.elsewhere, rc.other = int(min(tokens, 1<<40)), bestW.name
	return rc
}

// fromIndex walks kvtop's index from the decision's prefix toward the
// root and takes the deepest block another up worker holds.
func (s *State) fromIndex(prefix string, chosen *worker) recompute {
	rc := recompute{source: rcIndex, measured: true}
	_, key := prefixKey(prefix)
	x := s.index
	var path []uint64
	for cur := key; len(path) < maxRecomputeWalk; {
		i := x.t.lookup(cur)
		if i < 0 {
			break
		}
		path = append(path, cur)
		if x.t.cols[0][i]&hasParentBit == 0 {
			break
		}
		cur = x.t.parents[i]
	}
	for i, k := range path {
		n := x.replicas(k)
		if n == 0 || n == 1 && chosen != nil && chosen.idx.holds(k) {
			continue
		}
		for _, w := range s.workers {
			if w == chosen || !w.up || !w.idx.holds(k) {
				continue
			}
			bs := w.eventBlockSize()
			if bs <= 0 {
				return recompute{why: "the prefix's holder has no known block size"}
			}
			rc.elsewhere, rc.other = (len(path)-i)*bs, w.name
			return rc
		}
	}
	return rc
}

// eventBlockSize is the worker's tokens per block: from its events, else
// its cache geometry; 0 unknown.
func (w *worker) eventBlockSize() int {
	for _, p := range w.pubs {
		if p.idx.blockSize > 0 {
			return p.idx.blockSize
		}
	}
	return w.blockSize()
}

// settleRecompute completes a joined record's measurement and counts it
// in the windows at at (once).
func (s *State) settleRecompute(r *record, at time.Time) {
	d, o := r.d, r.o
	if d == nil || o == nil || r.rc.settled || !r.rc.measured && r.rc.why == "" {
		return // not joined yet, already counted, or never looked at
	}
	r.rc.settled = true
	if o.Error != "" || o.HTTPStatus >= 400 {
		return // it computed nothing worth counting
	}
	if r.rc.measured && o.CachedTokens == nil {
		r.rc.measured, r.rc.why = false, "the outcome has no cached_tokens"
	}
	if r.rc.measured {
		had := r.rc.elsewhere
		if o.PromptTokens != nil {
			had = min(had, *o.PromptTokens)
		}
		r.rc.tokens, r.rc.done = max(0, had-*o.CachedTokens), true
	}
	if d.Backfill || o.Backfill {
		return // in the record, not in the windowed figures
	}
	x := rcSums{notM: 1}
	if r.rc.done {
		x = rcSums{tokens: float64(r.rc.tokens), measured: 1}
		if r.rc.tokens > 0 {
			x.recomputing = 1
		}
		if o.PromptTokens != nil {
			x.shareTok, x.prompt = float64(r.rc.tokens), float64(*o.PromptTokens)
		}
	}
	s.recomp.add(at, x)
	if w := s.workerFor(r.chosen, ""); w != nil {
		w.recomp.add(at, x)
	}
}

// recomputeRow is a row's RecomputeInfo with the values its Tokens and
// ElsewhereTokens point at: one allocation a row.
type recomputeRow struct {
	info snapshot.RecomputeInfo
	vals [2]int
}

func (rc *recompute) info() *snapshot.RecomputeInfo {
	if !rc.measured && rc.why == "" {
		return nil
	}
	row := &recomputeRow{info: snapshot.RecomputeInfo{Worker: rc.other, Source: rc.source, NotMeasurable: rc.why}}
	out := &row.info
	if rc.measured {
		row.vals = [2]int{rc.tokens, rc.elsewhere}
		out.ElsewhereTokens = &row.vals[1]
		if rc.done {
			out.Tokens = &row.vals[0]
		}
	}
	return out
}

// read sums one scope's windows: the rate and share are nil while no
// measured request was counted in the window.
func (r *recomputeWindows) read(now, since time.Time, w time.Duration) (tokPerS, share *float64, requests, notMeasurable, measured int) {
	x := r.sums(now, w)
	if cov := min(now.Sub(since), w); x.measured > 0 && cov > 0 {
		tokPerS = fp(x.tokens / cov.Seconds())
	}
	if x.prompt > 0 {
		share = fraction(x.shareTok / x.prompt)
	}
	return tokPerS, share, int(x.recomputing), int(x.notM), int(x.measured)
}

func (s *State) poolRecompute(now time.Time) snapshot.Recompute {
	var out snapshot.Recompute
	out.TokensPerS, out.Share, out.Requests, out.NotMeasurable, out.Measured = s.recomp.read(now, s.recomp.since, s.window)
	return out
}

func (s *State) workerRecompute(w *worker, now time.Time) snapshot.WorkerRecompute {
	var out snapshot.WorkerRecompute
	out.TokensPerS, out.Share, out.Requests, out.NotMeasurable, _ = w.recomp.read(now, s.recomp.since, s.window)
	return out
}
