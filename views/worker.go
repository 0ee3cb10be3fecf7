package views

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Worker is one worker in depth. ↑/↓ step through the workers in the pool
// table's order (moving the pool cursor with them); esc goes back to the
// screen it was opened from.
var Worker = &Screen{
	Name: "worker", Short: "wkr", Tab: true,
	Body: workerBody,
	Move: func(s *snapshot.Snapshot, st *State, d, _, _ int) {
		if s == nil {
			return
		}
		// The worker rows of the pool table, in its order.
		var rows []int
		cur := -1
		name := st.Worker
		if wk := shownWorker(s, st); wk != nil {
			name = wk.Name
		}
		all := poolRows(s, *st)
		for i, r := range all {
			if r.Engine < 0 {
				if s.Workers[r.Worker].Name == name {
					cur = len(rows)
				}
				rows = append(rows, i)
			}
		}
		if len(rows) == 0 {
			return
		}
		next := max(0, min(cur+d, len(rows)-1))
		st.Pool.Cursor = rows[next]
		st.Worker = s.Workers[all[rows[next]].Worker].Name
	},
	Back:   backToOpener,
	Arrive: func(st *State) { st.Worker = "" },
	Keys: func(s *snapshot.Snapshot, _ *State) ScreenKeys {
		if s == nil || len(s.Workers) == 0 {
			return ScreenKeys{Back: "back"}
		}
		return ScreenKeys{Up: "previous worker", Down: "next worker", Ends: true, Back: "back"}
	},
}

// openWorker shows a worker; esc comes back to the screen it was opened from.
func openWorker(st *State, name string) {
	st.Worker = name
	st.Back, st.Screen = st.Screen, Worker
}

// findWorker returns the named worker, or the first one when name is "".
func findWorker(s *snapshot.Snapshot, name string) *snapshot.Worker {
	for i := range s.Workers {
		if s.Workers[i].Name == name || name == "" {
			return &s.Workers[i]
		}
	}
	return nil
}

// shownWorker is the worker the Worker screen shows: the one named, or,
// when none is, the one under the pool cursor (nil if the named one is gone).
func shownWorker(s *snapshot.Snapshot, st *State) *snapshot.Worker {
	if st.Worker == "" {
		rows := poolRows(s, *st)
		if c := st.Pool.Cursor; c >= 0 && c < len(rows) {
			return &s.Workers[rows[c].Worker]
		}
	}
	return findWorker(s, st.Worker)
}

// workerView is the worker screen: its figures now, time series over the
// window, its engines, its streams' history and the prefixes it holds.
func workerBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	wk := shownWorker(s, st)
	if wk == nil {
		return []string{"", line{{" worker " + st.Worker + " is not in this snapshot", themes.Warn}}.render(th, w)}
	}
	return workerLines(s, wk, w, n, th)
}

