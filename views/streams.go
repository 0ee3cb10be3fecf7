package views

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Streams is one row per KV event publisher and a timeline of gaps and
// recoveries: the screen that says whether the index can be trusted.
// Enter opens the publisher's worker.
var Streams = &Screen{
	Name: "streams", Short: "str", Tab: true,
	Body: streamsBody,
	Rows: func(s *snapshot.Snapshot, st *State, _, n int, _ *themes.Theme) (int, int) {
		rows := len(streamRows(s, *st))
		return rows, streamsSplit(n-1, rows) - 1
	},
	List: func(st *State) *List { return &st.Streams },
	Items: func(s *snapshot.Snapshot, st State) []string {
		rows := streamRows(s, st)
		out := make([]string, len(rows))
		for i, r := range rows {
			w := &s.Workers[r.Worker]
			out[i] = w.Name + "\x00" + strconv.Itoa(w.Streams[r.Stream].Rank)
		}
		return out
	},
	Enter: func(s *snapshot.Snapshot, st *State) {
		rows := streamRows(s, *st)
		if c := st.Streams.Cursor; c >= 0 && c < len(rows) {
			openWorker(st, s.Workers[rows[c].Worker].Name)
		}
	},
	Filter: true,
	Sorts:  []string{"", "state", "gaps", "lost", "age", "events", "decode"},
	Keys:   func(*snapshot.Snapshot, *State) ScreenKeys { return listKeys("open worker") },
}

// streamRow is one publisher: worker index and stream index.
type streamRow struct{ Worker, Stream int }

// streamRows returns the Streams table's rows after filter and sort.
func streamRows(s *snapshot.Snapshot, st State) []streamRow {
	if s == nil {
		return nil
	}
	f := strings.ToLower(strings.TrimSpace(st.Streams.Filter))
	var rows []streamRow
	for wi := range s.Workers {
		for si := range s.Workers[wi].Streams {
			if f != "" {
				word, _ := streamState(s.Workers[wi].Streams[si].State)
				if !strings.Contains(strings.ToLower(s.Workers[wi].Name), f) && !strings.Contains(strings.ToLower(word), f) {
					continue
				}
			}
			rows = append(rows, streamRow{wi, si})
		}
	}
	key := func(r streamRow) *float64 {
		ss := &s.Workers[r.Worker].Streams[r.Stream]
		v := 0.0
		switch st.Streams.Sort {
		case "state":
			v = float64(StreamSeverity(ss.State))
		case "gaps":
			v = float64(ss.Gaps)
		case "lost":
			v = float64(ss.Lost)
		case "age":
			return ss.LastMessageAgeS
		case "events":
			return ss.EventsPerS
		case "decode":
			v = float64(ss.DecodeErrors)
		}
		return &v
	}
	if st.Streams.Sort != "" {
		sort.SliceStable(rows, func(a, b int) bool {
			va, vb := key(rows[a]), key(rows[b])
			switch {
			case va == nil || vb == nil:
				return va != nil && vb == nil
			case st.Streams.Desc:
				return *va < *vb
			default:
				return *va > *vb
			}
		})
	} else if st.Streams.Desc {
		for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
			rows[i], rows[j] = rows[j], rows[i]
		}
	}
	return rows
}

var streamSortCol = map[string]int{"state": 2, "events": 5, "age": 6, "gaps": 7, "lost": 10, "decode": 12}

// streamsSplit divides the body between the table and the timeline.
func streamsSplit(n, rows int) (table int) {
	table = min(rows+1, n*3/5)
	return max(table, min(n-4, 3))
}

// streamsView draws the publishers' table above the timeline.
func streamsBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	rows := streamRows(s, *st)
	tn := streamsSplit(n-1, len(rows))
	out := []string{streamsTitle(s, rows, w, th)}
	if len(rows) == 0 {
		out = append(out, line{{"   no publishers", themes.Dim}}.render(th, w))
	} else {
		t := streamsTable(s, st, rows)
		out = append(out, t.render(th, len(rows), min(st.Streams.Cursor, len(rows)-1), st.Streams.Offset, w, tn)...)
	}
	// Whether the workers hash blocks alike: at most a few lines, above
	// the timeline.
	hash := hashCheckLines(s, w, th)
	if room := n - len(out) - 2; len(hash) > room {
		hash = hash[:max(room, 1)]
	}
	out = append(out, hash...)
	return append(out, timeline(s, w, n-len(out), th)...)
}

func streamsTitle(s *snapshot.Snapshot, rows []streamRow, w int, th *themes.Theme) string {
	var live, bad int
	for _, wk := range s.Workers {
		for _, ss := range wk.Streams {
			if ss.State == snapshot.StreamLive {
				live++
			}
			if ss.State == snapshot.StreamHistoryLost || ss.State == snapshot.StreamDisconnected {
				bad++
			}
		}
	}
	l := line{{" STREAMS ", themes.Title}, {fmt.Sprintf("%d publishers · %d live", len(rows), live), themes.Text}}
	if bad > 0 {
		l = append(l, span{fmt.Sprintf(" · %d lost or disconnected", bad), themes.Crit})
	}
	if s.Pool.IndexComplete {
		l = append(l, span{" · index complete", themes.OK})
	} else {
		l = append(l, span{" · index incomplete", themes.Warn})
	}
	return l.render(th, w)
}

