package pool

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Pool runs a State in one goroutine and publishes its snapshots.
type Pool struct {
	state   *State
	snaps   chan *Snapshot
	latest  atomic.Pointer[Snapshot]
	refresh atomic.Int64 // requested refresh, nanoseconds
	changed chan struct{}
	now     func() time.Time
}

// New returns a pool for o; call Run to start it.
func New(o Options) *Pool {
	s := NewState(o)
	p := &Pool{
		state:   s,
		snaps:   make(chan *Snapshot, 1),
		changed: make(chan struct{}, 1),
		now:     time.Now,
	}
	p.refresh.Store(int64(s.Refresh()))
	return p
}

// Snapshots delivers published snapshots. It is buffered 1 and a publish
// replaces an unread snapshot (latest wins): a slow reader never blocks
// the pool and never sees a stale picture after a fresh one. It is closed
// when Run stops.
func (p *Pool) Snapshots() <-chan *Snapshot { return p.snaps }

// Latest returns the most recent snapshot, or nil before the first.
// Safe from any goroutine.
func (p *Pool) Latest() *Snapshot { return p.latest.Load() }

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
			s.Apply(o)
		case <-tick.C:
			p.publish()
		case <-p.changed:
			d := time.Duration(p.refresh.Load())
			if d != s.Refresh() {
				s.SetRefresh(d)
				tick.Reset(s.Refresh())
				p.publish() // show the new cadence now
			}
		}
	}
}

func (p *Pool) publish() {
	snap := p.state.Snapshot(p.now())
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
