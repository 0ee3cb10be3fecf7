package snapshot

// The load skew's marks: max/mean of queue depth at which the header
// warns, and at which it is severe.
const (
	SkewHigh   = 2.0
	SkewSevere = 3.0
)

// MaxOwners is the most workers a hot prefix may need to reach
// OverheatShare and still overheat them, in a pool of up workers: a third
// of them, at least one.
func MaxOwners(up int) int { return max(1, up/3) }

// QueueMedian is the median waiting queue of the up workers that report
// one (mean of the middle two for an even count): the median the
// overheating rule compares queues with, for views to quote the same
// figure. nil when no up worker reports a queue.
func QueueMedian(ws []Worker) *float64 { return QueueMedianOf(ws, "") }

// DefaultThresholds are the rules used when the config says nothing.
func DefaultThresholds() Thresholds {
	return Thresholds{
		HotPrefixShare:     0.10,
		OverheatShare:      0.60,
		OverheatQueueRatio: 2.0,
		OverheatMinQueue:   4,
		KVUsageHigh:        0.90,
		RecoveryTolerance:  0.05,
		RecoveryHoldS:      10,
		ThrashShare:        0.20,
		ThrashMinStored:    256,
		LeaveRatio:         0.9,
		LeaveAfterS:        15,
		LadderLossShare:    0.10,
	}
}

// RecentDecisionsMax is the most rows Decisions.Recent holds, whatever
// limits.recent_decisions says (pool.Options.Limits.RecentDecisions).
const RecentDecisionsMax = 5000
