package views

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Render draws the screen st.Screen names: exactly h lines, none wider
// than w.
func Render(s *snapshot.Snapshot, st State, w, h int, th *themes.Theme) string {
	sc := st.screen()
	return page(s, &st, w, h, th, func(n int) []string { return sc.Body(s, &st, w, n, th) })
}

// page assembles header, alerts, body, status line and footer into exactly
// h lines. body is asked for exactly n lines of at most w cells.
func page(s *snapshot.Snapshot, st *State, w, h int, th *themes.Theme, body func(n int) []string) string {
	if w < MinWidth || h < MinHeight {
		return tooSmall(w, h, th)
	}
	head, alerts, n := chrome(s, st, w, h, th)
	out := make([]string, 0, h)
	out = append(out, head...)
	out = append(out, alerts...)
	var lines []string
	if s == nil {
		lines = []string{"", center("waiting for the first snapshot…", w)}
	} else {
		lines = body(n)
	}
	for i := 0; i < n; i++ {
		l := ""
		if i < len(lines) {
			l = safe(lines[i], w)
		}
		out = append(out, l)
	}
	out = append(out, statusLine(s, st, w, th), footer(s, st, w, th))
	return strings.Join(out, "\n")
}

// chrome renders the lines around the body and says how many are left.
func chrome(s *snapshot.Snapshot, st *State, w, h int, th *themes.Theme) (head, alerts []string, n int) {
	head = headerLines(s, st, w, th)
	alerts = alertLines(s, w, h, th)
	n = h - len(head) - len(alerts) - 2
	if n < 5 && len(alerts) > 0 { // the body needs room more than the last alert
		cut := min(len(alerts), 5-n)
		alerts = alerts[:len(alerts)-cut]
		n += cut
	}
	return head, alerts, n
}

// tooSmall is the screen below MinWidth×MinHeight: one centred line with
// the size needed.
func tooSmall(w, h int, th *themes.Theme) string {
	if h <= 0 || w <= 0 {
		return ""
	}
	msgs := []string{
		fmt.Sprintf("terminal %d×%d is too small: kvtop needs at least %d×%d", w, h, MinWidth, MinHeight),
		fmt.Sprintf("too small: need %d×%d, have %d×%d", MinWidth, MinHeight, w, h),
		fmt.Sprintf("need %d×%d", MinWidth, MinHeight),
	}
	msg := msgs[len(msgs)-1]
	for _, m := range msgs {
		if width(m) <= w {
			msg = m
			break
		}
	}
	out := make([]string, h)
	out[(h-1)/2] = th.Paint(themes.Warn, center(msg, w))
	return strings.Join(out, "\n")
}

var sep = span{" ─ ", themes.Border}

