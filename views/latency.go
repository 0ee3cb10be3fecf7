package views

import (
	"github.com/kvtop/kvtop/figures"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Latency, throughput and recomputed prefill in words and cells. Every
// figure comes from the pool (windowed, from bucket increases and counter
// deltas); the views only format it: "640 ms", "1.9 s", "≥2.5 s" for a
// quantile that fell in +Inf (the highest finite bound: a floor), "–" for
// unknown.

// quantile is one of a figure's quantiles ("p50", "p95", "p99") and
// whether it is capped.
func quantile(l snapshot.Latency, q string) (*float64, bool) {
	var v *float64
	switch q {
	case "p50":
		v = l.P50
	case "p95":
		v = l.P95
	default:
		v = l.P99
	}
	for _, c := range l.Capped {
		if c == q {
			return v, true
		}
	}
	return v, false
}

// latQ formats one quantile of a latency figure.
func latQ(l snapshot.Latency, q string) string {
	v, capped := quantile(l, q)
	if v == nil {
		return dash
	}
	return latText(*v, capped)
}

// latText formats milliseconds by figures' one rule for durations.
func latText(v float64, floor bool) string { return figures.Millis(v, floor) }

// latTriple is "180/420/610 ms": p50/p95/p99 in one unit, the unit of the
// largest (a capped one marked ≥).
func latTriple(l snapshot.Latency) string {
	var floor [3]bool
	for i, q := range [...]string{"p50", "p95", "p99"} {
		_, floor[i] = quantile(l, q)
	}
	return figures.MillisTriple([3]*float64{l.P50, l.P95, l.P99}, floor)
}

// tokensSum is prompt + generation tokens per second, nil when neither is
// known.
func tokensSum(t snapshot.Tokens) *float64 {
	switch {
	case t.Prompt == nil && t.Generation == nil:
		return nil
	case t.Prompt == nil:
		return t.Generation
	case t.Generation == nil:
		return t.Prompt
	}
	v := *t.Prompt + *t.Generation
	return &v
}

// latCell is a table cell of one quantile: warn when it is at least
// twice the pool's (the worker is where the time goes).
func latCell(l, poolL snapshot.Latency, q string, role themes.Role) line {
	v, _ := quantile(l, q)
	if v == nil {
		return cell1(dash, themes.Dim)
	}
	if p, _ := quantile(poolL, q); p != nil && *p > 0 && *v >= 2**p && role == themes.Text {
		role = themes.Warn
	}
	return cell1(latQ(l, q), role)
}

// rateCell is a per-second rate cell.
func rateCell(v *float64, role themes.Role) line {
	if v == nil {
		return cell1(dash, themes.Dim)
	}
	return cell1(numf(*v), role)
}

// recomputeWords is a scope's recomputed prefill: "recomputed 1.9k
// tok/s, 12% of prompt tokens", or "" when nothing was measured.
func recomputeWords(tokPerS, share *float64) string {
	if tokPerS == nil {
		return ""
	}
	out := "recomputed " + numf(*tokPerS) + " tok/s"
	if share != nil {
		out += " (" + pctf(*share) + " of prompt)"
	}
	return out
}

// latencyLine is the worker screen's line of latency and throughput
// figures over the window: "latency TTFT 180/420/610 ms (p50/p95/p99) ·
// ITL p95 38 ms · queue p95 25 ms · e2e p95 2.6 s · 6.7k tok/s (6.2k
// prompt, 540 gen) · 3.1 req/s · recomputed 120 tok/s (2% of prompt)".
func latencyLine(s *snapshot.Snapshot, wk *snapshot.Worker, win string) line {
	kept := themes.Text
	if !wk.Up {
		kept = themes.Dim
	}
	l := line{{" latency ", themes.Title}}
	if wk.TTFTMS.P95 == nil && wk.TTFTMS.Reason != "" {
		l = append(l, span{"TTFT – (" + wk.TTFTMS.Reason + ")", themes.Dim})
	} else {
		ttft := themes.Text
		if p := s.Pool.TTFTMS.P95; p != nil && wk.TTFTMS.P95 != nil && *wk.TTFTMS.P95 >= 2**p {
			ttft = themes.Warn
		}
		l = append(l, span{"TTFT ", ttft}, span{"p50/p95/p99 ", themes.Dim}, span{latTriple(wk.TTFTMS), ttft})
	}
	l = append(l, span{" · ITL p95 " + latQ(wk.ITLMS, "p95") + " · queue p95 " + latQ(wk.QueueMS, "p95") +
		" · e2e p95 " + latQ(wk.E2EMS, "p95"), kept})
	t := wk.TokensPerS
	l = append(l, span{" · " + num(tokensSum(t)) + " tok/s (" + num(t.Prompt) + " prompt, " + num(t.Generation) + " gen) · " +
		num(wk.RequestsPerS) + " req/s", kept})
	if r := recomputeWords(wk.Recompute.TokensPerS, wk.Recompute.Share); r != "" {
		role := kept
		if sh := wk.Recompute.Share; sh != nil && *sh >= 0.1 {
			role = themes.Warn
		}
		l = append(l, span{" · " + r, role})
	}
	return append(l, span{" " + win, themes.Dim})
}

// latencyCharts are the worker screen's latency and throughput charts,
// most telling first (a short screen keeps the first): TTFT (p95, with
// p50 and p99 dim), tokens per second with the recomputed prefill dim
// beneath, ITL p95 and queue time p95.
func latencyCharts(wk *snapshot.Worker) []chartSpec {
	ws := wk.Series
	tok := num(tokensSum(wk.TokensPerS))
	if r := wk.Recompute.TokensPerS; r != nil {
		tok += " · recomputed " + numf(*r)
	}
	// Titles fit a quarter of a 160-column screen; the help says what
	// the dim lines are.
	return []chartSpec{
		{title: "TTFT p50/p95/p99", short: "TTFT p95", pts: ws.TTFTP95MS, more: [][]snapshot.Point{ws.TTFTP50MS, ws.TTFTP99MS}, ms: true,
			now: latTriple(wk.TTFTMS), nowShort: latQ(wk.TTFTMS, "p95")},
		{title: "TOKENS/s", short: "TOK/s", pts: ws.TokensPerS, more: [][]snapshot.Point{ws.RecomputeTokensPerS}, now: tok,
			nowShort: num(tokensSum(wk.TokensPerS))},
		{title: "ITL p95", short: "ITL p95", pts: ws.ITLP95MS, ms: true, now: latQ(wk.ITLMS, "p95")},
		{title: "QUEUE TIME p95", short: "QUEUE ms", pts: ws.QueueP95MS, ms: true, now: latQ(wk.QueueMS, "p95")},
	}
}
