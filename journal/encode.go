package journal

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// encoder turns observations, ticks and refresh changes into frames. It
// keeps what later frames refer to (the symbol table, the time of the
// last frame, each publisher's last seq and ts), so it belongs to one
// goroutine and one segment: reset starts a new segment's state.
type encoder struct {
	out []byte // finished frames, oldest first
	w   wbuf   // the frame being built: tag, time delta, payload

	last int64 // unix ns of the last frame written
	at   int64 // unix ns of the frame being built

	syms     map[string]uint32
	symBytes int
	pubs     pubTable
	layout   []byte // scratch: a histogram's bucket bounds
}

func newEncoder() *encoder {
	e := &encoder{}
	e.w.enc = e
	e.reset()
	return e
}

// reset forgets the segment's state (a new file starts from nothing).
func (e *encoder) reset() {
	e.last, e.at = 0, 0
	e.syms = map[string]uint32{}
	e.symBytes = 0
	e.pubs = newPubTable()
}

// begin starts a frame at time t. The frame's time is t when it has one
// UnixNano can hold, else the last frame's, and the payload says which.
func (e *encoder) begin(tag byte, t time.Time) *wbuf {
	e.at = e.last
	if !t.IsZero() {
		if s := t.Unix(); s >= -maxNanoSec && s <= maxNanoSec {
			e.at = t.UnixNano()
		}
	}
	w := &e.w
	w.b = append(w.b[:0], tag)
	w.iv(e.at - e.last)
	return w
}

// beginAt starts a frame whose payload opens with t itself (an
// observation's time, a tick's): its zone, and its value only when the
// frame's time could not carry it.
func (e *encoder) beginAt(tag byte, t time.Time) *wbuf {
	w := e.begin(tag, t)
	w.tmFrame(t)
	return w
}

// end finishes the frame begun last, after the symbol frames its
// payload defined.
func (e *encoder) end() {
	e.out = appendFrame(e.out, e.w.b)
	e.last = e.at
}

// sym writes s as a symbol reference, defining it in a frame of its own
// (before the frame being built) the first time.
func (e *encoder) sym(w *wbuf, s string) {
	if id, ok := e.syms[s]; ok {
		w.uv(uint64(id) + 1)
		return
	}
	if len(s) > maxSymLen || len(e.syms) >= maxSyms || e.symBytes+len(s) > maxSymBytes {
		w.uv(0)
		w.str(s)
		return
	}
	id := uint32(len(e.syms))
	e.syms[s] = id
	e.symBytes += len(s)
	body := make([]byte, 0, 2+len(s))
	body = append(body, tagSymbol, 0) // time delta 0
	e.out = appendFrame(e.out, append(body, s...))
	w.uv(uint64(id) + 1)
}

// header writes the segment's first frame (after Magic).
func (e *encoder) header(h Header) error {
	js, err := json.Marshal(h)
	if err != nil {
		return err
	}
	w := e.begin(tagHeader, h.Start)
	w.b = append(w.b, js...)
	e.end()
	return nil
}

func (e *encoder) tick(at time.Time, seq uint64) {
	w := e.beginAt(tagTick, at)
	w.uv(seq)
	e.end()
}

func (e *encoder) refresh(d time.Duration) {
	w := e.begin(tagRefresh, time.Time{})
	w.dur(d)
	e.end()
}

func (e *encoder) lost(n uint64) {
	w := e.begin(tagLost, time.Time{})
	w.uv(n)
	e.end()
}

func (e *encoder) endFrame(reason uint64) {
	w := e.begin(tagEnd, time.Time{})
	w.uv(reason)
	e.end()
}

// observation appends o's frame. It says false for a type it cannot
// encode.
func (e *encoder) observation(o collectors.Observation) bool {
	switch v := o.(type) {
	case *collectors.MetricsScrape:
		if v != nil {
			e.scrape(v)
			return true
		}
	case *collectors.EventBatch:
		if v != nil {
			e.batch(v)
			return true
		}
	case *collectors.StreamReset:
		if v != nil {
			w := e.beginAt(tagReset, v.At)
			w.sym(v.Worker)
			w.iv(int64(v.Rank))
			w.sym(v.Reason)
			e.end()
			return true
		}
	case *collectors.StreamStatus:
		if v != nil {
			e.status(v)
			return true
		}
	case *collectors.Decision:
		if v != nil {
			e.decision(v)
			return true
		}
	case *collectors.Outcome:
		if v != nil {
			e.outcome(v)
			return true
		}
	case *collectors.SourceError:
		if v != nil {
			w := e.beginAt(tagError, v.At)
			w.sourceError(v)
			e.end()
			return true
		}
	case *collectors.DecisionSource:
		if v != nil {
			e.decisionSource(v)
			return true
		}
	case *collectors.TargetChange:
		if v != nil {
			e.target(v)
			return true
		}
	}
	if rv := reflect.ValueOf(o); o == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return true // the pool does nothing with it: nothing to write
	}
	// A type this journal does not know is named, so a replay can say
	// what it lacks.
	w := e.begin(tagUnknown, o.ObservedAt())
	w.sym(reflect.TypeOf(o).String())
	e.end()
	return false
}

