package journal

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Control is one of the replay's time controls.
type Control uint8

const (
	Pause   Control = iota + 1 // pause, or resume
	Back                       // SeekStep earlier
	Forward                    // SeekStep later
	Slower                     // speed ×½
	Faster                     // speed ×2
	ToStart                    // the first snapshot
	ToEnd                      // the last snapshot
)

// SeekStep is how far Back and Forward move, in journal time.
const SeekStep = 10 * time.Second

// Speeds are bounded: below MinSpeed a replay is a slideshow, and past
// MaxSpeed it runs as fast as one core rebuilds snapshots anyway.
const (
	MinSpeed = 1.0 / 16
	MaxSpeed = 1024
)

// recent is how many rebuilt snapshots a Replay keeps, so that going back
// within them is instant (farther back replays from the start). Snapshots
// are immutable, so keeping them is safe; their memory bounds the count.
const recent = 120

// publishEvery is how often a long seek shows where it is.
const publishEvery = 200 * time.Millisecond

// ReplayStatus is where a replay is, for the console.
type ReplayStatus struct {
	Paused  bool
	Speed   float64
	AtEnd   bool      // the last snapshot is shown
	Seeking bool      // rebuilding snapshots to reach a target (back in time: from the start)
	Target  time.Time // the seek's target
	At      time.Time // the shown snapshot's journal time
	Start   time.Time // the journal's first snapshot
	End     time.Time // and last
	Pos     int       // the shown snapshot, 1-based
	Ticks   int       // snapshots in the journal
	// Behind: the last snapshots came later than the speed asks, one core
	// could not rebuild them fast enough.
	Behind bool
	// LocalRefresh is what the console asked with SetRefresh (0 if never):
	// a replay keeps the journal's cadence.
	LocalRefresh time.Duration
}

// Replay is the console's snapshot source on a journal (`kvtop replay`):
// a Player paced at the journal's own time × a speed, with the controls
// (Control). It rebuilds each snapshot as the live pool built it; pausing
// stops the clock, seeking forward rebuilds what lies between quickly,
// seeking back shows a kept snapshot or replays from the start.
type Replay struct {
	p     *Player
	snaps chan *snapshot.Snapshot
	wake  chan struct{}
	notes []string // said once, in the banner: what the journal lacks

	mu  sync.Mutex
	st  ReplayStatus
	ctl []Control // controls not yet applied, oldest first
	at  time.Time // set: start here (SeekTo)
}

// NewReplay paces p at speed (clamped to MinSpeed…MaxSpeed; 0 is 1).
func NewReplay(p *Player, speed float64) *Replay {
	if speed == 0 {
		speed = 1
	}
	r := &Replay{p: p, snaps: make(chan *snapshot.Snapshot, 1), wake: make(chan struct{}, 1)}
	r.st = ReplayStatus{Speed: clampSpeed(speed), Start: p.Start(), End: p.End(), Ticks: p.Ticks()}
	r.notes = Notes(p)
	return r
}

func clampSpeed(s float64) float64 { return max(MinSpeed, min(s, MaxSpeed)) }

// Notes say, in words for the operator, what a journal lacks: a segment
// replayed without the ones before it, a torn or corrupt tail, what the
// recorder lost or could not encode, frames of a newer kvtop.
func Notes(p *Player) []string {
	var out []string
	h := p.Header()
	if h.Continues() {
		out = append(out, fmt.Sprintf("segment %d of a recording replayed from its start (%s): the index holds only blocks stored since, windows fill from there",
			h.Segment, h.Start.Format("2006-01-02 15:04:05")))
	}
	st := p.IndexStats()
	if st.Stop != "" {
		out = append(out, "journal cut short: "+st.Stop)
	}
	if st.Lost > 0 {
		out = append(out, fmt.Sprintf("%d observations were lost while recording (the disk fell behind): snapshots after the first loss may differ from the live ones", st.Lost))
	}
	if st.Unencoded > 0 {
		out = append(out, fmt.Sprintf("%d observations of a type this journal cannot hold were not recorded", st.Unencoded))
	}
	if st.Unknown > 0 {
		out = append(out, fmt.Sprintf("%d records of a newer kvtop skipped", st.Unknown))
	}
	return out
}

// SeekTo makes Run start at the snapshot as of t instead of the first.
func (r *Replay) SeekTo(t time.Time) {
	r.mu.Lock()
	r.at = t
	r.mu.Unlock()
}

// Snapshots implements tui.Source: the rebuilt snapshots, latest wins.
func (r *Replay) Snapshots() <-chan *snapshot.Snapshot { return r.snaps }

// SetRefresh implements tui.Source. A replay keeps the journal's cadence
// (its snapshots are the recorded ones): this only records the request,
// and Banner says that +/- change nothing.
func (r *Replay) SetRefresh(d time.Duration) {
	r.mu.Lock()
	r.st.LocalRefresh = d
	r.mu.Unlock()
	r.poke()
}