// headerLines is the pool summary: one line when it fits, else two (who and
// when above, the figures below).
func headerLines(s *snapshot.Snapshot, st *State, w int, th *themes.Theme) []string {
	ident := line{{" kvtop", themes.Title}}
	var figures line
	mode := span{"LIVE", themes.OK}
	if st.Replay != nil {
		mode = replayMode(st.Replay)
	}
	if st.Remote != nil {
		mode = remoteMode(st.Remote)
	}
	if st.Frozen {
		mode = span{"FROZEN", themes.Crit}
	}
	var right line
	var extras []line // latency figures, most telling first (see latencyFigures)
	if s == nil {
		ident = append(ident, span{"  waiting for data", themes.Dim})
		right = line{mode, {" " + dash, themes.Header}}
	} else {
		p := s.Pool
		ident = append(ident, span{"  pool " + p.Name, themes.Header}, sep)
		upRole := themes.OK
		if p.Up < p.Workers {
			upRole = themes.Warn
		}
		if p.Up == 0 && p.Workers > 0 {
			upRole = themes.Crit
		}
		ident = append(ident, span{fmt.Sprintf("%d/%d up", p.Up, p.Workers), upRole})
		if c := p.Churn; c.Joined > 0 || c.Left > 0 {
			// Workers that came and went within the window (Kubernetes).
			ident = append(ident, span{fmt.Sprintf(" (+%d −%d in %s)", c.Joined, c.Left, dur(time.Duration(s.WindowS*float64(time.Second)))), themes.Warn})
		}
		figures = line{{"hit " + pct(p.PrefixHitRate.Tokens) + " tok · " + pct(p.PrefixHitRate.Requests) + " req " + windowNote(p.PrefixHitRate.CoveredS, s.WindowS), themes.Header}}
		if n := p.PrefixHitRate.Left; n > 0 {
			figures = append(figures, span{fmt.Sprintf(" · %d %s left the figure", n, plural(n, "worker", "workers")), themes.Warn})
		}
		if p.Mixed() { // a disaggregated pool: each role's queue and KV use mean their own
			for _, f := range p.Roles {
				figures = append(figures, sep, span{roleWord(f.Role) + ": queue " + num(f.Queue) + " · KV " + pct(f.KVUsage), themes.Header})
			}
			figures = append(figures, sep, skewSpan(s))
		} else {
			figures = append(figures, sep, span{"queue " + num(p.Queue), themes.Header}, sep, skewSpan(s))
		}
		if p.MultiModel() { // several models: each one's hit rate, queue and KV
			for _, m := range p.Models {
				figures = append(figures, sep, span{shortModel(m.Model) + ": hit " + pct(m.HitTokens) + " · queue " + num(m.Queue) + " · KV " + pct(m.KVUsage), themes.Header})
			}
		}
		extras = latencyFigures(s)
		if !p.IndexComplete {
			figures = append(figures, sep, span{"index incomplete", themes.Warn})
		}
		right = line{mode, {" " + clock(s.At), themes.Header}}
		if st.Replay != nil { // a journal's time: the day matters
			right = line{mode, {" " + s.At.Format("2006-01-02 15:04:05"), themes.Header}}
		}
		if r := st.Remote; r != nil { // how old the data is here says more than the collector's clock
			role := themes.Dim
			if r.Lost || r.Age > 3*st.Refresh+2*time.Second {
				role = themes.Warn
			}
			right = line{mode, {" · " + ageWords(r.Age) + " old", role}}
		}
	}
	refresh := span{"refresh " + dur(st.Refresh), themes.Header}
	// One line: ident ─ figures ─ refresh ....... LIVE 14:02:11, when the
	// figures without the latency ones fit; those are then added as room
	// allows (the least telling dropped first), before the index warning.
	one := func(fig line) line {
		l := append(append(append(line{}, ident...), sep), fig...)
		if len(fig) == 0 {
			l = l[:len(l)-1]
		}
		return append(l, sep, refresh)
	}
	if one(figures).width()+right.width()+2 <= w {
		fig := withExtras(figures, extras, !p0(s).IndexComplete, func(f line) bool { return one(f).width()+right.width()+2 <= w })
		return []string{withRight(one(fig), right, w, th)}
	}
	two := append(append(line{}, ident...), sep, refresh)
	lines := []string{withRight(two, right, w, th)}
	if figures.width()+1 > w && s != nil && s.Pool.PrefixHitRate.Left > 0 {
		figures[1].text = fmt.Sprintf(" · %d left", s.Pool.PrefixHitRate.Left) // the rest must fit too
	}
	if len(figures) > 0 {
		fig := withExtras(figures, extras, !p0(s).IndexComplete, func(f line) bool { return f.width()+1 <= w })
		lines = append(lines, append(line{{" ", themes.Header}}, fig...).render(th, w))
	}
	return lines
}

// replayMode is the header's word for a replay: REPLAY and its speed, or
// what holds it.
func replayMode(r *Replay) span {
	switch {
	case r.Seeking:
		return span{"REPLAY seeking", themes.Warn}
	case r.AtEnd:
		return span{"REPLAY end", themes.Warn}
	case r.Paused:
		return span{"REPLAY paused", themes.Warn}
	}
	return span{"REPLAY " + r.Speed, themes.Key}
}

