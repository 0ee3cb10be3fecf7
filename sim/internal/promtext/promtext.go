// Package promtext writes the Prometheus text exposition format (0.0.4), as
// the Python prometheus_client does: HELP and TYPE per family, labels sorted
// by name, floats printed like Python's repr (66.0, 1.7682643398898673e+09).
package promtext

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ContentType is the text format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Writer accumulates one page.
type Writer struct {
	b    []byte
	pair []pair
}

type pair struct{ k, v string }

// helpEscaper is built once: a Replacer builds its tables on first use,
// which per family was a twentieth of the simulator's CPU.
var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// Family starts a metric family.
func (w *Writer) Family(name, help, typ string) {
	w.b = append(w.b, "# HELP "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, helpEscaper.Replace(help)...)
	w.b = append(w.b, "\n# TYPE "...)
	w.b = append(w.b, name...)
	w.b = append(w.b, ' ')
	w.b = append(w.b, typ...)
	w.b = append(w.b, '\n')
}

// Sample writes one sample; labels are name, value pairs.
func (w *Writer) Sample(name string, labels []string, v float64) {
	w.b = append(w.b, name...)
	if len(labels) >= 2 {
		w.pair = w.pair[:0]
		for i := 0; i+1 < len(labels); i += 2 {
			w.pair = append(w.pair, pair{labels[i], labels[i+1]})
		}
		sort.SliceStable(w.pair, func(i, j int) bool { return w.pair[i].k < w.pair[j].k })
		w.b = append(w.b, '{')
		for i, p := range w.pair {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, p.k...)
			w.b = append(w.b, '=')
			w.b = strconv.AppendQuote(w.b, p.v)
		}
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, ' ')
	w.b = append(w.b, Float(v)...)
	w.b = append(w.b, '\n')
}

// Bytes returns the page.
func (w *Writer) Bytes() []byte { return w.b }

// Float formats v as prometheus_client does (Python repr, with large values
// in exponent form).
func Float(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	s := pyRepr(v)
	if dot := strings.IndexByte(s, '.'); v > 0 && dot > 6 && !strings.ContainsAny(s, "e") {
		mantissa := strings.TrimRight(s[:1]+"."+s[1:dot]+s[dot+1:], "0.")
		return mantissa + "e+0" + strconv.Itoa(dot-1)
	}
	return s
}

// pyRepr is Python's repr of a float: shortest round-trip digits, an
// exponent only below 1e-4 or from 1e16 on, and ".0" on whole numbers.
func pyRepr(v float64) string {
	a := math.Abs(v)
	if a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(v, 'e', -1, 64)
		// Go writes e-05 / e+16 like Python does.
		return s
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// Unix is t in unix seconds, as exactly as a float64 holds it.
func Unix(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }
