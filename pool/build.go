package pool

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Snapshot builds the picture of the pool at now. Everything in it is
// freshly allocated: nothing aliases the state, so the caller may keep it
// while the state moves on. Building advances the time-based parts of the
// state (series, router recovery), so call it once per refresh.
func (s *State) Snapshot(now time.Time) *snapshot.Snapshot {
	s.seq++
	s.forgetLeft(now)
	snap := &snapshot.Snapshot{
		At:         now,
		WindowS:    s.window.Seconds(),
		Seq:        s.seq,
		RefreshS:   s.refresh.Seconds(),
		Thresholds: s.opt.Thresholds,
		Workers:    make([]snapshot.Worker, len(s.workers)),
		Prefixes:   []snapshot.Prefix{},
		Routers:    []snapshot.Router{},
		Alerts:     []snapshot.Alert{},
	}
	fromRouter := s.routerRoles()
	for i, w := range s.workers {
		if w.setRole(roleOf(w, fromRouter)) {
			s.ladder.downStale = true // a decode worker's blocks are routed to by none
		}
		snap.Workers[i] = s.buildWorker(w, now)
	}
	s.buildLatency(snap, now)
	s.buildCache(snap, now)
	s.buildTiers(snap, now)
	s.buildPool(snap, now)
	s.buildModels(snap, now)
	s.buildLadder(snap, now)
	snap.Pool.HashMismatch = s.buildHashMismatch()
	hot := s.buildPrefixes(snap, now)
	s.buildStates(snap, now)
	s.buildRouters(snap, now)
	snap.Decisions = s.buildDecisions(now)
	s.buildClients(snap, now)
	snap.Errors = s.errors.list()
	snap.Alerts = s.buildAlerts(snap, hot, now)
	s.appendSeries(snap, now)
	s.appendLatencySeries(snap, now)
	s.appendCacheSeries(snap, now)
	return snap
}

