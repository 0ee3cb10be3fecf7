package views

import (
	"fmt"
	"strings"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/themes"
)

// Help lists every enabled key (from the keymap, via st.Keys), the colour
// and glyph legend, the states and the thresholds in force. It scrolls
// with st.Help.Offset when it does not fit.
func Help(s *pool.Snapshot, st State, w, h int, th *themes.Theme) string {
	if w < MinWidth || h < MinHeight {
		return TooSmall(w, h, th)
	}
	return page(s, &st, w, h, th, func(n int) []string {
		lines := helpLines(s, &st, w, th)
		off := max(0, min(st.Help.Offset, len(lines)-n))
		end := min(len(lines), off+n)
		out := append([]string(nil), lines[off:end]...)
		if end < len(lines) && len(out) > 0 {
			out[len(out)-1] = th.Paint(themes.Dim, truncate(fmt.Sprintf(" ↓ %d more lines (j/k or ↑/↓ scroll)", len(lines)-end+1), w))
		}
		return out
	})
}

// helpLines lays the help out in two columns when the terminal is wide.
func helpLines(s *pool.Snapshot, st *State, w int, th *themes.Theme) []string {
	col := func(ls []line, w int) []string {
		var out []string
		for _, l := range ls {
			out = append(out, wrapLine(l, 17, w, th)...)
		}
		return out
	}
	if w >= 120 {
		lw := w / 2
		keys, legend := col(keyLines(st), lw-1), col(legendLines(s, st), w-lw)
		var out []string
		for i := 0; i < max(len(keys), len(legend)); i++ {
			var l, r string
			if i < len(keys) {
				l = keys[i]
			}
			if i < len(legend) {
				r = legend[i]
			}
			pad := lw - visWidth(l)
			out = append(out, strings.TrimRight(l+strings.Repeat(" ", max(pad, 1))+r, " "))
		}
		return out
	}
	return col(append(keyLines(st), legendLines(s, st)...), w)
}

func keyLines(st *State) []line {
	out := []line{{{" KEYS", themes.Title}, {"  on the " + st.From.String() + " screen · ? or esc closes help", themes.Dim}}}
	for _, g := range st.Keys {
		if len(g.Keys) == 0 {
			continue
		}
		out = append(out, line{{" " + g.Title, themes.Title}})
		for _, k := range g.Keys {
			out = append(out, line{{"   " + fit(k.Key, 14, false), themes.Key}, {k.Desc, themes.Text}})
		}
	}
	return out
}

func legendLines(s *pool.Snapshot, st *State) []line {
	theme := st.Theme
	if theme == "" {
		theme = "default"
	}
	out := []line{{{" COLOURS & GLYPHS", themes.Title}, {"  theme " + theme + " (t cycles; NO_COLOR turns colour off)", themes.Dim}}}
	for _, r := range []themes.Role{themes.OK, themes.Warn, themes.Crit, themes.Dim, themes.Selected, themes.Spark} {
		out = append(out, line{{"   ", themes.Text}, {fit(r.String(), 9, false), r}, {" " + r.Description(), themes.Text}})
	}
	for _, g := range [][2]string{
		{"▶", "cursor: the selected row"},
		{"⚠", "overheating worker, or an alert"},
		{"✖", "down, lost history, failed request"},
		{"!", "needs a look: stale, saturated, replaying, flagged"},
		{"↑ ↓", "changed since the last refresh (wait ±3, hot ±5 pts)"},
		{dash, "unknown: no data yet or source down — never 0"},
		{"▁▃▅▇", "sparkline over the window; blank = no data then"},
		{"·░▒▓█", "heat: a worker's share of a prefix's traffic"},
	} {
		out = append(out, line{{"   " + fit(g[0], 9, false), themes.Key}, {" " + g[1], themes.Text}})
	}
	out = append(out, line{{" STATES", themes.Title}},
		line{{"   worker    ", themes.Key}, {"ok · OVERHEATING · SATURATED · down", themes.Text}},
		line{{"             ", themes.Key}, {"stale: index incomplete (history lost, a gap, stream", themes.Text}},
		line{{"             ", themes.Key}, {"disconnected) · unknown: no metrics (yet)", themes.Text}},
		line{{"   stream    ", themes.Key}, {"connecting · live · joined late · disconnected", themes.Text}},
		line{{"             ", themes.Key}, {"REPLAYING: a gap being filled from the replay", themes.Text}},
		line{{"             ", themes.Key}, {"HISTORY LOST: a gap the replay could not fill", themes.Text}},
		line{{"   hit tok   ", themes.Key}, {"Δhits/Δqueries in tokens over the window", themes.Text}},
		line{{"   hit req   ", themes.Key}, {"share of requests with cached tokens > 0", themes.Text}},
		line{{"   HOT       ", themes.Key}, {"share of the #1 prefix's traffic: the same prefix", themes.Text}},
		line{{"             ", themes.Key}, {"in every row (an overheating one is named in NOTE)", themes.Text}},
		line{{"   prod. ts  ", themes.Key}, {"producer ts: the publisher's clock, shown as it", themes.Text}},
		line{{"             ", themes.Key}, {"is, never compared with kvtop's", themes.Text}},
	)
	out = append(out, line{{" THRESHOLDS IN FORCE", themes.Title}})
	if s == nil {
		return append(out, line{{"   (shown once the first snapshot arrives)", themes.Dim}})
	}
	t := s.Thresholds
	out = append(out,
		line{{"   hot prefix    ", themes.Key}, {"≥ " + pctf(t.HotPrefixShare) + " of pool traffic", themes.Text}},
		line{{"   overheating   ", themes.Key}, {fmt.Sprintf("≥ %s of a hot prefix's traffic while", pctf(t.OverheatShare)), themes.Text}},
		line{{"                 ", themes.Key}, {fmt.Sprintf("queue ≥ %.1f× pool median and ≥ %s", t.OverheatQueueRatio, numf(t.OverheatMinQueue)), themes.Text}},
		line{{"   saturated     ", themes.Key}, {"KV usage ≥ " + pctf(t.KVUsageHigh), themes.Text}},
		line{{"   recovered     ", themes.Key}, {fmt.Sprintf("pool token hit back within %.0f pts", t.RecoveryTolerance*100), themes.Text}},
		line{{"                 ", themes.Key}, {"of its pre-restart baseline for " + secs(t.RecoveryHoldS), themes.Text}},
		line{{"   window        ", themes.Key}, {fmt.Sprintf("%.0fs for rates and hit rates", s.WindowS), themes.Text}},
		line{{"   refresh       ", themes.Key}, {dur(st.Refresh) + " (+/- change it; floor 250ms)", themes.Text}},
	)
	return out
}
