package figures

import (
	"math"
	"testing"
)

// TestDurationsOneRule: milliseconds below a second, seconds above, on
// every face; a triple takes the unit of its largest.
func TestDurationsOneRule(t *testing.T) {
	for _, c := range []struct {
		ms    float64
		floor bool
		want  string
	}{
		{3.5, false, "3.5 ms"}, {38, false, "38 ms"}, {999.4, false, "999 ms"}, {999.6, false, "1.0 s"},
		{3944, false, "3.9 s"}, {4700, true, "≥4.7 s"}, {12_000, false, "12 s"}, {192_000, false, "3m12s"},
		{math.NaN(), false, Unknown},
	} {
		if got := Millis(c.ms, c.floor); got != c.want {
			t.Errorf("Millis(%v, %v) = %q, want %q", c.ms, c.floor, got, c.want)
		}
	}
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		v     [3]*float64
		floor [3]bool
		want  string
	}{
		{[3]*float64{f(180), f(420), f(610)}, [3]bool{}, "180/420/610 ms"},
		{[3]*float64{f(20), f(4000), f(4800)}, [3]bool{}, "0.02/4.0/4.8 s"},
		{[3]*float64{f(240), nil, f(2500)}, [3]bool{false, false, true}, "0.2/–/≥2.5 s"},
		{[3]*float64{f(0.4), f(2.5), f(9)}, [3]bool{}, "0.4/2.5/9 ms"},
	} {
		if got := MillisTriple(c.v, c.floor); got != c.want {
			t.Errorf("MillisTriple = %q, want %q", got, c.want)
		}
	}
}
