package pool

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Verdicts hold. Every state and alert that compares a figure with a
// threshold (saturated, thrash, overheating) follows one rule:
//
//	it begins when the figure reaches the threshold (the enter mark), and
//	ends only once the figure has stayed below its leave mark,
//	Thresholds.LeaveRatio × the threshold, for Thresholds.LeaveAfterS.
//
// KV use that swings between 89 and 92 % every few seconds, or dips below
// 80 % for a moment, keeps a worker saturated; it is no longer saturated
// 15 s after it settled below the leave mark. A verdict made of several
// figures (overheating: prefix share, worker share, queue against the
// median and the floor) stays while each is at its leave mark, and ends
// once any has been below its own for the hold time. A verdict whose figure
// becomes unknown (the worker down, the engine gone from its page, no
// share to judge) ends at once: there is nothing left to hold.

// verdict is one held judgement.
type verdict struct {
	on    bool
	since time.Time // when it began
	below time.Time // when its figure went below the leave mark (zero: not below)
	seq   uint64    // the snapshot that judged it last
}

// judge updates the verdict at snapshot seq, time now: enter says the
// figure is at its enter mark, stay that it is at or above its leave mark.
// A verdict the previous snapshot did not judge (its figure was unknown
// then) starts over. It reports whether the verdict holds.
func (v *verdict) judge(enter, stay bool, seq uint64, now time.Time, hold time.Duration) bool {
	if v.seq+1 != seq {
		*v = verdict{}
	}
	v.seq = seq
	stay = stay || enter
	switch {
	case !v.on && enter:
		v.on, v.since, v.below = true, now, time.Time{}
	case !v.on:
	case stay:
		v.below = time.Time{}
	case v.below.IsZero() || v.below.After(now):
		v.below = now
	}
	if v.on && !v.below.IsZero() && now.Sub(v.below) >= hold {
		v.on, v.since, v.below = false, time.Time{}, time.Time{}
	}
	return v.on
}

// hold is how long a figure must stay below its leave mark to end a
// verdict.
func (s *State) hold() time.Duration {
	return time.Duration(s.opt.Thresholds.LeaveAfterS * float64(time.Second))
}

// leave is the leave mark of threshold x.
func (s *State) leave(x float64) float64 { return x * s.opt.Thresholds.LeaveRatio }

// judgeSkew holds the pool's skew verdicts. Skew is judged only while
// the pool has load to skew (the header's "low load" otherwise): a
// median queue below one request per up worker, or below
// overheat_min_queue, leaves it unknown and the verdicts end.
func (s *State) judgeSkew(ps *snapshot.PoolSummary, seq uint64, now time.Time) {
	v := ps.LoadSkew.MaxOverMean
	q, up := ps.Queue, ps.Up
	for _, f := range ps.Roles {
		if ps.LoadSkew.Role != "" && f.Role == ps.LoadSkew.Role { // the load of the role compared
			q, up = f.Queue, f.Up
		}
	}
	if v == nil || q == nil || *q < float64(up) || *q < s.opt.Thresholds.OverheatMinQueue {
		s.skewHigh, s.skewSevere = verdict{}, verdict{}
		return
	}
	ps.LoadSkew.High = s.skewHigh.judge(*v >= snapshot.SkewHigh, *v >= s.leave(snapshot.SkewHigh), seq, now, s.hold())
	ps.LoadSkew.Severe = s.skewSevere.judge(*v >= snapshot.SkewSevere, *v >= s.leave(snapshot.SkewSevere), seq, now, s.hold())
}
