package views

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/figures"
)

// dash is what an unknown value looks like. It is never 0.
const dash = figures.Unknown

// pct formats a fraction (0..1) as a percentage; nil is unknown.
func pct(v *float64) string {
	if v == nil {
		return dash
	}
	return pctf(*v)
}

// pctf is figures.Pct: the one rounding rule of every face.
func pctf(v float64) string { return figures.Pct(v) }

// num formats a count compactly: 7, 4.8k, 48.1k, 481k, 1.2M.
func num(v *float64) string {
	if v == nil {
		return dash
	}
	return numf(*v)
}

func numf(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return dash
	}
	a := math.Abs(v)
	switch {
	case a < 1000:
		if v == math.Trunc(v) {
			return strconv.FormatFloat(v, 'f', 0, 64)
		}
		if a < 10 {
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case a < 1e6:
		return scaled(v, 1e3, "k")
	case a < 1e9:
		return scaled(v, 1e6, "M")
	default:
		return scaled(v, 1e9, "G")
	}
}

func scaled(v, unit float64, suffix string) string {
	x := v / unit
	if math.Abs(x) >= 99.95 {
		return strconv.FormatFloat(math.Round(x), 'f', 0, 64) + suffix
	}
	return strconv.FormatFloat(x, 'f', 1, 64) + suffix
}

func numi(n int) string    { return numf(float64(n)) }
func numu(n uint64) string { return numf(float64(n)) }

// numip is an optional count: nil is unknown.
func numip(n *int) string {
	if n == nil {
		return dash
	}
	return numi(*n)
}

// grouped writes an integer in groups of three ("3 120") for prose, where
// exact counts matter more than width.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ms formats a duration in milliseconds by the one rule every duration
// on screen follows: milliseconds below a second, seconds above ("40 ms",
// "640 ms", "1.9 s", "12 s", "3m12s").
func ms(v *float64) string {
	if v == nil {
		return dash
	}
	return latText(*v, false)
}

// secs formats a duration in seconds: "0.4 s", "42 s", "3m12s", "1h02m".
func secs(s float64) string { return figures.Seconds(s) }

func secsp(v *float64) string {
	if v == nil {
		return dash
	}
	return secs(*v)
}

// dur formats a refresh interval: "250ms", "1s", "2.5s".
func dur(d time.Duration) string {
	if d <= 0 {
		return dash
	}
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// clock is the wall time of a snapshot; views never read the real clock.
func clock(t time.Time) string {
	if t.IsZero() {
		return dash
	}
	return t.Format("15:04:05")
}

// ago says how long before the snapshot t was, on kvtop's clock.
func ago(at, t time.Time) string {
	if t.IsZero() || at.IsZero() {
		return dash
	}
	d := at.Sub(t).Seconds()
	if d < 0 {
		d = 0
	}
	return secs(d) + " ago"
}

// shortID shortens a hex prefix id for tables: "9f2c4e1a…".
func shortID(id string, n int) string {
	if len(id) <= n {
		return id
	}
	return id[:n] + "…"
}

func times(v *float64) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v, 'f', 1, 64) + "×"
}

func fl(v *float64, prec int) string {
	if v == nil {
		return dash
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