// buildWorker is one worker's row: metrics while up, reasons for what is
// unknown, blocks, streams.
func (s *State) buildWorker(w *worker, now time.Time) snapshot.Worker {
	row := snapshot.Worker{
		Name:        w.name,
		Engine:      w.profile,
		Role:        w.role,
		RoleSource:  w.roleSource,
		Model:       w.model,
		Up:          w.up,
		Restarts:    w.restarts,
		Engines:     []snapshot.Engine{},
		Streams:     []snapshot.Stream{},
		Tiers:       []snapshot.Tier{},
		Groups:      []snapshot.Group{},
		TopPrefixes: []snapshot.WorkerPrefix{},
		Invalid:     []snapshot.Invalid{},
	}
	if row.Engine == "" {
		row.Engine = "unknown"
	}
	w.saturated = false // judged by fillEngines while up
	if w.blocksKnown() {
		n := w.idx.distinct()
		row.Blocks = &n
	}
	row.Kube = kubeRow(w.tg.kube, now)
	var reasons []string
	pod := podNote(w.tg.kube)
	switch {
	case w.left():
		t := w.tg.leftAt
		row.LeftAt = &t
		reasons = append(reasons, "left "+clock(t)+": "+w.tg.leftWhy)
	case !podServing(w.tg.kube) && !w.up:
		// Kubernetes' words first: they say why, where a scrape
		// only says "connection refused".
		r := "down: " + pod
		if w.scraped && w.errMsg != "" {
			msg := w.errMsg
			row.Error = &msg
			r += "; scrape: " + msg
		}
		reasons = append(reasons, r)
		pod = ""
	case !w.scraped && w.origin != "":
		reasons = append(reasons, "discovered from "+w.origin)
	case !w.scraped && w.noMetrics:
		reasons = append(reasons, "no metrics configured")
	case !w.scraped:
		reasons = append(reasons, snapshot.ReasonNotScraped)
	case !w.up && s.eventsArriving(w, now):
		msg := w.errMsg
		row.Error = &msg
		reasons = append(reasons, "no metrics: "+msg+" — its events are still arriving")
	case !w.up:
		msg := w.errMsg
		row.Error = &msg
		reasons = append(reasons, "down: "+msg)
	}
	if w.scraped {
		ms := float64(w.scrapeDur) / float64(time.Millisecond)
		row.ScrapeMS = &ms
		t := w.lastScrape
		row.LastScrape = &t
		row.MetricsVia = w.via
		if w.viaInterval > 0 {
			iv := w.viaInterval.Seconds()
			row.MetricsIntervalS = &iv
		}
	}
	if !w.lastGood.IsZero() {
		t := w.lastGood
		row.LastScrapeOK = &t
	}
	// Index full explains a stale state: said before the figures' notes,
	// so a narrow screen still shows it.
	media := false
	for _, p := range w.pubs {
		if !p.fullSince.IsZero() {
			row.IndexFull = true
			media = media || p.mediaFull
		}
	}
	if row.IndexFull {
		reasons = append(reasons, s.indexFullNote(media))
	}
	if w.up {
		for _, v := range w.invalid {
			row.Invalid = append(row.Invalid, snapshot.Invalid{Engine: v.Engine, Field: v.Field, Note: v.Note})
		}
		if n := len(w.invalid); n > 0 {
			r := "invalid: " + w.invalid[0].Note
			if n > 1 {
				r += fmt.Sprintf(" (+%d more)", n-1)
			}
			reasons = append(reasons, r)
		}
		reasons = append(reasons, s.fillEngines(&row, w, now)...)
	} else {
		s.lastKnownEngines(&row, w, now)
	}
	if h, n, _ := w.outcomes.sum(now, s.window); n > 0 {
		row.PrefixHitRate.Requests = fraction(h / n)
	}
	// A stream still connecting has told nothing yet: the index is not
	// complete (though the worker is not called stale within the grace).
	row.IndexComplete = true
	for _, p := range w.pubs {
		st := s.buildStream(p, now)
		if st.State == snapshot.StreamConnecting || s.incomplete(p, st.State, now) {
			row.IndexComplete = false
		}
		row.Streams = append(row.Streams, st)
	}
	if row.IndexFull {
		row.IndexComplete = false
	}
	// A stream that has delivered nothing (an idle publisher kvtop
	// joined, or none at all yet for a worker given an event source)
	// leaves its blocks unknown: not complete, said beside the states
	// the streams show (a connecting one says so itself).
	if unknown, say := w.eventsUnknown(); unknown {
		row.IndexComplete = false
		if say && !w.left() {
			reasons = append(reasons, eventsUnknownNote)
		}
	}
	if !w.restartAt.IsZero() && now.Sub(w.restartAt) <= s.window {
		reasons = append(reasons, restartNote(w))
	}
	if pod != "" && !w.left() {
		reasons = append(reasons, pod)
	}
	row.Reason = strings.Join(reasons, "; ")
	return row
}

