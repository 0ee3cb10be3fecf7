package pool

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// The overheating rule. A hot prefix's traffic may land on one worker or
// be split between two or three that hold it (requests that arrived
// together before any of them had cached it, or a load threshold that sent
// some elsewhere): either way those few workers are where it hurts. So:
//
//	k: the fewest workers that together take at least OverheatShare of a
//	hot prefix's traffic. When k ≤ MaxOwners(up), its owners (those k,
//	and any worker taking exactly as much as the last of them: equal
//	workers are judged alike) each overheat if they are up with a queue
//	≥ OverheatQueueRatio × the pool median and ≥ OverheatMinQueue.
//
// One owner at OverheatShare is the classic case; a prefix spread over
// more than a third of the pool is replicated, not overheating. A prefix
// with fewer than overheatMinRequests requests (or stores) in the window
// is judged on nothing: a pool just started, 15 decisions in, would call
// the owner of its first busy document overheating.

// overheatMinRequests is the traffic a prefix needs in the window before
// its owners can overheat (the floor of the hot-versus-rest quantiles too).
const overheatMinRequests = 20

// shareEpsilon absorbs float rounding in sums of decayed counts: 0.3+0.3
// of a prefix's traffic is 60%.
const shareEpsilon = 1e-9

// owners returns k, the fewest workers of ws (heaviest first, as top sorts
// them) whose traffic adds up to at least share of total, and those
// workers plus any that tie with the last of them. k is 0 when the named
// workers never reach share (traffic to workers kvtop cannot name counts
// in total but owns nothing).
func owners(ws []wcount, total, share float64) (int, []wcount) {
	if total <= 0 {
		return 0, nil
	}
	eps := shareEpsilon * total
	need := share*total - eps
	sum := 0.0
	k := 0
	var out []wcount
	for _, wc := range ws {
		if wc.w == nil {
			continue
		}
		if k > 0 && wc.n < out[len(out)-1].n-eps {
			break
		}
		out = append(out, wc)
		sum += wc.n
		if k == 0 && sum >= need {
			k = len(out)
		}
	}
	if k == 0 {
		return 0, nil
	}
	return k, out
}

// heatKey is one worker on one hot prefix: what an overheating verdict is
// about.
type heatKey struct {
	w      *worker
	prefix uint64
}

// judgeOverheating applies the rule to the top prefixes, marks the
// overheating workers (rows and prefixes) and returns them per prefix.
// Each (worker, prefix) verdict holds (verdict.go): it begins when every
// condition is met at its threshold, and ends once one of them has been
// below its leave mark (LeaveRatio × the prefix share, the owners' share,
// the queue ratio and the queue floor) for the hold time; at once when the
// worker is not up, its queue or its traffic on the prefix is unknown, or
// the prefix is out of the top list or below the request floor.
func (s *State) judgeOverheating(snap *snapshot.Snapshot, top []prefixTraffic, rowOf map[*worker]*snapshot.Worker, med medians, now time.Time) []overheat {
	th := s.opt.Thresholds
	hold, most := s.hold(), snapshot.MaxOwners(snap.Pool.Up)
	held := s.overheat
	s.overheat = make(map[heatKey]verdict, len(held))
	heldOn := make(map[uint64]int, len(held)) // held verdicts per prefix
	for k := range held {
		heldOn[k.prefix]++
	}
	var hot []overheat
	for i, t := range top {
		p := &snap.Prefixes[i]
		if med.none() || t.n < overheatMinRequests-shareEpsilon*overheatMinRequests {
			continue
		}
		hotIn, hotKept := p.Share >= th.HotPrefixShare, p.Share >= s.leave(th.HotPrefixShare)
		if !hotIn && heldOn[t.key] == 0 {
			continue
		}
		// The owners at the share, and at its leave mark (fewer may
		// reach it): a worker keeps its verdict as one of either.
		in, kept := ownersWithin(t, th.OverheatShare, most), ownersWithin(t, s.leave(th.OverheatShare), most)
		var h overheat
		named, seen := 0, 0
		for _, wc := range t.workers {
			if wc.w == nil {
				continue
			}
			if named++; named > max(len(in), len(kept)) && seen == heldOn[t.key] {
				break // past the owners, every held verdict judged
			}
			key := heatKey{wc.w, t.key}
			v, was := held[key]
			if was {
				seen++
			}
			isIn := hotIn && holds(in, wc.w)
			if !was && !isIn {
				continue
			}
			row := rowOf[wc.w]
			m := med.of(row)
			if !row.Up || row.Queue == nil || m == nil {
				continue
			}
			q := *row.Queue
			enter := isIn && q >= th.OverheatQueueRatio**m && q >= th.OverheatMinQueue
			stay := hotKept && (isIn || holds(kept, wc.w)) &&
				q >= s.leave(th.OverheatQueueRatio)**m && q >= s.leave(th.OverheatMinQueue)
			if !v.judge(enter, stay, s.seq, now, hold) {
				continue
			}
			s.overheat[key] = v
			name, id, share := wc.w.name, p.ID, clamp01(wc.n/t.n)
			if p.Overheating == nil {
				p.Overheating = &name
			}
			p.OverheatingWorkers = append(p.OverheatingWorkers, name)
			if !row.Overheating {
				row.Overheating = true
				row.OverheatPrefix, row.OverheatShare = &id, &share
			}
			if len(h.workers) == 0 {
				h.median, h.medianOf = *m, med.name(row)
			}
			h.workers, h.shares, h.queues = append(h.workers, name), append(h.shares, share), append(h.queues, q)
		}
		if len(h.workers) > 0 {
			h.prefix = *p
			hot = append(hot, h)
		}
	}
	return hot
}

// ownersWithin is the owners of t at share, or none when more than most
// workers are needed to reach it (the prefix is replicated, not hot on a
// few).
func ownersWithin(t prefixTraffic, share float64, most int) []wcount {
	k, set := owners(t.workers, t.n, share)
	if k == 0 || k > most {
		return nil
	}
	return set
}

func holds(set []wcount, w *worker) bool {
	for _, wc := range set {
		if wc.w == w {
			return true
		}
	}
	return false
}

// medians are the overheating rule's yardsticks: the median queue of the
// up workers of each role (of the pool when it has one role), so that a
// decode worker's queue is never compared with prefill queues.
type medians struct {
	byRole map[string]*float64
	mixed  bool
}

func queueMedians(snap *snapshot.Snapshot) medians {
	m := medians{byRole: map[string]*float64{}, mixed: snap.Pool.Mixed()}
	for _, f := range snap.Pool.Roles {
		m.byRole[f.Role] = f.QueueMedian
	}
	if !m.mixed {
		all := snapshot.QueueMedian(snap.Workers)
		for _, w := range snap.Workers {
			m.byRole[w.Role] = all
		}
	}
	return m
}

func (m medians) none() bool {
	for _, v := range m.byRole {
		if v != nil {
			return false
		}
	}
	return true
}

func (m medians) of(row *snapshot.Worker) *float64 { return m.byRole[row.Role] }

// name says whose median it is, for the alert: "pool median", or the
// role's in a pool of several ("decode median").
func (m medians) name(row *snapshot.Worker) string {
	if m.mixed {
		return row.Role + " median"
	}
	return "pool median"
}
