package journal

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// decoder is the reading side of encoder: the same symbol table, frame
// time and publisher state, rebuilt from the frames in order.
type decoder struct {
	last, at int64
	syms     []string
	symBytes int
	pubs     pubTable
	r        rbuf
}

func newDecoder() *decoder {
	d := &decoder{pubs: newPubTable()}
	d.r.dec = d
	return d
}

func (d *decoder) sym(r *rbuf) string {
	v := r.uv()
	if r.err != nil {
		return ""
	}
	if v == 0 {
		return r.str()
	}
	if v-1 >= uint64(len(d.syms)) {
		r.fail(fmt.Errorf("symbol %d not defined (%d are)", v-1, len(d.syms)))
		return ""
	}
	return d.syms[v-1]
}

// Record is one frame of a journal, as a replay applies it.
type Record struct {
	Kind RecordKind
	At   time.Time // the observation's or the tick's time; the last frame's for the others
	// Observation is set for KindObservation.
	Observation collectors.Observation
	// Refresh is set for KindRefresh.
	Refresh time.Duration
	// Seq is the snapshot number the pool gave a KindTick.
	Seq uint64
	// Lost counts the observations a KindLost stands for.
	Lost uint64
	// Type names the observation type of a KindUnencoded.
	Type string
}

// RecordKind says what a Record is.
type RecordKind uint8

const (
	KindObservation RecordKind = iota + 1
	KindTick                   // a snapshot was published at At
	KindRefresh                // the refresh changed to Refresh
	KindLost                   // Lost observations were not recorded here (the disk fell behind)
	KindUnencoded              // an observation of a type the recorder could not encode
)

// errSkip is a frame decoded to nothing a replay applies (a symbol, an
// unknown tag).
var errSkip = errors.New("skip")

// frame decodes one frame's body. It returns errSkip for frames that only
// change the decoder (symbols) or that it does not know (counted by the
// caller through unknown).
func (d *decoder) frame(body []byte) (rec Record, unknown bool, err error) {
	r := &d.r
	*r = rbuf{b: body, dec: d}
	tag := r.byte1()
	dt := r.iv()
	if r.err != nil {
		return rec, false, r.err
	}
	d.at = d.last + dt
	d.last = d.at
	switch tag {
	case tagSymbol:
		s := string(r.b)
		if len(s) > maxSymLen || len(d.syms) >= maxSyms || d.symBytes+len(s) > maxSymBytes {
			return rec, false, errors.New("symbol table over its bounds")
		}
		d.syms = append(d.syms, s)
		d.symBytes += len(s)
		return rec, false, errSkip
	case tagHeader:
		return rec, false, errors.New("a second header")
	case tagTick:
		rec.Kind, rec.At = KindTick, r.tmFrame()
		rec.Seq = r.uv()
	case tagRefresh:
		rec.Kind, rec.Refresh = KindRefresh, r.dur()
		if rec.Refresh <= 0 {
			return rec, false, errors.New("refresh not positive")
		}
	case tagLost:
		rec.Kind, rec.Lost = KindLost, r.uv()
	case tagUnknown:
		rec.Kind, rec.Type = KindUnencoded, r.sym()
	case tagEnd:
		return rec, false, errEnd{reason: r.uv()}
	case tagScrape, tagBatch, tagReset, tagStatus, tagDecision, tagOutcome, tagError, tagDecSrc, tagTarget:
		rec.Kind = KindObservation
		rec.At = r.tmFrame()
		rec.Observation = d.observation(tag, rec.At)
	default:
		return rec, true, errSkip
	}
	if r.err != nil {
		return Record{}, false, r.err
	}
	if rec.Kind != KindTick && rec.Kind != KindObservation {
		rec.At = time.Unix(0, d.at)
	}
	return rec, false, nil
}

// errEnd is the recorder's end marker.
type errEnd struct{ reason uint64 }

func (e errEnd) Error() string { return "end of segment" }

func (d *decoder) observation(tag byte, at time.Time) collectors.Observation {
	r := &d.r
	switch tag {
	case tagScrape:
		return d.scrape(at)
	case tagBatch:
		return d.batch(at)
	case tagReset:
		return &collectors.StreamReset{Worker: r.sym(), Rank: r.int(), Reason: r.sym(), At: at}
	case tagStatus:
		return d.status(at)
	case tagDecision:
		return d.decision(at)
	case tagOutcome:
		return d.outcome(at)
	case tagError:
		e := r.sourceError()
		e.At = at
		return e
	case tagDecSrc:
		return d.decisionSource(at)
	case tagTarget:
		return d.target(at)
	}
	return nil
}

