package pool

import "time"

// series is one figure over the window, one point per refresh. Old points
// are dropped by reslicing (append reallocates now and then, copying only
// the live points), so adding is O(1), not a shift of the whole window.
type series struct {
	pts []Point
}

// maxSeriesPoints bounds a series whatever the refresh/window ratio.
const maxSeriesPoints = 4096

// addIf adds a point only for a known value: a gap stays a gap.
func (s *series) addIf(t time.Time, v *float64, w time.Duration) {
	if v != nil {
		s.pts = append(s.pts, Point{T: t, V: *v})
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

// points returns a copy for a snapshot.
func (s *series) points() []Point {
	return append(make([]Point, 0, len(s.pts)), s.pts...)
}
