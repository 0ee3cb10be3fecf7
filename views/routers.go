package views

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Routers shows each router's health, its restarts and the pool's recovery
// after the last one, and how it spreads requests over the workers.
var Routers = &Screen{
	Name: "routers", Short: "rtr", Tab: true,
	Body: routersBody,
	Rows: func(s *snapshot.Snapshot, _ *State, _, _ int, _ *themes.Theme) (int, int) {
		return len(s.Routers), len(s.Routers)
	},
	List: func(st *State) *List { return &st.Routers },
	Items: func(s *snapshot.Snapshot, _ State) []string {
		out := make([]string, len(s.Routers))
		for i := range s.Routers {
			out[i] = s.Routers[i].Name
		}
		return out
	},
	Keys: func(*snapshot.Snapshot, *State) ScreenKeys { return listKeys("") },
}

func routersBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	if len(s.Routers) == 0 {
		return []string{line{{" ROUTERS ", themes.Title}, {"none configured: add routers: to the config to see restarts and routed share", themes.Dim}}.render(th, w)}
	}
	t := routersTable(s)
	out := []string{line{{" ROUTERS ", themes.Title}, {fmt.Sprintf("%d configured", len(s.Routers)), themes.Text}}.render(th, w)}
	out = append(out, t.render(th, len(s.Routers), min(st.Routers.Cursor, len(s.Routers)-1), st.Routers.Offset, w, len(s.Routers)+1)...)
	out = append(out, "")
	for i := range s.Routers {
		out = append(out, recoveryWords(s, &s.Routers[i], w, th)...)
		if l := beliefLine(&s.Routers[i]); l != nil {
			out = append(out, l.render(th, w))
		}
	}
	out = append(out, "")
	var grid, compact []string
	for i := range s.Routers {
		grid = append(grid, routedShare(s, &s.Routers[i], w, th)...)
		compact = append(compact, routedTop(&s.Routers[i], w, th))
	}
	if len(out)+len(grid) <= n {
		return append(out, grid...)
	}
	return append(out, compact...) // short terminals: biggest shares first, one line each
}

func routersTable(s *snapshot.Snapshot) *table {
	rs := s.Routers
	nameW := 6
	var nowS float64
	for _, r := range rs {
		nameW = max(nameW, width(r.Name))
		nowS = max(nowS, r.Recovery.CurrentS)
	}
	// NOW is the pool token hit over the last CurrentS seconds in every
	// state (10 s, or since the restart when that is sooner): the title
	// says over how long, in whole seconds, in a column as wide as
	// "NOW 10s" so the columns stay put while it grows.
	nowTitle := "NOW"
	if nowS > 0 {
		nowTitle = "NOW " + strconv.Itoa(max(1, int(math.Round(nowS)))) + "s"
	}
	cols := []column{
		{title: "ROUTER", width: min(nameW, 16), cell: func(i, _ int) line { return cell1(rs[i].Name, themes.Text) }},
		{title: "PROFILE", width: 13, drop: 2, cell: func(i, _ int) line { return cell1(orDash(rs[i].Profile), themes.Dim) }},
		{title: "STATE", width: 5, cell: func(i, _ int) line { return cell1(routerState(&rs[i])) }},
		{title: "RST", width: 3, right: true, cell: func(i, _ int) line {
			if rs[i].Restarts > 0 {
				return cell1(numi(rs[i].Restarts), themes.Warn)
			}
			return cell1("0", themes.Dim)
		}},
		{title: "LAST RESTART", width: 12, right: true, drop: 3, cell: func(i, _ int) line {
			if rs[i].LastRestart == nil {
				return cell1(dash, themes.Dim)
			}
			return cell1(ago(s.At, *rs[i].LastRestart), themes.Text)
		}},
		{title: "RECOVERY", width: 10, cell: func(i, _ int) line { return cell1(recoveryState(rs[i].Recovery)) }},
		{title: "TIME", width: 6, right: true, cell: func(i, _ int) line { return cell1(secsp(rs[i].Recovery.Seconds), themes.Text) }},
		{title: "BEFORE", width: 6, right: true, cell: func(i, _ int) line { return cell1(pct(rs[i].Recovery.Baseline), themes.Text) }},
		{title: nowTitle, width: max(width("NOW 10s"), width(nowTitle)), right: true, cell: func(i, _ int) line {
			rc := rs[i].Recovery
			role := themes.Text
			if rc.State == snapshot.RecoveryRecovering {
				role = themes.Warn
			}
			return cell1(pct(rc.Current), role)
		}},
		{title: "REQ/s", width: 6, right: true, drop: 4, cell: func(i, _ int) line { return valCell(rs[i].RequestsPerS, "", themes.Text) }},
		{title: "NOTE", width: 10, flex: true, maxWidth: 80, drop: 1, cell: func(i, _ int) line {
			if rs[i].Error != nil {
				return cell1(oneLine(*rs[i].Error), themes.Crit)
			}
			if b := breakerNote(rs[i].Breakers); b != "" {
				return cell1(b, themes.Warn)
			}
			return nil
		}},
	}
	return &table{cols: cols, sortCol: -1, mark: func(i int) (string, themes.Role) {
		switch {
		case !rs[i].Up:
			return "✖", themes.Crit
		case rs[i].Recovery.State == snapshot.RecoveryRecovering:
			return "!", themes.Warn
		}
		return "", themes.Text
	}}
}