func (r *rbuf) sourceError() *collectors.SourceError {
	return &collectors.SourceError{Source: r.sym(), Kind: r.sym(), Message: r.sym(), Backfill: r.flag()}
}

func (d *decoder) scrape(at time.Time) *collectors.MetricsScrape {
	r := &d.r
	v := &collectors.MetricsScrape{At: at}
	v.Target = r.sym()
	v.Role = collectors.Role(r.uv())
	v.URL = r.sym()
	v.Duration = r.dur()
	if r.flag() {
		t := r.tm()
		v.Err = r.sourceError()
		v.Err.At = t
	}
	v.Profile = r.sym()
	v.ProcessStart = r.fp()
	if n, isNil := r.count(20); !isNil {
		v.Engines = make([]collectors.EngineMetrics, n)
		for i := range v.Engines {
			d.engine(&v.Engines[i])
		}
	}
	if r.flag() {
		v.WorkerTotals = &collectors.EngineMetrics{}
		d.engine(v.WorkerTotals)
	}
	if r.flag() {
		m := &collectors.RouterMetrics{}
		m.Processed = r.floatMap()
		m.Running = r.floatMap()
		m.CBState = r.floatMap()
		for _, f := range []**float64{&m.Requests, &m.Retries, &m.Errors, &m.CacheHits, &m.CacheMisses, &m.PredictedHit} {
			*f = r.fp()
		}
		m.TTFT = d.histogram()
		v.Router = m
	}
	v.Skipped = int(r.uv())
	if n, isNil := r.count(3); !isNil {
		v.Invalid = make([]collectors.InvalidValue, n)
		for i := range v.Invalid {
			v.Invalid[i] = collectors.InvalidValue{Engine: r.sym(), Field: r.sym(), Note: r.sym()}
		}
	}
	if len(r.b) > 0 && r.err == nil { // the source, when the payload goes on
		v.Via = r.sym()
		v.Interval = r.dur()
	}
	if len(r.b) > 0 && r.err == nil { // the engines' offload figures
		d.offloads(v)
	}
	if len(r.b) > 0 && r.err == nil { // Dynamo's router figures
		if v.Router == nil {
			r.fail(errors.New("router figures in a scrape without a router"))
			return v
		}
		m := v.Router
		if n, isNil := r.count(2); !isNil {
			m.Roles = make(map[string]string, n)
			for range n {
				k := r.sym()
				m.Roles[k] = r.sym()
			}
		}
		m.ActivePrefillTokens = r.floatMap()
		m.ActiveDecodeBlocks = r.floatMap()
		m.KVTransferEstimate = d.histogram()
		m.SharedCacheHit = r.fp()
	}
	return v
}

func (d *decoder) offloads(v *collectors.MetricsScrape) {
	r := &d.r
	k := r.uv()
	if k > uint64(len(v.Engines))+1 {
		r.fail(errors.New("more offload figures than engines"))
		return
	}
	for j := uint64(0); j < k && r.err == nil; j++ {
		i := r.uv()
		var m *collectors.EngineMetrics
		switch {
		case i < uint64(len(v.Engines)):
			m = &v.Engines[i]
		case i == uint64(len(v.Engines)) && v.WorkerTotals != nil:
			m = v.WorkerTotals
		default:
			r.fail(errors.New("offload figures for an engine the scrape does not have"))
			return
		}
		o := &collectors.Offload{}
		for _, f := range offloadFields(o) {
			*f = r.fp()
		}
		for _, ts := range [...]*[]collectors.TierCount{&o.TierHits, &o.TierChunks} {
			if n, isNil := r.count(3); !isNil {
				*ts = make([]collectors.TierCount, n)
				for t := range *ts {
					(*ts)[t] = collectors.TierCount{Tier: r.sym(), Hits: r.fp(), Queries: r.fp()}
				}
			}
		}
		m.Offload = o
	}
}

func (d *decoder) engine(m *collectors.EngineMetrics) {
	r := &d.r
	m.Engine = r.sym()
	m.Model = r.sym()
	for _, f := range []**float64{&m.Waiting, &m.Running, &m.KVUsage, &m.PrefixQueries, &m.PrefixHits,
		&m.ExternalQueries, &m.ExternalHits, &m.CacheHitRate, &m.PromptTokens, &m.GenerationTokens,
		&m.Preemptions, &m.RequestsFinished, &m.NumGPUBlocks, &m.BlockSize} {
		*f = r.fp()
	}
	m.TTFT = d.histogram()
	m.QueueTime = d.histogram()
	m.E2E = d.histogram()
	m.ITL = d.histogram()
}

