package figures

import (
	"math"
	"testing"
)

func TestPct(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0.465, "47%"}, // 46.5 exactly: away from zero, as on screen
		{0.125, "13%"},
		{0.4649, "46%"},
		{0, "0%"},
		{0.004, "0.4%"},   // small, not none
		{0.0004, "<0.1%"}, // smaller: not "0.0%" beside a true 0%
		{0.0005, "0.1%"},
		{0.0095, "1%"},
		{1, "100%"},
		{math.NaN(), "–"},
		{math.Inf(1), "–"},
	} {
		if got := Pct(c.v); got != c.want {
			t.Errorf("Pct(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
