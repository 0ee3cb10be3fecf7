package views

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Below the worker table the pool screen is an overview: panels, most
// important first, in whatever lines the table leaves. Every panel that
// fits gets its fewest lines, by priority; then they grow, by priority, up
// to the lines they want:
//
//	ALERTS             every active alert in full (wrapped) with its age; its fewest lines hold the top one whole
//	HOTTEST PREFIXES   share, depth, replicas and owners of the top prefixes
//	HIT LADDER         the hit rate each fix would reach, and the losses in words (ladder.go)
//	FLAGGED DECISIONS  the newest routing decisions that carry a flag
//	POOL               token and request hit rates, queue and skew over the window
//
// A panel is hidden only when fewer lines than its minimum remain. Panels
// are set apart by a blank line when all of them fit whole with it, and
// packed without where a blank line would cost a panel a row. There is no size below which
// the overview goes: what a screen shows depends on its size and the data,
// never on where a cutoff falls, so nothing flips on and off while both
// stay the same.

// tableShare is the part of the pool screen's body the worker table keeps
// however much the panels want: beyond it the table scrolls.
const tableShare = 0.6

// panel is one overview panel: the fewest and most lines it can use, and
// how it draws itself in h lines (min ≤ h ≤ max).
type panel struct {
	min, max int
	draw     func(h int) []string
	// use is the lines draw fills of h, when it may leave some (whole
	// alerts, charts of 3 or 5 lines); nil: all h.
	use func(h int) int
}

// lines is what p draws in h lines.
func (p panel) lines(h int) int {
	if p.use == nil {
		return h
	}
	return p.use(h)
}

// overviewPanels are the pool screen's panels, by priority.
func overviewPanels(s *snapshot.Snapshot, w int, th *themes.Theme) []panel {
	return []panel{alertsPanel(s, w, th), prefixesPanel(s, w, th), ladderPanel(s, w, th), flaggedPanel(s, w, th), poolChartsPanel(s, w, th)}
}

// tableLines is how many lines the worker table takes of avail (its
// header included) when it needs needed: all it needs while the panels'
// wants fit beside it, else what they leave, but never less than
// tableShare of avail.
func tableLines(needed, avail int, ps []panel) int {
	want := 0
	for _, p := range ps {
		want += 1 + p.max
	}
	keep := int(math.Ceil(float64(avail) * tableShare))
	return max(0, min(needed, avail, max(avail-want, keep)))
}

// layout gives each panel its lines out of avail, gap blank lines above
// each shown; 0 hides a panel.
func layout(ps []panel, avail, gap int) []int {
	hs := make([]int, len(ps))
	used := 0
	for i, p := range ps { // as short as they can be, by priority
		if used+gap+p.min <= avail {
			hs[i] = p.min
			used += gap + p.min
		}
	}
	for i, p := range ps { // then as tall as they want, by priority
		if hs[i] > 0 {
			h := p.lines(min(p.max, hs[i]+avail-used))
			used += h - hs[i]
			hs[i] = h
		}
	}
	return hs
}

// overview lays the panels out in avail lines: a blank line above each
// when all of them fit whole with it, else packed, the lines going to
// what the panels have to show.
func overview(ps []panel, avail int) []string {
	gap := 1
	hs := layout(ps, avail, 1)
	for i, p := range ps {
		if hs[i] < p.max {
			gap, hs = 0, layout(ps, avail, 0)
			break
		}
	}
	var out []string
	for i, p := range ps {
		if hs[i] > 0 {
			if gap > 0 {
				out = append(out, "")
			}
			out = append(out, p.draw(hs[i])...)
		}
	}
	return out
}

