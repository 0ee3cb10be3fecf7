package views

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Prefixes shows where the hot prefixes live, the pool's skew, and the
// overheating verdict in words.
var Prefixes = &Screen{
	Name: "prefixes", Short: "pfx", Tab: true,
	Body: prefixesBody,
	Rows: func(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) (int, int) {
		return len(s.Prefixes), n - 3 - len(verdict(s, w, th))
	},
	List: func(st *State) *List { return &st.Prefixes },
	Items: func(s *snapshot.Snapshot, _ State) []string {
		out := make([]string, len(s.Prefixes))
		for i := range s.Prefixes {
			out[i] = s.Prefixes[i].ID
		}
		return out
	},
	Keys: func(*snapshot.Snapshot, *State) ScreenKeys { return listKeys("") },
}

func prefixesBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	out := []string{skewLine(s, w, th)}
	out = append(out, verdict(s, w, th)...)
	if len(s.Prefixes) == 0 {
		return append(out, "", line{{"   no prefix traffic seen in the window yet", themes.Dim}}.render(th, w))
	}
	t := prefixTable(s)
	legend := heatLegend(s, w, th)
	tn := n - len(out) - 1
	out = append(out, t.render(th, len(s.Prefixes), min(st.Prefixes.Cursor, len(s.Prefixes)-1), st.Prefixes.Offset, w, tn)...)
	return append(out, legend)
}

func skewLine(s *snapshot.Snapshot, w int, th *themes.Theme) string {
	sk := s.Pool.LoadSkew
	l := line{{" SKEW ", themes.Title},
		{"queue max/mean " + times(sk.MaxOverMean), skewRole(sk)},
		{" · Gini " + fl(sk.Gini, 2), themes.Text}}
	if lowLoad(s) {
		// The figures stay (scripts get them too), but dim and explained.
		l[1].role, l[2].role = themes.Dim, themes.Dim
		l = append(l, span{fmt.Sprintf(" (low load: %s waiting over %d up %s — skew means little)",
			numf(*s.Pool.Queue), s.Pool.Up, plural(s.Pool.Up, "worker", "workers")), themes.Dim})
	}
	if med, ok := queueMedian(s); ok {
		l = append(l, span{" · median " + numf(med), themes.Text})
	}
	var top *snapshot.Worker
	for i := range s.Workers {
		if q := s.Workers[i].Queue; q != nil && s.Workers[i].Up && (top == nil || *q > *top.Queue) {
			top = &s.Workers[i]
		}
	}
	switch {
	case top == nil:
	case *top.Queue == 0:
		l = append(l, span{" · all queues empty", themes.Text})
	default:
		l = append(l, span{" · longest " + numf(*top.Queue) + " on " + top.Name, themes.Text})
	}
	// The table lists the top prefixes; only those over the rule are hot.
	hot := 0
	for _, p := range s.Prefixes {
		if p.Share >= s.Thresholds.HotPrefixShare {
			hot++
		}
	}
	l = append(l, span{fmt.Sprintf(" · %d hot of %d listed", hot, len(s.Prefixes)), themes.Dim})
	return l.render(th, w)
}

// verdict is the overheating judgement in words, one line per overheating
// worker, or one line saying nobody is.
func verdict(s *snapshot.Snapshot, w int, th *themes.Theme) []string {
	tr := s.Thresholds
	med, _ := queueMedian(s)
	var out []string
	for _, p := range s.Prefixes {
		if p.Overheating == nil {
			continue
		}
		names := p.OverheatingWorkers
		if len(names) == 0 {
			names = []string{*p.Overheating}
		}
		// Owners sharing the prefix are named together with their
		// combined share: that is what put them over the rule.
		together, sum := "", 0.0
		if len(names) > 1 {
			for _, n := range names {
				sum += p.Workers[n]
			}
			together = fmt.Sprintf(" (%s: %s)", strings.Join(names, " + "), pctf(math.Min(sum, 1)))
		}
		for _, name := range names {
			q := dash
			if wk := findWorker(s, name); wk != nil && name != "" {
				q = num(wk.Queue)
			}
			out = append(out, indented(" ⚠ ", themes.Crit, name+" is OVERHEATING"+fmt.Sprintf(" on prefix %s (%s): it takes %s of that prefix's traffic%s, which is %s of the pool's; queue %s vs median %s",
				shortID(p.ID, 8), depth(p), pctf(p.Workers[name]), together, pctf(p.Share), q, numf(med)), themes.Crit, w, th)...)
		}
	}
	if len(out) == 0 {
		if len(s.Prefixes) == 0 {
			return []string{line{{" ✓ ", themes.OK}, {"no worker is overheating", themes.Text}}.render(th, w)}
		}
		p := s.Prefixes[0]
		where := fmt.Sprintf("over %d %s", p.Replicas, plural(p.Replicas, "replica", "replicas"))
		if p.Replicas == 0 { // its traffic is in the window, its blocks are gone
			where = "and no worker holds it now"
		}
		out = append(out, indented(" ✓ ", themes.OK, fmt.Sprintf("no worker is overheating: the hottest prefix %s takes %s of traffic %s",
			shortID(p.ID, 8), pctf(p.Share), where), themes.Text, w, th)...)
	}
	rule := fmt.Sprintf("rule: hot ≥ %s of traffic; overheating = the fewest workers taking ≥ %s of a hot prefix's traffic, if at most %d, each with queue ≥ %.1f× median and ≥ %s",
		pctf(tr.HotPrefixShare), pctf(tr.OverheatShare), snapshot.MaxOwners(s.Pool.Up), tr.OverheatQueueRatio, numf(tr.OverheatMinQueue))
	out = append(out, indented("   ", themes.Dim, rule, themes.Dim, w, th)...)
	return append(out, tailLines(s, w, th)...)
}

