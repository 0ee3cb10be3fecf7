package views

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Decisions is the live list of routing decisions next to what happened.
// It follows the newest record until the operator moves or presses F;
// enter opens a record. Paused or filtered, it holds the records it lists
// after the pool lets them go (State.Held), so a row on screen stays put
// and opens.
var Decisions = &Screen{
	Name: "decisions", Short: "dec", Tab: true,
	Body: decisionsBody,
	Rows: func(s *snapshot.Snapshot, st *State, _, n int, _ *themes.Theme) (int, int) {
		return len(decisionRows(s, *st)), n - 2 - len(clientsLines(s))
	},
	List: func(st *State) *List { return &st.Decisions },
	Items: func(s *snapshot.Snapshot, st State) []string {
		rows := decisionRows(s, st)
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = r.RequestID + "\x00" + r.AttemptID
		}
		return out
	},
	// While following, the cursor is the newest row, whatever it was.
	AnchorOf: func(s *snapshot.Snapshot, st State) string {
		if st.Follow {
			return ""
		}
		if rows := decisionRows(s, st); st.Decisions.Cursor >= 0 && st.Decisions.Cursor < len(rows) {
			r := rows[st.Decisions.Cursor]
			return r.RequestID + "\x00" + r.AttemptID
		}
		return ""
	},
	Find: func(s *snapshot.Snapshot, st State, anchor string) int {
		req, att, _ := strings.Cut(anchor, "\x00")
		rows := decisionRows(s, st)
		for i := len(rows) - 1; i >= 0; i-- { // the cursor is near the newest, mostly
			if rows[i].RequestID == req && rows[i].AttemptID == att {
				return i
			}
		}
		return -1
	},
	// Any move pauses follow, from the newest record.
	Move: func(s *snapshot.Snapshot, st *State, d, total, _ int) {
		if st.Follow {
			pauseFollow(s, st)
		}
		MoveCursor(&st.Decisions, d, total)
	},
	Enter: func(s *snapshot.Snapshot, st *State) {
		rows := decisionRows(s, *st)
		if c := decisionCursor(st, len(rows)); c >= 0 && c < len(rows) {
			r := *rows[c]
			st.Decision = DecisionKey{RequestID: r.RequestID, AttemptID: r.AttemptID}
			st.Opened = &r // the record view holds what it shows
			// Opening a record pauses follow, so esc comes back to it.
			st.Follow, st.Decisions.Cursor = false, c
			st.Back, st.Screen = st.Screen, DecisionDetail
		}
	},
	Carry:  holdDecisions,
	Filter: true,
	Keys: func(_ *snapshot.Snapshot, st *State) ScreenKeys {
		k := listKeys("open record")
		f := bind("follow", groupList, []string{"F"}, "F", "follow newest").hinted("follow", 60)
		if st.Follow {
			f.Desc, f.Hint = "pause follow", "pause"
		}
		k.Own = []Binding{f.does(func(s *snapshot.Snapshot, st *State) {
			if st.Follow {
				pauseFollow(s, st)
				return
			}
			st.Follow = true
			st.Message = "following the newest decision"
		})}
		return k
	},
	Help: []string{
		"The pool lists the decisions of the last 2 minutes (limits.recent_decisions). Paused or filtered, the list holds " +
			"the records it shows after the pool lets them go (up to " + grouped(MaxHeld) + "), so a row on screen stays and opens.",
	},
}

// MaxHeld bounds State.Held: about 1.2 KiB a record (its row and the
// values it shares with the snapshot it came from), some 6 MiB in all.
const MaxHeld = snapshot.RecentDecisionsMax

// heldView is how many rows from the top of the list's view are never let
// go to stay within MaxHeld: more than any screen shows.
const heldView = 256

