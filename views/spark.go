package views

import (
	"math"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// sparkline draws points over [end-window, end] in w cells, one time slot
// per cell (the last value in the slot), scaled to [0, max]. Slots without
// a point stay blank, so a worker that was down shows a hole, not a zero.
// Our own renderer: ntcharts' sparkline only grows its max and styles every
// cell, and a table of 256 rows wants neither.
func sparkline(pts []snapshot.Point, end time.Time, window time.Duration, w int, max float64) string {
	if w <= 0 {
		return ""
	}
	if len(pts) == 0 || window <= 0 {
		return strings.Repeat(" ", w)
	}
	var slotsA [64]float64
	var seenA [64]bool
	slots, seen := slotsA[:0], seenA[:0]
	if w <= 64 {
		slots, seen = slotsA[:w], seenA[:w]
	} else {
		slots, seen = make([]float64, w), make([]bool, w)
	}
	start := end.Add(-window)
	span := float64(window)
	for _, p := range pts {
		if p.T.Before(start) || p.T.After(end) {
			continue
		}
		i := int(float64(p.T.Sub(start)) / span * float64(w))
		if i >= w {
			i = w - 1
		}
		slots[i], seen[i] = p.V, true
	}
	var b strings.Builder
	b.Grow(w * 3)
	for i := range slots {
		if !seen[i] {
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(sparkRunes[level(slots[i], max, len(sparkRunes))])
	}
	return b.String()
}

// level maps v in [0, max] to 0..n-1; anything above 0 gets at least the
// second step so a small queue is visibly not empty.
func level(v, max float64, n int) int {
	if max <= 0 || v <= 0 || math.IsNaN(v) {
		return 0
	}
	l := int(math.Round(v / max * float64(n-1)))
	if l < 1 {
		l = 1
	}
	if l > n-1 {
		l = n - 1
	}
	return l
}

// seriesMax is the largest value in a series (0 if empty).
func seriesMax(pts []snapshot.Point) float64 {
	m := 0.0
	for _, p := range pts {
		if p.V > m {
			m = p.V
		}
	}
	return m
}

// bar is a usage bar of w cells for a fraction in [0, 1]: the filled and
// the empty part, to be painted apart.
func bar(frac float64, w int) (full, empty string) {
	if math.IsNaN(frac) {
		frac = 0
	}
	frac = math.Max(0, math.Min(1, frac))
	n := int(math.Round(frac * float64(w)))
	if frac > 0 && n == 0 {
		n = 1
	}
	return strings.Repeat("█", n), strings.Repeat("░", w-n)
}

// heatGlyphs mark a share level without colour: none, <10%, <30%, <60%, more.
var heatGlyphs = []string{"·", "░", "▒", "▓", "█"}

func heatLevel(share float64) int {
	switch {
	case share <= 0:
		return 0
	case share < 0.10:
		return 1
	case share < 0.30:
		return 2
	case share < 0.60:
		return 3
	default:
		return 4
	}
}
