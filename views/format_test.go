package views

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

func fp(v float64) *float64 { return &v }

func TestNumbersKeepUnitsAndUnknowns(t *testing.T) {
	cases := []struct {
		name, got, want string
	}{
		{"unknown pct", pct(nil), "–"},
		{"zero pct", pct(fp(0)), "0%"},
		{"tiny pct", pct(fp(0.004)), "0.4%"},
		{"pct", pct(fp(0.613)), "61%"},
		{"full pct", pct(fp(1)), "100%"},
		{"NaN pct", pct(fp(math.NaN())), "–"},
		{"unknown num", num(nil), "–"},
		{"zero num", num(fp(0)), "0"},
		{"small", num(fp(7)), "7"},
		{"fraction", num(fp(4.5)), "4.5"},
		{"thousands", num(fp(4800)), "4.8k"},
		{"tens of thousands", num(fp(48100)), "48.1k"},
		{"hundreds of thousands", num(fp(481000)), "481k"},
		{"rounds up a unit", num(fp(99960)), "100k"},
		{"millions", num(fp(1.25e6)), "1.2M"},
		{"negative", num(fp(-3)), "-3"},
		{"ms", ms(fp(40)), "40 ms"},
		{"ms fraction", ms(fp(0.4)), "0.4 ms"},
		{"ms to s", ms(fp(12400)), "12 s"},
		// One rule for every duration (issue 25): ms below a second, s
		// above — a record's queue is not "3944 ms" where the worker
		// screen says "3.9 s".
		{"ms under 1 s", ms(fp(999)), "999 ms"},
		{"ms over 1 s", ms(fp(3944)), "3.9 s"},
		{"unknown ms", ms(nil), "–"},
		{"secs", secs(0.4), "0.4 s"},
		{"secs whole", secs(42), "42 s"},
		{"minutes", secs(192), "3m12s"},
		{"hours", secs(3720), "1h02m"},
		{"grouped", grouped(3120), "3 120"},
		{"grouped big", grouped(1234567), "1 234 567"},
		{"grouped small", grouped(88), "88"},
		{"grouped negative", grouped(-1240), "-1 240"},
		{"refresh ms", dur(250 * time.Millisecond), "250ms"},
		{"refresh s", dur(time.Second), "1s"},
		{"refresh 2.5s", dur(2500 * time.Millisecond), "2.5s"},
		{"times", times(fp(2.44)), "2.4×"},
		{"times unknown", times(nil), "–"},
		{"window full", windowNote(60, 60), "(60s)"},
		{"window partial", windowNote(23, 60), "(23 of 60s)"},
		{"window none yet", windowNote(0, 60), "(60s)"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
}

func TestSparklineShowsHolesAndScale(t *testing.T) {
	end := time.Date(2025, 1, 1, 0, 1, 0, 0, time.UTC)
	var pts []snapshot.Point
	// Values for the first half of the window only: the worker went down.
	for i := 0; i < 30; i++ {
		pts = append(pts, snapshot.Point{T: end.Add(-60*time.Second + time.Duration(i)*time.Second), V: float64(i % 9)})
	}
	s := sparkline(pts, end, time.Minute, 10, 8)
	if r := []rune(s); len(r) != 10 {
		t.Fatalf("sparkline %q is %d cells, want 10", s, len(r))
	}
	if !strings.HasSuffix(s, "     ") {
		t.Errorf("no data in the second half must stay blank, got %q", s)
	}
	if strings.TrimSpace(s) == "" {
		t.Errorf("first half has data but drew nothing: %q", s)
	}
	// Explicit max: a value at max is a full block, above it too.
	full := sparkline([]snapshot.Point{{T: end, V: 12}}, end, time.Minute, 1, 8)
	if full != "█" {
		t.Errorf("value above max = %q, want full block", full)
	}
	zero := sparkline([]snapshot.Point{{T: end, V: 0}}, end, time.Minute, 1, 8)
	if zero != "▁" {
		t.Errorf("a measured 0 = %q, want the lowest bar (not blank)", zero)
	}
	small := sparkline([]snapshot.Point{{T: end, V: 0.01}}, end, time.Minute, 1, 8)
	if small == "▁" {
		t.Errorf("a small non-zero value must not look like zero")
	}
	if got := sparkline(nil, end, time.Minute, 4, 1); got != "    " {
		t.Errorf("no points = %q, want blanks", got)
	}
}

func TestBar(t *testing.T) {
	cases := []struct {
		frac        float64
		full, empty int
	}{{0, 0, 10}, {0.01, 1, 9}, {0.61, 6, 4}, {1, 10, 0}, {1.7, 10, 0}, {-1, 0, 10}, {math.NaN(), 0, 10}}
	for _, c := range cases {
		f, e := bar(c.frac, 10)
		if len([]rune(f)) != c.full || len([]rune(e)) != c.empty {
			t.Errorf("bar(%v) = %d full + %d empty, want %d + %d", c.frac, len([]rune(f)), len([]rune(e)), c.full, c.empty)
		}
	}
}

func TestFitAndTruncate(t *testing.T) {
	cases := []struct {
		in    string
		w     int
		right bool
		want  string
	}{
		{"w3", 6, false, "w3    "},
		{"19", 5, true, "   19"},
		{"HISTORY LOST", 8, false, "HISTORY…"},
		{"日本語ワーカー", 7, false, "日本語…"},
		{"a\x1b[31mred", 9, false, "a?[31mred"}, // an escape from a label is neutralised
		{"tab\there", 8, false, "tab?here"},
		{"x", 0, false, ""},
		{"abc", 1, false, "…"},
	}
	for _, c := range cases {
		got := fit(c.in, c.w, c.right)
		if got != c.want {
			t.Errorf("fit(%q, %d) = %q, want %q", c.in, c.w, got, c.want)
		}
		if c.w > 0 && width(got) > c.w {
			t.Errorf("fit(%q, %d) is %d wide", c.in, c.w, width(got))
		}
	}
}

func TestLineRenderCutsBeforePainting(t *testing.T) {
	th, err := themes.Load("mono", nil)
	if err != nil {
		t.Fatal(err)
	}
	l := line{{"w3 ", themes.Text}, {"OVERHEATING", themes.Crit}, {" on prefix 9f2c", themes.Text}}
	got := l.render(th, 10)
	if w := visWidth(got); w > 10 {
		t.Fatalf("rendered %q is %d wide", got, w)
	}
	if !strings.Contains(stripTest(got), "…") {
		t.Errorf("a cut line must end in …: %q", got)
	}
	// Exactly filling the width while more text follows still shows the cut.
	if got := (line{{"12345", themes.Text}, {"6789", themes.Text}}).render(th, 5); stripTest(got) != "1234…" {
		t.Errorf("got %q, want 1234…", got)
	}
}

func stripTest(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == 0x1b:
			in = true
		case in && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'):
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestWrap(t *testing.T) {
	got := wrap("the prediction was for w2; the request went to w1", 20)
	for _, l := range got {
		if width(l) > 20 {
			t.Errorf("line %q wider than 20", l)
		}
	}
	if strings.Join(got, " ") != "the prediction was for w2; the request went to w1" {
		t.Errorf("wrap lost words: %q", got)
	}
	long := wrap("tcp://a-very-long-endpoint-name:5557", 10)
	for _, l := range long {
		if width(l) > 10 {
			t.Errorf("hard-broken line %q wider than 10", l)
		}
	}
}

func TestTableDropsInStatedOrder(t *testing.T) {
	cell := func(s string) func(int, int) line { return func(int, int) line { return cell1(s, themes.Text) } }
	tb := &table{sortCol: -1, cols: []column{
		{title: "A", width: 10, cell: cell("a")},
		{title: "B", width: 10, drop: 2, cell: cell("b")},
		{title: "C", width: 10, drop: 1, cell: cell("c")},
		{title: "D", width: 15, narrow: 4, narrowAt: 3, cell: cell("d")},
	}}
	cases := []struct {
		w    int
		want []int
	}{
		{4 + 10 + 10 + 10 + 15 + 6, []int{10, 10, 10, 15}},
		{4 + 10 + 10 + 15 + 4, []int{10, 10, 0, 15}}, // C drops first
		{4 + 10 + 15 + 2, []int{10, 0, 0, 15}},       // then B
		{4 + 10 + 4 + 2, []int{10, 0, 0, 4}},         // then D narrows
	}
	for _, c := range cases {
		got := tb.layout(c.w)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("width %d: widths %v, want %v", c.w, got, c.want)
				break
			}
		}
	}
}

func TestCleanKeepsPrintableText(t *testing.T) {
	for _, s := range []string{"w3", "HISTORY LOST", "日本語", "█░▁", "–", "seq 88121–89360"} {
		if clean(s) != s {
			t.Errorf("clean(%q) = %q", s, clean(s))
		}
	}
	if got := clean("a\x9bb\xffc\x7f"); got != "a?b?c?" {
		t.Errorf("clean of C1, invalid UTF-8 and DEL = %q", got)
	}
}

// FuzzFit: whatever text arrives (labels, errors from the network), a cell
// is exactly as wide as asked and carries no control characters.
func FuzzFit(f *testing.F) {
	for _, s := range []string{"w3", "HISTORY LOST, 2 gaps", "日本語", "a\x1b[31m", "\t\n\r", "e\u0301", "👍🏽", "\xff\xfe", ""} {
		f.Add(s, 8, false)
		f.Add(s, 1, true)
	}
	f.Fuzz(func(t *testing.T, s string, w int, right bool) {
		w = w % 200
		if w < 0 {
			w = -w
		}
		got := fit(s, w, right)
		if w > 0 && width(got) != w {
			t.Fatalf("fit(%q, %d) = %q, %d wide", s, w, got, width(got))
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("fit(%q) left control character %U in %q", s, r, got)
			}
		}
	})
}