func (w *wbuf) sourceError(v *collectors.SourceError) {
	w.sym(v.Source)
	w.sym(v.Kind)
	w.sym(v.Message)
	w.flag(v.Backfill)
}

func (e *encoder) scrape(v *collectors.MetricsScrape) {
	w := e.beginAt(tagScrape, v.At)
	w.sym(v.Target)
	w.uv(uint64(v.Role))
	w.sym(v.URL)
	w.dur(v.Duration)
	if v.Err != nil {
		w.byte1(1)
		w.tm(v.Err.At)
		w.sourceError(v.Err)
	} else {
		w.byte1(0)
	}
	w.sym(v.Profile)
	w.fp(v.ProcessStart)
	w.count(len(v.Engines), v.Engines == nil)
	for i := range v.Engines {
		e.engine(&v.Engines[i])
	}
	if v.WorkerTotals != nil {
		w.byte1(1)
		e.engine(v.WorkerTotals)
	} else {
		w.byte1(0)
	}
	if r := v.Router; r != nil {
		w.byte1(1)
		w.floatMap(r.Processed)
		w.floatMap(r.Running)
		w.floatMap(r.CBState)
		for _, f := range []*float64{r.Requests, r.Retries, r.Errors, r.CacheHits, r.CacheMisses, r.PredictedHit} {
			w.fp(f)
		}
		e.histogram(r.TTFT)
	} else {
		w.byte1(0)
	}
	w.uv(uint64(v.Skipped))
	w.count(len(v.Invalid), v.Invalid == nil)
	for _, iv := range v.Invalid {
		w.sym(iv.Engine)
		w.sym(iv.Field)
		w.sym(iv.Note)
	}
	// Where the figures came from (a Prometheus read back, issue 13),
	// added after format 1's fields: at the end of the payload, only when
	// set — a journal recorded before them ends here.
	offloads := 0
	eachOffload(v, func(int, *collectors.Offload) { offloads++ })
	dyn := v.Router != nil && hasDynamo(v.Router)
	if v.Via != "" || v.Interval != 0 || offloads > 0 || dyn {
		w.sym(v.Via)
		w.dur(v.Interval)
	}
	// The engines' offload figures (issue 23), after the source: how many,
	// then each one's engine (len(Engines) for the worker totals).
	if offloads > 0 || dyn {
		w.uv(uint64(offloads))
		eachOffload(v, func(i int, o *collectors.Offload) {
			w.uv(uint64(i))
			for _, f := range offloadFields(o) {
				w.fp(*f)
			}
			for _, ts := range [...][]collectors.TierCount{o.TierHits, o.TierChunks} {
				w.count(len(ts), ts == nil)
				for _, t := range ts {
					w.sym(t.Tier)
					w.fp(t.Hits)
					w.fp(t.Queries)
				}
			}
		})
	}
	// Dynamo's router figures (issue 24), after the offloads.
	if dyn {
		r := v.Router
		w.count(len(r.Roles), r.Roles == nil)
		for _, k := range slices.Sorted(maps.Keys(r.Roles)) {
			w.sym(k)
			w.sym(r.Roles[k])
		}
		w.floatMap(r.ActivePrefillTokens)
		w.floatMap(r.ActiveDecodeBlocks)
		e.histogram(r.KVTransferEstimate)
		w.fp(r.SharedCacheHit)
	}
	e.end()
}

// hasDynamo: the router has any of Dynamo's later figures.
func hasDynamo(r *collectors.RouterMetrics) bool {
	return r.Roles != nil || r.ActivePrefillTokens != nil || r.ActiveDecodeBlocks != nil || r.KVTransferEstimate != nil || r.SharedCacheHit != nil
}

// eachOffload calls f with each engine's offload figures, the worker
// totals' last (index len(Engines)).
func eachOffload(v *collectors.MetricsScrape, f func(int, *collectors.Offload)) {
	for i := range v.Engines {
		if o := v.Engines[i].Offload; o != nil {
			f(i, o)
		}
	}
	if t := v.WorkerTotals; t != nil && t.Offload != nil {
		f(len(v.Engines), t.Offload)
	}
}