// remoteMode is the header's word for a console on a collector: REMOTE
// and its host, LOST while the stream is gone.
func remoteMode(r *Remote) span {
	host := truncate(r.Host, 28)
	if r.Lost {
		return span{"REMOTE " + host + " LOST", themes.Crit}
	}
	return span{"REMOTE " + host, themes.OK}
}

// ageWords is a data age as the header says it: 0.4 s, 12 s, 3m5s.
func ageWords(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// p0 is the snapshot's pool summary (a zero one before the first snapshot).
func p0(s *snapshot.Snapshot) snapshot.PoolSummary {
	if s == nil {
		return snapshot.PoolSummary{IndexComplete: true}
	}
	return s.Pool
}

// latencyFigures are the header's pool latency figures, in the order they
// stay when the line is short: the ladder's largest loss (when it passes
// its threshold), TTFT p95, then the recomputed share, then
// tokens/s (the pool's RPS in tokens, the least telling). The recomputed
// share shows once decisions were measured.
func latencyFigures(s *snapshot.Snapshot) []line {
	p := s.Pool
	var out []line
	// The hit-rate ladder's largest avoidable loss, once it matters, first.
	if loss, ok := ladderHeader(s); ok {
		out = append(out, line{sep, loss})
	}
	out = append(out, line{sep, {"TTFT p95 " + latQ(p.TTFTMS, "p95"), themes.Header}})
	if r := p.Recompute; r.Measured > 0 || r.NotMeasurable > 0 {
		role := themes.Header
		if r.Share != nil && *r.Share >= 0.1 {
			role = themes.Warn
		}
		out = append(out, line{sep, {"recomputed " + pct(r.Share), role}})
	}
	return append(out, line{sep, {num(tokensSum(p.TokensPerS)) + " tok/s", themes.Header}})
}

// withExtras adds the latency figures that fit (fits says whether a
// figures line does), in their order of importance, shown in that order
// before the index warning that ends figures when warn is set.
func withExtras(figures line, extras []line, warn bool, fits func(line) bool) line {
	base, tail := figures, line(nil)
	if warn { // keep "─ index incomplete" last
		base, tail = figures[:len(figures)-2], figures[len(figures)-2:]
	}
	build := func(n int) line {
		l := append(line{}, base...)
		for _, x := range extras[:n] {
			l = append(l, x...)
		}
		return append(l, tail...)
	}
	n := len(extras)
	for n > 0 && !fits(build(n)) {
		n--
	}
	return build(n)
}

// withRight renders left, then right flush with the right edge.
func withRight(left, right line, w int, th *themes.Theme) string {
	rw := right.width() + 1
	lw := min(left.width(), w-rw-1)
	gap := w - rw - lw
	return left.render(th, lw) + strings.Repeat(" ", max(gap, 1)) + right.render(th, rw-1)
}

// windowNote says how much window a rate covers: "(60s)", or "(23 of 60s)"
// while it is still filling after start or a reset.
func windowNote(covered, window float64) string {
	if window <= 0 {
		return ""
	}
	if covered > 0 && covered < window-0.5 {
		return fmt.Sprintf("(%.0f of %.0fs)", covered, window)
	}
	return fmt.Sprintf("(%.0fs)", window)
}

// lowLoad: the pool's queue is too small for its skew to mean anything
// (fewer waiting requests than up workers, or below the overheating
// floor): one request waiting in an idle pool reads as "4.0×".
func lowLoad(s *snapshot.Snapshot) bool {
	q, up := s.Pool.Queue, s.Pool.Up
	for _, f := range s.Pool.Roles { // the skew compares one role's workers: its load
		if f.Role == s.Pool.LoadSkew.Role {
			q, up = f.Queue, f.Up
		}
	}
	return q != nil && (*q < float64(up) || *q < s.Thresholds.OverheatMinQueue)
}

// skewSpan is the header's skew: max/mean of queue depth, or "low load"
// (dim) when the queues are too short for it to say anything.
func skewSpan(s *snapshot.Snapshot) span {
	if lowLoad(s) {
		return span{"skew low load", themes.Dim}
	}
	v := s.Pool.LoadSkew.MaxOverMean
	if r := s.Pool.LoadSkew.Role; r != "" {
		return span{"skew " + times(v) + " " + roleWord(r), skewRole(s.Pool.LoadSkew)}
	}
	return span{"skew " + times(v), skewRole(s.Pool.LoadSkew)}
}

// skewRole colours the skew by the pool's held verdicts (2× warns, 3× is
// severe; each ends only after the figure stayed below its leave mark).
func skewRole(k snapshot.Skew) themes.Role {
	switch {
	case k.MaxOverMean == nil:
		return themes.Dim
	case k.Severe:
		return themes.Crit
	case k.High:
		return themes.Warn
	}
	return themes.Header
}

// maxAlerts grows with the terminal: 2 lines at 24 rows, 4 at 48.
func maxAlerts(h int) int {
	switch {
	case h < 30:
		return 2
	case h < 40:
		return 3
	default:
		return 4
	}
}

// alertLines shows the pool's alerts, most severe first, one line each.
func alertLines(s *snapshot.Snapshot, w, h int, th *themes.Theme) []string {
	if s == nil || len(s.Alerts) == 0 {
		return nil
	}
	n := min(len(s.Alerts), maxAlerts(h))
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		a := s.Alerts[i]
		glyph, role := alertGlyph(a.Severity)
		l := line{{" ", themes.Text}, {glyph + " ", role}, {a.Text, themes.Text}}
		if i == n-1 && len(s.Alerts) > n {
			more := fmt.Sprintf(" (+%d more)", len(s.Alerts)-n)
			out = append(out, l.render(th, w-width(more))+th.Paint(themes.Dim, more))
			continue
		}
		out = append(out, l.render(th, w))
	}
	return out
}