func (d *decoder) histogram() *collectors.Histogram {
	r := &d.r
	if !r.flag() {
		return nil
	}
	h := &collectors.Histogram{Count: r.f(), Sum: r.f()}
	n, isNil := r.count(1)
	if isNil || r.err != nil {
		return h
	}
	h.Buckets = make([]collectors.Bucket, n)
	if n == 0 {
		return h
	}
	layout := r.sym()
	if len(layout) != 8*n {
		r.fail(fmt.Errorf("histogram of %d buckets with %d bytes of bounds", n, len(layout)))
		return h
	}
	deltas := r.flag()
	prev := 0.0
	for i := range h.Buckets {
		c := r.f()
		if deltas {
			c += prev
			prev = c
		}
		h.Buckets[i] = collectors.Bucket{UpperBound: bound(layout, i), Count: c}
	}
	return h
}

// bound is the i-th float of a histogram layout symbol.
func bound(layout string, i int) float64 {
	var u uint64
	for j := 7; j >= 0; j-- {
		u = u<<8 | uint64(layout[8*i+j])
	}
	return math.Float64frombits(u)
}

func (r *rbuf) floatMap() map[string]float64 {
	n, isNil := r.count(2)
	if isNil {
		return nil
	}
	m := make(map[string]float64, n)
	for i := 0; i < n && r.err == nil; i++ {
		k := r.sym()
		m[k] = r.f()
	}
	return m
}

func (d *decoder) batch(at time.Time) *collectors.EventBatch {
	r := &d.r
	v := &collectors.EventBatch{At: at}
	var p *pubState
	if ref := r.uv(); ref == 0 {
		v.Worker = r.sym()
		v.Rank = r.int()
		v.Endpoint = r.sym()
		v.Topic = r.sym()
		if r.err != nil {
			return v
		}
		id := pubID{v.Worker, v.Rank, v.Endpoint, v.Topic}
		if _, known := d.pubs.lookup(id); known != nil {
			r.fail(errors.New("a known publisher written in full"))
			return v
		}
		p = d.pubs.add(id)
	} else {
		if ref > uint64(len(d.pubs.list)) {
			r.fail(fmt.Errorf("publisher %d not defined (%d are)", ref, len(d.pubs.list)))
			return v
		}
		p = d.pubs.list[ref-1]
		id := d.pubs.idOf(int(ref - 1))
		v.Worker, v.Rank, v.Endpoint, v.Topic = id.worker, id.rank, id.endpoint, id.topic
	}
	var lastSeq, lastTS uint64
	if p != nil {
		lastSeq, lastTS = p.seq, p.ts
	}
	v.Seq = lastSeq + 1 + uint64(r.iv())
	ts := r.uv() ^ lastTS
	v.TS = math.Float64frombits(ts)
	if r.err != nil {
		return v
	}
	if p != nil {
		p.seq, p.ts = v.Seq, ts
	}
	fl := r.byte1()
	v.Replayed = fl&batchReplayed != 0
	n := r.uv()
	if n > uint64(len(r.b))/2 { // an event takes at least 2 bytes
		r.fail(errShort)
		return v
	}
	if fl&batchNilEvs == 0 {
		v.Events = make([]collectors.KVEvent, n)
	}
	// One array for every hash of the batch (at most the payload's bytes
	// over 8), each event's a capped slice of it: two allocations, not one
	// per event.
	all := make([]uint64, 0, len(r.b)/8)
	block := 0
	for i := 0; i < int(n) && r.err == nil; i++ {
		var ev collectors.KVEvent
		f := r.byte1()
		ev.Kind = collectors.EventKind(f & evKindMask)
		if ev.Kind == 0 {
			ev.Kind = collectors.EventKind(r.byte1())
		}
		ev.HasParent = f&evHasParent != 0
		if f&evNilHashes == 0 {
			nh := r.uv()
			if nh > uint64(len(r.b))/8 {
				r.fail(errShort)
				break
			}
			from := len(all)
			for j := uint64(0); j < nh; j++ {
				all = append(all, r.u64raw())
			}
			ev.Hashes = all[from:len(all):len(all)]
		}
		switch f & (evParent | evParentBack) {
		case evParent:
			ev.Parent = r.u64raw()
		case evParentBack:
			h, ok := p.hash(r.uv())
			if !ok {
				r.fail(errors.New("a parent further back than its publisher's hashes"))
				break
			}
			ev.Parent = h
		case evParent | evParentBack:
			r.fail(errors.New("a parent both in full and by reference"))
		}
		if f&evSameBlock == 0 {
			block = r.int()
		}
		ev.BlockSize = block
		ev.NumTokens = int(r.iv() + int64(len(ev.Hashes))*int64(block))
		if f&evUsual != 0 {
			ev.Medium = "GPU"
		} else {
			ev.Medium = r.sym()
			ev.LoRA = r.sym()
		}
		if ev.Kind == collectors.BlockStored && r.err == nil {
			for _, h := range ev.Hashes {
				p.stored(h)
			}
		}
		if v.Events != nil {
			v.Events[i] = ev
		}
	}
	// The root content fingerprints, when the payload goes on (a journal
	// recorded before them ends here).
	if len(r.b) > 0 && r.err == nil {
		k := r.uv()
		if k > n || k > uint64(len(r.b))/9 { // an index byte and 8 bytes each
			r.fail(errShort)
			return v
		}
		for j := uint64(0); j < k && r.err == nil; j++ {
			i, c := r.uv(), r.u64raw()
			if i >= n {
				r.fail(errors.New("a root fingerprint for an event the batch does not have"))
				break
			}
			if v.Events != nil {
				v.Events[i].RootContent = c
			}
		}
	}
	// The group keys, when the payload goes on (after the fingerprints).
	if len(r.b) > 0 && r.err == nil {
		k := r.uv()
		if k > n || k > uint64(len(r.b))/6 { // an index, four keys and a symbol: 6 bytes at least
			r.fail(errShort)
			return v
		}
		for j := uint64(0); j < k && r.err == nil; j++ {
			i := r.uv()
			g, kind, win := r.iv(), r.sym(), r.iv()
			loc, org := r.byte1(), r.byte1()
			if i >= n || g != int64(int32(g)) || win != int64(int32(win)) {
				r.fail(errors.New("group keys for an event the batch does not have, or out of range"))
				break
			}
			if v.Events != nil {
				ev := &v.Events[i]
				ev.Group, ev.GroupKind, ev.Window = int32(g), kind, int32(win)
				ev.Locality, ev.Origin = collectors.Locality(loc), collectors.Origin(org)
			}
		}
	}
	return v
}

