package views

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Pool is the default screen: the worker table under the pool header.
// Enter opens the worker under the cursor; e unfolds DP engines.
var Pool = &Screen{
	Name: "pool", Short: "pool", Tab: true,
	Body: poolBody,
	Rows: func(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) (int, int) {
		rows := poolRows(s, *st)
		return len(rows), poolTableLines(s, len(rows), w, n, th) - 1
	},
	List:  func(st *State) *List { return &st.Pool },
	Items: poolItems,
	Enter: func(s *snapshot.Snapshot, st *State) {
		rows := poolRows(s, *st)
		if c := st.Pool.Cursor; c >= 0 && c < len(rows) {
			openWorker(st, s.Workers[rows[c].Worker].Name)
		}
	},
	Filter: true,
	Sorts:  []string{"", "wait", "kv", "hit", "hot", "blocks", "state", "name", "ttft", "tok/s", "evict/s"},
	Keys: func(_ *snapshot.Snapshot, st *State) ScreenKeys {
		k := listKeys("open worker")
		desc := "unfold DP engines"
		if st.Engines {
			desc = "fold DP engines"
		}
		k.Own = []Binding{bind("engines", groupList, []string{"e"}, "e", desc).hinted("engines", 80).does(
			func(_ *snapshot.Snapshot, st *State) { st.Engines = !st.Engines })}
		node := "group by node"
		if st.ByNode {
			node = "ungroup nodes"
		}
		k.Own = append(k.Own, bind("nodes", groupList, []string{"n"}, "n", node).hinted("nodes", 85).does(
			func(_ *snapshot.Snapshot, st *State) { st.ByNode = !st.ByNode }))
		role := "group by role"
		if st.ByRole {
			role = "ungroup roles"
		}
		k.Own = append(k.Own, bind("roles", groupList, []string{"r"}, "r", role).hinted("roles", 90).does(
			func(_ *snapshot.Snapshot, st *State) { st.ByRole = !st.ByRole }))
		model := "group by model"
		if st.ByModel {
			model = "ungroup models"
		}
		k.Own = append(k.Own, bind("models", groupList, []string{"m"}, "m", model).hinted("models", 95).does(
			func(_ *snapshot.Snapshot, st *State) { st.ByModel = !st.ByModel }))
		return k
	},
}

// poolItems names the pool table's rows: a worker by its name, an engine
// row under it as name\x00engine, so a folded engine lands on its worker.
func poolItems(s *snapshot.Snapshot, st State) []string {
	rows := poolRows(s, st)
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = s.Workers[r.Worker].Name
		if r.Engine >= 0 {
			out[i] += "\x00" + strconv.Itoa(r.Engine)
		}
	}
	return out
}

// poolRow is one row of the worker table: a worker (Engine -1) or one of
// its DP engines when engines are unfolded.
type poolRow struct{ Worker, Engine int }

// poolRows returns the Pool table's rows after filter and sort.
func poolRows(s *snapshot.Snapshot, st State) []poolRow {
	if s == nil {
		return nil
	}
	idx := make([]int, 0, len(s.Workers))
	f := strings.ToLower(strings.TrimSpace(st.Pool.Filter))
	for i := range s.Workers {
		w := &s.Workers[i]
		if f != "" {
			word, _ := workerState(w)
			if !strings.Contains(strings.ToLower(w.Name), f) && !strings.Contains(strings.ToLower(word), f) {
				continue
			}
		}
		idx = append(idx, i)
	}
	sortWorkers(s.Workers, idx, st.Pool.Sort, st.Pool.Desc)
	if st.ByNode { // nodes in name order, the sort kept within each; no node last
		sort.SliceStable(idx, func(a, b int) bool {
			na, nb := nodeOf(&s.Workers[idx[a]]), nodeOf(&s.Workers[idx[b]])
			return na != "" && (nb == "" || na < nb)
		})
	}
	if st.ByModel { // models in name order, the sort (and nodes) kept within each; none last
		sort.SliceStable(idx, func(a, b int) bool {
			ma, mb := strings.ToLower(s.Workers[idx[a]].Model), strings.ToLower(s.Workers[idx[b]].Model)
			return ma != "" && (mb == "" || ma < mb)
		})
	}
	if st.ByRole { // prefill, decode, aggregated; the sort (and nodes) kept within each
		sort.SliceStable(idx, func(a, b int) bool {
			return roleRank(s.Workers[idx[a]].Role) < roleRank(s.Workers[idx[b]].Role)
		})
	}
	rows := make([]poolRow, 0, len(idx))
	for _, i := range idx {
		rows = append(rows, poolRow{i, -1})
		if st.Engines && len(s.Workers[i].Engines) > 1 {
			for e := range s.Workers[i].Engines {
				rows = append(rows, poolRow{i, e})
			}
		}
	}
	return rows
}