// recoveryWords says, for the operator's third moment, whether the pool is
// back after the router's restart.
func recoveryWords(s *snapshot.Snapshot, r *snapshot.Router, w int, th *themes.Theme) []string {
	rc := r.Recovery
	tr := s.Thresholds
	switch {
	case !r.Up:
		msg := r.Name + " is down"
		if r.Error != nil {
			msg += ": " + oneLine(*r.Error)
		}
		return indented(" ✖ ", themes.Crit, msg, themes.Crit, w, th)
	case rc.State == snapshot.RecoveryRecovering:
		return indented(" ⚠ ", themes.Warn, fmt.Sprintf("%s restarted %s: pool token hit %s vs %s before; recovering for %s (recovered when within %s pts, held %s)",
			r.Name, agoPtr(s, r.LastRestart), pct(rc.Current), pct(rc.Baseline), secsp(rc.Seconds),
			fmt.Sprintf("%.0f", tr.RecoveryTolerance*100), secs(tr.RecoveryHoldS)), themes.Text, w, th)
	case rc.State == snapshot.RecoveryRecovered:
		return indented(" ✓ ", themes.OK, fmt.Sprintf("%s recovered in %s after its restart %s: hit %s vs %s before",
			r.Name, secsp(rc.Seconds), agoPtr(s, r.LastRestart), pct(rc.Current), pct(rc.Baseline)), themes.Text, w, th)
	case rc.State == snapshot.RecoverySteady:
		return indented(" ✓ ", themes.OK, r.Name+" steady: no restart seen", themes.Text, w, th)
	}
	return indented(" · ", themes.Dim, r.Name+": recovery unknown (no hit-rate baseline yet)", themes.Dim, w, th)
}

func agoPtr(s *snapshot.Snapshot, t *time.Time) string {
	if t == nil {
		return "at an unknown time"
	}
	return ago(s.At, *t) + " (" + clock(*t) + ")"
}

// routedTop is one router's routed share in one line, largest first.
func routedTop(r *snapshot.Router, w int, th *themes.Theme) string {
	head := line{{" ROUTED " + r.Name + " ", themes.Title}}
	if len(r.RoutedShare) == 0 {
		return append(head, span{"no data" + map[bool]string{true: "", false: " (router down)"}[r.Up], themes.Dim}).render(th, w)
	}
	return append(head, span{topWorkers(snapshot.Prefix{Workers: r.RoutedShare}), themes.Text}).render(th, w)
}