// holdDecisions carries the list from the snapshot shown to the next. While
// it follows the newest unfiltered, it is the pool's list as it comes.
// Paused or filtered, the records it lists that the new snapshot no longer
// has are held (State.Held, oldest first; filtered, those that match), so
// the rows on screen and under the cursor stay; a snapshot from before
// the shown one (a replay going back) lets them go. Past MaxHeld the oldest
// held go first, but not those from the top of the view on (heldView
// rows): the ones after those go instead.
func holdDecisions(old, s *snapshot.Snapshot, st *State) {
	if st.Follow && st.Decisions.Filter == "" {
		st.Held = nil
		return
	}
	if s == nil {
		return
	}
	listed := make(map[DecisionKey]bool, len(s.Decisions.Recent))
	for i := range s.Decisions.Recent {
		listed[keyOf(&s.Decisions.Recent[i])] = true
	}
	held := st.Held
	for i := range held {
		if listed[keyOf(&held[i])] { // listed again (the pool's window grew)
			held = slices.DeleteFunc(slices.Clone(held), func(r snapshot.DecisionRow) bool { return listed[keyOf(&r)] })
			break
		}
	}
	switch {
	case old == nil:
	case s.Seq < old.Seq:
		// A replay went back, or the collector restarted: another stretch
		// of time, whose records come after none of those held.
		held = nil
	default:
		// The records the pool let go are the oldest it listed: those
		// before the first it still lists.
		match := decisionFilter(s, st.Decisions.Filter)
		for i := range old.Decisions.Recent {
			r := &old.Decisions.Recent[i]
			if listed[keyOf(r)] {
				break
			}
			if match(r) {
				held = append(held, *r)
			}
		}
	}
	if over := len(held) - MaxHeld; over > 0 {
		held = trimHeld(held, over, heldTop(held, s, st))
	}
	st.Held = held
}

// heldTop is the index in held of the row at the top of the list's view
// (or under the cursor, if above it); len(held) when that row is the
// pool's.
func heldTop(held []snapshot.DecisionRow, s *snapshot.Snapshot, st *State) int {
	top := max(0, min(st.Decisions.Offset, st.Decisions.Cursor))
	match := decisionFilter(s, st.Decisions.Filter)
	n := 0
	for i := range held {
		if match(&held[i]) {
			if n == top {
				return i
			}
			n++
		}
	}
	return len(held)
}

// trimHeld drops over rows of held: the oldest above the view first, then
// those just after its heldView rows.
func trimHeld(held []snapshot.DecisionRow, over, top int) []snapshot.DecisionRow {
	above := min(over, top)
	out := slices.Clone(held[above:])
	over -= above
	if over > 0 {
		from := min(top-above+heldView, len(out))
		to := min(from+over, len(out))
		out = slices.Delete(out, from, to)
	}
	return out
}

func keyOf(r *snapshot.DecisionRow) DecisionKey {
	return DecisionKey{RequestID: r.RequestID, AttemptID: r.AttemptID}
}

// decisionList is every record the list can show, oldest first: those it
// holds, then the snapshot's.
func decisionList(s *snapshot.Snapshot, st *State) []*snapshot.DecisionRow {
	out := make([]*snapshot.DecisionRow, 0, len(st.Held)+len(s.Decisions.Recent))
	for i := range st.Held {
		out = append(out, &st.Held[i])
	}
	for i := range s.Decisions.Recent {
		out = append(out, &s.Decisions.Recent[i])
	}
	return out
}

// pauseFollow stops following, with the cursor on the newest record.
func pauseFollow(s *snapshot.Snapshot, st *State) {
	st.Decisions.Cursor = max(0, decisionCursor(st, len(decisionRows(s, *st))))
	st.Follow = false
	st.Message = "follow paused (F resumes)"
}

// decisionRows returns the records the list shows (held, then the
// snapshot's) that pass the filter, oldest first (the list reads like a
// log; follow keeps the newest in view).
//
// The filter is space-separated terms, all of which must match:
// "flag:truncated" (a flag, prefix match: "flag:trunc"), a worker name
// ("w1": chosen or predicted owner), or any other text (request id
// substring: "r-88").
func decisionRows(s *snapshot.Snapshot, st State) []*snapshot.DecisionRow {
	if s == nil {
		return nil
	}
	all := decisionList(s, &st)
	if st.Decisions.Filter == "" {
		return all
	}
	match := decisionFilter(s, st.Decisions.Filter)
	rows := all[:0]
	for _, r := range all {
		if match(r) {
			rows = append(rows, r)
		}
	}
	return rows
}

// decisionFilter is the test of the filter text against one record; the
// snapshot says which terms are worker names.
func decisionFilter(s *snapshot.Snapshot, filter string) func(*snapshot.DecisionRow) bool {
	terms := strings.Fields(strings.ToLower(filter))
	if len(terms) == 0 {
		return func(*snapshot.DecisionRow) bool { return true }
	}
	workers := make(map[string]bool, len(s.Workers))
	for _, w := range s.Workers {
		workers[strings.ToLower(w.Name)] = true
	}
	return func(r *snapshot.DecisionRow) bool { return matchDecision(r, terms, workers) }
}