func streamsTable(s *snapshot.Snapshot, st *State, rows []streamRow) *table {
	nameW := 6
	for _, wk := range s.Workers {
		nameW = max(nameW, width(wk.Name))
	}
	nameW = min(nameW, 16)
	at := func(i int) (*snapshot.Worker, *snapshot.Stream) {
		r := rows[i]
		return &s.Workers[r.Worker], &s.Workers[r.Worker].Streams[r.Stream]
	}
	count := func(get func(*snapshot.Stream) uint64, bad themes.Role) func(i, _ int) line {
		return func(i, _ int) line {
			_, ss := at(i)
			v := get(ss)
			if v == 0 {
				return cell1("0", themes.Dim)
			}
			return cell1(numu(v), bad)
		}
	}
	cols := []column{
		{title: "WORKER", width: nameW, cell: func(i, _ int) line { w, _ := at(i); return cell1(w.Name, themes.Text) }},
		{title: "DP", width: 2, right: true, cell: func(i, _ int) line { _, ss := at(i); return cell1(fmt.Sprint(ss.Rank), themes.Text) }},
		{title: "STATE", width: 12, cell: func(i, _ int) line { _, ss := at(i); return cell1(streamState(ss.State)) }},
		{title: "SEQ", width: 8, right: true, cell: func(i, _ int) line {
			_, ss := at(i)
			if ss.LastSeq == nil {
				return cell1(dash, themes.Dim)
			}
			return cell1(fmt.Sprint(*ss.LastSeq), themes.Text)
		}},
		{title: "BATCH/s", width: 7, right: true, drop: 3, cell: func(i, _ int) line { _, ss := at(i); return valCell(ss.BatchesPerS, "", themes.Text) }},
		{title: "EV/s", width: 7, right: true, cell: func(i, _ int) line { _, ss := at(i); return valCell(ss.EventsPerS, "", themes.Text) }},
		{title: "LAST", width: 6, right: true, cell: func(i, _ int) line {
			_, ss := at(i)
			if ss.LastMessageAgeS == nil {
				return cell1(dash, themes.Dim)
			}
			// Silence is not death: an idle worker publishes nothing.
			// Dim, never a warning (disconnects have their own state).
			role := themes.Text
			if *ss.LastMessageAgeS >= 10 {
				role = themes.Dim
			}
			return cell1(secs(*ss.LastMessageAgeS), role)
		}},
		{title: "GAPS", width: 4, right: true, cell: count(func(ss *snapshot.Stream) uint64 { return ss.Gaps }, themes.Warn)},
		{title: "MISSING", width: 7, right: true, drop: 5, cell: count(func(ss *snapshot.Stream) uint64 { return ss.Missing }, themes.Warn)},
		{title: "REPLAYED", width: 8, right: true, drop: 4, cell: count(func(ss *snapshot.Stream) uint64 { return ss.Replayed }, themes.OK)},
		{title: "LOST", width: 6, right: true, cell: count(func(ss *snapshot.Stream) uint64 { return ss.Lost }, themes.Crit)},
		{title: "RST", width: 3, right: true, drop: 6, cell: count(func(ss *snapshot.Stream) uint64 { return ss.Restarts }, themes.Warn)},
		{title: "DECODE", width: 6, right: true, cell: count(func(ss *snapshot.Stream) uint64 { return ss.DecodeErrors }, themes.Crit)},
		{title: "PRODUCER TS", width: 11, right: true, drop: 1, cell: func(i, _ int) line {
			_, ss := at(i)
			return cell1(producerTS(s, ss.LastTS), themes.Dim)
		}},
		{title: "ENDPOINT", width: 12, flex: true, maxWidth: 40, drop: 2, cell: func(i, _ int) line {
			_, ss := at(i)
			return cell1(ss.Endpoint, themes.Dim)
		}},
	}
	sortCol := -1
	if c, ok := streamSortCol[st.Streams.Sort]; ok {
		sortCol = c
	}
	return &table{cols: cols, sortCol: sortCol, sortDesc: st.Streams.Desc, mark: func(i int) (string, themes.Role) {
		_, ss := at(i)
		switch ss.State {
		case snapshot.StreamHistoryLost, snapshot.StreamDisconnected:
			return "✖", themes.Crit
		case snapshot.StreamReplaying, snapshot.StreamJoinedLate:
			return "!", themes.Warn
		}
		return "", themes.Text
	}}
}

// timeline lists every stream incident in the pool, newest first.
func timeline(s *snapshot.Snapshot, w, n int, th *themes.Theme) []string {
	if n <= 0 {
		return nil
	}
	var all []incident
	for wi := range s.Workers {
		wk := &s.Workers[wi]
		for si := range wk.Streams {
			ss := &wk.Streams[si]
			for k := range ss.History {
				all = append(all, incident{fmt.Sprintf("%s/%d", wk.Name, ss.Rank), &ss.History[k]})
			}
		}
	}
	sortIncidents(all)
	title := line{{" TIMELINE ", themes.Title}, {"gaps, replays, losses, restarts — newest first, kvtop clock", themes.Dim}}
	if len(all) == 0 {
		return []string{title.render(th, w), line{{"   no incidents in memory", themes.Dim}}.render(th, w)}
	}
	// The newest that fit; the last line says how many older ones there
	// are once two rows fit, else the title does: a timeline always shows
	// its newest incident.
	rows := min(len(all), n-1)
	older := ""
	switch {
	case rows == len(all):
	case rows >= 2:
		rows--
		older = fmt.Sprintf("   … %d older", len(all)-rows)
	default:
		title = append(title[:1], span{fmt.Sprintf("newest of %d · kvtop clock", len(all)), themes.Dim})
	}
	out := []string{title.render(th, w)}
	for _, in := range all[:max(rows, 0)] {
		out = append(out, incidentLine(in).render(th, w))
	}
	if older != "" {
		out = append(out, th.Paint(themes.Dim, truncate(older, w)))
	}
	return out
}
