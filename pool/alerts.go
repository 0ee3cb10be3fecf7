package pool

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Alert kinds in order of importance within a severity.
var alertRank = map[string]int{
	"overheating":       0,
	"history_lost":      1,
	"down":              2,
	"router_recovering": 3,
	"gap":               4,
	"joined_late":       5,
	"decode_errors":     6,
	"bad_lines":         7,
}

var severityRank = map[string]int{"critical": 0, "warning": 1, "info": 2}

// buildAlerts lists what the operator must see now, one line each, most
// severe first.
func (s *State) buildAlerts(snap *Snapshot, hot []overheat, now time.Time) []Alert {
	out := []Alert{}
	for _, h := range hot {
		p := h.prefix
		out = append(out, Alert{
			Severity: "critical", Kind: "overheating", Subject: h.worker, Since: now,
			Text: fmt.Sprintf("%s overheating: takes %s of prefix %s (%s tok, %s of traffic); queue %s vs pool median %s",
				h.worker, pct(h.share), shortID(p.ID), depthTokens(p), pct(p.Share), num(h.queue), num(h.median)),
		})
	}
	for i, w := range s.workers {
		if w.scraped && !w.up {
			out = append(out, Alert{
				Severity: "critical", Kind: "down", Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s down: %s", w.name, w.errMsg),
			})
		}
		for j, p := range w.pubs {
			out = append(out, s.streamAlerts(p, &snap.Workers[i].Streams[j], now)...)
		}
	}
	for i, r := range s.routers {
		rec := snap.Routers[i].Recovery
		if rec.State != "recovering" {
			continue
		}
		out = append(out, Alert{
			Severity: "warning", Kind: "router_recovering", Subject: r.name, Since: r.lastRestart,
			Text: fmt.Sprintf("%s restarted %s: pool hit %s vs %s before; recovering for %s s",
				r.name, clock(r.lastRestart), pctp(rec.Current), pctp(rec.Baseline), num(math.Round(*rec.Seconds))),
		})
	}
	if n, _, _ := s.badLineWin.sum(now, s.window); n > 0 {
		out = append(out, Alert{
			Severity: "info", Kind: "bad_lines", Subject: "decisions", Since: now,
			Text: fmt.Sprintf("decisions: %s bad lines skipped in the last %s s (%s in all)",
				count(uint64(n)), num(s.window.Seconds()), count(uint64(s.badLines))),
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if severityRank[a.Severity] != severityRank[b.Severity] {
			return severityRank[a.Severity] < severityRank[b.Severity]
		}
		return alertRank[a.Kind] < alertRank[b.Kind]
	})
	return out
}

func streamSubject(p *publisher) string {
	if p.rank == 0 && len(p.w.pubs) == 1 {
		return p.w.name + " events"
	}
	return fmt.Sprintf("%s events rank %d", p.w.name, p.rank)
}

func (s *State) streamAlerts(p *publisher, row *Stream, now time.Time) []Alert {
	subj := streamSubject(p)
	var out []Alert
	switch collectors.StreamState(row.State) {
	case collectors.StreamHistoryLost:
		in := lastIncident(p, "history_lost")
		since := p.incompleteSince()
		text := fmt.Sprintf("%s: history lost — its index is incomplete since %s", subj, clock(since))
		if in != nil {
			n := in.Lost
			if n == 0 {
				n = in.Missing
			}
			text = fmt.Sprintf("%s: history lost at seq %d (%s batches) — its index is incomplete since %s",
				subj, in.FromSeq, count(n), clock(since))
		}
		out = append(out, Alert{Severity: "critical", Kind: "history_lost", Subject: p.w.name, Since: since, Text: text})
	case collectors.StreamReplaying:
		in := lastIncident(p, "gap")
		text := subj + ": a gap is being replayed — its index is incomplete until it is repaired"
		since := now
		if in != nil {
			since = in.Start
			text = fmt.Sprintf("%s: gap at seq %d–%d (%s batches) being replayed since %s",
				subj, in.FromSeq, in.ToSeq, count(in.Missing), clock(in.Start))
		}
		out = append(out, Alert{Severity: "warning", Kind: "gap", Subject: p.w.name, Since: since, Text: text})
	case collectors.StreamJoinedLate:
		since := p.incompleteSince()
		text := fmt.Sprintf("%s: joined late (first seq %d) — blocks stored before are unknown", subj, p.status.FirstSeq)
		out = append(out, Alert{Severity: "warning", Kind: "joined_late", Subject: p.w.name, Since: since, Text: text})
	}
	if d, _, ok := p.decodeErr.delta(now, s.window); ok && d > 0 {
		out = append(out, Alert{
			Severity: "warning", Kind: "decode_errors", Subject: p.w.name, Since: now,
			Text: fmt.Sprintf("%s: %s batches could not be decoded in the last %s s (%s in all)",
				subj, count(uint64(d)), num(s.window.Seconds()), count(row.DecodeErrors)),
		})
	}
	return out
}

func lastIncident(p *publisher, kind string) *collectors.StreamIncident {
	if p.status == nil {
		return nil
	}
	h := p.status.History
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Kind == kind {
			return &h[i]
		}
	}
	return nil
}

// pct formats a fraction as a whole percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

func pctp(f *float64) string {
	if f == nil {
		return "–"
	}
	return pct(*f)
}

// num prints a figure without a pointless ".0".
func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// count groups thousands with a space, as on screen ("1 240").
func count(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// tokens shortens a token count: 512, 2.1k, 1.3M.
func tokens(n int) string {
	switch {
	case n < 1000:
		return strconv.Itoa(n)
	case n < 1000000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1fM", float64(n)/1e6)
}

// depthTokens is a prefix's depth for a sentence; "–" when unresolved.
func depthTokens(p Prefix) string {
	if p.Tokens == 0 {
		return "–"
	}
	return tokens(p.Tokens)
}

func shortID(id string) string {
	if len(id) <= 4 {
		return id
	}
	return id[:4] + "…"
}

func clock(t time.Time) string { return t.Format("15:04:05") }
