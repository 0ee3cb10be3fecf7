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
	"github.com/kvtop/kvtop/snapshot"
)

// Alert kinds in order of importance within a severity.
var alertRank = map[snapshot.AlertKind]int{
	snapshot.AlertOverheating:      0,
	snapshot.AlertHashMismatch:     1,
	snapshot.AlertBlockSizes:       1,
	snapshot.AlertThrash:           3,
	snapshot.AlertHashRestart:      4,
	snapshot.AlertHashRanks:        4,
	snapshot.AlertHistoryLost:      1,
	snapshot.AlertDown:             2,
	snapshot.AlertNoMetrics:        2,
	snapshot.AlertDisconnected:     3,
	snapshot.AlertIndexFull:        3,
	snapshot.AlertBreakerOpen:      4,
	snapshot.AlertRouterRecovering: 5,
	snapshot.AlertGap:              6,
	snapshot.AlertNotConnected:     7,
	snapshot.AlertJoinedLate:       8,
	snapshot.AlertDecodeErrors:     9,
	snapshot.AlertWorkerRestart:    10,
	snapshot.AlertUnmappedWorker:   11,
	snapshot.AlertBadLines:         12,
}

var severityRank = map[snapshot.Severity]int{snapshot.SeverityCritical: 0, snapshot.SeverityWarning: 1, snapshot.SeverityInfo: 2}