func workerLines(s *snapshot.Snapshot, wk *snapshot.Worker, w, n int, th *themes.Theme) []string {
	// The figures lines (title, now, latency, cache, tiers…) list items
	// separated by " · ": wrapped between items where the screen has the
	// lines, else each cut after its last whole item (fig); the others are
	// drawn as they are (text).
	type piece struct {
		fig  line
		text []string
		key  bool // the title and now lines: wrapped before the others
	}
	var pieces []piece
	fig := func(l line) { pieces = append(pieces, piece{fig: l}) }
	keyFig := func(l line) { pieces = append(pieces, piece{fig: l, key: true}) }
	text := func(ls ...string) { pieces = append(pieces, piece{text: ls}) }
	state, srole := workerState(wk)
	// A worker that is not up says why in its state word (down, no
	// metrics, unknown): "not up" after it would say it twice.
	up := span{"", themes.Dim}
	if wk.Up {
		up = span{" · up", themes.OK}
	}
	title := line{{" WORKER " + wk.Name, themes.Title}, {"  " + wk.Engine + " · ", themes.Dim}}
	if s.Pool.Mixed() || wk.RoleSource != "" && wk.RoleSource != snapshot.RoleFromDefault {
		// Its role, and who says so: a decode worker's figures mean
		// their own (transferred prompt tokens are not its misses).
		title = append(title, span{wk.Role + " (" + wk.RoleSource + ") · ", themes.Text})
	}
	title = append(title, span{state, srole}, up)
	// A worker not up says first how old what it shows is.
	scraped := span{scrapeWords(s, wk), themes.Dim}
	if !wk.Up {
		title = append(title, scraped)
	}
	title = append(title, span{" · routed " + pct(wk.RoutedShare), themes.Dim},
		breakerSpan(wk.Breaker),
		span{fmt.Sprintf(" · %d %s", wk.Restarts, plural(wk.Restarts, "restart", "restarts")), themes.Dim})
	if wk.Up {
		title = append(title, scraped)
	}
	keyFig(title)
	if wk.Reason != "" || wk.Error != nil {
		l := line{{" ", themes.Text}}
		role := themes.Warn
		if wk.State == snapshot.WorkerDown {
			role = themes.Crit
			l = append(l, span{"✖ ", role})
		}
		if wk.Reason != "" {
			l = append(l, span{wk.Reason, role})
		}
		// The pool's reason for a down worker already quotes its error.
		if wk.Error != nil && !strings.Contains(wk.Reason, oneLine(*wk.Error)) {
			if wk.Reason != "" {
				l = append(l, span{" · ", themes.Dim})
			}
			l = append(l, span{oneLine(*wk.Error), themes.Dim})
		}
		text(l.render(th, w))
	}
	text(kubeLines(wk, w, th)...)
	win := fmt.Sprintf("(%.0fs)", s.WindowS)
	// A down worker's hot share and blocks are what kvtop last knew: kept,
	// but dim and said so.
	kept, lastKnown := themes.Text, ""
	if wk.State == snapshot.WorkerDown {
		kept, lastKnown = themes.Dim, " (last known)"
	}
	keyFig(line{
		{" now ", themes.Title},
		{"wait " + num(wk.Queue) + " · run " + num(wk.Running) + " · KV " + pct(wk.KVUsage) + " · ", themes.Text},
		{"hot " + pct(wk.HotShare) + " of #1 prefix", kept},
		{" · hit " + pct(wk.PrefixHitRate.Tokens) + " tok, " + pct(wk.PrefixHitRate.Requests) + " req " + win + transferredWords(wk) + " · ", themes.Text},
		{"blocks " + numip(wk.Blocks) + lastKnown, kept},
	})
	fig(latencyLine(s, wk, win))
	fig(cacheLine(s, wk, win))
	for _, l := range []line{tiersLine(wk, kept), groupsLine(wk, kept), hitsTierLine(wk, win)} {
		if l != nil {
			fig(l)
		}
	}
	if wk.Ladder.Rungs.Actual != nil {
		fig(ladderLine(wk))
	}
	if wk.Overheating && wk.OverheatPrefix != nil && wk.OverheatShare != nil {
		over := fmt.Sprintf("overheating: takes %s of prefix %s", pctf(*wk.OverheatShare), shortID(*wk.OverheatPrefix, 8))
		if wk.TTFTMS.P95 != nil && s.Pool.TTFTMS.P95 != nil {
			over += " · TTFT p95 " + latQ(wk.TTFTMS, "p95") + " vs pool " + latQ(s.Pool.TTFTMS, "p95")
		}
		fig(line{{" ⚠ ", themes.Crit}, {over, themes.Crit}})
	}
	if len(wk.Engines) > 1 {
		text(engineLines(s, wk, w, th)...)
	}
	// Every figures line wrapped if that leaves the charts their four
	// lines and the streams and prefixes theirs; else the title and now
	// lines (state, queue, KV, hit rate) if they fit, the rest cut.
	incidents := workerIncidents(wk, w, th)
	prefixLines := topPrefixLines(wk, w, th)
	var streamLines []string
	for i := range wk.Streams {
		streamLines = append(streamLines, streamLine(s, &wk.Streams[i], w, th)...)
	}
	// Each figures line wrapped once: counted, then drawn if chosen.
	wrapped := make([][]string, len(pieces))
	below := 4 + 1 + len(streamLines) + min(len(incidents), 2) + len(prefixLines)
	need := [2]int{below, below} // all wrapped, key lines only
	for i, p := range pieces {
		if p.fig != nil {
			wrapped[i] = wrapItems(p.fig, width(p.fig[0].text), w, th)
		}
		switch {
		case p.fig == nil:
			need[0] += len(p.text)
			need[1] += len(p.text)
		case p.key:
			need[0] += len(wrapped[i])
			need[1] += len(wrapped[i])
		default:
			need[0] += len(wrapped[i])
			need[1]++
		}
	}
	var top []string
	for i, p := range pieces {
		switch {
		case p.fig == nil:
			top = append(top, p.text...)
		case need[0] <= n || p.key && need[1] <= n:
			top = append(top, wrapped[i]...)
		default:
			top = append(top, cutItems(p.fig, w, th))
		}
	}

	winDur := time.Duration(s.WindowS * float64(time.Second))
	specs := []chartSpec{
		{title: "WAITING requests", short: "WAIT", pts: wk.Series.Queue, now: num(wk.Queue)},
		{title: "RUNNING requests", short: "RUN", pts: wk.Series.Running, now: num(wk.Running)},
		{title: "KV USAGE", short: "KV USE", pts: wk.Series.KVUsage, percent: true, now: pct(wk.KVUsage)},
		{title: "HIT RATE tok", short: "HIT tok", pts: wk.Series.HitTokens, percent: true, now: pct(wk.PrefixHitRate.Tokens)},
	}
	specs = append(specs, latencyCharts(wk)...)
	specs = append(specs, cacheCharts(s, wk)...)
	for i := range specs {
		specs[i].role = seriesRole(wk) // a worker not up: what it last reported, dim
	}
	avail := n - len(top)
	var charts []string
	// Two charts a row, four on a wide terminal; each row as tall as the
	// room allows (7, 11 or 15 rows: round y labels; the first rows grow
	// first), else one line each.
	cols := 2
	if w >= 150 {
		cols = 4
	}
	rows := (len(specs) + cols - 1) / cols
	room := avail - 1 - len(streamLines) - min(len(incidents), 2) - len(prefixLines)
	if room/rows >= 7 && w >= 70 {
		heights := make([]int, rows)
		used := 0
		for r := range heights {
			heights[r], used = 7, used+7
		}
		for grown := true; grown; {
			grown = false
			for r := range heights {
				if heights[r] < 15 && used+4 <= room {
					heights[r] += 4
					used += 4
					grown = true
				}
			}
		}
		cw := (w - (cols - 1)) / cols
		for r := 0; r < rows; r++ {
			ch := heights[r]
			var cells [][]string
			for c := 0; c < cols && r*cols+c < len(specs); c++ {
				width := cw
				if c == cols-1 {
					width = w - (cols-1)*(cw+1)
				}
				cells = append(cells, chart(specs[r*cols+c], s.At, winDur, width, ch, th))
			}
			for i := range cells[0] {
				var b strings.Builder
				for c, cell := range cells {
					l := cell[i]
					if c < len(cells)-1 {
						l += strings.Repeat(" ", max(cw-visWidth(l), 0)) + " "
					}
					b.WriteString(l)
				}
				charts = append(charts, strings.TrimRight(b.String(), " "))
			}
		}
	} else {
		// One line each: the queue, KV and hit rate always; the latency
		// ones (TTFT first) as the room left for incidents allows.
		for _, c := range specs[:max(4, min(len(specs), room))] {
			charts = append(charts, sparkRow(c, s.At, winDur, w, th))
		}
	}
	out := append(top, charts...)
	// Streams, then their incidents newest first, as many as fit above
	// the prefixes.
	out = append(out, streamHeader(wk, w, th))
	out = append(out, streamLines...)
	room = n - len(out) - len(prefixLines)
	for i := 0; i < len(incidents) && i < room; i++ {
		if i == room-1 && len(incidents) > room {
			out = append(out, th.Paint(themes.Dim, truncate("   … more on the streams screen (3)", w)))
			break
		}
		out = append(out, incidents[i])
	}
	for len(out) < n-len(prefixLines) {
		out = append(out, "")
	}
	return append(out, prefixLines...)
}