func (d *decoder) status(at time.Time) *collectors.StreamStatus {
	r := &d.r
	v := &collectors.StreamStatus{At: at}
	v.Worker = r.sym()
	v.Rank = r.int()
	v.Endpoint = r.sym()
	v.Replay = r.sym()
	v.Topic = r.sym()
	v.State = collectors.StreamState(r.sym())
	v.HasSeq = r.flag()
	for _, n := range []*uint64{&v.LastSeq, &v.FirstSeq, &v.Batches, &v.Events, &v.Gaps, &v.Missing,
		&v.Replayed, &v.Lost, &v.Restarts, &v.Duplicates, &v.DecodeErrors, &v.UnknownEvents,
		&v.UnknownFields, &v.Malformed, &v.Oversized, &v.Dropped} {
		*n = r.uv()
	}
	v.LastMessage = r.tm()
	v.LastTS = r.f()
	if n, isNil := r.count(9); !isNil {
		v.History = make([]collectors.StreamIncident, n)
		for i := range v.History {
			in := &v.History[i]
			in.Kind = r.sym()
			for _, n := range []*uint64{&in.FromSeq, &in.ToSeq, &in.Missing, &in.Replayed, &in.Lost} {
				*n = r.uv()
			}
			in.Start = r.tm()
			in.End = r.tm()
			in.Note = r.sym()
		}
	}
	if len(r.b) > 0 && r.err == nil { // unknown events by type (a later addition)
		k := r.uv()
		if k > collectors.MaxUnknownTypes+1 || k > uint64(len(r.b))/2 {
			r.fail(errShort)
			return v
		}
		v.UnknownByType = make(map[string]uint64, k)
		for j := uint64(0); j < k && r.err == nil; j++ {
			tag := r.sym()
			v.UnknownByType[tag] = r.uv()
		}
	}
	return v
}

