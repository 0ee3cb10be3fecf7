// Package figures writes kvtop's numbers the one way every face shows them
// (the console, `snapshot --format text`, the pool's alert and reason
// texts), so the same value never reads 46 % in one place and 47 % in
// another.
package figures

import (
	"math"
	"strconv"
)

// Unknown is what a value that is not known looks like. It is never 0.
const Unknown = "–"

// Pct writes a fraction (0..1) as a percentage: whole percents, halves
// rounded away from zero (0.465 → "47%", where fmt's "%.0f" says 46), and
// one decimal below 1 % so a small share does not read as none ("0.4%"),
// "<0.1%" below that (never "0.0%", which would sit beside a true "0%").
// NaN and ±Inf are Unknown.
func Pct(v float64) string {
	x := v * 100
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return Unknown
	case x > 0 && x < 0.05:
		return "<0.1%" // not "0.0%" beside a true "0%"
	case x > 0 && x < 0.95:
		return strconv.FormatFloat(x, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(math.Round(x), 'f', 0, 64) + "%"
}
