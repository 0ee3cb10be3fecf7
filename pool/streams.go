package pool

import (
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

type pubKey struct {
	w    *worker
	rank int
}

// publisher is one KV event stream (worker, rank): its blocks, the latest
// status its collector reported, and what the pool itself counted.
type publisher struct {
	w        *worker
	rank     int
	endpoint string
	topic    string
	idx      *pubIndex

	status *collectors.StreamStatus // latest, copied; nil until one arrives

	// Counted by the pool as batches are applied: exact and current even
	// when status messages are rate-limited.
	counts       *buckets // (batches, events)
	batches      uint64
	events       uint64
	hasSeq       bool
	lastSeq      uint64
	lastAt       time.Time
	lastTS       float64
	unknownKinds uint64

	clearedAt time.Time // last AllBlocksCleared or StreamReset
	lostSince time.Time // pool clock when the current history loss was first reported
	resets    uint64
	decodeErr counterWindow // status DecodeErrors over time
}

func (s *State) publisher(w *worker, rank int) *publisher {
	k := pubKey{w, rank}
	if p := s.pubs[k]; p != nil {
		return p
	}
	p := &publisher{w: w, rank: rank, idx: newPubIndex(), counts: newBuckets(s.window)}
	s.pubs[k] = p
	w.idx.addPub(p.idx)
	w.pubs = append(w.pubs, p)
	sort.Slice(w.pubs, func(i, j int) bool { return w.pubs[i].rank < w.pubs[j].rank })
	return p
}

func (s *State) applyBatch(b *collectors.EventBatch) {
	w := s.workerFor(b.Worker, true)
	if w == nil {
		return
	}
	p := s.publisher(w, b.Rank)
	if b.Endpoint != "" {
		p.endpoint = b.Endpoint
	}
	if b.Topic != "" {
		p.topic = b.Topic
	}
	p.batches++
	p.events += uint64(len(b.Events))
	p.counts.add(b.At, 1, float64(len(b.Events)))
	if !p.hasSeq || b.Seq > p.lastSeq {
		p.lastSeq = b.Seq
	}
	p.hasSeq = true
	p.lastAt = b.At
	p.lastTS = b.TS

	x := s.index
	var g float64 // traffic weight of one BlockStored at b.At, computed once
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case collectors.BlockStored:
			if g == 0 {
				g = s.evPrefix.weight(b.At)
			}
			s.storeEvent(w, p, ev, g)
		case collectors.BlockRemoved:
			m := p.idx.column(ev.Medium, false)
			if m >= 0 && len(ev.Hashes) > 1 {
				x.prefetch(p.idx, m, ev.Hashes)
			}
			for _, h := range ev.Hashes {
				x.remove(&w.idx, p.idx, m, h)
			}
		case collectors.AllBlocksCleared:
			x.clear(&w.idx, p.idx)
			p.clearedAt = b.At
		default:
			p.unknownKinds++
		}
	}
}

// storeEvent indexes one BlockStored and counts it as one request's worth
// of traffic: for its parent (the prefix it continues) and for any tracked
// hot prefix re-stored inside its chain.
func (s *State) storeEvent(w *worker, p *publisher, ev *collectors.KVEvent, g float64) {
	if bs := blockSizeOf(ev); bs > 0 {
		p.idx.blockSize = bs
		s.blockSize = bs
	}
	m := p.idx.column(ev.Medium, true)
	parent, hasParent := ev.Parent, ev.HasParent
	pc := s.evPrefix
	pc.addTotal(g)
	// One request counts at most once per prefix: a share never passes 1.
	credited := make([]uint64, 0, 4)
	if hasParent {
		credited = append(credited, slotKey(parent))
		pc.add(credited[0], "", w, g)
	}
	hot := s.hot.n > 0
	if len(ev.Hashes) > 1 {
		s.index.prefetch(p.idx, m, ev.Hashes)
	}
	for _, h := range ev.Hashes {
		s.index.store(&w.idx, p.idx, m, h, parent, hasParent)
		if hot {
			if k := slotKey(h); s.hot.has(k) && !seen(credited, k) {
				pc.add(k, "", w, g)
				credited = append(credited, k)
			}
		}
		parent, hasParent = h, true
	}
}

func seen(ks []uint64, k uint64) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func blockSizeOf(ev *collectors.KVEvent) int {
	if ev.BlockSize > 0 {
		return ev.BlockSize
	}
	if n := len(ev.Hashes); n > 0 && ev.NumTokens > 0 && ev.NumTokens%n == 0 {
		return ev.NumTokens / n
	}
	return 0
}

func (s *State) applyReset(r *collectors.StreamReset) {
	w := s.workerFor(r.Worker, true)
	if w == nil {
		return
	}
	p := s.publisher(w, r.Rank)
	s.index.clear(&w.idx, p.idx)
	p.clearedAt = r.At
	p.resets++
}

func (s *State) applyStatus(st *collectors.StreamStatus) {
	w := s.workerFor(st.Worker, true)
	if w == nil {
		return
	}
	p := s.publisher(w, st.Rank)
	c := *st
	// Keep our own bounded copy: the collector may reuse its slice.
	h := st.History
	if lim := s.opt.Limits.Incidents; len(h) > lim {
		h = h[len(h)-lim:]
	}
	c.History = append([]collectors.StreamIncident(nil), h...)
	if c.State == collectors.StreamHistoryLost && (p.status == nil || p.status.State != collectors.StreamHistoryLost) {
		p.lostSince = st.At
	}
	p.status = &c
	if st.Endpoint != "" {
		p.endpoint = st.Endpoint
	}
	if st.Topic != "" {
		p.topic = st.Topic
	}
	p.decodeErr.add(st.At, float64(st.DecodeErrors), s.window)
}

// state is the stream's effective state. A history loss (or late join)
// ends when the publisher clears all its blocks or restarts after it: from
// then on the index holds everything again, whatever the collector's last
// word was.
func (p *publisher) state() collectors.StreamState {
	if p.status == nil {
		if p.batches > 0 {
			return collectors.StreamLive
		}
		return collectors.StreamConnecting
	}
	st := p.status.State
	if (st == collectors.StreamHistoryLost || st == collectors.StreamJoinedLate) &&
		!p.clearedAt.IsZero() && !p.clearedAt.Before(p.incompleteSince()) {
		return collectors.StreamLive
	}
	return st
}

// incompleteSince is when the current loss of history began: the start of
// the latest matching incident, else when the pool first heard of it.
func (p *publisher) incompleteSince() time.Time {
	kind := string(p.status.State)
	h := p.status.History
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Kind == kind && !h[i].Start.IsZero() {
			return h[i].Start
		}
	}
	if p.status.State == collectors.StreamHistoryLost && !p.lostSince.IsZero() {
		return p.lostSince
	}
	return p.status.At
}

// incomplete reports whether the stream leaves its worker's index
// incomplete.
func incomplete(st collectors.StreamState) bool {
	switch st {
	case collectors.StreamHistoryLost, collectors.StreamReplaying, collectors.StreamJoinedLate:
		return true
	}
	return false
}