// fillEngines sets the worker's engine rows and totals from its last good
// scrape and returns reasons for figures that are missing and for a
// saturated engine.
func (s *State) fillEngines(row *snapshot.Worker, w *worker, now time.Time) []string {
	var queue, running sumOpt
	var kvW, kvB, kvSum float64
	kvN, kvNoBlocks := 0, false
	missing := map[string]bool{}
	// A field rejected as invalid is not missing: the reason already
	// says "invalid: ..." with the series.
	invalid := map[invalidKey]bool{}
	for _, v := range w.invalid {
		invalid[invalidKey{v.Engine, v.Field}] = true
		if v.Field == "prefix_queries" || v.Field == "prefix_hits" {
			invalid[invalidKey{v.Engine, "prefix_cache counters"}] = true
		}
	}
	note := func(engine, name string) {
		if !invalid[invalidKey{engine, name}] {
			missing[name] = true
		}
	}
	// An engine is saturated from KV use at kv_usage_high until it has
	// stayed below the leave mark for the hold time (verdict.go).
	var saturated []string
	high := s.opt.Thresholds.KVUsageHigh
	low, hold := s.leave(high), s.hold()
	w.saturated = false
	from := now.Add(-s.window)
	for _, name := range w.current {
		e := w.engines[name]
		if e == nil {
			continue
		}
		h := e.hitSince(from, now)
		row.Engines = append(row.Engines, engineRow(e, h))
		queue.add(e.waiting, note, e.name, "queue")
		running.add(e.running, note, e.name, "running")
		if e.kvUsage != nil {
			kvSum += *e.kvUsage
			kvN++
			if e.gpuBlock != nil && *e.gpuBlock > 0 {
				kvW += *e.kvUsage * *e.gpuBlock
				kvB += *e.gpuBlock
			} else {
				kvNoBlocks = true
			}
			if e.sat.judge(*e.kvUsage >= high, *e.kvUsage >= low, s.seq, now, hold) {
				saturated = append(saturated, engineKV(e.name, len(w.current), *e.kvUsage))
				row.Engines[len(row.Engines)-1].Saturated = true
				w.saturated = true
			}
		} else {
			e.sat = verdict{}
			note(e.name, "kv_usage")
		}
		if !h.ok {
			note(e.name, "prefix_cache counters")
		}
	}
	row.Queue, row.Running = queue.value(), running.value()
	switch {
	case kvN == 0:
	case kvNoBlocks:
		row.KVUsage = fraction(kvSum / float64(kvN))
	default:
		row.KVUsage = fraction(kvW / kvB)
	}
	// Worker-level series of a DP page fill what no engine has: SGLang
	// counts tokens per worker while its gauges are per rank.
	if t := w.totals; t != nil {
		if row.Queue == nil && t.waiting != nil {
			row.Queue, missing["queue"] = cp(t.waiting), false
		}
		if row.Running == nil && t.running != nil {
			row.Running, missing["running"] = cp(t.running), false
		}
		if row.KVUsage == nil && t.kvUsage != nil {
			row.KVUsage, missing["kv_usage"] = cp(t.kvUsage), false
			if w.satTotal.judge(*t.kvUsage >= high, *t.kvUsage >= low, s.seq, now, hold) {
				w.saturated = true
				if len(saturated) == 0 {
					saturated = append(saturated, engineKV("", 1, *t.kvUsage))
				}
			}
		}
	}
	// Every engine still in the window counts toward the hit rate, even
	// one that left the last scrape: its hits happened.
	hit := w.hitSince(from, now)
	if hit.ok {
		missing["prefix_cache counters"] = false
	}
	row.PrefixHitRate.Tokens = hit.rate()
	row.PrefixHitRate.CoveredS = hit.covered.Seconds()
	row.PrefixHitRate.Reason = hit.reason()
	if w.role == snapshot.RoleDecode && hit.ok {
		row.PrefixHitRate.TransferredTokens = fp(hit.transferred)
	}
	if len(w.current) == 0 && w.totals == nil {
		return []string{"metric missing: no engine metrics on the page"}
	}
	var reasons []string
	if r := hit.reason(); r != "" {
		reasons = append(reasons, "hit rate unknown: "+r)
	}
	var names []string
	for _, k := range []string{"queue", "running", "kv_usage", "prefix_cache counters"} {
		if missing[k] {
			names = append(names, k)
		}
	}
	if len(names) > 0 {
		reasons = append(reasons, "metric missing: "+strings.Join(names, ", "))
	}
	if hit.ok && hit.queries <= 0 && hit.bad == "" {
		reasons = append(reasons, "no prefix-cache queries in the window")
	}
	return append(reasons, saturated...)
}

// engineRow is one engine's figures from its last good scrape, with its
// hit over the window h.
func engineRow(e *engine, h hitSum) snapshot.Engine {
	return snapshot.Engine{
		Engine:       e.name,
		Queue:        cp(e.waiting),
		Running:      cp(e.running),
		KVUsage:      cp(e.kvUsage),
		NumGPUBlocks: cp(e.gpuBlock),
		HitTokens:    h.rate(),
		HitReason:    h.reason(),
	}
}