// listPanel is a title over the first rows of a list of total items, as
// many as fit; a list cut short ends in a line saying how many more there
// are and where they are. It can show n rows, which rows builds, and only
// when the panel is drawn (a frame lays out panels it may not draw).
func listPanel(title line, n int, rows func() []line, total int, where string, w int, th *themes.Theme) panel {
	more := func(n int) string {
		return th.Paint(themes.Dim, truncate(fmt.Sprintf("   … %d more%s", n, where), w))
	}
	extra := 0
	if total > n {
		extra = 1
	}
	return panel{min: min(2, 1+total), max: 1 + n + extra, draw: func(h int) []string {
		out := []string{title.render(th, w)}
		// The rows that fit; the last line says how many more there are
		// once two rows fit (a panel of one row shows the row: its title
		// gives the count).
		k := min(n, h-1)
		if k < total && k >= 2 && 1+k == h {
			k--
		}
		if k > 0 {
			for _, r := range rows()[:k] {
				out = append(out, r.render(th, w))
			}
		}
		if k < total && len(out) < h {
			out = append(out, more(total-k))
		}
		return out
	}}
}

// emptyPanel is a panel's title saying why it has nothing to show.
func emptyPanel(title line, why string, w int, th *themes.Theme) panel {
	return listPanel(append(title, span{why, themes.Dim}), 0, nil, 0, "", w, th)
}

// alertsPanel lists every active alert, most severe first, with how long
// it has been active, each in full: wrapped under itself, never cut (the
// header's alert lines are). Its fewest lines hold the top alert whole.
func alertsPanel(s *snapshot.Snapshot, w int, th *themes.Theme) panel {
	title := line{{" ALERTS ", themes.Title}}
	if len(s.Alerts) == 0 {
		return emptyPanel(title, "none active", w, th)
	}
	blocks := make([][]line, len(s.Alerts)) // painted only if drawn
	all := 0
	for i, a := range s.Alerts {
		glyph, role := alertGlyph(a.Severity)
		age := dash
		if !a.Since.IsZero() {
			age = secs(math.Max(0, s.At.Sub(a.Since).Seconds()))
		}
		lead := line{{"   " + glyph + " ", role}, {fit(age, 6, true) + "  ", themes.Dim}}
		blocks[i] = wrapSpans(append(lead, span{oneLine(a.Text), themes.Text}), lead.width(), w)
		all += len(blocks[i])
	}
	whole := func(h int) (n, used int) { // the alerts that fit whole in h
		used = 1
		for n < len(blocks) && used+len(blocks[n]) <= h {
			used += len(blocks[n])
			n++
		}
		return n, used
	}
	return panel{min: 1 + len(blocks[0]), max: 1 + all, use: func(h int) int { _, used := whole(h); return used }, draw: func(h int) []string {
		n, _ := whole(h)
		count := fmt.Sprintf("%d active", len(blocks))
		if n < len(blocks) {
			count += fmt.Sprintf(", %d shown", n)
		}
		out := []string{append(title, span{count + ", most severe first · for how long", themes.Dim}).render(th, w)}
		for _, b := range blocks[:n] {
			for _, l := range b {
				out = append(out, l.render(th, w))
			}
		}
		return out
	}}
}

// alertGlyph is how an alert of a severity is marked.
func alertGlyph(severity snapshot.Severity) (string, themes.Role) {
	switch severity {
	case snapshot.SeverityCritical:
		return "⚠", themes.Crit
	case snapshot.SeverityInfo:
		return "·", themes.Dim
	}
	return "⚠", themes.Warn
}

// maxOverviewPrefixes bounds the prefix panel: the prefixes screen has
// the whole list.
const maxOverviewPrefixes = 8

// prefixesPanel is the top of the prefix table: who holds the hottest
// prefixes and how their traffic spreads.
func prefixesPanel(s *snapshot.Snapshot, w int, th *themes.Theme) panel {
	title := line{{" HOTTEST PREFIXES ", themes.Title}}
	if len(s.Prefixes) == 0 {
		return emptyPanel(title, "no prefix traffic in the window yet", w, th)
	}
	title = append(title, span{"share of the pool's traffic " + windowNote(0, s.WindowS) + " · depth · workers holding it (index) · its traffic by worker", themes.Dim})
	shown := s.Prefixes[:min(len(s.Prefixes), maxOverviewPrefixes)]
	// Two figures from two sources, each labelled: the workers whose
	// caches hold the prefix (the block index), and where its traffic went
	// (the router's decisions, or re-stores seen in events) — "resident on
	// 1" beside "routed to w3 51% · w2 49%" is not a contradiction. The
	// column is as wide as its widest label: "resident on 10" is not cut.
	rows := func() []line { return prefixRows(s, shown) }
	return listPanel(title, len(shown), rows, len(s.Prefixes), " on the prefixes screen (4)", w, th)
}