// offloadFields are an Offload's single values, in journal order.
func offloadFields(o *collectors.Offload) []**float64 {
	return []**float64{&o.LoadBytes, &o.StoreBytes, &o.LoadSeconds, &o.StoreSeconds,
		&o.PromptComputed, &o.PromptLocalHit, &o.PromptExternal, &o.HostUsedTokens, &o.HostTotalTokens}
}

func (e *encoder) engine(m *collectors.EngineMetrics) {
	w := &e.w
	w.sym(m.Engine)
	w.sym(m.Model)
	for _, f := range []*float64{m.Waiting, m.Running, m.KVUsage, m.PrefixQueries, m.PrefixHits,
		m.ExternalQueries, m.ExternalHits, m.CacheHitRate, m.PromptTokens, m.GenerationTokens,
		m.Preemptions, m.RequestsFinished, m.NumGPUBlocks, m.BlockSize} {
		w.fp(f)
	}
	e.histogram(m.TTFT)
	e.histogram(m.QueueTime)
	e.histogram(m.E2E)
	e.histogram(m.ITL)
}

// histogram writes h with its bucket bounds as one symbol (they repeat
// every scrape) and its cumulative counts as differences when those are
// exact (whole numbers, as counts are).
func (e *encoder) histogram(h *collectors.Histogram) {
	w := &e.w
	if h == nil {
		w.byte1(0)
		return
	}
	w.byte1(1)
	w.f(h.Count)
	w.f(h.Sum)
	w.count(len(h.Buckets), h.Buckets == nil)
	if len(h.Buckets) == 0 {
		return
	}
	e.layout = e.layout[:0]
	for _, b := range h.Buckets {
		e.layout = binary.LittleEndian.AppendUint64(e.layout, math.Float64bits(b.UpperBound))
	}
	w.sym(string(e.layout))
	deltas := true
	prev := 0.0
	for _, b := range h.Buckets {
		d := b.Count - prev
		if prev+d != b.Count || d != math.Trunc(d) || math.Signbit(b.Count) {
			deltas = false
			break
		}
		prev = b.Count
	}
	w.flag(deltas)
	prev = 0
	for _, b := range h.Buckets {
		if deltas {
			w.f(b.Count - prev)
			prev = b.Count
		} else {
			w.f(b.Count)
		}
	}
}

// floatMap writes a map in key order, so equal maps are equal bytes.
func (w *wbuf) floatMap(m map[string]float64) {
	w.count(len(m), m == nil)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.sym(k)
		w.f(m[k])
	}
}

// Event flags: the kind when it is a known one, which fields follow, and
// which take their usual value.
const (
	evKindMask    = 0x03 // 0: a kind byte follows
	evHasParent   = 0x04
	evParent      = 0x08 // the parent hash follows (HasParent, or a stray non-zero one)
	evParentBack  = 0x10 // the parent follows as how far back its publisher stored it
	evSameBlock   = 0x20 // BlockSize as the batch's previous event
	evUsual       = 0x40 // Medium "GPU" and LoRA ""; else both follow as symbols
	evNilHashes   = 0x80
	batchReplayed = 0x01
	batchNilEvs   = 0x02
)