func (d *decoder) decision(at time.Time) *collectors.Decision {
	r := &d.r
	v := &collectors.Decision{At: at}
	v.TS = r.tm()
	v.RequestID = r.str()
	for _, s := range []*string{&v.AttemptID, &v.Router, &v.RouterVersion, &v.Model, &v.Pool, &v.Endpoint} {
		*s = r.sym()
	}
	if r.flag() {
		p := &collectors.Prediction{}
		p.Source = r.sym()
		p.Input = r.sym()
		p.Units = r.sym()
		p.Matched = r.fp()
		p.Total = r.fp()
		p.Owner = r.sym()
		p.BlockSize = r.int()
		p.AgeMS = r.fp()
		v.Prediction = p
	}
	v.Chosen = r.sym()
	v.Reason = r.sym()
	if r.flag() {
		v.Load = &collectors.Load{Kind: r.sym(), Value: r.fp(), Scope: r.sym()}
	}
	v.Prefix = r.sym()
	if n, isNil := r.count(4); !isNil {
		v.Candidates = make([]collectors.Candidate, n)
		for i := range v.Candidates {
			v.Candidates[i] = collectors.Candidate{Worker: r.sym(), Score: r.fp(), Matched: r.fp(), Load: r.fp()}
		}
	}
	v.Format = r.sym()
	v.Source = r.sym()
	v.Backfill = r.flag()
	if len(r.b) > 0 && r.err == nil { // a journal recorded before it ends here
		v.DecodeWorker = r.sym()
	}
	return v
}

func (d *decoder) outcome(at time.Time) *collectors.Outcome {
	r := &d.r
	v := &collectors.Outcome{At: at}
	v.TS = r.tm()
	v.RequestID = r.str()
	v.AttemptID = r.sym()
	v.Worker = r.sym()
	v.HTTPStatus = r.int()
	v.PromptTokens = r.ip()
	v.CachedTokens = r.ip()
	v.QueueMS = r.fp()
	v.TTFTMS = r.fp()
	v.E2EMS = r.fp()
	v.FinishReason = r.sym()
	v.Done = r.bp()
	v.Error = r.sym()
	v.RetryOf = r.str()
	v.Format = r.sym()
	v.Source = r.sym()
	v.Backfill = r.flag()
	if len(r.b) > 0 && r.err == nil { // a journal recorded before them ends here
		v.OutputTokens = r.ip()
		v.PrefillMS = r.fp()
		v.ITLMS = r.fp()
		v.KVTransferMS = r.fp()
	}
	return v
}

func (d *decoder) decisionSource(at time.Time) *collectors.DecisionSource {
	r := &d.r
	v := &collectors.DecisionSource{At: at}
	v.Source = r.sym()
	v.Format = r.sym()
	v.Detected = r.sym()
	for _, n := range []*uint64{&v.Lines, &v.Decisions, &v.Outcomes, &v.Bad, &v.Skipped} {
		*n = r.uv()
	}
	if n, isNil := r.count(2); !isNil {
		v.SkippedBy = make(map[string]uint64, n)
		for i := 0; i < n && r.err == nil; i++ {
			k := r.sym()
			v.SkippedBy[k] = r.uv()
		}
	}
	v.Waiting = r.flag()
	return v
}

func (d *decoder) target(at time.Time) *collectors.TargetChange {
	r := &d.r
	v := &collectors.TargetChange{At: at}
	v.Name = r.sym()
	v.Role = collectors.Role(r.uv())
	v.Kind = collectors.TargetChangeKind(r.sym())
	v.Reason = r.sym()
	if n, isNil := r.count(1); !isNil {
		v.Aliases = make([]string, n)
		for i := 0; i < n && r.err == nil; i++ {
			v.Aliases[i] = r.sym()
		}
	}
	v.NoMetrics = r.flag()
	if r.flag() {
		k := &collectors.KubeInfo{}
		for _, s := range []*string{&k.Pod, &k.Namespace, &k.UID, &k.Node, &k.IP, &k.Phase, &k.Reason, &k.Access, &k.AccessNote} {
			*s = r.sym()
		}
		k.Message = r.str()
		k.Ready = r.flag()
		k.New = r.flag()
		k.Restarts = r.int()
		k.Started = r.tm()
		k.Created = r.tm()
		if r.flag() {
			k.LastTermination = &collectors.Termination{Reason: r.sym(), ExitCode: r.int()}
			k.LastTermination.At = r.tm()
		}
		v.Kube = k
	}
	return v
}