// scrapeWords says how fresh the worker's figures are. Up: when the last
// scrape was and how long it took. Not up: the last good scrape (what the
// last-known figures are from) apart from the last, failed, attempt —
// "scraped 1.0 s ago" of a worker down for a minute would be the failure.
func scrapeWords(s *snapshot.Snapshot, wk *snapshot.Worker) string {
	switch {
	case wk.LastScrape == nil:
		return ""
	case wk.Up && wk.MetricsVia != "":
		// Another source scraped it: say which, how often, and how old its
		// data is (Prometheus' scrape time on kvtop's clock).
		return " · " + viaText(wk) + " · data " + secs(max(0, s.At.Sub(*wk.LastScrape).Seconds())) + " old"
	case wk.Up:
		t := " · scraped " + ago(s.At, *wk.LastScrape)
		if wk.ScrapeMS != nil {
			t += " in " + ms(wk.ScrapeMS)
		}
		return t
	}
	good := " · never scraped OK"
	if wk.LastScrapeOK != nil {
		good = " · last good scrape " + ago(s.At, *wk.LastScrapeOK)
	}
	return good + ", failed " + ago(s.At, *wk.LastScrape)
}

func engineLines(s *snapshot.Snapshot, wk *snapshot.Worker, w int, th *themes.Theme) []string {
	hdr := line{{" ENGINE  ", themes.Title}, {fmt.Sprintf("%5s %5s  %-15s %7s %11s %9s %6s", "WAIT", "RUN", "KV USE", "HIT tok", "GPU blocks", "TTFT p95", "TOK/s"), themes.Title}}
	if !wk.Up && len(wk.Engines) > 0 && wk.Engines[0].LastKnown {
		known := ""
		if wk.LastScrapeOK != nil {
			known = ", " + ago(s.At, *wk.LastScrapeOK)
		}
		hdr = append(hdr, span{"  last known (its last good scrape" + known + ")", themes.Dim})
	}
	out := []string{hdr.render(th, w)}
	for _, e := range wk.Engines {
		kv := pct(e.KVUsage)
		var barF, barE string
		role := themes.Text
		if e.KVUsage != nil {
			barF, barE = bar(*e.KVUsage, 10)
			if e.Saturated { // the pool's held verdict, not this refresh's figure
				role = themes.Warn
				kv += " SATURATED"
			}
		} else {
			barE = strings.Repeat(" ", 10)
		}
		l := line{
			{fmt.Sprintf(" %-6s  %5s %5s  ", "dp "+e.Engine, num(e.Queue), num(e.Running)), themes.Text},
			{barF, themes.BarFull}, {barE, themes.BarEmpty},
			{fmt.Sprintf(" %4s %7s %11s %9s %6s", pct(e.KVUsage), pct(e.HitTokens), num(e.NumGPUBlocks), latQ(e.TTFTMS, "p95"), num(tokensSum(e.TokensPerS))), role},
			{strings.TrimPrefix(kv, pct(e.KVUsage)), themes.Warn},
		}
		if !wk.Up { // what kvtop last knew of it: every figure dim
			for i := range l {
				l[i].role = themes.Dim
			}
		}
		out = append(out, l.render(th, w))
	}
	return out
}