// Control applies a time control; safe from any goroutine, never blocks.
func (r *Replay) Control(c Control) {
	r.mu.Lock()
	switch c {
	case Pause:
		if r.st.AtEnd && r.st.Paused {
			break // nothing to resume at the end: g or ← move
		}
		r.st.Paused = !r.st.Paused
	case Slower:
		r.st.Speed = clampSpeed(r.st.Speed / 2)
	case Faster:
		r.st.Speed = clampSpeed(r.st.Speed * 2)
	}
	r.ctl = append(r.ctl, c)
	r.mu.Unlock()
	r.poke()
}

// Status is where the replay is now.
func (r *Replay) Status() ReplayStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func (r *Replay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Banner is the console's status-line context: the file, where in it the
// replay is, and the first note.
func (r *Replay) Banner() string {
	st := r.Status()
	parts := []string{"replay " + filepath.Base(r.p.Paths()[len(r.p.Paths())-1])}
	state := fmt.Sprintf("▶ %s", Speed(st.Speed))
	switch {
	case st.Seeking:
		state = "seeking " + st.Target.Format("15:04:05") + "…"
	case st.AtEnd:
		state = "end of journal"
	case st.Paused:
		state = "paused"
	case st.Behind:
		state += " (behind: one core cannot keep up)"
	}
	parts = append(parts, state, fmt.Sprintf("%s of %s", offset(st.At.Sub(st.Start)), offset(st.End.Sub(st.Start))))
	if st.LocalRefresh > 0 {
		parts = append(parts, "the journal's refresh stays: +/- change nothing in a replay")
	}
	if len(r.notes) > 0 {
		parts = append(parts, r.notes[0])
	}
	return strings.Join(parts, " · ")
}

// Speed prints a replay speed: ×1, ×60, ×½, ×1/16.
func Speed(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("×%g", s)
	case s == 0.5:
		return "×½"
	case s == 0.25:
		return "×¼"
	}
	return fmt.Sprintf("×1/%g", 1/s)
}

// offset prints a journal offset as +1m20s.
func offset(d time.Duration) string {
	return "+" + max(d, 0).Round(time.Second).String()
}

// Run plays the journal until ctx is done, then closes Snapshots.
func (r *Replay) Run(ctx context.Context) {
	defer close(r.snaps)
	defer r.p.Close()
	pl := &playback{r: r, ctx: ctx}
	r.mu.Lock()
	at := r.at
	r.mu.Unlock()
	first := 0
	if !at.IsZero() {
		first = max(0, r.p.TickAt(at))
	}
	if !pl.seek(first) {
		return
	}
	for ctx.Err() == nil {
		if c, ok := r.takeControl(); ok {
			if !pl.control(c) {
				return
			}
			continue
		}
		st := r.Status()
		if st.Paused || st.AtEnd {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		if !pl.playNext(st.Speed) {
			return
		}
	}
}

func (r *Replay) takeControl() (Control, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ctl) == 0 {
		return 0, false
	}
	c := r.ctl[0]
	r.ctl = r.ctl[1:]
	return c, true
}

// playback is Run's state: the shown snapshot, the kept ones, the pace.
type playback struct {
	r   *Replay
	ctx context.Context
	// kept are the last rebuilt snapshots, by tick index (kept[i] is
	// tick keptFrom+i); cur is the shown one's index.
	kept     []*snapshot.Snapshot
	keptFrom int
	cur      int
	// The pace: the shown snapshot came at wall time anchor, so the next
	// is due its journal distance / speed later.
	anchor time.Time
}

// snapshot returns the snapshot of tick i, from those kept or by
// rebuilding up to it (from the start if it is behind the player).
func (pl *playback) snapshot(i int) (*snapshot.Snapshot, error) {
	if i >= pl.keptFrom && i < pl.keptFrom+len(pl.kept) {
		return pl.kept[i-pl.keptFrom], nil
	}
	p := pl.r.p
	if i < p.Pos()-1 {
		pl.kept, pl.keptFrom = nil, 0
	}
	s, err := p.Seek(i)
	if err != nil {
		return nil, err
	}
	pl.keep(p.Pos()-1, s)
	return s, nil
}

func (pl *playback) keep(i int, s *snapshot.Snapshot) {
	if len(pl.kept) > 0 && i != pl.keptFrom+len(pl.kept) {
		pl.kept = nil
	}
	if len(pl.kept) == 0 {
		pl.keptFrom = i
	}
	pl.kept = append(pl.kept, s)
	if len(pl.kept) > recent {
		pl.kept[0] = nil
		pl.kept = pl.kept[1:]
		pl.keptFrom++
	}
}

