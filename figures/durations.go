package figures

import (
	"math"
	"strconv"
)

// Durations follow one rule on every face (issue 25): milliseconds below
// a second, seconds above ("38 ms", "640 ms", "1.9 s", "12 s", "3m12s").
// A quantile that fell above a histogram's highest bound is a floor,
// marked "≥".

// Millis writes a duration given in milliseconds.
func Millis(v float64, floor bool) string {
	p := ""
	if floor {
		p = "≥"
	}
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return Unknown
	case v < 10 && v != math.Trunc(v):
		return p + strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	case v < 999.5:
		return p + strconv.FormatFloat(math.Round(v), 'f', 0, 64) + " ms"
	case v < 9950:
		return p + strconv.FormatFloat(v/1000, 'f', 1, 64) + " s"
	}
	return p + Seconds(v/1000)
}

// Seconds writes a duration given in seconds: "0.4 s", "42 s", "3m12s",
// "1h02m".
func Seconds(s float64) string {
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0):
		return Unknown
	case s < 10:
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	case s < 60:
		return strconv.FormatFloat(math.Round(s), 'f', 0, 64) + " s"
	case s < 3600:
		m := int(s) / 60
		return strconv.Itoa(m) + "m" + pad2(int(s)%60) + "s"
	default:
		h := int(s) / 3600
		return strconv.Itoa(h) + "h" + pad2(int(s)%3600/60) + "m"
	}
}

func pad2(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// MillisTriple writes three quantiles (p50/p95/p99, in milliseconds; nil
// unknown, floor marks a capped one) in one unit, the unit the largest
// takes by Millis' rule: "180/420/610 ms", "0.02/4.0/4.8 s". A fast p50
// beside a slow p99 keeps enough digits not to read "0.0".
func MillisTriple(vals [3]*float64, floor [3]bool) string {
	top := 0.0
	for _, v := range vals {
		if v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
			top = max(top, *v)
		}
	}
	div, unit := 1.0, " ms"
	if top >= 999.5 {
		div, unit = 1000, " s"
	}
	out := ""
	for i, v := range vals {
		if i > 0 {
			out += "/"
		}
		if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
			out += Unknown
			continue
		}
		if floor[i] {
			out += "≥"
		}
		x, prec := *v/div, 0
		switch {
		case div == 1 && x < 10 && x != math.Trunc(x):
			prec = 1
		case div == 1, x == 0, x >= 10:
		case x >= 0.1:
			prec = 1
		default:
			prec = 2
		}
		out += strconv.FormatFloat(x, 'f', prec, 64)
	}
	return out + unit
}
