package pool

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

// MaxOwners is the most workers a hot prefix may need to reach
// OverheatShare and still overheat them, in a pool of up workers: a third
// of them, at least one.
func MaxOwners(up int) int { return max(1, up/3) }

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