// statusLine is where the operator looks for what went wrong: the filter
// prompt while typing, else a message, else the latest errors.
func statusLine(s *snapshot.Snapshot, st *State, w int, th *themes.Theme) string {
	if st.Filtering {
		r := []rune(st.Input)
		pos := max(0, min(st.InputPos, len(r)))
		return line{{" / ", themes.Key}, {string(r[:pos]), themes.Text}, {"▏", themes.Key}, {string(r[pos:]), themes.Text},
			{"   enter keep · esc clear", themes.Dim}}.render(th, w)
	}
	l := line{{" ", themes.Text}}
	if f := st.filter(); f != "" {
		l = append(l, span{"filter ", themes.Dim}, span{f, themes.Key}, span{" · ", themes.Border})
	}
	if st.Message != "" {
		l = append(l, span{st.Message, themes.Text})
		return l.render(th, w)
	}
	var recent []snapshot.ErrorCount
	earlier := 0
	if s != nil {
		recent, earlier = recentErrors(s)
	}
	if st.Banner != "" {
		b := "▸ " + oneLine(st.Banner)
		if len(recent) > 0 { // the error matters more than the context
			b = truncate(b, max(w/3, 20))
		}
		l = append(l, span{b, themes.Key}, span{" · ", themes.Border})
	}
	if s == nil {
		return l.render(th, w)
	}
	switch {
	case len(recent) == 0 && earlier == 0:
		l = append(l, span{"✓ no errors", themes.Dim})
		return l.render(th, w)
	case len(recent) == 0:
		l = append(l, span{fmt.Sprintf("✓ no errors in the last %s (%d earlier %s: see ? help)", dur(errorWindow(s)),
			earlier, plural(earlier, "source", "sources")), themes.Dim})
		return l.render(th, w)
	}
	e := recent[0]
	l = append(l, span{"✖ ", themes.Crit}, span{fmt.Sprintf("%s %s ×%d: %s (%s)", e.Source, e.Kind, e.Count, oneLine(e.Last), clock(e.At)), themes.Text})
	if len(recent) > 1 {
		more := fmt.Sprintf(" · +%d more %s", len(recent)-1, plural(len(recent)-1, "error source", "error sources"))
		return l.render(th, w-width(more)) + th.Paint(themes.Dim, more)
	}
	return l.render(th, w)
}