func streamHeader(wk *snapshot.Worker, w int, th *themes.Theme) string {
	if len(wk.Streams) == 0 {
		return line{{" STREAMS ", themes.Title}, {"none configured: no KV events for this worker", themes.Dim}}.render(th, w)
	}
	return line{{" STREAMS ", themes.Title}, {"state · last seq · rates · last message (kvtop clock) · producer ts (its clock) · gaps", themes.Dim}}.render(th, w)
}

func streamLine(s *snapshot.Snapshot, ss *snapshot.Stream, w int, th *themes.Theme) []string {
	state, role := streamState(ss.State)
	seq := dash
	if ss.LastSeq != nil {
		seq = fmt.Sprint(*ss.LastSeq)
	}
	age := dash
	if ss.LastMessageAgeS != nil {
		age = secs(*ss.LastMessageAgeS) + " ago"
	}
	head := fmt.Sprintf("   rank %d  ", ss.Rank)
	n := func(v uint64, one, many string) string {
		return grouped(int64(v)) + " " + plural(int(min(v, 2)), one, many)
	}
	rest := fmt.Sprintf("seq %s · %s ev/s · %s batch/s · last %s · producer ts %s · %s, %s missing, %s replayed, %s lost, %s, %s · %s",
		seq, num(ss.EventsPerS), num(ss.BatchesPerS), age, producerTS(s, ss.LastTS), n(ss.Gaps, "gap", "gaps"), grouped(int64(ss.Missing)),
		grouped(int64(ss.Replayed)), grouped(int64(ss.Lost)), n(ss.Restarts, "restart", "restarts"),
		n(ss.DecodeErrors, "decode error", "decode errors"), ss.Endpoint)
	rest += streamOddities(ss)
	lines := wrap(state+"  "+rest, w-width(head))
	out := make([]string, len(lines))
	for i, l := range lines {
		if i == 0 && strings.HasPrefix(l, state) {
			out[i] = line{{head, themes.Text}, {state, role}, {strings.TrimPrefix(l, state), themes.Text}}.render(th, w)
			continue
		}
		out[i] = line{{strings.Repeat(" ", width(head)), themes.Text}, {l, themes.Text}}.render(th, w)
	}
	return out
}