func depth(p snapshot.Prefix) string {
	if p.Orphan || p.Tokens == nil {
		return "depth unknown"
	}
	return numi(*p.Tokens) + " tok"
}

func prefixTable(s *snapshot.Snapshot) *table {
	ps := s.Prefixes
	heatW := min(len(s.Workers), 32)
	cols := []column{
		{title: "PREFIX", width: 9, cell: func(i, _ int) line { return cell1(shortID(ps[i].ID, 8), themes.Text) }},
		{title: "DEPTH", width: 8, right: true, cell: func(i, _ int) line {
			if ps[i].Orphan {
				return cell1("orphan", themes.Warn)
			}
			if ps[i].Tokens == nil {
				return cell1(dash, themes.Dim)
			}
			return cell1(numi(*ps[i].Tokens)+" tok", themes.Text)
		}},
		{title: "SHARE", width: 5, right: true, cell: func(i, _ int) line {
			role := themes.Text
			if ps[i].Share >= s.Thresholds.HotPrefixShare && s.Thresholds.HotPrefixShare > 0 {
				role = themes.Warn
			}
			return cell1(pctf(ps[i].Share), role)
		}},
		{title: reqTitle(s), width: 7, right: true, drop: 4, cell: func(i, _ int) line {
			return cell1(approxRequests(ps[i].Requests), themes.Text)
		}},
		{title: "REPL", width: 4, right: true, cell: func(i, _ int) line { return cell1(numi(ps[i].Replicas), themes.Text) }},
		{title: "SOURCE", width: 9, drop: 3, cell: func(i, _ int) line {
			if ps[i].Source == "events" {
				return cell1("events~", themes.Dim)
			}
			return cell1(ps[i].Source, themes.Text)
		}},
		// The joined requests under the prefix over the window: their
		// TTFT and queue time p95 (exact, null below 20) and how many.
		{title: "TTFT p95", width: 8, right: true, drop: 5, cell: func(i, _ int) line { return quantCell(ps[i].TTFTMS) }},
		{title: "QUEUE p95", width: 9, right: true, drop: 1, cell: func(i, _ int) line { return quantCell(ps[i].QueueMS) }},
		{title: "JOINED", width: 6, right: true, drop: 2, cell: func(i, _ int) line {
			if ps[i].TTFTMS.N == 0 {
				return cell1("0", themes.Dim)
			}
			return cell1(numi(ps[i].TTFTMS.N), themes.Text)
		}},
		{title: "HEAT", width: max(heatW, 4), drop: 6, cell: func(i, _ int) line { return heatRow(s, ps[i].Workers, heatW) }},
		{title: "TOP WORKERS", width: 14, flex: true, maxWidth: 60, cell: func(i, _ int) line {
			l := topWorkers(ps[i])
			if ps[i].Overheating != nil {
				return cell1(l, themes.Crit)
			}
			return cell1(l, themes.Text)
		}},
	}
	return &table{cols: cols, sortCol: 2, mark: func(i int) (string, themes.Role) {
		if ps[i].Overheating != nil {
			return "⚠", themes.Crit
		}
		return "", themes.Text
	}}
}

// reqTitle heads the prefix traffic column: requests per window.
func reqTitle(s *snapshot.Snapshot) string {
	if s == nil || s.WindowS <= 0 {
		return "REQ/win"
	}
	return "REQ/" + dur(time.Duration(s.WindowS*float64(time.Second)))
}

// approxRequests shows a prefix's traffic over the window as the estimate
// it is: the counts decay with age, so "8.5" requests means about 8.
func approxRequests(v float64) string {
	switch {
	case v <= 0:
		return "0"
	case v < 0.5:
		return "<1"
	}
	return "≈" + numf(math.Round(v))
}