// errorWindow is how long an error stays on the status line after it last
// happened: the rate window (a failing source errs again every scrape, so
// it stays while it fails).
func errorWindow(s *snapshot.Snapshot) time.Duration {
	if s.WindowS <= 0 {
		return time.Minute
	}
	return time.Duration(s.WindowS * float64(time.Second))
}

// recentErrors splits the snapshot's errors (newest first) into those seen
// within the error window and a count of the earlier ones. An error
// without a time (the pool's own) counts as earlier.
func recentErrors(s *snapshot.Snapshot) (recent []snapshot.ErrorCount, earlier int) {
	win := errorWindow(s)
	for _, e := range s.Errors {
		if !e.At.IsZero() && s.At.Sub(e.At) <= win {
			recent = append(recent, e)
		} else {
			earlier++
		}
	}
	return recent, earlier
}

// StatusErrors names what the status line reports when no message hides
// it: each recent error by source and kind, and a lost collector. The
// console lets a message go as soon as one it did not name before comes,
// so a message never hides a newer error.
func StatusErrors(s *snapshot.Snapshot, st *State) []string {
	var out []string
	if st.Remote != nil && st.Remote.Lost {
		out = append(out, "collector lost")
	}
	if s != nil {
		recent, _ := recentErrors(s)
		for _, e := range recent {
			out = append(out, e.Source+"\x00"+e.Kind)
		}
	}
	return out
}

// filter is the applied filter of the screen on display, if it filters.
func (st *State) filter() string {
	if !st.screen().Filter {
		return ""
	}
	return st.List().Filter
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// footer shows the screen tabs (the current one in brackets, so it reads
// without colour) and as many key hints as fit.
func footer(s *snapshot.Snapshot, st *State, w int, th *themes.Theme) string {
	cur := st.screen().TabScreen()
	tabs := func(short bool) line {
		l := line{{" ", themes.Text}}
		for i, sc := range Tabs() {
			if i > 0 {
				l = append(l, span{" ", themes.Text})
			}
			long := fmt.Sprintf("%d %s", i+1, sc.Name)
			switch {
			case sc == cur:
				l = append(l, span{"[" + long + "]", themes.TabActive})
			case short:
				l = append(l, span{fmt.Sprintf("%d %s", i+1, sc.Short), themes.Tab})
			default:
				l = append(l, span{long, themes.Tab})
			}
		}
		return l
	}
	// Full tab names when they leave room for a few key hints, else short.
	l := tabs(false)
	if l.width()+45 > w {
		l = tabs(true)
	}
	hint := func(k Binding) line { return line{{" " + k.Key, themes.Key}, {" " + k.Hint, themes.Dim}} }
	// Quit stays whatever else drops: the other hints fill the room left
	// of it, most useful first.
	var quit line
	hs := hints(Keys(s, st))
	for _, k := range hs {
		if k.ID == KeyQuit {
			quit = hint(k)
		}
	}
	room := w - quit.width()
	if len(hs) > 0 {
		l = append(l, span{" │", themes.Border})
	}
	for _, k := range hs {
		if k.ID == KeyQuit {
			continue
		}
		if h := hint(k); l.width()+h.width() <= room {
			l = append(l, h...)
		} else {
			break
		}
	}
	return l.render(th, room) + quit.render(th, w-min(l.width(), room))
}