// show publishes the snapshot of tick i as the current one.
func (pl *playback) show(i int, s *snapshot.Snapshot) {
	pl.cur = i
	pl.anchor = time.Now()
	r := pl.r
	r.mu.Lock()
	r.st.Pos, r.st.At = i+1, s.At
	r.st.AtEnd = i >= r.p.Ticks()-1
	if r.st.AtEnd {
		r.st.Paused = true
	}
	r.st.End, r.st.Ticks = r.p.End(), r.p.Ticks() // a pass that stops early shortens the journal
	r.mu.Unlock()
	publish(r.snaps, s)
}

// publish replaces an unread snapshot (latest wins), as the pool does.
func publish(ch chan *snapshot.Snapshot, s *snapshot.Snapshot) {
	select {
	case ch <- s:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	ch <- s
}

// seek moves to tick i, rebuilding what lies between tick by tick: a
// new control stops it where it is (and is applied next), and every
// publishEvery it shows how far it got. False: ctx is done.
func (pl *playback) seek(i int) bool {
	r := pl.r
	i = max(0, min(i, r.p.Ticks()-1))
	if s, err := pl.kept1(i); s != nil || err != nil {
		if s != nil {
			pl.show(i, s)
		}
		return pl.ctx.Err() == nil
	}
	r.mu.Lock()
	r.st.Seeking, r.st.Target = true, r.p.TickTime(i)
	r.mu.Unlock()
	// Seeking ends before the last snapshot is shown: the console reads
	// the state as that snapshot arrives, and at the journal's end (or
	// paused) no other snapshot follows to correct a stale "seeking".
	done := func() {
		r.mu.Lock()
		r.st.Seeking = false
		r.mu.Unlock()
	}
	defer done()
	from := r.p.Pos() - 1
	if i < from {
		from = -1 // from the start
		pl.kept, pl.keptFrom = nil, 0
	}
	last := time.Now()
	for j := from + 1; j <= i; j++ {
		if pl.ctx.Err() != nil {
			return false
		}
		s, err := pl.snapshot(j)
		if err != nil || s == nil {
			break
		}
		if j == i || pending(r) {
			done()
			pl.show(j, s)
			return true
		}
		if time.Since(last) >= publishEvery {
			pl.show(j, s)
			last = time.Now()
		}
	}
	done()
	if s := r.p.Snapshot(); s != nil {
		pl.show(r.p.Pos()-1, s)
	}
	return pl.ctx.Err() == nil
}

// kept1 returns tick i's snapshot if it is kept or the player's current
// one, without rebuilding anything.
func (pl *playback) kept1(i int) (*snapshot.Snapshot, error) {
	if i >= pl.keptFrom && i < pl.keptFrom+len(pl.kept) {
		return pl.kept[i-pl.keptFrom], nil
	}
	if i == pl.r.p.Pos()-1 {
		return pl.r.p.Snapshot(), nil
	}
	return nil, nil
}

func pending(r *Replay) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ctl) > 0
}

// control applies one control.
func (pl *playback) control(c Control) bool {
	p := pl.r.p
	at := p.TickTime(pl.cur)
	switch c {
	case Back:
		i := p.TickAt(at.Add(-SeekStep))
		return pl.seek(max(0, min(i, pl.cur-1)))
	case Forward:
		i := sort.Search(p.Ticks(), func(k int) bool { return !p.TickTime(k).Before(at.Add(SeekStep)) })
		return pl.seek(max(i, pl.cur+1))
	case ToStart:
		return pl.seek(0)
	case ToEnd:
		return pl.seek(p.Ticks() - 1)
	}
	// Pause and speed changes restart the pace from the shown snapshot.
	pl.anchor = time.Now()
	return true
}

// playNext waits until the next snapshot is due at speed (or a control
// comes), then shows it. False: ctx is done.
func (pl *playback) playNext(speed float64) bool {
	r := pl.r
	next := pl.cur + 1
	if next >= r.p.Ticks() {
		pl.show(pl.cur, pl.mustSnapshot(pl.cur))
		return true
	}
	gap := r.p.TickTime(next).Sub(r.p.TickTime(pl.cur))
	due := pl.anchor.Add(time.Duration(float64(gap) / speed))
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-pl.ctx.Done():
			return false
		case <-r.wake:
			return true // a control, or a refresh request: Run looks
		case <-t.C:
		}
	}
	s, err := pl.snapshot(next)
	if err != nil || s == nil {
		r.mu.Lock()
		r.st.AtEnd, r.st.Paused = true, true
		r.mu.Unlock()
		return true
	}
	late := time.Since(due)
	pl.show(next, s)
	// Behind when a snapshot comes later than a tenth of a second (or
	// of its own gap) after it was due; then the pace restarts from now
	// rather than rushing to catch up.
	behind := late > max(100*time.Millisecond, time.Duration(float64(gap)/speed)/10)
	if !behind {
		pl.anchor = due
	}
	r.mu.Lock()
	r.st.Behind = behind
	r.mu.Unlock()
	return true
}

func (pl *playback) mustSnapshot(i int) *snapshot.Snapshot {
	s, _ := pl.snapshot(i)
	if s == nil {
		s = pl.r.p.Snapshot()
	}
	return s
}
