package kvevents

import (
	"fmt"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// The centralized (bind) layout creates a publisher for every topic id and
// data-parallel rank it hears from. What it keeps is bounded: at most
// MaxPublishers streams (batches of more are refused and counted), ranks in
// 0..maxRank, and a stream silent for IdleEvict is forgotten, leaving a
// small tombstone so that its return continues the seq machine.

// maxRank is the highest data_parallel_rank accepted from a batch.
const maxRank = 255

// refusalEvery rate-limits the error about refused batches.
const refusalEvery = 10 * time.Second

// topicKey names a publisher in the centralized layout.
type topicKey struct {
	id   string
	rank int
}

type resolved struct {
	worker   string
	rank     int
	replay   string
	firstSeq uint64
	streams  int // live streams of this topic id
}

// refusal counts batches the centralized layout did not take, for one
// reason.
type refusal struct {
	n    uint64
	said time.Time
}

// tombstone is what is kept of a forgotten publisher: enough to go on with
// its seq, its counters and its open incidents when it comes back.
type tombstone struct {
	st         collectors.StreamStatus // History dropped
	last       uint64
	hasSeq     bool
	lastApp    applied
	from1      bool
	lost, late *collectors.StreamIncident
	disc       *collectors.StreamIncident
}

// streamFor finds (or, centralized, creates) the publisher of a batch; nil
// when the batch is refused.
func (r *runner) streamFor(m inMsg) *stream {
	if m.src >= 0 {
		return r.bySrc[m.src]
	}
	id := TopicID(m.b.topic)
	res, known := r.resolve[id]
	if !known {
		res = resolved{worker: id}
		if r.o.ResolveEndpoint != nil {
			ep := r.o.ResolveEndpoint(id)
			res.worker, res.rank, res.replay, res.firstSeq = ep.Worker, ep.Rank, ep.Replay, ep.FirstSeq
		}
		if res.worker == "" {
			res.worker = id
		}
	}
	// The batch's own rank tells ranks sharing one topic apart.
	rank := res.rank
	if m.b.err == nil && m.b.batch.HasRank {
		rank = m.b.batch.Rank
		if rank < 0 || rank > maxRank {
			r.refuse(m.at, "decode", fmt.Sprintf("batch from topic %q has data_parallel_rank %d, outside 0..%d: dropped",
				shortTag([]byte(m.b.topic)), rank, maxRank))
			return nil
		}
	}
	key := topicKey{id: id, rank: rank}
	if s := r.byTopic[key]; s != nil {
		return s
	}
	if len(r.byTopic) >= r.o.MaxPublishers {
		r.refuse(m.at, "too_large", fmt.Sprintf("batch from topic %q rank %d dropped: already tracking %d publishers (the limit)",
			shortTag([]byte(m.b.topic)), rank, len(r.byTopic)))
		return nil
	}
	res.streams++
	r.resolve[id] = res
	// A rank above the resolved one replays at its port offset, like its PUB.
	replay := res.replay
	if replay != "" && rank != res.rank {
		ep, err := rankEndpoint(replay, rank-res.rank)
		if err != nil || rank < res.rank {
			ep = ""
		}
		replay = ep
	}
	s := newStream(r, r.o, res.worker, rank, r.o.Bind, replay, m.b.topic, res.firstSeq, false)
	if t := r.gone[key]; t != nil {
		delete(r.gone, key)
		s.restore(t, m.at)
	}
	r.byTopic[key] = s
	return s
}

// refuse counts a dropped batch and says so, at most every refusalEvery
// per kind of refusal.
func (r *runner) refuse(now time.Time, kind, msg string) {
	c := &r.refused[0]
	if kind != "decode" {
		c = &r.refused[1]
	}
	c.n++
	if !c.said.IsZero() && now.Sub(c.said) < refusalEvery {
		return
	}
	c.said = now
	r.emit(&collectors.SourceError{Source: "events bind " + r.o.Bind, Kind: kind, At: now,
		Message: fmt.Sprintf("%s (%d such batch(es) dropped so far)", msg, c.n)})
}

// idle reports a centralized publisher silent for IdleEvict with nothing
// in flight.
func (s *stream) idle(now time.Time) bool {
	return s.job == nil && len(s.held) == 0 && now.Sub(s.St.LastMessage) >= s.o.IdleEvict
}

// evict forgets an idle centralized publisher: a last status says
// disconnected; a tombstone keeps its seq for when it comes back.
func (r *runner) evict(k topicKey, s *stream, now time.Time) {
	s.evicted = true
	s.Dirty = true
	inc := s.Incident("disconnected", s.last, s.last, now)
	inc.Note = fmt.Sprintf("no batch for %v: kvtop stopped tracking this publisher (its blocks stay); the next batch resumes it",
		s.o.IdleEvict)
	s.flush(now, true)
	delete(r.byTopic, k)
	if res, ok := r.resolve[k.id]; ok {
		if res.streams--; res.streams <= 0 {
			delete(r.resolve, k.id)
		} else {
			r.resolve[k.id] = res
		}
	}
	for gk := range r.gone { // bounded too: drop any one
		if len(r.gone) < r.o.MaxPublishers {
			break
		}
		delete(r.gone, gk)
	}
	st := s.St
	st.History = nil
	r.gone[k] = &tombstone{st: st, last: s.last, hasSeq: s.hasSeq, lastApp: s.lastApp, from1: s.from1,
		lost: s.LostInc, late: s.LateInc, disc: inc}
}

// restore resumes a forgotten publisher. It may have restarted while it was
// silent, so its first seq jump is checked like one after a reconnect.
func (s *stream) restore(t *tombstone, now time.Time) {
	st := t.st
	st.Endpoint, st.Replay, st.Topic = s.St.Endpoint, s.St.Replay, s.St.Topic
	s.St = st
	s.hasSeq, s.last, s.lastApp, s.from1 = t.hasSeq, t.last, t.lastApp, t.from1
	if t.lastApp.ok {
		s.recent[t.lastApp.seq%recentSeqs] = t.lastApp // a redelivery stays a duplicate
	}
	s.unverified = t.hasSeq
	for _, inc := range []*collectors.StreamIncident{t.lost, t.late, t.disc} {
		if inc != nil {
			s.History = append(s.History, inc)
		}
	}
	s.LostInc, s.LateInc = t.lost, t.late
	t.disc.End = now
	s.Dirty = true
}