// lastKnownEngines keeps the engine rows of a worker that is not up (down,
// or no metrics) as its last good scrape left them, marked LastKnown: the
// operator still sees which engine held what, dimmed, instead of rows
// that vanish. They count in no figure: the worker's and the pool's
// totals stay unknown or leave it out.
func (s *State) lastKnownEngines(row *snapshot.Worker, w *worker, now time.Time) {
	if w.lastGood.IsZero() {
		return
	}
	from := now.Add(-s.window)
	for _, name := range w.current {
		if e := w.engines[name]; e != nil {
			er := engineRow(e, e.hitSince(from, now))
			er.LastKnown = true
			row.Engines = append(row.Engines, er)
		}
	}
}

// engineKV names a saturated engine for the row's reason: "engine 1 KV
// 96%", or "KV 96%" for a worker with one engine.
func engineKV(name string, engines int, kv float64) string {
	if engines > 1 {
		return fmt.Sprintf("engine %s KV %s", name, pct(kv))
	}
	return "KV " + pct(kv)
}

// indexFullNote is the reason of a worker whose stores were dropped at the
// index limit.
func (s *State) indexFullNote(media bool) string {
	if media {
		return fmt.Sprintf("index full: a stream names more than %d storage media and cache groups; blocks of the rest not indexed", maxColumns)
	}
	return fmt.Sprintf("index full: %s blocks (limits.index_blocks)", count(uint64(s.index.limit)))
}

// restartNote says what a process restart seen in metrics did to the
// index.
func restartNote(w *worker) string {
	if w.restartDropped > 0 {
		return fmt.Sprintf("restarted %s: %s indexed blocks dropped (a restarted engine's cache is empty)",
			clock(w.restartAt), count(uint64(w.restartDropped)))
	}
	return "restarted " + clock(w.restartAt)
}

// sumOpt sums optional values: nil until one is known.
type sumOpt struct {
	v  float64
	ok bool
}

func (s *sumOpt) add(p *float64, missing func(engine, name string), engine, name string) {
	if p == nil {
		missing(engine, name)
		return
	}
	s.v += *p
	s.ok = true
}

func (s sumOpt) value() *float64 {
	if !s.ok {
		return nil
	}
	return fp(s.v)
}

// buildStream is one publisher's row: the collector's latest status merged
// with what the pool counted itself.
func (s *State) buildStream(p *publisher, now time.Time) snapshot.Stream {
	st := snapshot.Stream{
		Endpoint:            p.endpoint,
		Rank:                p.rank,
		Topic:               p.topic,
		State:               p.state(),
		Batches:             p.batches,
		Events:              p.events,
		Blocks:              p.idx.poolCount,
		UnknownRemovals:     p.idx.unknownRemovals,
		DroppedBlocks:       p.dropped,
		Reannounced:         p.reannounced,
		Inconsistent:        p.inconsistent,
		UnknownEventsByType: map[string]uint64{},
		History:             []snapshot.Incident{},
	}
	if p.hasSeq {
		v := p.lastSeq
		st.LastSeq = &v
	}
	last := p.lastAt
	if ps := p.status; ps != nil {
		st.Batches = max(st.Batches, ps.Batches)
		st.Events = max(st.Events, ps.Events)
		st.Gaps, st.Missing, st.Replayed, st.Lost = ps.Gaps, ps.Missing, ps.Replayed, ps.Lost
		st.Restarts, st.Duplicates = ps.Restarts, ps.Duplicates
		st.DecodeErrors, st.UnknownEvents = ps.DecodeErrors, ps.UnknownEvents
		for tag, n := range ps.UnknownByType {
			st.UnknownEventsByType[tag] = n
		}
		st.UnknownFields, st.Malformed = ps.UnknownFields, ps.Malformed
		st.Oversized, st.Dropped = ps.Oversized, ps.Dropped
		if ps.HasSeq {
			v := ps.LastSeq
			if st.LastSeq != nil && *st.LastSeq > v && ps.Restarts == 0 {
				v = *st.LastSeq
			}
			st.LastSeq = &v
		}
		if ps.LastMessage.After(last) {
			last = ps.LastMessage
		}
		for _, in := range ps.History {
			st.History = append(st.History, incident(in, now))
		}
	}
	if len(p.incidents) > 0 {
		st.History = s.mergeIncidents(st.History, p.incidents, now)
	}
	st.Restarts = max(st.Restarts, p.resets)
	st.UnknownEvents += p.unknownKinds
	// Producer clock, shown only: the freshest of our batches and the status.
	if p.hasSeq && p.lastTS != 0 {
		st.LastTS = finite(&p.lastTS)
	} else if p.status != nil && p.status.HasSeq {
		st.LastTS = finite(&p.status.LastTS)
	}
	if !last.IsZero() {
		age := now.Sub(last).Seconds()
		st.LastMessageAgeS = &age
	}
	if b, e, cov := p.counts.sum(now, s.window); cov > 0 {
		st.BatchesPerS, st.EventsPerS = fp(b/cov.Seconds()), fp(e/cov.Seconds())
	}
	return st
}