// buildAlerts lists what the operator must see now, one line each, most
// severe first.
func (s *State) buildAlerts(snap *snapshot.Snapshot, hot []overheat, now time.Time) []snapshot.Alert {
	out := []snapshot.Alert{}
	// An overheating alert is as old as its longest-overheating worker
	// (it was stamped now at every refresh: its age read 0 s).
	if s.overheatSince == nil {
		s.overheatSince = map[string]time.Time{}
	}
	hotNow := make(map[string]bool, len(hot))
	for _, h := range hot {
		a := overheatAlert(h, now)
		for _, w := range h.workers {
			hotNow[w] = true
			since, ok := s.overheatSince[w]
			if !ok {
				since = now
				s.overheatSince[w] = now
			}
			if since.Before(a.Since) {
				a.Since = since
			}
		}
		a.Text += ttftVersus(snap, h.workers) + restVersus(snap, h.prefix)
		out = append(out, a)
	}
	for w := range s.overheatSince {
		if !hotNow[w] {
			delete(s.overheatSince, w)
		}
	}
	out = append(out, s.hashAlerts(snap, now)...)
	out = append(out, s.thrashAlerts(snap, now)...)
	for i, w := range s.workers {
		switch {
		case w.left():
			continue
		case snap.Workers[i].State == snapshot.WorkerDown && !podServing(w.tg.kube):
			out = append(out, snapshot.Alert{
				Severity: snapshot.SeverityCritical, Kind: snapshot.AlertDown, Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s down: %s", w.name, podNote(w.tg.kube)),
			})
		case snap.Workers[i].State == snapshot.WorkerNoMetrics:
			out = append(out, snapshot.Alert{
				Severity: snapshot.SeverityWarning, Kind: snapshot.AlertNoMetrics, Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s metrics: %s — its events are still arriving", w.name, w.errMsg),
			})
		case w.scraped && !w.up:
			out = append(out, snapshot.Alert{
				Severity: snapshot.SeverityCritical, Kind: snapshot.AlertDown, Subject: w.name, Since: w.downSince,
				Text: fmt.Sprintf("%s down: %s", w.name, w.errMsg),
			})
		}
		for j, p := range w.pubs {
			out = append(out, s.streamAlerts(p, &snap.Workers[i].Streams[j], now)...)
		}
		if !w.restartAt.IsZero() && now.Sub(w.restartAt) <= s.window {
			out = append(out, snapshot.Alert{
				Severity: snapshot.SeverityInfo, Kind: snapshot.AlertWorkerRestart, Subject: w.name, Since: w.restartAt,
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
		if rec.State != snapshot.RecoveryRecovering {
			continue
		}
		out = append(out, snapshot.Alert{
			Severity: snapshot.SeverityWarning, Kind: snapshot.AlertRouterRecovering, Subject: r.name, Since: r.lastRestart,
			Text: fmt.Sprintf("%s restarted %s: pool hit %s vs %s before; recovering for %s s",
				r.name, clock(r.lastRestart), pctp(rec.Current), pctp(rec.Baseline), num(math.Round(*rec.Seconds))),
		})
	}
	if n, _, _ := s.badLineWin.sum(now, s.window); n > 0 {
		out = append(out, snapshot.Alert{
			Severity: snapshot.SeverityInfo, Kind: snapshot.AlertBadLines, Subject: "decisions", Since: now,
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
func overheatAlert(h overheat, now time.Time) snapshot.Alert {
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
	return snapshot.Alert{
		Severity: snapshot.SeverityCritical, Kind: snapshot.AlertOverheating, Subject: who, Since: now,
		Text: fmt.Sprintf("%s overheating: %s %s of prefix %s (%s tok, %s of traffic); %s %s vs %s %s",
			who, takes, pct(min(share, 1)), shortID(p.ID), depthTokens(p), pct(p.Share), queue, strings.Join(qs, ", "), h.medianOf, num(h.median)),
	}
}

func streamSubject(p *publisher) string {
	if p.rank == 0 && len(p.w.pubs) == 1 {
		return p.w.name + " events"
	}
	return fmt.Sprintf("%s events rank %d", p.w.name, p.rank)
}

func (s *State) streamAlerts(p *publisher, row *snapshot.Stream, now time.Time) []snapshot.Alert {
	subj := streamSubject(p)
	var out []snapshot.Alert
	switch row.State {
	case snapshot.StreamHistoryLost:
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
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityCritical, Kind: snapshot.AlertHistoryLost, Subject: p.w.name, Since: since, Text: text})
	case snapshot.StreamReplaying:
		in := lastIncident(p, "gap")
		text := subj + ": a gap is being replayed — its index is incomplete until it is repaired"
		since := now
		if in != nil {
			since = in.Start
			text = fmt.Sprintf("%s: gap at seq %d–%d (%s batches) being replayed since %s",
				subj, in.FromSeq, in.ToSeq, count(in.Missing), clock(in.Start))
		}
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertGap, Subject: p.w.name, Since: since, Text: text})
	case snapshot.StreamJoinedLate:
		since := p.incompleteSince()
		text := fmt.Sprintf("%s: joined late (first seq %d) — blocks stored before are unknown", subj, p.status.FirstSeq)
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertJoinedLate, Subject: p.w.name, Since: since, Text: text})
	case snapshot.StreamDisconnected:
		// The PUB drops everything while no SUB is connected: whatever
		// the worker stores or evicts meanwhile is never seen.
		since := p.disconnectedSince()
		text := fmt.Sprintf("%s: disconnected since %s — index frozen", subj, clock(since))
		if since.IsZero() {
			text = subj + ": disconnected — index frozen"
		}
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertDisconnected, Subject: p.w.name, Since: since, Text: text})
	case snapshot.StreamConnecting:
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
			out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertNotConnected, Subject: p.w.name, Since: since, Text: text})
		}
	}
	if d, _, ok := p.decodeErr.delta(now, s.window); ok && d > 0 {
		out = append(out, snapshot.Alert{
			Severity: snapshot.SeverityWarning, Kind: snapshot.AlertDecodeErrors, Subject: p.w.name, Since: now,
			Text: fmt.Sprintf("%s: %s batches could not be decoded in the last %s s (%s in all)",
				subj, count(uint64(d)), num(s.window.Seconds()), count(row.DecodeErrors)),
		})
	}
	return out
}