func matchDecision(d *snapshot.DecisionRow, terms []string, workers map[string]bool) bool {
	for _, t := range terms {
		switch {
		case strings.HasPrefix(t, "flag:"):
			want := strings.TrimPrefix(t, "flag:")
			ok := d.Pending && strings.HasPrefix("pending", want)
			for _, f := range d.Flags {
				if strings.HasPrefix(f, want) || strings.HasPrefix(strings.ToLower(flagWord(f)), want) {
					ok = true
				}
			}
			if !ok {
				return false
			}
		case workers[t]:
			if !strings.EqualFold(d.Chosen, t) && !strings.EqualFold(d.Owner, t) && !strings.EqualFold(d.DecodeWorker, t) {
				return false
			}
		default:
			if !strings.Contains(strings.ToLower(d.RequestID), t) {
				return false
			}
		}
	}
	return true
}

// decisionCursor is the row under the cursor: the newest while following.
func decisionCursor(st *State, rows int) int {
	if st.Follow {
		return rows - 1
	}
	return min(st.Decisions.Cursor, rows-1)
}

func decisionsBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	rows := decisionRows(s, *st)
	out := []string{decisionsTitle(s, st, len(rows), w, th)}
	for _, l := range clientsLines(s) {
		out = append(out, l.render(th, w))
		n--
	}
	if len(rows) == 0 {
		switch {
		case st.Decisions.Filter != "":
			return append(out, line{{"   no decision matches the filter", themes.Dim}}.render(th, w))
		case len(s.Decisions.Sources) == 0:
			return append(out, line{{"   no decisions yet: is a decision log configured?", themes.Dim}}.render(th, w))
		}
		// Say what each log is doing: an empty list needs a reason.
		out = append(out, line{{"   no decisions yet:", themes.Dim}}.render(th, w))
		for i := range s.Decisions.Sources {
			out = append(out, wrapLine(sourceLine(&s.Decisions.Sources[i]), 5, w, th)...)
		}
		return out
	}
	t := decisionsTable(rows)
	return append(out, t.render(th, len(rows), decisionCursor(st, len(rows)), st.Decisions.Offset, w, n-1)...)
}

// clientsLines is what the clients got over the window, while a tap feeds
// the pool: the router's successes beside the client's finished streams
// ("router: 3 ok · client: 2 finished, 1 truncated"), the client's TTFT
// and the streaming breaks. None without a tap.
func clientsLines(s *snapshot.Snapshot) []line {
	c := s.Pool.Clients
	tapped := c.Requests > 0
	for i := range s.Decisions.Sources {
		tapped = tapped || s.Decisions.Sources[i].Format == "tap"
	}
	if !tapped {
		return nil
	}
	l := line{{" CLIENTS ", themes.Title}, {"(kvtop tap, " + dur(errorWindow(s)) + ") ", themes.Dim}}
	if c.Requests == 0 {
		return []line{append(l, span{"no tapped request in the window", themes.Dim})}
	}
	if c.RouterKnown == 0 {
		l = append(l, span{"router: no outcome records", themes.Dim})
	} else {
		l = append(l, span{fmt.Sprintf("router: %d ok", c.RouterOK), themes.Text})
		if c.RouterKnown < c.Requests {
			l = append(l, span{fmt.Sprintf(" (of %d it recorded)", c.RouterKnown), themes.Dim})
		}
	}
	role := themes.Text
	if c.Truncated+c.Failed > 0 {
		role = themes.Warn
	}
	client := fmt.Sprintf("client: %d finished", c.Finished)
	for _, k := range []struct {
		n    int
		what string
	}{{c.Truncated, "truncated"}, {c.Failed, "failed"}, {c.Left, "left"}, {c.Unknown, "unknown"}} {
		if k.n > 0 {
			client += fmt.Sprintf(", %d %s", k.n, k.what)
		}
	}
	l = append(l, span{" · ", themes.Dim}, span{client, role})
	q := c.TTFTMS
	if q.P50 != nil {
		l = append(l, span{" · TTFT " + ms(q.P50) + " p50, " + ms(q.P95) + " p95, " + ms(q.P99) + " p99", themes.Text})
	} else {
		l = append(l, span{fmt.Sprintf(" · TTFT: %d requests, quantiles from 20", q.N), themes.Dim})
	}
	brk := themes.Dim
	if c.Breaks > 0 {
		brk = themes.Warn
	}
	l = append(l, span{fmt.Sprintf(" · %d streaming breaks", c.Breaks), brk})
	return []line{l}
}