var stateRank = map[snapshot.WorkerState]int{
	snapshot.WorkerDown: 7, snapshot.WorkerOverheating: 6, snapshot.WorkerNoMetrics: 5, snapshot.WorkerSaturated: 4,
	snapshot.WorkerStale: 3, snapshot.WorkerUnknown: 2, snapshot.WorkerOK: 1, snapshot.WorkerLeft: 0,
}

// nodeOf is the Kubernetes node of a worker's pod, "" when none.
func nodeOf(w *snapshot.Worker) string {
	if w.Kube == nil {
		return ""
	}
	return w.Kube.Node
}

// nodeSummary is the by-node title: each node with its workers and how
// many are not ok, the worst node first, so a bad node stands out.
func nodeSummary(ws []snapshot.Worker) string {
	type agg struct {
		name   string
		n, bad int
		down   int
	}
	by := map[string]*agg{}
	var order []*agg
	for i := range ws {
		w := &ws[i]
		if w.State == snapshot.WorkerLeft {
			continue
		}
		name := nodeOf(w)
		if name == "" {
			name = "no node"
		}
		a := by[name]
		if a == nil {
			a = &agg{name: name}
			by[name] = a
			order = append(order, a)
		}
		a.n++
		switch w.State {
		case snapshot.WorkerDown:
			a.down++
			a.bad++
		case snapshot.WorkerOK:
		default:
			a.bad++
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].down != order[j].down {
			return order[i].down > order[j].down
		}
		if order[i].bad != order[j].bad {
			return order[i].bad > order[j].bad
		}
		return order[i].name < order[j].name
	})
	var parts []string
	for _, a := range order {
		p := fmt.Sprintf("%s %d", a.name, a.n)
		if a.down > 0 {
			p += fmt.Sprintf(" (%d down)", a.down)
		} else if a.bad > 0 {
			p += fmt.Sprintf(" (%d not ok)", a.bad)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// sortWorkers orders worker indexes by key. Numbers sort largest first
// (Desc flips it) and unknown values always go last: an unknown is not a 0.
func sortWorkers(ws []snapshot.Worker, idx []int, key string, desc bool) {
	var val func(w *snapshot.Worker) *float64
	switch key {
	case "wait":
		val = func(w *snapshot.Worker) *float64 { return w.Queue }
	case "kv":
		val = func(w *snapshot.Worker) *float64 { return w.KVUsage }
	case "hit":
		val = func(w *snapshot.Worker) *float64 { return w.PrefixHitRate.Tokens }
	case "ttft":
		val = func(w *snapshot.Worker) *float64 { return w.TTFTMS.P95 }
	case "tok/s":
		val = func(w *snapshot.Worker) *float64 { return tokensSum(w.TokensPerS) }
	case "evict/s":
		val = func(w *snapshot.Worker) *float64 { return w.Cache.RemovedPerS }
	case "hot":
		val = func(w *snapshot.Worker) *float64 { return w.HotShare }
	case "blocks":
		val = func(w *snapshot.Worker) *float64 {
			if w.Blocks == nil {
				return nil
			}
			v := float64(*w.Blocks)
			return &v
		}
	case "state":
		val = func(w *snapshot.Worker) *float64 { v := float64(stateRank[w.State]); return &v }
	case "name":
		sort.SliceStable(idx, func(a, b int) bool {
			less := ws[idx[a]].Name < ws[idx[b]].Name
			if desc {
				return ws[idx[a]].Name > ws[idx[b]].Name
			}
			return less
		})
		return
	default:
		if desc {
			for i, j := 0, len(idx)-1; i < j; i, j = i+1, j-1 {
				idx[i], idx[j] = idx[j], idx[i]
			}
		}
		return
	}
	// Each row's key is read once, not at every comparison (some keys are
	// computed: a thousand rows made 20 000 of them a sort).
	keys := make([]sortKey, len(ws))
	for _, i := range idx {
		if v := val(&ws[i]); v != nil {
			keys[i] = sortKey{*v, true}
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ka, kb := keys[idx[a]], keys[idx[b]]
		switch {
		case !ka.ok || !kb.ok:
			return ka.ok && !kb.ok
		case desc:
			return ka.v < kb.v
		default:
			return ka.v > kb.v
		}
	})
}

// sortKey is a row's sort value; ok false when unknown.
type sortKey struct {
	v  float64
	ok bool
}

// poolView draws the worker table under the pool header.
func poolBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	rows := poolRows(s, *st)
	cur := min(st.Pool.Cursor, len(rows)-1)
	t := poolTable(s, st, rows)
	// Below the table, the overview (overview.go) in what it leaves.
	ps := overviewPanels(s, w, th)
	tableH := tableLines(len(rows)+1, n-1, ps)
	out := []string{poolTitle(s, st, rows, tableH-1, w, th)}
	out = append(out, t.render(th, len(rows), cur, st.Pool.Offset, w, tableH)...)
	return append(out, overview(ps, n-1-tableH)...)
}

// poolTableLines is the worker table's lines (its header row included) in
// a body of n lines.
func poolTableLines(s *snapshot.Snapshot, rows, w, n int, th *themes.Theme) int {
	if s == nil {
		return n - 1
	}
	return tableLines(rows+1, n-1, overviewPanels(s, w, th))
}

func poolTitle(s *snapshot.Snapshot, st *State, rows []poolRow, visible, w int, th *themes.Theme) string {
	l := line{{" WORKERS ", themes.Title}}
	shown := 0
	for _, r := range rows {
		if r.Engine < 0 {
			shown++
		}
	}
	if shown == len(s.Workers) {
		l = append(l, span{fmt.Sprintf("%d", len(s.Workers)), themes.Text})
	} else {
		l = append(l, span{fmt.Sprintf("%d of %d", shown, len(s.Workers)), themes.Text})
	}
	if st.Pool.Sort != "" {
		dir := "▼"
		if st.Pool.Desc {
			dir = "▲"
		}
		l = append(l, span{" · sorted by " + st.Pool.Sort + " " + dir, themes.Dim})
	}
	if st.Engines {
		l = append(l, span{" · engines unfolded", themes.Dim})
	}
	if st.ByNode {
		l = append(l, span{" · by node: " + nodeSummary(s.Workers), themes.Dim})
	}
	if st.ByRole {
		l = append(l, span{" · by role", themes.Dim})
	}
	if st.ByModel {
		l = append(l, span{" · by model", themes.Dim})
	}
	if len(rows) > visible && visible > 0 {
		off := window(st.Pool.Cursor, st.Pool.Offset, len(rows), visible)
		l = append(l, span{fmt.Sprintf(" · rows %d–%d of %d", off+1, min(off+visible, len(rows)), len(rows)), themes.Dim})
	}
	if s.Pool.Mixed() { // each role's median: the overheating rule's yardstick
		for _, f := range s.Pool.Roles {
			if f.QueueMedian != nil {
				l = append(l, span{" · " + roleWord(f.Role) + " median " + numf(*f.QueueMedian), themes.Dim})
			}
		}
	} else if med, ok := queueMedian(s); ok {
		l = append(l, span{" · queue median " + numf(med), themes.Dim})
	}
	if v := poolVia(s); v != "" {
		l = append(l, span{" · " + v, themes.Dim})
	}
	// Where the pool's prompt tokens hit, per tier, once a page names a
	// tier beyond the GPU.
	if c := s.Pool.CacheTiers; beyondGPU(c) {
		if t := tierHitsText(c); t != "" {
			role := themes.Text
			if c.StoresWithoutLoads {
				role = themes.Warn
			}
			l = append(l, span{" · hits: " + t, role})
		}
	}
	return l.render(th, w)
}

// queueMedian is the pool's median waiting queue over up workers, the
// figure the overheating rule uses.
func queueMedian(s *snapshot.Snapshot) (float64, bool) {
	if m := snapshot.QueueMedian(s.Workers); m != nil {
		return *m, true
	}
	return 0, false
}

func poolTable(s *snapshot.Snapshot, st *State, rows []poolRow) *table {
	ws := s.Workers
	winDur := time.Duration(s.WindowS * float64(time.Second))
	var prev map[string]*snapshot.Worker
	if st.Prev != nil {
		prev = make(map[string]*snapshot.Worker, len(st.Prev.Workers))
		for i := range st.Prev.Workers {
			prev[st.Prev.Workers[i].Name] = &st.Prev.Workers[i]
		}
	}
	nameW := 6
	peak := 0.0 // the WAIT sparklines share one scale: the rows compare
	for i := range ws {
		nameW = max(nameW, width(ws[i].Name))
		peak = max(peak, seriesMax(ws[i].Series.Queue))
	}
	qmax := countScale(peak)
	nameW = min(nameW, 16)
	high := s.Thresholds.KVUsageHigh
	if high <= 0 {
		high = 0.9
	}
	thrash := thrashShare(s)
	wk := func(i int) *snapshot.Worker { return &ws[rows[i].Worker] }
	eng := func(i int) *snapshot.Engine {
		if r := rows[i]; r.Engine >= 0 {
			return &ws[r.Worker].Engines[r.Engine]
		}
		return nil
	}
	prevOf := func(w *snapshot.Worker) *snapshot.Worker {
		if prev == nil {
			return nil
		}
		return prev[w.Name]
	}
	kvCell := func(v *float64, w int) line {
		if v == nil {
			return cell1(dash, themes.Dim)
		}
		role := themes.Text
		if *v >= high {
			role = themes.Warn
		}
		p := fit(pctf(*v), 4, true)
		if w < 15 {
			return cell1(p, role)
		}
		full, empty := bar(*v, w-5)
		return line{{full, themes.BarFull}, {empty, themes.BarEmpty}, {" " + p, role}}
	}
	// As the terminal narrows, columns go in this order: TOK/s, EVICT/s,
	// TTFT p95, the HIT sparkline, BLOCKS, the WAIT sparkline, NOTE, then
	// HOT while KV USE shortens to a number; WORKER, STATE, WAIT, RUN, KV,
	// HIT tok and STREAM always stay (80 columns keep just those). TOK/s
	// and TTFT p95 go early: the header shows the pool's and the worker
	// screen each worker's at any width. EVICT/s (GPU blocks removed per
	// second) goes before TTFT p95: the worker screen charts it, and a
	// thrashing worker's NOTE and alert say so at any width. NOTE holds the reason
	// for a state ("engine 1 KV 91%" for a SATURATED worker whose KV reads
	// 47%), so it outlasts the less telling columns: it is as wide as the
	// longest reason's first part (15 to 27 cells, "down: connection
	// refused s…") until the step before the WAIT sparkline goes, when it
	// narrows to 15. When no worker has a note it goes first, an empty
	// column being worth nothing.
	noteDrop, later, noteW := 1, 1, 15 // no notes: NOTE first, the others a step later
	// STREAM grows only as far as its longest summary needs (up to 24):
	// slack it cannot use is worth more to NOTE.
	streamW := 14
	for i := 0; i < len(ws) && streamW < 24; i++ {
		streamW = max(streamW, min(streamSummaryWidth(ws[i].Streams), 24))
	}
	for i := 0; i < len(ws) && noteW < 27; i++ {
		if parts, _ := noteParts(&ws[i]); len(parts) > 0 {
			noteDrop, later = 8, 0
			noteW = max(noteW, min(width(parts[0]), 27))
		}
	}
	cols := []column{
		{title: "WORKER", width: nameW, cell: func(i, _ int) line {
			if e := eng(i); e != nil {
				return cell1(" └ dp"+e.Engine, themes.Dim)
			}
			return cell1(wk(i).Name, themes.Text)
		}},
	}
	if st.ByNode {
		nodeW := 4
		for i := range ws {
			nodeW = max(nodeW, width(nodeOf(&ws[i])))
		}
		cols = append(cols, column{title: "NODE", width: min(nodeW, 20), cell: func(i, _ int) line {
			if eng(i) != nil {
				return nil
			}
			node := nodeOf(wk(i))
			if node == "" {
				return cell1(dash, themes.Dim)
			}
			// The first row of a node's group names it plainly, the rows
			// under it dim: the groups read at a glance, scrolled or not.
			for j := i - 1; j >= 0; j-- {
				if rows[j].Engine < 0 {
					if nodeOf(&ws[rows[j].Worker]) == node {
						return cell1(node, themes.Dim)
					}
					break
				}
			}
			return cell1(node, themes.Text)
		}})
	}
	// MODEL in a pool of several models (or grouped by model).
	showModel := s.Pool.MultiModel() || st.ByModel
	if showModel {
		modelW := 5
		for i := range ws {
			modelW = max(modelW, width(shortModel(ws[i].Model)))
		}
		// It narrows to its names' first 10 cells late, as the table runs
		// out of room (an 80-column terminal keeps STREAM whole).
		cols = append(cols, column{title: "MODEL", width: min(modelW, 18), narrow: min(modelW, 10), narrowTitle: "MODEL", narrowAt: 8, cell: func(i, w int) line {
			if eng(i) != nil {
				return nil
			}
			if m := shortModel(wk(i).Model); m != "" {
				return cell1(fit(m, w, false), themes.Text)
			}
			return cell1(dash, themes.Dim)
		}})
	}
	// ROLE in a disaggregated pool (or grouped by role): queues and KV use
	// mean different things per role.
	showRole := s.Pool.Mixed() || st.ByRole
	if showRole {
		cols = append(cols, column{title: "ROLE", width: 7, cell: func(i, _ int) line {
			if eng(i) != nil {
				return nil
			}
			w := wk(i)
			role := themes.Text
			if w.RoleSource == snapshot.RoleFromDefault {
				role = themes.Dim // nothing said: aggregated by default
			}
			return cell1(roleWord(w.Role), role)
		}})
	}
	cols = append(cols, []column{
		{title: "STATE", width: 11, cell: func(i, _ int) line {
			if e := eng(i); e != nil {
				if e.LastKnown {
					return cell1("last known", themes.Dim)
				}
				if e.Saturated { // the pool's held verdict, not this refresh's figure
					return cell1("SATURATED", themes.Warn)
				}
				return cell1("", themes.Text)
			}
			return cell1(workerState(wk(i)))
		}},
		{title: "WAIT", width: 5, right: true, cell: func(i, _ int) line {
			if e := eng(i); e != nil {
				return withArrow(valCell(e.Queue, "", themes.Dim), "", prev != nil)
			}
			w := wk(i)
			a := ""
			if p := prevOf(w); p != nil {
				a = arrow(w.Queue, p.Queue, 3)
			}
			return withArrow(valCell(w.Queue, "", themes.Text), a, prev != nil)
		}},
		{title: "RUN", width: 4, right: true, cell: func(i, _ int) line {
			if e := eng(i); e != nil {
				return valCell(e.Running, "", themes.Dim)
			}
			return valCell(wk(i).Running, "", themes.Text)
		}},
		{title: "KV USE", width: 15, narrow: 4, narrowTitle: "KV", narrowAt: 9, right: true, cell: func(i, w int) line {
			if e := eng(i); e != nil {
				return kvCell(e.KVUsage, w)
			}
			return kvCell(wk(i).KVUsage, w)
		}},
		{title: "HIT tok", width: 7, right: true, cell: func(i, _ int) line {
			v := wk(i).PrefixHitRate.Tokens
			if e := eng(i); e != nil {
				v = e.HitTokens
			}
			if v == nil {
				return cell1(dash, themes.Dim)
			}
			return cell1(pctf(*v), themes.Text)
		}},
		{title: "TTFT p95", width: 8, right: true, drop: 3 + later, cell: func(i, _ int) line {
			if e := eng(i); e != nil {
				return latCell(e.TTFTMS, s.Pool.TTFTMS, "p95", themes.Dim)
			}
			return latCell(wk(i).TTFTMS, s.Pool.TTFTMS, "p95", lastKnown(wk(i)))
		}},
		{title: "TOK/s", width: 6, right: true, drop: 1 + later, cell: func(i, _ int) line {
			if e := eng(i); e != nil {
				return rateCell(tokensSum(e.TokensPerS), themes.Dim)
			}
			return rateCell(tokensSum(wk(i).TokensPerS), lastKnown(wk(i)))
		}},
		{title: "EVICT/s", width: 7, right: true, drop: 2 + later, cell: func(i, _ int) line {
			c := wk(i).Cache
			role := lastKnown(wk(i))
			high := wk(i).ThrashHigh // the pool's held verdict
			if e := eng(i); e != nil {
				c, role = e.Cache, themes.Dim
				high = c.ThrashShare != nil && *c.ThrashShare >= thrash
			}
			if high {
				role = themes.Warn // it evicts what it stores again
			}
			return rateCell(c.RemovedPerS, role)
		}},
		{title: "HIT " + dur(winDur), width: 10, drop: 4 + later, cell: func(i, w int) line {
			if eng(i) != nil {
				return nil
			}
			return cell1(sparkline(wk(i).Series.HitTokens, s.At, winDur, w, 1), seriesRole(wk(i)))
		}},
		{title: "WAIT " + dur(winDur), width: 10, drop: 7 + later, cell: func(i, w int) line {
			if eng(i) != nil {
				return nil
			}
			return cell1(sparkline(wk(i).Series.Queue, s.At, winDur, w, qmax), seriesRole(wk(i)))
		}},
		{title: "BLOCKS", width: 6, right: true, drop: 5 + later, cell: func(i, _ int) line {
			if eng(i) != nil {
				return nil
			}
			if b := wk(i).Blocks; b != nil {
				return cell1(numi(*b), lastKnown(wk(i)))
			}
			return cell1(dash, themes.Dim)
		}},
		{title: "STREAM", width: 14, flex: true, maxWidth: streamW, cell: func(i, w int) line {
			if e := eng(i); e != nil {
				for _, ss := range wk(i).Streams {
					if fmt.Sprint(ss.Rank) == e.Engine {
						return cell1(streamState(ss.State))
					}
				}
				return nil
			}
			return cell1(streamSummary(wk(i).Streams, w))
		}},
		{title: "HOT", width: 5, right: true, drop: 9, cell: func(i, _ int) line {
			if eng(i) != nil {
				return nil
			}
			w := wk(i)
			if w.HotShare == nil {
				return withArrow(cell1(dash, themes.Dim), "", prev != nil)
			}
			a := ""
			if p := prevOf(w); p != nil {
				a = arrow(w.HotShare, p.HotShare, 0.05)
			}
			role := lastKnown(w)
			if w.Overheating {
				role = themes.Crit
			}
			return withArrow(cell1(pctf(*w.HotShare), role), a, prev != nil)
		}},
		// 15 cells hold the shortest reasons whole ("engine 1 KV 91%").
		{title: "NOTE", width: noteW, narrow: 15, narrowTitle: "NOTE", narrowAt: 6 + later, flex: true, maxWidth: 80, drop: noteDrop, cell: func(i, w int) line {
			if e := eng(i); e != nil {
				if e.NumGPUBlocks != nil {
					return cell1("engine "+e.Engine+" · "+num(e.NumGPUBlocks)+" GPU blocks", themes.Dim)
				}
				return cell1("engine "+e.Engine, themes.Dim)
			}
			return workerNote(wk(i), w)
		}},
	}...)
	// A worker that is not up keeps what kvtop last knew of its engines:
	// their rows stay, every figure dim; so does a worker that left the
	// set (its pod is gone), for one window.
	for k := range cols {
		cell := cols[k].cell
		cols[k].cell = func(i, w int) line {
			l := cell(i, w)
			if eng(i) != nil && !wk(i).Up || wk(i).State == snapshot.WorkerLeft {
				for j := range l {
					l[j].role = themes.Dim
				}
			}
			return l
		}
	}
	sortCol := -1
	if c, ok := poolSortCol[st.Pool.Sort]; ok {
		sortCol = c
		if st.ByNode && c > 0 {
			sortCol++ // NODE sits after WORKER
		}
		if showModel && c > 0 {
			sortCol++ // MODEL after it
		}
		if showRole && c > 0 {
			sortCol++ // and ROLE after that
		}
	}
	return &table{cols: cols, sortCol: sortCol, sortDesc: st.Pool.Desc, mark: func(i int) (string, themes.Role) {
		if rows[i].Engine >= 0 {
			return "", themes.Text
		}
		return workerMark(wk(i))
	}}
}

// streamSummaryWidth is the width of streamSummary's widest text for ss,
// counted without building it (the pool table asks for every worker).
func streamSummaryWidth(ss []snapshot.Stream) int {
	if len(ss) == 0 {
		return width("none")
	}
	worst, same := 0, 0
	var gaps uint64
	for i := range ss {
		if StreamSeverity(ss[i].State) > StreamSeverity(ss[worst].State) {
			worst = i
		}
		gaps += ss[i].Gaps
	}
	for i := range ss {
		if ss[i].State == ss[worst].State {
			same++
		}
	}
	text, _ := streamState(ss[worst].State)
	n := width(text)
	if same < len(ss) {
		n += 2 + digits(uint64(same)) + digits(uint64(len(ss))) // " 1/2"
	}
	if gaps > 0 {
		n += 3 + digits(gaps) + len(plural(int(min(gaps, 2)), "gap", "gaps")) // ", 1 gap"
	}
	return n
}

func digits(v uint64) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

// poolSortCol is the column carrying the sort marker for each key.
var poolSortCol = map[string]int{"name": 0, "state": 1, "wait": 2, "kv": 4, "hit": 5, "ttft": 6, "tok/s": 7, "evict/s": 8, "blocks": 11, "hot": 13}

// thrashShare is the thrash rule's share in force (pool's default before
// the first snapshot says).
func thrashShare(s *snapshot.Snapshot) float64 {
	if s != nil && s.Thresholds.ThrashShare > 0 {
		return s.Thresholds.ThrashShare
	}
	return snapshot.DefaultThresholds().ThrashShare
}

// lastKnown is the role of a figure kept from before a worker went down
// (its blocks, its hot share): dim, since it is no longer current.
func lastKnown(w *snapshot.Worker) themes.Role {
	if w.State == snapshot.WorkerDown {
		return themes.Dim
	}
	return themes.Text
}

// seriesRole paints a worker's sparklines: dim when it is not up, since
// they end where its metrics stopped (last known).
func seriesRole(w *snapshot.Worker) themes.Role {
	if !w.Up {
		return themes.Dim
	}
	return themes.Spark
}

// valCell is a right-aligned count with an optional change arrow.
// withArrow appends a change mark to a right-aligned cell; while marks
// are shown (a previous snapshot to compare with) every cell of the
// column keeps their cell, so the figures stay aligned ("19↑" above "4 ").
func withArrow(l line, arrow string, marks bool) line {
	switch {
	case arrow != "":
		return append(l, span{arrow, themes.Warn})
	case marks:
		return append(l, span{" ", themes.Text})
	}
	return l
}

func valCell(v *float64, arrow string, role themes.Role) line {
	if v == nil {
		return cell1(dash, themes.Dim)
	}
	if arrow != "" {
		return line{{numf(*v), role}, {arrow, themes.Warn}}
	}
	return cell1(numf(*v), role)
}

// workerNote says why numbers are missing or what to look at, in w cells:
// as many of its parts as fit whole, the first (the reason) cut if it must.
func workerNote(wk *snapshot.Worker, w int) line {
	parts, role := noteParts(wk)
	text := ""
	for i, p := range parts {
		next := text + " · " + p
		if i == 0 {
			next = p
		}
		if i > 0 && width(next) > w {
			break
		}
		text = next
	}
	return cell1(text, role)
}

// noteParts are the parts of a worker's note, most telling first, and
// the role the note is painted in.
func noteParts(w *snapshot.Worker) ([]string, themes.Role) {
	var parts []string
	role := themes.Dim
	switch {
	case w.Reason != "":
		parts = append(parts, w.Reason)
	case w.Error != nil:
		parts = append(parts, "error: "+oneLine(*w.Error))
	}
	switch w.State {
	case snapshot.WorkerDown:
		role = themes.Crit
	case snapshot.WorkerNoMetrics:
		role = themes.Warn
	}
	if w.Overheating && w.OverheatPrefix != nil && w.OverheatShare != nil {
		parts = append(parts, fmt.Sprintf("takes %s of prefix %s", pctf(*w.OverheatShare), shortID(*w.OverheatPrefix, 6)))
		role = themes.Crit
	}
	if sh := w.Cache.ThrashShare; sh != nil && w.ThrashHigh { // held (pool/verdict.go)
		parts = append(parts, "thrash "+pctf(*sh)+" of stores")
		if role == themes.Dim {
			role = themes.Warn
		}
	}
	if b := w.Breaker; b != nil && *b != "closed" {
		parts = append(parts, "breaker "+*b)
		if role == themes.Dim {
			role = themes.Warn
		}
	}
	if len(w.Engines) > 1 {
		parts = append(parts, fmt.Sprintf("%d engines", len(w.Engines)))
	}
	if w.Restarts > 0 {
		parts = append(parts, fmt.Sprintf("%d %s", w.Restarts, plural(w.Restarts, "restart", "restarts")))
	}
	return parts, role
}

// roleRank orders roles as the pool lists them.
func roleRank(r string) int {
	for i, x := range snapshot.Roles {
		if x == r {
			return i
		}
	}
	return len(snapshot.Roles)
}

// roleWord is a role in a table cell: "prefill", "decode", "aggr".
func roleWord(r string) string {
	if r == snapshot.RoleAggregated {
		return "aggr"
	}
	return r
}

// shortModel is a model's name without its organisation ("Qwen/Qwen3-8B"
// → "Qwen3-8B"): the column is narrow, the name's tail tells them apart.
func shortModel(m string) string {
	if i := strings.LastIndexByte(m, '/'); i >= 0 && i < len(m)-1 {
		return m[i+1:]
	}
	return m
}
