package pool

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/figures"
)

// Alert kinds in order of importance within a severity.
var alertRank = map[AlertKind]int{
	AlertOverheating:      0,
	AlertHistoryLost:      1,
	AlertDown:             2,
	AlertNoMetrics:        2,
	AlertDisconnected:     3,
	AlertIndexFull:        3,
	AlertBreakerOpen:      4,
	AlertRouterRecovering: 5,
	AlertGap:              6,
	AlertNotConnected:     7,
	AlertJoinedLate:       8,
	AlertDecodeErrors:     9,
	AlertWorkerRestart:    10,
	AlertUnmappedWorker:   11,
	AlertBadLines:         12,
}

var severityRank = map[Severity]int{SeverityCritical: 0, SeverityWarning: 1, SeverityInfo: 2}

// buildAlerts lists what the operator must see now, one line each, most
// severe first.
func (s *State) buildAlerts(snap *Snapshot, hot []overheat, now time.Time) []Alert {
	out := []Alert{}
	for _, h := range hot {
		a := overheatAlert(h, now)
		a.Text += ttftVersus(snap, h.workers)
		out = append(out, a)
	}
	for i, w := range s.workers {
		switch {
		case w.left():
			continue
		case snap.Workers[i].State == WorkerDown && !podServing(w.tg.kube):
			out = append(out, Alert{
				Severity: SeverityCritical, Kind: AlertDown, Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s down: %s", w.name, podNote(w.tg.kube)),
			})
		case snap.Workers[i].State == WorkerNoMetrics:
			out = append(out, Alert{
				Severity: SeverityWarning, Kind: AlertNoMetrics, Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s metrics: %s — its events are still arriving", w.name, w.errMsg),
			})
		case w.scraped && !w.up:
			out = append(out, Alert{
				Severity: SeverityCritical, Kind: AlertDown, Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s down: %s", w.name, w.errMsg),
			})
		}
		for j, p := range w.pubs {
			out = append(out, s.streamAlerts(p, &snap.Workers[i].Streams[j], now)...)
		}
		if !w.restartAt.IsZero() && now.Sub(w.restartAt) <= s.window {
			out = append(out, Alert{
				Severity: SeverityInfo, Kind: AlertWorkerRestart, Subject: w.name, Since: w.restartAt,
				Text: w.name + " " + restartNote(w) + " — " + w.restartWhy,
			})
		}
	}
	if a := s.indexFullAlert(snap); a != nil {
		out = append(out, *a)
	}
	out = append(out, s.breakerAlerts(now)...)
	out = append(out, s.unmappedAlerts(snap, now)...)
	for i, r := range s.routers {
		rec := snap.Routers[i].Recovery
		if rec.State != RecoveryRecovering {
			continue
		}
		out = append(out, Alert{
			Severity: SeverityWarning, Kind: AlertRouterRecovering, Subject: r.name, Since: r.lastRestart,
			Text: fmt.Sprintf("%s restarted %s: pool hit %s vs %s before; recovering for %s s",
				r.name, clock(r.lastRestart), pctp(rec.Current), pctp(rec.Baseline), num(math.Round(*rec.Seconds))),
		})
	}
	if n, _, _ := s.badLineWin.sum(now, s.window); n > 0 {
		out = append(out, Alert{
			Severity: SeverityInfo, Kind: AlertBadLines, Subject: "decisions", Since: now,
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

// overheatAlert is one line for the workers overheating on one prefix:
// their names, their combined share of it, their queues in the same order.
func overheatAlert(h overheat, now time.Time) Alert {
	p := h.prefix
	who := strings.Join(h.workers, ", ")
	takes, queue := "takes", "queue"
	if len(h.workers) > 1 {
		takes, queue = "take", "queues"
	}
	share := 0.0
	qs := make([]string, len(h.queues))
	for i := range h.workers {
		share += h.shares[i]
		qs[i] = num(h.queues[i])
	}
	return Alert{
		Severity: SeverityCritical, Kind: AlertOverheating, Subject: who, Since: now,
		Text: fmt.Sprintf("%s overheating: %s %s of prefix %s (%s tok, %s of traffic); %s %s vs pool median %s",
			who, takes, pct(min(share, 1)), shortID(p.ID), depthTokens(p), pct(p.Share), queue, strings.Join(qs, ", "), num(h.median)),
	}
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
	switch row.State {
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
		out = append(out, Alert{Severity: SeverityCritical, Kind: AlertHistoryLost, Subject: p.w.name, Since: since, Text: text})
	case collectors.StreamReplaying:
		in := lastIncident(p, "gap")
		text := subj + ": a gap is being replayed — its index is incomplete until it is repaired"
		since := now
		if in != nil {
			since = in.Start
			text = fmt.Sprintf("%s: gap at seq %d–%d (%s batches) being replayed since %s",
				subj, in.FromSeq, in.ToSeq, count(in.Missing), clock(in.Start))
		}
		out = append(out, Alert{Severity: SeverityWarning, Kind: AlertGap, Subject: p.w.name, Since: since, Text: text})
	case collectors.StreamJoinedLate:
		since := p.incompleteSince()
		text := fmt.Sprintf("%s: joined late (first seq %d) — blocks stored before are unknown", subj, p.status.FirstSeq)
		out = append(out, Alert{Severity: SeverityWarning, Kind: AlertJoinedLate, Subject: p.w.name, Since: since, Text: text})
	case collectors.StreamDisconnected:
		// The PUB drops everything while no SUB is connected: whatever
		// the worker stores or evicts meanwhile is never seen.
		since := p.disconnectedSince()
		text := fmt.Sprintf("%s: disconnected since %s — index frozen", subj, clock(since))
		if since.IsZero() {
			text = subj + ": disconnected — index frozen"
		}
		out = append(out, Alert{Severity: SeverityWarning, Kind: AlertDisconnected, Subject: p.w.name, Since: since, Text: text})
	case collectors.StreamConnecting:
		if s.connectingLong(p, now) {
			since := p.connSince
			if since.IsZero() {
				since = p.created
			}
			where := ""
			if p.endpoint != "" {
				where = " to " + p.endpoint
			}
			text := fmt.Sprintf("%s: not connected%s since %s — nothing indexed for %s", subj, where, clock(since), p.w.name)
			out = append(out, Alert{Severity: SeverityWarning, Kind: AlertNotConnected, Subject: p.w.name, Since: since, Text: text})
		}
	}
	if d, _, ok := p.decodeErr.delta(now, s.window); ok && d > 0 {
		out = append(out, Alert{
			Severity: SeverityWarning, Kind: AlertDecodeErrors, Subject: p.w.name, Since: now,
			Text: fmt.Sprintf("%s: %s batches could not be decoded in the last %s s (%s in all)",
				subj, count(uint64(d)), num(s.window.Seconds()), count(row.DecodeErrors)),
		})
	}
	return out
}

// indexFullAlert is one line for the whole pool (the limit is pool-wide):
// which workers' stores were dropped, since the first drop.
func (s *State) indexFullAlert(snap *Snapshot) *Alert {
	var names []string
	var since time.Time
	for i, w := range s.workers {
		if !snap.Workers[i].IndexFull {
			continue
		}
		names = append(names, w.name)
		for _, p := range w.pubs {
			if !p.fullSince.IsZero() && (since.IsZero() || p.fullSince.Before(since)) {
				since = p.fullSince
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &Alert{Severity: SeverityWarning, Kind: AlertIndexFull, Subject: "pool", Since: since,
		Text: fmt.Sprintf("index full: %s not fully indexed since %s (limits.index_blocks %s)",
			nameList(names), clock(since), count(uint64(s.index.limit)))}
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

// pct formats a fraction as the console does (figures.Pct).
func pct(f float64) string { return figures.Pct(f) }

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

// depthTokens is a prefix's depth for a sentence; "–" when unknown.
func depthTokens(p Prefix) string {
	if p.Tokens == nil {
		return "–"
	}
	return tokens(*p.Tokens)
}

// breakerAlerts: one warning per open circuit breaker of an up router.
func (s *State) breakerAlerts(now time.Time) []Alert {
	var out []Alert
	for _, r := range s.routers {
		if !r.up {
			continue
		}
		labels := make([]string, 0, len(r.cb))
		for label, cb := range r.cb {
			if cb.v == 1 {
				labels = append(labels, label)
			}
		}
		sort.Strings(labels)
		for _, label := range labels {
			name := s.workerName(label)
			out = append(out, Alert{
				Severity: SeverityWarning, Kind: AlertBreakerOpen, Subject: name, Since: r.cb[label].since,
				Text: fmt.Sprintf("%s's circuit breaker for %s is open since %s — it gets no requests from %s",
					r.name, name, clock(r.cb[label].since), r.name),
			})
		}
	}
	return out
}

// unmappedAlerts name router labels and decision worker names that map to
// no configured worker: their traffic is shown under no worker.
func (s *State) unmappedAlerts(snap *Snapshot, now time.Time) []Alert {
	var out []Alert
	for i := range snap.Routers {
		r := &snap.Routers[i]
		if len(r.Unmapped) == 0 {
			continue
		}
		out = append(out, Alert{
			Severity: SeverityInfo, Kind: AlertUnmappedWorker, Subject: r.Name, Since: now,
			Text: fmt.Sprintf("%s routes to %s, %s: add %s", r.Name, nameList(r.Unmapped),
				noWorker(len(r.Unmapped)), map[bool]string{true: "it to that worker's aliases", false: "them to the workers' aliases"}[len(r.Unmapped) == 1]),
		})
	}
	if names := snap.Decisions.Unmapped; len(names) > 0 {
		out = append(out, Alert{
			Severity: SeverityInfo, Kind: AlertUnmappedWorker, Subject: "decisions", Since: now,
			Text: fmt.Sprintf("decisions name %s, %s: add %s", nameList(names), noWorker(len(names)),
				map[bool]string{true: "it to aliases", false: "them to aliases"}[len(names) == 1]),
		})
	}
	return out
}

func noWorker(n int) string {
	if n == 1 {
		return "which is no configured worker"
	}
	return "which are no configured workers"
}

// nameList shows up to three names and how many more.
func nameList(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(names[:3], ", "), len(names)-3)
}

func shortID(id string) string {
	if len(id) <= 4 {
		return id
	}
	return id[:4] + "…"
}

func clock(t time.Time) string { return t.Format("15:04:05") }