// prefixRows are the hottest prefixes panel's rows.
func prefixRows(s *snapshot.Snapshot, shown []snapshot.Prefix) []line {
	replicas := make([]string, len(shown))
	digits := 1
	for _, p := range shown {
		digits = max(digits, len(strconv.Itoa(p.Replicas)))
	}
	for i, p := range shown {
		replicas[i] = fmt.Sprintf("resident on %*d", digits, p.Replicas)
	}
	replW := 12 + digits
	var rows []line
	for i, p := range shown {
		mark, role := "  ", themes.Text
		if p.Overheating != nil {
			mark, role = "⚠ ", themes.Crit
		}
		share := themes.Text
		if p.Share >= s.Thresholds.HotPrefixShare && s.Thresholds.HotPrefixShare > 0 {
			share = themes.Warn
		}
		l := line{{" " + mark, role}, {fit(shortID(p.ID, 8), 10, false), themes.Text}, {fit(pctf(p.Share), 4, true), share},
			{"  " + fit(depth(p), 13, true), themes.Dim}, {"  " + fit(replicas[i], replW, true), themes.Dim},
			{"  " + trafficWord(p) + topWorkers(p), role}}
		if p.Overheating != nil {
			l = append(l, span{"  — " + joinNames(p.OverheatingWorkers, *p.Overheating) + " overheating", themes.Crit})
		}
		rows = append(rows, l)
	}
	return rows
}

// joinNames names the workers overheating on a prefix ("w3", "w3 + w4").
func joinNames(names []string, first string) string {
	if len(names) == 0 {
		return first
	}
	out := names[0]
	for _, n := range names[1:] {
		out += " + " + n
	}
	return out
}

// maxOverviewDecisions bounds the flagged decisions panel.
const maxOverviewDecisions = 10

// flaggedPanel is the newest decisions that carry a flag (a mismatch, a
// miss, a truncated stream…), newest first.
func flaggedPanel(s *snapshot.Snapshot, w int, th *themes.Theme) panel {
	title := line{{" FLAGGED DECISIONS ", themes.Title}}
	rs := s.Decisions.Recent
	flagged := 0
	for i := range rs {
		if len(rs[i].Flags) > 0 {
			flagged++
		}
	}
	switch {
	case len(rs) == 0:
		return emptyPanel(title, "no decisions yet", w, th)
	case flagged == 0:
		return emptyPanel(title, fmt.Sprintf("none among the last %d", len(rs)), w, th)
	}
	title = append(title, span{fmt.Sprintf("%d of the last %d, newest first", flagged, len(rs)), themes.Dim})
	return listPanel(title, min(flagged, maxOverviewDecisions), func() []line { return flaggedRows(rs) }, flagged, " on the decisions screen (5)", w, th)
}

// flaggedRows are the newest flagged decisions, newest first, at most
// maxOverviewDecisions.
func flaggedRows(rs []snapshot.DecisionRow) []line {
	var rows []line
	for i := len(rs) - 1; i >= 0 && len(rows) < maxOverviewDecisions; i-- {
		r := &rs[i]
		if len(r.Flags) == 0 {
			continue
		}
		who := orDash(r.Chosen)
		if r.Owner != "" && r.Chosen != "" && r.Owner != r.Chosen {
			who += " (owner " + r.Owner + ")"
		}
		l := line{{"   " + clock(r.At) + "  ", themes.Dim}, {fit(requestLabel(r), 12, false) + "  ", themes.Text}, {fit(who, 16, false) + "  ", themes.Text}}
		for k, f := range r.Flags {
			if k > 0 {
				l = append(l, span{" ", themes.Text})
			}
			l = append(l, span{flagWord(f), flagRole(f)})
		}
		rows = append(rows, l)
	}
	return rows
}