// mergeIncidents adds the pool's own incidents to the collector's history
// in time order (ties: the collector's first) and keeps the most recent
// Limits.Incidents.
func (s *State) mergeIncidents(h []snapshot.Incident, own []collectors.StreamIncident, now time.Time) []snapshot.Incident {
	for _, in := range own {
		x := incident(in, now)
		x.Origin = "metrics"
		h = append(h, x)
	}
	sort.SliceStable(h, func(i, j int) bool { return h[i].Start.Before(h[j].Start) })
	if over := len(h) - s.opt.Limits.Incidents; over > 0 {
		h = h[over:]
	}
	return h
}

func incident(in collectors.StreamIncident, now time.Time) snapshot.Incident {
	out := snapshot.Incident{
		Kind: in.Kind, FromSeq: in.FromSeq, ToSeq: in.ToSeq,
		Missing: in.Missing, Replayed: in.Replayed, Lost: in.Lost,
		Start: in.Start, Note: in.Note,
	}
	end := now
	if !in.End.IsZero() {
		e := in.End
		out.End = &e
		end = e
	}
	if !in.Start.IsZero() {
		d := end.Sub(in.Start).Seconds()
		out.DurationS = &d
	}
	return out
}

// appendSeries adds this refresh's point to every series and copies them
// into the snapshot.
func (s *State) appendSeries(snap *snapshot.Snapshot, now time.Time) {
	w := s.window
	for i, wk := range s.workers {
		row := &snap.Workers[i]
		ws := &wk.series
		ws.queue.addIf(now, row.Queue, w)
		ws.running.addIf(now, row.Running, w)
		ws.kv.addIf(now, row.KVUsage, w)
		ws.hit.addIf(now, row.PrefixHitRate.Tokens, w)
		rs := &row.Series // one allocation for the worker's series (copySeries)
		copySeries([]*[]snapshot.Point{&rs.Queue, &rs.Running, &rs.KVUsage, &rs.HitTokens}, []*series{&ws.queue, &ws.running, &ws.kv, &ws.hit})
	}
	p := &snap.Pool
	s.poolHit.addIf(now, p.PrefixHitRate.Tokens, w)
	s.poolHitReq.addIf(now, p.PrefixHitRate.Requests, w)
	s.poolQueue.addIf(now, p.Queue, w)
	s.poolSkew.addIf(now, p.LoadSkew.MaxOverMean, w)
	s.poolRouting.addIf(now, p.Ladder.Rungs.PerfectRouting, w)
	s.poolCeiling.addIf(now, p.Ladder.Rungs.EnoughCapacity, w)
	p.Series = snapshot.PoolSeries{
		HitTokens: s.poolHit.points(), HitRequests: s.poolHitReq.points(),
		Queue: s.poolQueue.points(), Skew: s.poolSkew.points(),
		HitPerfectRouting: s.poolRouting.points(), HitCeiling: s.poolCeiling.points(),
	}
}