// indexFullAlert is one line for the whole pool (the limit is pool-wide):
// which workers' stores were dropped, since the first drop.
func (s *State) indexFullAlert(snap *snapshot.Snapshot) *snapshot.Alert {
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
	return &snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertIndexFull, Subject: "pool", Since: since,
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
// num prints a figure in full, or in exponent form past 1e15 (a counter
// near float64's limit would otherwise print 309 digits into a reason).
func num(f float64) string {
	if math.Abs(f) >= 1e15 {
		return strconv.FormatFloat(f, 'g', 4, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

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
func depthTokens(p snapshot.Prefix) string {
	if p.Tokens == nil {
		return "–"
	}
	return tokens(*p.Tokens)
}

// breakerAlerts: one warning per open circuit breaker of an up router.
func (s *State) breakerAlerts(now time.Time) []snapshot.Alert {
	var out []snapshot.Alert
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
			out = append(out, snapshot.Alert{
				Severity: snapshot.SeverityWarning, Kind: snapshot.AlertBreakerOpen, Subject: name, Since: r.cb[label].since,
				Text: fmt.Sprintf("%s's circuit breaker for %s is open since %s — it gets no requests from %s",
					r.name, name, clock(r.cb[label].since), r.name),
			})
		}
	}
	return out
}

// unmappedAlerts name router labels and decision worker names that map to
// no configured worker: their traffic is shown under no worker.
func (s *State) unmappedAlerts(snap *snapshot.Snapshot, now time.Time) []snapshot.Alert {
	var out []snapshot.Alert
	for i := range snap.Routers {
		r := &snap.Routers[i]
		if len(r.Unmapped) == 0 {
			continue
		}
		out = append(out, snapshot.Alert{
			Severity: snapshot.SeverityInfo, Kind: snapshot.AlertUnmappedWorker, Subject: r.Name, Since: now,
			Text: fmt.Sprintf("%s routes to %s, %s: add %s", r.Name, nameList(r.Unmapped),
				noWorker(len(r.Unmapped)), map[bool]string{true: "it to that worker's aliases", false: "them to the workers' aliases"}[len(r.Unmapped) == 1]),
		})
	}
	if names := snap.Decisions.Unmapped; len(names) > 0 {
		out = append(out, snapshot.Alert{
			Severity: snapshot.SeverityInfo, Kind: snapshot.AlertUnmappedWorker, Subject: "decisions", Since: now,
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

// restVersus is the overheating alert's clause on the requests away from
// the hot prefix: their TTFT p95 against the hot stream's, "" unless both
// are known (hotrest.go).
func restVersus(snap *snapshot.Snapshot, p snapshot.Prefix) string {
	rest, hot := snap.Pool.Rest.TTFTMS.P95, p.TTFTMS.P95
	if rest == nil || hot == nil {
		return ""
	}
	return fmt.Sprintf("; requests away from %s: TTFT p95 %s vs %s on the hot stream", shortID(p.ID), msText(*rest, false), msText(*hot, false))
}

// hashAlerts name the workers that hash identical prefixes differently
// (grouped around the one in most pairs: "w2 and w0, w1, w3 …"), whose
// hashes changed at a restart or between their ranks, and block sizes
// that differ.
func (s *State) hashAlerts(snap *snapshot.Snapshot, now time.Time) []snapshot.Alert {
	hm := &snap.Pool.HashMismatch
	var out []snapshot.Alert
	left := append([]snapshot.HashPair(nil), hm.Pairs...)
	for len(left) > 0 {
		// The worker in most of the remaining pairs (config order on ties).
		n := map[string]int{}
		for _, p := range left {
			n[p.A]++
			n[p.B]++
		}
		who := ""
		for _, w := range s.workers {
			if n[w.name] > n[who] {
				who = w.name
			}
		}
		var others []string
		var prefixes int
		var since time.Time
		rest := left[:0]
		for _, p := range left {
			switch {
			case p.A == who:
				others = append(others, p.B)
			case p.B == who:
				others = append(others, p.A)
			default:
				rest = append(rest, p)
				continue
			}
			prefixes += p.Prefixes
			if since.IsZero() || p.Since.Before(since) {
				since = p.Since
			}
		}
		left = rest
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityCritical, Kind: snapshot.AlertHashMismatch, Subject: who, Since: since,
			Text: fmt.Sprintf("%s and %s hash identical prefixes differently: an event-fed index cannot match between them — "+
				"check PYTHONHASHSEED, the prefix-cache hash algorithm and the block size (%s %s since %s)",
				who, nameList(others), count(uint64(prefixes)), plural(prefixes, "prefix", "prefixes"), clock(since))})
	}
	since := s.fps.blockSizesSince
	s.fps.blockSizesSince = time.Time{}
	if len(hm.BlockSizes) > 1 {
		if since.IsZero() || since.After(now) {
			since = now
		}
		s.fps.blockSizesSince = since
		parts := make([]string, len(hm.BlockSizes))
		for i, g := range hm.BlockSizes {
			parts[i] = fmt.Sprintf("%s %s %d tokens", nameList(g.Workers), map[bool]string{true: "stores blocks of", false: "store blocks of"}[len(g.Workers) == 1], g.BlockSize)
			if i > 0 {
				parts[i] = fmt.Sprintf("%s of %d", nameList(g.Workers), g.BlockSize)
			}
		}
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityCritical, Kind: snapshot.AlertBlockSizes, Subject: "pool", Since: since,
			Text: "block sizes differ: " + strings.Join(parts, ", ") + " — an event-fed index cannot match blocks between them; the router and every worker need one block size"})
	}
	for _, w := range s.workers {
		if w.left() {
			continue
		}
		if x := w.acrossRestart; !x.at.IsZero() && x.gen == w.hashGen {
			out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertHashRestart, Subject: w.name, Since: x.at,
				Text: fmt.Sprintf("%s hashes the same prefixes differently since its restart (%s %s): its hash seed changes with each process — pin PYTHONHASHSEED",
					w.name, count(uint64(x.prefixes)), plural(x.prefixes, "prefix", "prefixes"))})
		}
		if x := w.acrossRanks; !x.at.IsZero() && x.gen == w.hashGen {
			out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertHashRanks, Subject: w.name, Since: x.at,
				Text: fmt.Sprintf("%s's DP ranks hash identical prefixes differently (%s %s): each engine process seeds its own — pin PYTHONHASHSEED",
					w.name, count(uint64(x.prefixes)), plural(x.prefixes, "prefix", "prefixes"))})
		}
	}
	return out
}

