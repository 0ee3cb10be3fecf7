package journal

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// A KV event stream's observations: a batch of events (tag 'e'), a
// publisher's reset after its restart ('r') and the stream's status ('s').
func init() {
	register(tagBatch, (*encoder).batch, (*decoder).batch).catchUp = func(o collectors.Observation) (bool, bool) {
		b := o.(*collectors.EventBatch)
		return b != nil && b.Replayed, false
	}
	register(tagReset, (*encoder).streamReset, (*decoder).streamReset)
	register(tagStatus, (*encoder).status, (*decoder).status)
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

func (e *encoder) streamReset(v *collectors.StreamReset) {
	w := e.beginAt(tagReset, v.At)
	w.sym(v.Worker)
	w.iv(int64(v.Rank))
	w.sym(v.Reason)
	e.end()
}

func (d *decoder) streamReset(at time.Time) *collectors.StreamReset {
	r := &d.r
	return &collectors.StreamReset{Worker: r.sym(), Rank: r.int(), Reason: r.sym(), At: at}
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

func (d *decoder) status(at time.Time) *collectors.StreamStatus {
	r := &d.r
	v := &collectors.StreamStatus{At: at}
	v.Worker = r.sym()
	v.Rank = r.int()
	v.Endpoint = r.sym()
	v.Replay = r.sym()
	v.Topic = r.sym()
	v.State = snapshot.StreamState(r.sym())
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