// routedShare draws one router's share per worker as small bars, as many
// per line as fit.
func routedShare(s *snapshot.Snapshot, r *snapshot.Router, w int, th *themes.Theme) []string {
	head := line{{" ROUTED " + r.Name + " ", themes.Title}}
	if len(r.RoutedShare) == 0 {
		return []string{append(head, span{"no data" + map[bool]string{true: "", false: " (router down)"}[r.Up], themes.Dim}).render(th, w)}
	}
	names := make([]string, 0, len(r.RoutedShare))
	nameW := 2
	for n := range r.RoutedShare {
		names = append(names, n)
		nameW = max(nameW, width(n))
	}
	order := map[string]int{}
	for i, wk := range s.Workers {
		order[wk.Name] = i + 1
	}
	sort.Slice(names, func(a, b int) bool {
		oa, ob := order[names[a]], order[names[b]]
		if oa != ob && oa > 0 && ob > 0 {
			return oa < ob
		}
		return names[a] < names[b]
	})
	const barW = 8
	cellW := nameW + 1 + barW + 5 + 3
	per := max(1, (w-width(" ROUTED "+r.Name+" "))/cellW)
	var out []string
	cur := head
	indent := strings.Repeat(" ", head.width())
	for i, n := range names {
		if i > 0 && i%per == 0 {
			out = append(out, strings.TrimRight(cur.render(th, w), " "))
			cur = line{{indent, themes.Text}}
		}
		v := r.RoutedShare[n]
		full, empty := bar(v, barW)
		cur = append(cur, span{fit(n, nameW, false) + " ", themes.Text}, span{full, themes.BarFull}, span{empty, themes.BarEmpty},
			span{fit(pctf(v), 5, true) + "   ", themes.Text})
	}
	return append(out, strings.TrimRight(cur.render(th, w), " "))
}

// breakerNote lists the workers whose circuit breaker is not closed:
// "breaker open: w7 · half-open: w2".
func breakerNote(b map[string]string) string {
	by := map[string][]string{}
	for w, st := range b {
		if st != "closed" {
			by[st] = append(by[st], w)
		}
	}
	var parts []string
	for _, st := range []string{"open", "half-open", "unknown"} {
		if ws := by[st]; len(ws) > 0 {
			sort.Strings(ws)
			parts = append(parts, st+": "+strings.Join(ws, ", "))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "breaker " + strings.Join(parts, " · ")
}

// beliefLine is what a router believes, in its own units, where it says:
// " r0 believes predicted hit 62% · shared cache 20% · KV transfer est.
// p50 38 ms, p95 92 ms · roles decode-0 decode, prefill-0 prefill · load
// prefill-0 4.1k prefill tok, decode-0 400 decode blk". nil when it says
// none of it.
func beliefLine(r *snapshot.Router) line {
	var parts []string
	if r.PredictedHitRate != nil {
		parts = append(parts, "predicted hit "+pct(r.PredictedHitRate))
	}
	if r.SharedCacheHitRate != nil {
		parts = append(parts, "shared cache "+pct(r.SharedCacheHitRate))
	}
	if l := r.KVTransferEstimatedMS; l.P50 != nil {
		parts = append(parts, "KV transfer est. p50 "+latQ(l, "p50")+", p95 "+latQ(l, "p95"))
	}
	if len(r.Roles) > 0 {
		var rs []string
		for _, k := range slices.Sorted(maps.Keys(r.Roles)) {
			rs = append(rs, k+" "+r.Roles[k])
		}
		parts = append(parts, "roles "+strings.Join(rs, ", "))
	}
	var load []string
	for _, k := range slices.Sorted(maps.Keys(r.ActivePrefillTokens)) {
		load = append(load, k+" "+numf(r.ActivePrefillTokens[k])+" prefill tok")
	}
	for _, k := range slices.Sorted(maps.Keys(r.ActiveDecodeBlocks)) {
		load = append(load, k+" "+numf(r.ActiveDecodeBlocks[k])+" decode blk")
	}
	if len(load) > 0 {
		parts = append(parts, "load "+strings.Join(load, ", "))
	}
	if len(parts) == 0 {
		return nil
	}
	return line{{" " + r.Name + " believes ", themes.Key}, {strings.Join(parts, " · "), themes.Text}, {" (its own figures, not measured)", themes.Dim}}
}