// batch writes an event batch. It is most of a journal's volume: hashes
// are their 8 raw bytes (they are random), a parent the publisher stored
// lately a byte or two (pubs.go), everything else a byte or two.
func (e *encoder) batch(v *collectors.EventBatch) {
	w := e.beginAt(tagBatch, v.At)
	id := pubID{v.Worker, v.Rank, v.Endpoint, v.Topic}
	ref, p := e.pubs.lookup(id)
	w.uv(uint64(ref))
	if ref == 0 {
		w.sym(v.Worker)
		w.iv(int64(v.Rank))
		w.sym(v.Endpoint)
		w.sym(v.Topic)
		p = e.pubs.add(id)
	}
	var lastSeq, lastTS uint64
	if p != nil {
		lastSeq, lastTS = p.seq, p.ts
	}
	w.iv(int64(v.Seq - (lastSeq + 1)))
	ts := math.Float64bits(v.TS)
	w.uv(ts ^ lastTS)
	if p != nil {
		p.seq, p.ts = v.Seq, ts
	}
	var fl byte
	if v.Replayed {
		fl |= batchReplayed
	}
	if v.Events == nil {
		fl |= batchNilEvs
	}
	w.byte1(fl)
	w.uv(uint64(len(v.Events)))
	block := 0
	for i := range v.Events {
		ev := &v.Events[i]
		var f byte
		if ev.Kind >= 1 && ev.Kind <= 3 {
			f = byte(ev.Kind)
		}
		if ev.HasParent {
			f |= evHasParent
		}
		back := uint64(0)
		if ev.HasParent || ev.Parent != 0 {
			if back = p.back(ev.Parent); back > 0 {
				f |= evParentBack
			} else {
				f |= evParent
			}
		}
		if ev.BlockSize == block {
			f |= evSameBlock
		}
		if ev.Medium == "GPU" && ev.LoRA == "" {
			f |= evUsual
		}
		if ev.Hashes == nil {
			f |= evNilHashes
		}
		w.byte1(f)
		if f&evKindMask == 0 {
			w.byte1(byte(ev.Kind))
		}
		if ev.Hashes != nil {
			w.uv(uint64(len(ev.Hashes)))
			for _, h := range ev.Hashes {
				w.u64raw(h)
			}
		}
		switch {
		case f&evParentBack != 0:
			w.uv(back)
		case f&evParent != 0:
			w.u64raw(ev.Parent)
		}
		if f&evSameBlock == 0 {
			w.iv(int64(ev.BlockSize))
			block = ev.BlockSize
		}
		// A store's tokens are usually its blocks times the block size.
		w.iv(int64(ev.NumTokens) - int64(len(ev.Hashes))*int64(ev.BlockSize))
		if f&evUsual == 0 {
			w.sym(ev.Medium)
			w.sym(ev.LoRA)
		}
		if ev.Kind == collectors.BlockStored {
			for _, h := range ev.Hashes {
				p.stored(h)
			}
		}
	}
	// Root content fingerprints (the hash-boundary check), added after
	// format 1's fields: at the end of the payload, only when a batch has
	// one — how many, then each event's index and fingerprint.
	roots := 0
	for i := range v.Events {
		if v.Events[i].RootContent != 0 {
			roots++
		}
	}
	groups := 0
	for i := range v.Events {
		if hasGroupKeys(&v.Events[i]) {
			groups++
		}
	}
	if roots > 0 || groups > 0 {
		w.uv(uint64(roots))
		for i := range v.Events {
			if c := v.Events[i].RootContent; c != 0 {
				w.uv(uint64(i))
				w.u64raw(c)
			}
		}
	}
	// The KV cache group keys (group, kind, window, locality, origin),
	// added after the fingerprints: only when some event has one — how
	// many, then each event's index and keys.
	if groups > 0 {
		w.uv(uint64(groups))
		for i := range v.Events {
			ev := &v.Events[i]
			if !hasGroupKeys(ev) {
				continue
			}
			w.uv(uint64(i))
			w.iv(int64(ev.Group))
			w.sym(ev.GroupKind)
			w.iv(int64(ev.Window))
			w.byte1(byte(ev.Locality))
			w.byte1(byte(ev.Origin))
		}
	}
	e.end()
}

// hasGroupKeys: the event names a group, kind, window, locality or origin.
func hasGroupKeys(ev *collectors.KVEvent) bool {
	return ev.Group != 0 || ev.GroupKind != "" || ev.Window != 0 || ev.Locality != 0 || ev.Origin != 0
}

func (e *encoder) status(v *collectors.StreamStatus) {
	w := e.beginAt(tagStatus, v.At)
	w.sym(v.Worker)
	w.iv(int64(v.Rank))
	w.sym(v.Endpoint)
	w.sym(v.Replay)
	w.sym(v.Topic)
	w.sym(string(v.State))
	w.flag(v.HasSeq)
	for _, n := range []uint64{v.LastSeq, v.FirstSeq, v.Batches, v.Events, v.Gaps, v.Missing,
		v.Replayed, v.Lost, v.Restarts, v.Duplicates, v.DecodeErrors, v.UnknownEvents,
		v.UnknownFields, v.Malformed, v.Oversized, v.Dropped} {
		w.uv(n)
	}
	w.tm(v.LastMessage)
	w.f(v.LastTS)
	w.count(len(v.History), v.History == nil)
	for _, in := range v.History {
		w.sym(in.Kind)
		for _, n := range []uint64{in.FromSeq, in.ToSeq, in.Missing, in.Replayed, in.Lost} {
			w.uv(n)
		}
		w.tm(in.Start)
		w.tm(in.End)
		w.sym(in.Note)
	}
	// Unknown events by type, added later: only when the map is there, in
	// the order of its names (the same status, the same bytes).
	if v.UnknownByType != nil {
		tags := slices.Sorted(maps.Keys(v.UnknownByType))
		w.uv(uint64(len(tags)))
		for _, tag := range tags {
			w.sym(tag)
			w.uv(v.UnknownByType[tag])
		}
	}
	e.end()
}

