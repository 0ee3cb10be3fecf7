package pool

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Pool runs a State in one goroutine and publishes its snapshots.
type Pool struct {
	state   *State
	snaps   chan *snapshot.Snapshot
	latest  atomic.Pointer[snapshot.Snapshot]
	refresh atomic.Int64 // requested refresh, nanoseconds
	changed chan struct{}
	now     func() time.Time
	tap     Tap
}

// Tap sees what the pool consumes, in the order it consumes it, on the
// pool goroutine: each observation just before it is applied, each change
// of the refresh, and each snapshot as it is published. The pool reads
// time only from these (observation timestamps and the snapshot's At), so
// applying the same sequence to a fresh State (Apply, SetRefresh,
// Snapshot(At)) rebuilds the same snapshots: that is what a journal
// (package journal) records and replays.
//
// Observed returns the observation to apply: o, or an equal copy. A
// journal returns o with its times on the wall clock alone (no monotonic
// reading, which a replay cannot have: Go measures between two times on
// the monotonic clock only when both carry it), so that the live pool
// computes exactly what the replay will. For the same reason, while a tap
// is installed the pool's own clock reads the wall clock alone. A tap
// must not block, nor keep or change o (snapshots are immutable: it may
// keep those).
type Tap interface {
	Observed(o collectors.Observation) collectors.Observation
	Refreshed(d time.Duration)
	Published(s *snapshot.Snapshot)
}

// New returns a pool for o; call Run to start it.
func New(o Options) *Pool {
	s := NewState(o)
	p := &Pool{
		state:   s,
		snaps:   make(chan *snapshot.Snapshot, 1),
		changed: make(chan struct{}, 1),
		now:     time.Now,
	}
	p.refresh.Store(int64(s.Refresh()))
	return p
}

// SetTap installs t (nil: none). Call it before Run.
func (p *Pool) SetTap(t Tap) {
	p.tap = t
	p.now = time.Now
	if t != nil {
		p.now = func() time.Time { return time.Now().Round(0) }
	}
}

// Snapshots delivers published snapshots. It is buffered 1 and a publish
// replaces an unread snapshot (latest wins): a slow reader never blocks
// the pool and never sees a stale picture after a fresh one. It is closed
// when Run stops.
func (p *Pool) Snapshots() <-chan *snapshot.Snapshot { return p.snaps }

// Latest returns the most recent snapshot, or nil before the first.
// Safe from any goroutine.
func (p *Pool) Latest() *snapshot.Snapshot { return p.latest.Load() }

// SetRefresh asks the pool goroutine to change the snapshot cadence
// (floor MinRefresh). Safe from any goroutine; takes effect at once.
func (p *Pool) SetRefresh(d time.Duration) {
	if d < MinRefresh {
		d = MinRefresh
	}
	p.refresh.Store(int64(d))
	select {
	case p.changed <- struct{}{}:
	default: // a change is already pending; it will read the new value
	}
}

// Run is the pool goroutine: it applies observations as they come and
// publishes a snapshot at start and at every refresh tick, until ctx is
// done. A closed input channel stops applying, not publishing. When Run
// returns it closes the Snapshots channel (after the snapshot still
// unread, if any), so a reader knows nothing more will come. Call it once.
func (p *Pool) Run(ctx context.Context, in <-chan collectors.Observation) {
	defer close(p.snaps)
	s := p.state
	p.publish()
	tick := time.NewTicker(s.Refresh())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case o, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			if p.tap != nil {
				o = p.tap.Observed(o)
			}
			s.Apply(o)
			if b, ok := o.(*collectors.EventBatch); ok {
				b.Applied() // its collector may send the next one (collectors.Pending)
			}
		case <-tick.C:
			p.publish()
		case <-p.changed:
			d := time.Duration(p.refresh.Load())
			if d != s.Refresh() {
				s.SetRefresh(d)
				if p.tap != nil {
					p.tap.Refreshed(s.Refresh())
				}
				tick.Reset(s.Refresh())
				p.publish() // show the new cadence now
			}
		}
	}
}

func (p *Pool) publish() {
	snap := p.state.Snapshot(p.now())
	if p.tap != nil {
		p.tap.Published(snap)
	}
	p.latest.Store(snap)
	select {
	case p.snaps <- snap:
		return
	default:
	}
	// Replace the unread one. Only this goroutine sends, so after the
	// drain the send cannot block.
	select {
	case <-p.snaps:
	default:
	}
	p.snaps <- snap
}