func decisionsTitle(s *snapshot.Snapshot, st *State, shown int, w int, th *themes.Theme) string {
	d := s.Decisions
	// Held records are said beside the mode, which the title never cuts.
	held := ""
	if len(st.Held) > 0 {
		held = " · " + grouped(int64(len(st.Held))) + " held"
	}
	mode := span{"  ● FOLLOW" + held, themes.OK}
	if !st.Follow {
		mode = span{"  ‖ PAUSED" + held + " (F follows)", themes.Warn}
	}
	bad := func(n int, what string) span {
		if n == 0 {
			return span{fmt.Sprintf(" · %d %s", n, what), themes.Dim}
		}
		return span{fmt.Sprintf(" · %d %s", n, what), themes.Warn}
	}
	l := line{{" DECISIONS ", themes.Title}, {fmt.Sprintf("%s seen · %s with outcome", grouped(int64(d.Records)), grouped(int64(d.WithOutcome))), themes.Text},
		bad(d.OwnerMismatch, "owner mismatch"), bad(d.PredictionErrors, "prediction errors"), bad(d.Truncated, "truncated"),
		bad(d.OrphanOutcomes, "orphan outcomes"), bad(d.BadLines, "bad log lines")}
	if all := len(d.Recent) + len(st.Held); shown != all {
		l = append(l, span{fmt.Sprintf(" · %d of %d shown", shown, all), themes.Dim})
	}
	return withRight(l, line{mode}, w, th)
}

func decisionsTable(rows []*snapshot.DecisionRow) *table {
	d := func(i int) *snapshot.DecisionRow { return rows[i] }
	reqW := 7
	for _, r := range rows {
		reqW = max(reqW, width(requestLabel(r)))
	}
	reqW = min(reqW, 18)
	worker := func(name string) line {
		if name == "" {
			return cell1(dash, themes.Dim)
		}
		return cell1(name, themes.Text)
	}
	cols := []column{
		{title: "TIME", width: 8, drop: 3, cell: func(i, _ int) line { return cell1(clock(d(i).At), themes.Dim) }},
		{title: "REQUEST", width: reqW, cell: func(i, _ int) line { return cell1(requestLabel(d(i)), themes.Text) }},
		{title: "CHOSEN", width: 6, cell: func(i, _ int) line { return worker(d(i).Chosen) }},
		{title: "OWNER", width: 6, drop: 5, cell: func(i, _ int) line {
			r := d(i)
			if r.Owner != "" && r.Chosen != "" && r.Owner != r.Chosen {
				return cell1(r.Owner, themes.Warn)
			}
			return worker(r.Owner)
		}},
		{title: "MATCH", width: 15, right: true, cell: func(i, _ int) line {
			r := d(i)
			if r.Matched == nil {
				return cell1(dash, themes.Dim)
			}
			role := themes.Text
			if r.Units != "tokens" {
				role = themes.Warn
			}
			return cell1(num(r.Matched)+"/"+num(r.Total)+" "+unitWord(r.Units), role)
		}},
		{title: "CACHED", width: 8, right: true, cell: func(i, _ int) line {
			r := d(i)
			switch {
			case r.Pending:
				return cell1(pendingMark, themes.Dim)
			case r.CachedTokens == nil:
				return cell1(dash, themes.Dim)
			}
			return cell1(numi(*r.CachedTokens)+" tok", themes.Text)
		}},
		{title: "QUEUE", width: 7, right: true, drop: 2, cell: func(i, _ int) line { return outcomeMS(d(i), d(i).QueueMS) }},
		{title: "TTFT", width: 6, right: true, cell: func(i, _ int) line { return outcomeMS(d(i), d(i).TTFTMS) }},
		{title: "DONE", width: 4, drop: 4, cell: func(i, _ int) line {
			r := d(i)
			switch {
			case r.Pending:
				return cell1(pendingMark, themes.Dim)
			case r.Done == nil:
				return cell1(dash, themes.Dim)
			case *r.Done:
				return cell1("yes", themes.OK)
			default:
				return cell1("NO", themes.Crit)
			}
		}},
		{title: "FLAGS", width: 13, flex: true, maxWidth: 60, cell: func(i, _ int) line {
			r := d(i)
			l := make(line, 0, 2*len(r.Flags)+1)
			if r.Pending {
				l = append(l, span{"pending", themes.Dim})
			}
			for _, f := range r.Flags {
				if len(l) > 0 {
					l = append(l, span{" ", themes.Text})
				}
				l = append(l, span{flagWord(f), flagRole(f)})
			}
			return l
		}},
	}
	return &table{cols: cols, sortCol: -1, mark: func(i int) (string, themes.Role) {
		r := d(i)
		for _, f := range r.Flags {
			if flagRole(f) == themes.Crit {
				return "✖", themes.Crit
			}
		}
		if len(r.Flags) > 0 {
			return "!", themes.Warn
		}
		return "", themes.Text
	}}
}