func (e *encoder) decision(v *collectors.Decision) {
	w := e.beginAt(tagDecision, v.At)
	w.tm(v.TS)
	w.str(v.RequestID)
	for _, s := range []string{v.AttemptID, v.Router, v.RouterVersion, v.Model, v.Pool, v.Endpoint} {
		w.sym(s)
	}
	if p := v.Prediction; p != nil {
		w.byte1(1)
		w.sym(p.Source)
		w.sym(p.Input)
		w.sym(p.Units)
		w.fp(p.Matched)
		w.fp(p.Total)
		w.sym(p.Owner)
		w.iv(int64(p.BlockSize))
		w.fp(p.AgeMS)
	} else {
		w.byte1(0)
	}
	w.sym(v.Chosen)
	w.sym(v.Reason)
	if l := v.Load; l != nil {
		w.byte1(1)
		w.sym(l.Kind)
		w.fp(l.Value)
		w.sym(l.Scope)
	} else {
		w.byte1(0)
	}
	w.sym(v.Prefix)
	w.count(len(v.Candidates), v.Candidates == nil)
	for _, c := range v.Candidates {
		w.sym(c.Worker)
		w.fp(c.Score)
		w.fp(c.Matched)
		w.fp(c.Load)
	}
	w.sym(v.Format)
	w.sym(v.Source)
	w.flag(v.Backfill)
	w.sym(v.DecodeWorker) // added after the first release: a reader stops before it on older journals
	e.end()
}

func (e *encoder) outcome(v *collectors.Outcome) {
	w := e.beginAt(tagOutcome, v.At)
	w.tm(v.TS)
	w.str(v.RequestID)
	w.sym(v.AttemptID)
	w.sym(v.Worker)
	w.iv(int64(v.HTTPStatus))
	w.ip(v.PromptTokens)
	w.ip(v.CachedTokens)
	w.fp(v.QueueMS)
	w.fp(v.TTFTMS)
	w.fp(v.E2EMS)
	w.sym(v.FinishReason)
	w.bp(v.Done)
	w.sym(v.Error)
	w.str(v.RetryOf)
	w.sym(v.Format)
	w.sym(v.Source)
	w.flag(v.Backfill)
	// Added after the first release (Dynamo's request traces): older
	// journals end before them.
	w.ip(v.OutputTokens)
	w.fp(v.PrefillMS)
	w.fp(v.ITLMS)
	w.fp(v.KVTransferMS)
	e.end()
}

func (e *encoder) decisionSource(v *collectors.DecisionSource) {
	w := e.beginAt(tagDecSrc, v.At)
	w.sym(v.Source)
	w.sym(v.Format)
	w.sym(v.Detected)
	for _, n := range []uint64{v.Lines, v.Decisions, v.Outcomes, v.Bad, v.Skipped} {
		w.uv(n)
	}
	w.count(len(v.SkippedBy), v.SkippedBy == nil)
	keys := make([]string, 0, len(v.SkippedBy))
	for k := range v.SkippedBy {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w.sym(k)
		w.uv(v.SkippedBy[k])
	}
	w.flag(v.Waiting)
	e.end()
}

// target writes a change of the watched set. They are rare (a pod event),
// so the pod's words are written as they are, without cleverness.
func (e *encoder) target(v *collectors.TargetChange) {
	w := e.beginAt(tagTarget, v.At)
	w.sym(v.Name)
	w.uv(uint64(v.Role))
	w.sym(string(v.Kind))
	w.sym(v.Reason)
	w.count(len(v.Aliases), v.Aliases == nil)
	for _, a := range v.Aliases {
		w.sym(a)
	}
	w.flag(v.NoMetrics)
	k := v.Kube
	w.flag(k != nil)
	if k != nil {
		for _, s := range []string{k.Pod, k.Namespace, k.UID, k.Node, k.IP, k.Phase, k.Reason, k.Access, k.AccessNote} {
			w.sym(s)
		}
		w.str(k.Message)
		w.flag(k.Ready)
		w.flag(k.New)
		w.iv(int64(k.Restarts))
		w.tm(k.Started)
		w.tm(k.Created)
		w.flag(k.LastTermination != nil)
		if lt := k.LastTermination; lt != nil {
			w.sym(lt.Reason)
			w.iv(int64(lt.ExitCode))
			w.tm(lt.At)
		}
	}
	e.end()
}