// streamOddities names what a newer producer sends that kvtop reads as
// something else than a store: re-announced blocks (touches), full-
// attention stores whose tokens do not fill their blocks (not indexed),
// unknown event types by tag. "" when none.
func streamOddities(ss *snapshot.Stream) string {
	var parts []string
	if ss.Reannounced > 0 {
		parts = append(parts, grouped(int64(ss.Reannounced))+" re-announced")
	}
	if ss.Inconsistent > 0 {
		parts = append(parts, grouped(int64(ss.Inconsistent))+" inconsistent (not indexed)")
	}
	if len(ss.UnknownEventsByType) > 0 {
		tags := slices.Sorted(maps.Keys(ss.UnknownEventsByType))
		var u []string
		for _, tag := range tags {
			u = append(u, fmt.Sprintf("%s×%s", tag, grouped(int64(ss.UnknownEventsByType[tag]))))
		}
		parts = append(parts, "skipped "+strings.Join(u, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return " · " + strings.Join(parts, " · ")
}

// incident pairs an incident with the publisher it happened on.
type incident struct {
	who string
	inc *snapshot.Incident
}

func workerIncidents(wk *snapshot.Worker, w int, th *themes.Theme) []string {
	var all []incident
	for i := range wk.Streams {
		ss := &wk.Streams[i]
		for k := range ss.History {
			all = append(all, incident{fmt.Sprintf("rank %d", ss.Rank), &ss.History[k]})
		}
	}
	sortIncidents(all)
	var out []string
	for _, in := range all {
		out = append(out, wrapLine(incidentLine(in), 13, w, th)...)
	}
	return out
}

func sortIncidents(all []incident) {
	sort.SliceStable(all, func(a, b int) bool { return all[a].inc.Start.After(all[b].inc.Start) })
}

// incidentLine says what happened to a stream, when, for how long, and
// what it cost, in words.
func incidentLine(in incident) line {
	x := in.inc
	var what string
	role := themes.Warn
	open := x.End == nil
	dur := secsp(x.DurationS)
	switch x.Kind {
	case "gap":
		what = fmt.Sprintf("gap seq %d–%d · %s missing", x.FromSeq, x.ToSeq, grouped(int64(x.Missing)))
		if open {
			what += fmt.Sprintf(" · replaying, %s so far (%s)", grouped(int64(x.Replayed)), dur)
		} else {
			what += fmt.Sprintf(" · replayed %s in %s", grouped(int64(x.Replayed)), dur)
			if x.Lost > 0 {
				what += fmt.Sprintf(" · %s lost", grouped(int64(x.Lost)))
				role = themes.Crit
			} else {
				role = themes.OK
			}
		}
	case "history_lost":
		what = fmt.Sprintf("HISTORY LOST seq %d–%d · %s missing · %s lost · index incomplete", x.FromSeq, x.ToSeq, grouped(int64(x.Missing)), grouped(int64(x.Lost)))
		role = themes.Crit
	case "joined_late":
		// The incident spans the seqs before the first one seen.
		what = fmt.Sprintf("joined late at seq %d · %s earlier batches never seen", x.ToSeq+1, grouped(int64(x.Missing)))
	case "restart":
		if x.Origin == "metrics" {
			// Concluded by the pool from the engine's metrics: no seq
			// involved; the note says what evidence and what it dropped.
			what = "engine restart seen in metrics · its blocks dropped"
			break
		}
		// FromSeq is the new run's first seq; where it came back from is
		// in the note.
		what = fmt.Sprintf("publisher restart: seq back to %d · its blocks dropped", x.FromSeq)
	case "disconnect", "disconnected":
		what = "disconnected after seq " + fmt.Sprint(x.FromSeq)
		if open {
			what += " · still down (" + dur + ")"
			role = themes.Crit
		} else {
			what += " · back after " + dur
		}
	default:
		what = strings.ReplaceAll(x.Kind, "_", " ")
		if x.DurationS != nil {
			what += " · " + dur
		}
	}
	l := line{{"   " + clock(x.Start) + "  ", themes.Dim}, {in.who + "  ", themes.Text}, {what, role}}
	if x.Note != "" {
		l = append(l, span{" — " + x.Note, themes.Dim})
	}
	return l
}

func topPrefixLines(wk *snapshot.Worker, w int, th *themes.Theme) []string {
	if len(wk.TopPrefixes) == 0 {
		return []string{line{{" TOP PREFIXES ", themes.Title}, {"none known for this worker", themes.Dim}}.render(th, w)}
	}
	l := line{{" TOP PREFIXES ", themes.Title}}
	for i, p := range wk.TopPrefixes {
		if i == 3 {
			break
		}
		if i > 0 {
			l = append(l, span{" · ", themes.Border})
		}
		depth := "depth unknown"
		if p.Tokens != nil {
			depth = numi(*p.Tokens) + " tok"
		}
		l = append(l, span{shortID(p.ID, 8), themes.Text}, span{" " + depth + ", " + pctf(p.Share) + " of its traffic here", themes.Dim})
	}
	return []string{l.render(th, w)}
}

// producerTS is a stream's last producer timestamp as a clock time, in
// the snapshot's zone. It is the producer's clock, shown as it is: never
// compared with kvtop's.
func producerTS(s *snapshot.Snapshot, ts *float64) string {
	if ts == nil || *ts <= 0 {
		return dash
	}
	sec, frac := math.Modf(*ts)
	return clock(time.Unix(int64(sec), int64(frac*1e9)).In(s.At.Location()))
}

// breakerSpan names a router circuit breaker that is not closed.
func breakerSpan(b *string) span {
	if b == nil || *b == "closed" {
		return span{"", themes.Dim}
	}
	return span{" · breaker " + *b, themes.Warn}
}

// kubeLines are Kubernetes' view of the worker's pod and the path kvtop
// reaches it by; none for a worker that is not a discovered pod.
func kubeLines(wk *snapshot.Worker, w int, th *themes.Theme) []string {
	k := wk.Kube
	if k == nil {
		return nil
	}
	phase, role := k.Phase, themes.OK
	if phase == "" {
		phase = "phase unknown"
	}
	if k.Reason != "" || phase != "Running" || !k.Ready {
		role = themes.Crit
	}
	l := line{{" pod " + k.Pod, themes.Text}, {" · node " + orDash(k.Node), themes.Dim}, {" · ", themes.Dim}, {phase, role}}
	if k.Reason != "" && k.Reason != phase {
		l = append(l, span{" " + k.Reason, role})
	}
	ready := "ready"
	if !k.Ready {
		ready = "NOT READY"
	}
	l = append(l, span{" · " + ready, role})
	rr := themes.Dim
	if k.Restarts > 0 {
		rr = themes.Warn
	}
	l = append(l, span{fmt.Sprintf(" · %d %s", k.Restarts, plural(k.Restarts, "restart", "restarts")), rr})
	if t := k.LastTermination; t != nil && t.Reason != "" {
		l = append(l, span{fmt.Sprintf(" · last %s (exit %d)", t.Reason, t.ExitCode), themes.Warn})
	}
	if k.AgeS != nil {
		l = append(l, span{" · age " + podAge(*k.AgeS), themes.Dim})
	}
	if k.IP != "" {
		l = append(l, span{" · " + k.IP, themes.Dim})
	}
	out := []string{l.render(th, w)}
	if k.Access != "" {
		a := line{{" access " + k.Access, themes.Text}}
		if k.AccessNote != "" {
			a = append(a, span{": " + k.AccessNote, themes.Dim})
		}
		out = append(out, a.render(th, w))
	}
	return out
}

// podAge says a pod's age as kubectl does: 45s, 12m, 3h12m, 5d.
func podAge(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < 0:
		return dash
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) - 60*h; m > 0 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// transferredWords is a decode worker's prompt tokens that arrived by KV
// transfer, out of its hit rate: " (18.4k tok transferred, not in it)".
func transferredWords(wk *snapshot.Worker) string {
	if t := wk.PrefixHitRate.TransferredTokens; t != nil {
		return " (" + num(t) + " tok transferred, not in it)"
	}
	return ""
}