// The fast width path must agree with the full grapheme measure for every
// glyph it claims, or frames would be off by the terminal's count.
func TestNarrowGlyphsAgreeWithAnsiWidth(t *testing.T) {
	for r := rune(0); r < 0x30000; r++ {
		if !narrow(r) {
			continue
		}
		if w := ansi.StringWidth(string(r)); w != 1 {
			t.Errorf("%U %q: fast path says 1 cell, ansi says %d", r, r, w)
		}
	}
	for _, s := range []string{"▶⚠ w3  ██████░░░░  61%  ▁▂▃▅▆▇█  ↑↓  – … · × ≥ ≠ ✖ ✓ Δ ‖ ⣀⠤", "\x1b[1mbold\x1b[0m ▶"} {
		if visWidth(s) != ansi.StringWidth(s) {
			t.Errorf("visWidth(%q) = %d, ansi says %d", s, visWidth(s), ansi.StringWidth(s))
		}
	}
}

func TestLatencyFormats(t *testing.T) {
	l := func(p50, p95, p99 float64, capped ...string) snapshot.Latency {
		return snapshot.Latency{P50: &p50, P95: &p95, P99: &p99, Capped: capped}
	}
	for _, c := range []struct {
		l      snapshot.Latency
		triple string
		p95    string
	}{
		{l(180, 420, 610), "180/420/610 ms", "420 ms"},
		{l(4.2, 9.25, 14), "4.2/9.2/14 ms", "9.2 ms"},
		{l(30, 1700, 2300), "0.03/1.7/2.3 s", "1.7 s"},
		{l(900, 1900, 12400), "0.9/1.9/12 s", "1.9 s"},
		{l(300, 2500, 2500, "p95", "p99"), "0.3/≥2.5/≥2.5 s", "≥2.5 s"},
		{snapshot.Latency{Reason: "no requests in the window"}, "–/–/– ms", "–"},
	} {
		if got := latTriple(c.l); got != c.triple {
			t.Errorf("latTriple = %q, want %q", got, c.triple)
		}
		if got := latQ(c.l, "p95"); got != c.p95 {
			t.Errorf("latQ p95 = %q, want %q", got, c.p95)
		}
	}
}

// streamSummaryWidth counts what streamSummary writes, without writing it.
func TestStreamSummaryWidth(t *testing.T) {
	for _, ss := range [][]snapshot.Stream{
		nil,
		{{State: "live"}},
		{{State: "live", Gaps: 1}},
		{{State: "history_lost", Gaps: 12}, {State: "live"}},
		{{State: "replaying", Gaps: 2}, {State: "replaying", Gaps: 1}},
		{{State: "joined_late"}, {State: "live"}, {State: "live"}, {State: "live"}, {State: "live"}, {State: "live"}, {State: "live"}, {State: "live"}, {State: "live"}, {State: "live", Gaps: 100}},
	} {
		text, _ := streamSummary(ss, 80)
		if got := streamSummaryWidth(ss); got != width(text) {
			t.Errorf("%q: width %d, counted %d", text, width(text), got)
		}
	}
}