// heatRow is one cell per worker in configured order, glyph and colour by
// that worker's share of the prefix's traffic.
func heatRow(s *snapshot.Snapshot, shares map[string]float64, w int) line {
	l := make(line, 0, w)
	for i := 0; i < w && i < len(s.Workers); i++ {
		lv := heatLevel(shares[s.Workers[i].Name])
		l = append(l, span{heatGlyphs[lv], themes.HeatRole(lv)})
	}
	return l
}

// topWorkers names the workers taking most of a prefix's (or a router's)
// traffic, largest share first.
// trafficWord says where a prefix's traffic shares come from: routed by
// the router's decisions, or stored as seen in the KV events.
func trafficWord(p snapshot.Prefix) string {
	if p.Source == "decisions" {
		return "routed to "
	}
	return "stored on "
}

func topWorkers(p snapshot.Prefix) string {
	type ws struct {
		name  string
		share float64
	}
	var all []ws
	for n, v := range p.Workers {
		all = append(all, ws{n, v})
	}
	sort.Slice(all, func(a, b int) bool {
		if all[a].share != all[b].share {
			return all[a].share > all[b].share
		}
		return all[a].name < all[b].name
	})
	parts := make([]string, 0, 4)
	for i, x := range all {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("+%d", len(all)-4))
			break
		}
		parts = append(parts, x.name+" "+pctf(x.share))
	}
	return strings.Join(parts, " · ")
}

func heatLegend(s *snapshot.Snapshot, w int, th *themes.Theme) string {
	who := ""
	if n := len(s.Workers); n > 0 {
		last := min(n, 32) - 1
		who = fmt.Sprintf(" (%s … %s)", s.Workers[0].Name, s.Workers[last].Name)
	}
	l := line{{" heat: one cell per worker" + who + ": ", themes.Dim}}
	for lv, g := range heatGlyphs {
		l = append(l, span{g, themes.HeatRole(lv)}, span{" " + []string{"none", "<10%", "<30%", "<60%", "≥60%"}[lv] + "  ", themes.Dim})
	}
	l = append(l, span{"· events~ = estimated from BlockStored events", themes.Dim})
	return l.render(th, w)
}

// quantCell is one request-quantile cell: "–" (dim) below 20 samples.
func quantCell(q snapshot.RequestQuantiles) line {
	if q.P95 == nil {
		return cell1(dash, themes.Dim)
	}
	return cell1(latText(*q.P95, false), themes.Text)
}

// quantWords is "p50/p95/p99 410 ms/1.9/2.6 s (n 640)", or "– (why)".
func quantWords(q snapshot.RequestQuantiles) string {
	if q.P50 == nil {
		if q.N > 0 {
			return fmt.Sprintf("– (n %d, fewer than 20)", q.N)
		}
		return dash
	}
	return "p50/p95/p99 " + latTriple(snapshot.Latency{P50: q.P50, P95: q.P95, P99: q.P99}) + fmt.Sprintf(" (n %d)", q.N)
}

// tailLines put the requests away from the hot prefixes beside them: the
// rest's TTFT (p50/p95/p99) and queue p95, and the requests on
// overheating workers against the others'.
func tailLines(s *snapshot.Snapshot, w int, th *themes.Theme) []string {
	p := s.Pool
	rest := p.Rest.TTFTMS
	if rest.N == 0 && p.OverheatingWorkers.TTFTMS.N == 0 {
		return []string{line{{" rest ", themes.Title}, {"no joined request in the window to compare (decisions with outcomes)", themes.Dim}}.render(th, w)}
	}
	role := themes.Text
	var hot *float64
	for _, x := range s.Prefixes {
		if x.Share >= s.Thresholds.HotPrefixShare && x.TTFTMS.P95 != nil && (hot == nil || *x.TTFTMS.P95 < *hot) {
			hot = x.TTFTMS.P95
		}
	}
	if rest.P95 != nil && hot != nil && *rest.P95 >= 2**hot {
		role = themes.Warn // the rest waits while the hot stream is served
	}
	l := line{{" rest ", themes.Title}, {"under no hot prefix: TTFT " + quantWords(rest), role},
		{" · queue p95 " + quantP95(p.Rest.QueueMS), themes.Text}}
	if o := p.OverheatingWorkers.TTFTMS; o.N > 0 {
		l = append(l, span{" · on overheating workers TTFT p95 " + quantP95(o) + " vs " + quantP95(p.OtherWorkers.TTFTMS) + " on the others", themes.Text})
	}
	return wrapLine(l, 6, w, th)
}

func quantP95(q snapshot.RequestQuantiles) string {
	if q.P95 == nil {
		return dash
	}
	return latText(*q.P95, false) + fmt.Sprintf(" (n %d)", q.N)
}