// chartLines: the pool charts draw 3 lines or 5.
func chartLines(h int) int {
	if h < 5 {
		return 3
	}
	return 5
}

// poolChartsPanel draws the pool's figures over the window: the token and
// request hit rates, the queue and its skew, one sparkline each; in its
// fewest lines, the token hit rate (beside the request hit rate now) and
// the queue (beside the skew now).
func poolChartsPanel(s *snapshot.Snapshot, w int, th *themes.Theme) panel {
	return panel{min: 3, max: 5, use: chartLines, draw: func(h int) []string { return poolCharts(s, w, h, th) }}
}

// poolCharts draws the pool charts in h lines (3 or 5), only when shown:
// the sparklines are the overview's dearest part.
func poolCharts(s *snapshot.Snapshot, w, h int, th *themes.Theme) []string {
	p := s.Pool
	win := time.Duration(s.WindowS * float64(time.Second))
	// A cell spans at least two refreshes: with one point a refresh, a
	// cell a refresh would show holes wherever two points fall into one.
	sw := max(0, w-40)
	if s.RefreshS > 0 {
		sw = min(sw, int(s.WindowS/(2*s.RefreshS)))
	}
	cell := "" // how long a cell is
	if sw > 0 {
		cell = ", " + secs(s.WindowS/float64(sw)) + " a cell"
	}
	scale := countScale(seriesMax(p.Series.Queue))
	hit := line{{"   " + fit("HIT tok", 8, false) + " ", themes.Title}, {sparkline(p.Series.HitTokens, s.At, win, sw, 1), themes.Spark},
		{" " + fit(pct(p.PrefixHitRate.Tokens), 4, true) + " now", themes.Text}, {" · " + pct(p.PrefixHitRate.Requests) + " of requests hit · 0–100%", themes.Dim}}
	queue := line{{"   " + fit("QUEUE", 8, false) + " ", themes.Title}, {sparkline(p.Series.Queue, s.At, win, sw, scale), themes.Spark},
		{" " + fit(num(p.Queue), 4, true) + " now", themes.Text}, {" · ", themes.Dim}, skewSpan(s), {fmt.Sprintf(" · max %s of %s", numf(seriesMax(p.Series.Queue)), numf(scale)), themes.Dim}}
	title := line{{" POOL ", themes.Title}, {"over the window " + windowNote(0, s.WindowS) + cell, themes.Dim}}
	// Skew is max/mean, 1× when the load is even: the sparkline starts
	// there, so an even pool draws flat at the bottom.
	skewMax := countScale(seriesMax(p.Series.Skew))
	skewPts := make([]snapshot.Point, len(p.Series.Skew))
	for i, pt := range p.Series.Skew {
		skewPts[i] = snapshot.Point{T: pt.T, V: pt.V - 1}
	}
	hitReq := line{{"   " + fit("HIT req", 8, false) + " ", themes.Title}, {sparkline(p.Series.HitRequests, s.At, win, sw, 1), themes.Spark},
		{" " + fit(pct(p.PrefixHitRate.Requests), 4, true) + " now", themes.Text}, {" · share of requests with cached tokens · 0–100%", themes.Dim}}
	skew := line{{"   " + fit("SKEW", 8, false) + " ", themes.Title}, {sparkline(skewPts, s.At, win, sw, skewMax-1), themes.Spark},
		{" " + fit(times(p.LoadSkew.MaxOverMean), 4, true) + " now", themes.Text},
		{fmt.Sprintf(" · max/mean of queues (1× even) · max %s of %s", strconv.FormatFloat(seriesMax(p.Series.Skew), 'f', 1, 64), numf(skewMax)), themes.Dim}}
	if h < 5 {
		return []string{title.render(th, w), hit.render(th, w), queue.render(th, w)}
	}
	hit = line{hit[0], hit[1], hit[2], {" · 0–100%", themes.Dim}} // the request rate has its own row
	queue = line{queue[0], queue[1], queue[2], queue[len(queue)-1]}
	return []string{title.render(th, w), hit.render(th, w), hitReq.render(th, w), queue.render(th, w), skew.render(th, w)}
}