func requestLabel(r *snapshot.DecisionRow) string {
	if r.AttemptID != "" && r.AttemptID != "1" && r.AttemptID != "0" {
		return r.RequestID + " #" + r.AttemptID
	}
	return r.RequestID
}

func unitWord(u string) string {
	switch u {
	case "tokens":
		return "tok"
	case "":
		return "?"
	}
	return u
}

// pendingMark fills an outcome cell of a decision whose request is still
// running: the value is on its way, not unknown (–).
const pendingMark = "…"

// outcomeMS is a timing from the outcome: … while it is pending.
func outcomeMS(r *snapshot.DecisionRow, v *float64) line {
	if r.Pending {
		return cell1(pendingMark, themes.Dim)
	}
	return msCell(v)
}

func msCell(v *float64) line {
	if v == nil {
		return cell1(dash, themes.Dim)
	}
	return cell1(ms(v), themes.Text)
}

// findDecision returns the record k as the list has it: the snapshot's,
// else held by the list, else the one the detail opened (nil: none).
// fresh says it is the snapshot's (it still changes as outcomes arrive).
func findDecision(s *snapshot.Snapshot, st *State, k DecisionKey) (r *snapshot.DecisionRow, fresh bool) {
	if s != nil {
		for i := range s.Decisions.Recent {
			if keyOf(&s.Decisions.Recent[i]) == k {
				return &s.Decisions.Recent[i], true
			}
		}
	}
	for i := range st.Held {
		if keyOf(&st.Held[i]) == k {
			return &st.Held[i], false
		}
	}
	if st.Opened != nil && keyOf(st.Opened) == k {
		return st.Opened, false
	}
	return nil, false
}

// skipHints explain a skip reason to the operator.
var skipHints = map[string]string{
	"no request id": "Dynamo logs at INFO? its [ROUTING] lines need DEBUG",
	"unknown kind":  "a newer kvtop record?",
}

// sourceLine says what one decision log is doing: "router.jsonl: 1 240
// lines, 0 decisions — 1 240 skipped: no request id (…)", or that the
// file is not there yet.
func sourceLine(src *snapshot.DecisionSource) line {
	if src.Waiting {
		return line{{"   ⧗ ", themes.Warn}, {"waiting for " + src.Source + " to appear", themes.Warn}}
	}
	text := fmt.Sprintf("%s: %s lines, %s decisions, %s outcomes", src.Source, grouped(int64(src.Lines)),
		grouped(int64(src.Decisions)), grouped(int64(src.Outcomes)))
	if src.Detected != "" {
		text += " (" + src.Detected + ")"
	}
	l := line{{"   · ", themes.Dim}, {text, themes.Text}}
	if src.Bad > 0 {
		l = append(l, span{fmt.Sprintf(" — %s bad", grouped(int64(src.Bad))), themes.Warn})
	}
	if src.Skipped > 0 {
		reasons := make([]string, 0, len(src.SkippedBy))
		for r := range src.SkippedBy {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(a, b int) bool {
			if src.SkippedBy[reasons[a]] != src.SkippedBy[reasons[b]] {
				return src.SkippedBy[reasons[a]] > src.SkippedBy[reasons[b]]
			}
			return reasons[a] < reasons[b]
		})
		var parts []string
		for _, r := range reasons {
			p := grouped(int64(src.SkippedBy[r])) + " " + r
			if h := skipHints[r]; h != "" {
				p += " (" + h + ")"
			}
			parts = append(parts, p)
		}
		l = append(l, span{fmt.Sprintf(" — %s skipped: %s", grouped(int64(src.Skipped)), strings.Join(parts, ", ")), themes.Warn})
	}
	return l
}
