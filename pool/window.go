package pool

import (
	"math"
	"time"
)

// counterWindow turns a cumulative counter into increments over a window.
// It stores (time, adjusted value) where the adjusted value only grows: a
// decrease is a reset, and the new raw value counts as the increase (the
// process counted it since it restarted). Samples older than the one just
// before the window are dropped, so memory follows the window, not uptime.
type counterWindow struct {
	t    []int64   // unix nanos, ascending
	adj  []float64 // reset-adjusted cumulative value
	last float64   // last raw value
	has  bool
	// fresh makes the next sample count whole as the increase: the
	// process restarted (process_start_time changed), so its counters
	// began again at 0 even when they are already above their old values.
	fresh bool
	// onChange: samples come when the value changes (stream status), not
	// periodically, so an increase belongs at the sample that shows it and
	// is never spread back over the gap before it.
	onChange bool
	// absent is the latest successful scrape that lacked the counter (unix
	// nanos; 0 while it is present). vLLM creates some counters only at
	// the first request: when one appears, it was 0 at that scrape, so its
	// first increments count rather than becoming a baseline.
	absent int64
}

// maxSamples bounds a window whatever the scrape rate.
const maxSamples = 4096

// add records raw value v at time t and reports whether it was a reset.
// keep is the window length used for pruning.
func (c *counterWindow) add(t time.Time, v float64, keep time.Duration) (reset bool) {
	return c.record(t, v, keep, true)
}

// addRebase records v like add, but a decrease is not an increase: the
// series that were summed into the counter changed (a label set
// vanished), the process did not restart. The step counts as 0.
func (c *counterWindow) addRebase(t time.Time, v float64, keep time.Duration) (dropped bool) {
	return c.record(t, v, keep, false)
}

// observe records one scrape's value of the counter: nil when the page
// lacked it (the scrape itself succeeded and the value was not rejected
// as invalid, which says nothing). It reports whether v was a reset.
func (c *counterWindow) observe(t time.Time, v *float64, keep time.Duration) (reset bool) {
	if v == nil {
		c.absent = t.UnixNano()
		return false
	}
	if c.absent != 0 {
		c.fromZero(c.absent)
		c.absent = 0
	}
	return c.add(t, *v, keep)
}

// fromZero records that the counter stood at 0 at ns (a scrape that
// lacked it): the next sample's whole value is the increase since then.
func (c *counterWindow) fromZero(ns int64) {
	n := len(c.t)
	if n > 0 && ns < c.t[n-1] {
		return
	}
	a := 0.0
	if n > 0 {
		a = c.adj[n-1]
	}
	c.t = append(c.t, ns)
	c.adj = append(c.adj, a)
	c.last, c.has, c.fresh = 0, true, false
}

// vanished: the counter was seen once and the latest scrape lacked it.
func (c *counterWindow) vanished() bool { return c.has && c.absent != 0 }

// restarted makes the next sample a reset whatever its value.
func (c *counterWindow) restarted() {
	if c.has {
		c.fresh = true
	}
}

func (c *counterWindow) record(t time.Time, v float64, keep time.Duration, resetOnDrop bool) (dropped bool) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	ns := t.UnixNano()
	if n := len(c.t); n > 0 && ns < c.t[n-1] {
		return false // out of order: ignore rather than invent a reset
	}
	a := 0.0
	if c.has {
		a = c.adj[len(c.adj)-1]
		switch {
		case c.fresh:
			a += v
		case v < c.last:
			dropped = true
			if resetOnDrop {
				a += v
			}
		default:
			a += v - c.last
		}
	}
	c.last, c.has, c.fresh = v, true, false
	c.t = append(c.t, ns)
	c.adj = append(c.adj, a)
	c.prune(ns - int64(keep))
	return dropped
}

// prune drops samples before the last one at or before from.
func (c *counterWindow) prune(from int64) {
	drop := 0
	for drop+1 < len(c.t) && c.t[drop+1] <= from {
		drop++
	}
	if over := len(c.t) - maxSamples; over > drop {
		drop = over
	}
	if drop == 0 {
		return
	}
	// Compact in place once half the backing array is dead, so appends
	// keep reusing it.
	c.t = c.t[drop:]
	c.adj = c.adj[drop:]
	if cap(c.t) > 2*len(c.t)+16 {
		c.t = append([]int64(nil), c.t...)
		c.adj = append([]float64(nil), c.adj...)
	}
}

// since returns the increase between from and now and the time span it
// really covers. ok is false when there is no sample at all.
//
// When the last sample before from is older than from (always, a little;
// by minutes after a down period), the step from it to the next sample is
// taken linearly and only its part after from counts: an increase that
// built up over a long gap is not put into the window whole, which would
// overstate every per-second rate.
func (c *counterWindow) since(from, now time.Time) (d float64, covered time.Duration, ok bool) {
	n := len(c.t)
	if n == 0 {
		return 0, 0, false
	}
	f, e := from.UnixNano(), now.UnixNano()
	end := n - 1
	for end >= 0 && c.t[end] > e {
		end--
	}
	if end < 0 || c.t[end] <= f {
		return 0, 0, true // nothing measured inside the span
	}
	base := 0
	for base+1 <= end && c.t[base+1] <= f {
		base++
	}
	start := c.t[base]
	d = c.adj[end] - c.adj[base]
	switch {
	case start >= f:
	case c.onChange:
		start = f
	default:
		// base is before the span and base+1 inside it (base < end).
		next := c.t[base+1]
		step := c.adj[base+1] - c.adj[base]
		d -= step * float64(f-start) / float64(next-start)
		start = f
	}
	return d, time.Duration(c.t[end] - start), true
}

// delta is the increase over the window ending at now.
func (c *counterWindow) delta(now time.Time, w time.Duration) (float64, time.Duration, bool) {
	return c.since(now.Add(-w), now)
}

// buckets counts events in fixed time buckets over a window: exact rates
// for things the pool sees one by one (batches, outcomes), in memory that
// depends only on the window.
type buckets struct {
	width int64 // nanos
	slots []bucket
	first int64 // first observation, for coverage
	seen  bool
}

type bucket struct {
	epoch int64
	a, b  float64
}

// bucketsPerWindow sets the time resolution of bucketed windows.
const bucketsPerWindow = 60

func newBuckets(w time.Duration) *buckets {
	width := int64(w) / bucketsPerWindow
	if width <= 0 {
		width = 1
	}
	return &buckets{width: width, slots: make([]bucket, bucketsPerWindow+1)}
}

func (b *buckets) add(t time.Time, a, bb float64) {
	ns := t.UnixNano()
	if !b.seen || ns < b.first {
		b.first, b.seen = ns, true
	}
	e := ns / b.width
	s := &b.slots[int(uint64(e)%uint64(len(b.slots)))]
	if s.epoch != e {
		*s = bucket{epoch: e}
	}
	s.a += a
	s.b += bb
}

// sum returns both totals over the window ending at now, and how much of
// the window they cover (less right after the first observation).
func (b *buckets) sum(now time.Time, w time.Duration) (a, bb float64, covered time.Duration) {
	if !b.seen {
		return 0, 0, 0
	}
	ns := now.UnixNano()
	lo := (ns - int64(w)) / b.width
	hi := ns / b.width
	for _, s := range b.slots {
		if s.epoch > lo && s.epoch <= hi {
			a += s.a
			bb += s.b
		}
	}
	covered = time.Duration(ns - b.first)
	if covered > w {
		covered = w
	}
	if covered < 0 {
		covered = 0
	}
	return a, bb, covered
}
