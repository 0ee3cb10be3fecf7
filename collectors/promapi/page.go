package promapi

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// series is one sample of a worker's answer: its name, the labels the
// engine put on it (target labels stripped) and its value.
type series struct {
	name   string
	labels []lpair // sorted by name
	value  float64
}

// family groups a page's samples under one TYPE line.
type family struct {
	name, typ string
	series    []series
}

// writePage turns one worker's samples into the Prometheus text page its
// engine served, as far as kvtop reads it: families grouped under TYPE
// lines (counters as `_total`, classic histograms by their base name), the
// target's labels (namespace, pod, job, instance: what Prometheus added)
// removed, so the page parses and folds exactly like a direct scrape.
// HELP lines and the families kvtop does not read are not there; nor are
// families a page declares without samples (Prometheus stores no series
// for them). buf is reused.
func writePage(buf []byte, ss []series) []byte {
	hist := map[string]bool{} // base names that have buckets
	for _, s := range ss {
		if base, ok := strings.CutSuffix(s.name, "_bucket"); ok && hasLabel(s.labels, "le") {
			hist[base] = true
		}
	}
	fams := map[string]*family{}
	for _, s := range ss {
		name, typ := s.name, "gauge"
		switch {
		case strings.HasSuffix(s.name, "_total"):
			typ = "counter"
		default:
			for _, suf := range [...]string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(s.name, suf); ok && hist[base] {
					name, typ = base, "histogram"
					break
				}
			}
		}
		f := fams[name]
		if f == nil {
			f = &family{name: name, typ: typ}
			fams[name] = f
		}
		f.series = append(f.series, s)
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	slices.Sort(names)
	buf = buf[:0]
	for _, n := range names {
		f := fams[n]
		slices.SortFunc(f.series, func(a, b series) int {
			if c := strings.Compare(a.name, b.name); c != 0 {
				return c
			}
			return compareLabels(a.labels, b.labels)
		})
		buf = append(buf, "# TYPE "...)
		buf = append(buf, f.name...)
		buf = append(buf, ' ')
		buf = append(buf, f.typ...)
		buf = append(buf, '\n')
		for _, s := range f.series {
			buf = append(buf, s.name...)
			if len(s.labels) > 0 {
				buf = append(buf, '{')
				for i, l := range s.labels {
					if i > 0 {
						buf = append(buf, ',')
					}
					buf = append(buf, l.name...)
					buf = append(buf, '=', '"')
					buf = appendEscaped(buf, l.value)
					buf = append(buf, '"')
				}
				buf = append(buf, '}')
			}
			buf = append(buf, ' ')
			buf = appendValue(buf, s.value)
			buf = append(buf, '\n')
		}
	}
	return buf
}

func hasLabel(ls []lpair, name string) bool {
	for _, l := range ls {
		if l.name == name {
			return true
		}
	}
	return false
}

func compareLabels(a, b []lpair) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := strings.Compare(a[i].name, b[i].name); c != 0 {
			return c
		}
		if c := strings.Compare(a[i].value, b[i].value); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

// appendEscaped escapes a label value for the text format.
func appendEscaped(buf []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			buf = append(buf, '\\', '\\')
		case '"':
			buf = append(buf, '\\', '"')
		case '\n':
			buf = append(buf, '\\', 'n')
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

func appendValue(buf []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(buf, "NaN"...)
	case math.IsInf(v, 1):
		return append(buf, "+Inf"...)
	case math.IsInf(v, -1):
		return append(buf, "-Inf"...)
	}
	return strconv.AppendFloat(buf, v, 'g', -1, 64)
}
