package pool

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// series is one figure over the window, one point per refresh. Old points
// are dropped by reslicing (append reallocates now and then, copying only
// the live points), so adding is O(1), not a shift of the whole window,
// and a snapshot takes it in O(1) too (points).
type series struct {
	pts []snapshot.Point
}

// maxSeriesPoints bounds a series whatever the refresh/window ratio.
const maxSeriesPoints = 4096

// addIf adds a point only for a known value: a gap stays a gap.
func (s *series) addIf(t time.Time, v *float64, w time.Duration) {
	if v != nil {
		s.pts = append(s.pts, snapshot.Point{T: t, V: *v})
	}
	s.trim(t, w)
}

func (s *series) trim(t time.Time, w time.Duration) {
	from := t.Add(-w)
	drop := 0
	for drop < len(s.pts) && s.pts[drop].T.Before(from) {
		drop++
	}
	if over := len(s.pts) - maxSeriesPoints; over > drop {
		drop = over
	}
	s.pts = s.pts[drop:]
}

// points returns the series for a snapshot without copying it: points
// are never written once appended (trim reslices, append writes past every
// length a snapshot was given, and reallocates into a new array), so a
// snapshot can share the backing array. The slice is capped: appending to
// it copies, never writes into the pool's array.
// An empty series is [], never nil: the JSON contract's lists are never
// null.
func (s *series) points() []snapshot.Point {
	if len(s.pts) == 0 {
		return []snapshot.Point{}
	}
	return s.pts[:len(s.pts):len(s.pts)]
}