// thrashAlerts: a worker whose thrash share is at thrash_share (judged
// once the window holds thrash_min_stored stored blocks, whatever the
// window's coverage) while it is saturated evicts blocks it needs again:
// its cache is too small for its working set. Both verdicts hold
// (verdict.go): the alert stays while the share is above its leave mark
// and the worker saturated, and ends with either.
func (s *State) thrashAlerts(snap *snapshot.Snapshot, now time.Time) []snapshot.Alert {
	th := s.opt.Thresholds
	var out []snapshot.Alert
	for i, w := range s.workers {
		row := &snap.Workers[i]
		c := row.Cache
		since := w.thrashSince
		w.thrashSince = time.Time{}
		if c.ThrashShare == nil {
			w.thrashHigh = verdict{} // unknown: nothing to hold
			continue
		}
		var sums cacheSums
		for _, p := range w.pubs {
			p.cache.add(&sums, now, s.window)
		}
		share := *c.ThrashShare
		enter := share >= th.ThrashShare && sums.stored >= float64(th.ThrashMinStored)
		row.ThrashHigh = w.thrashHigh.judge(enter, share >= s.leave(th.ThrashShare), s.seq, now, s.hold())
		if !row.ThrashHigh || !w.saturated {
			continue
		}
		if since.IsZero() || since.After(now) {
			since = now
		}
		w.thrashSince = since
		kv := "–"
		if row.KVUsage != nil {
			kv = pct(*row.KVUsage)
		}
		capText := ""
		if c.CapacityTokens != nil {
			capText = " of " + tokens(*c.CapacityTokens) + " tokens"
		}
		out = append(out, snapshot.Alert{Severity: snapshot.SeverityWarning, Kind: snapshot.AlertThrash, Subject: w.name, Since: since,
			Text: fmt.Sprintf("%s thrashes its KV cache: %s of its stores in the last %s s re-store blocks it evicted (%s blocks/s recomputed); KV %s%s — too small for its working set",
				w.name, pct(share), num(s.window.Seconds()), rate(c.ThrashPerS), kv, capText)})
	}
	return out
}

// rate prints a per-second figure with sensible digits.
func rate(v *float64) string {
	switch {
	case v == nil:
		return "–"
	case *v >= 10:
		return num(math.Round(*v))
	}
	return num(math.Round(*v*10) / 10)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
