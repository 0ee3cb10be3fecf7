package kvevents

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// inBatch is one received (live or replayed) batch, decoded off the state
// goroutine.
type inBatch struct {
	seq   uint64
	topic string
	batch Batch
	err   error  // the payload is not a batch
	fp    uint64 // fingerprint: tells a duplicate from a restarted publisher
	at    time.Time
}

// fingerprint identifies one batch of one run of a publisher well enough to
// recognise a redelivery: a restarted engine re-using a seq has a different
// wall-clock ts (and almost surely a different size).
func fingerprint(payload []byte, b Batch) uint64 {
	h := math.Float64bits(b.TS)
	h ^= uint64(len(payload)) * 0x9e3779b97f4a7c15
	h ^= uint64(len(b.Events)) << 48
	if len(payload) >= 8 {
		for _, c := range payload[len(payload)-8:] {
			h = h*1099511628211 ^ uint64(c)
		}
	}
	return h
}

// replayJob is the one replay a publisher may have open.
type replayJob struct {
	id       uint64
	from, to uint64 // seqs wanted
	join     bool   // asked from 0 after joining late, not for a gap
	inc      *collectors.StreamIncident
	due      time.Time // cooldown: not before
	started  bool
	cancel   func()
}

// replayResult is what a replay goroutine hands back.
type replayResult struct {
	stream   *stream
	id       uint64
	batches  []inBatch // in seq order, unique
	first    uint64    // first seq the publisher replayed (hasFirst)
	hasFirst bool
	ended    bool  // the publisher finished answering
	err      error // timeout or protocol error
}

// covers reports whether the replay answered for every seq up to to: what
// is absent below that is gone from the publisher's buffer, not just unasked.
func (r *replayResult) covers(to uint64) bool {
	return r != nil && r.ended && r.err == nil && len(r.batches) > 0 && r.batches[len(r.batches)-1].seq >= to
}

// in returns the replayed batches with from ≤ seq ≤ to.
func (r *replayResult) in(from, to uint64) []inBatch {
	if r == nil {
		return nil
	}
	i := sort.Search(len(r.batches), func(i int) bool { return r.batches[i].seq >= from })
	j := sort.Search(len(r.batches), func(i int) bool { return r.batches[i].seq > to })
	return r.batches[i:j]
}

// env is what a stream needs from the collector's state goroutine.
type env interface {
	emit(collectors.Observation)
	launchReplay(s *stream, j *replayJob)
	nextID() uint64
}

const recentSeqs = 256 // seqs remembered for duplicate detection

// stream is the seq state machine of one publisher (worker, rank). It is
// owned by the collector's single state goroutine: no locks.
type stream struct {
	env    env
	o      *Options
	source string // "w0 events rank 0"

	monitored     bool // connect mode: the socket monitor reports the TCP link
	connected     bool
	everConnected bool

	st      collectors.StreamStatus // counters and identity; State/History filled on send
	hasSeq  bool
	last    uint64 // highest seq accounted for (applied or given up)
	job     *replayJob
	held    []inBatch // live batches waiting behind job, in arrival order
	lastJob time.Time // start of the last replay (cooldown)
	recent  [recentSeqs]struct {
		seq, fp uint64
		ok      bool
	}

	history []*collectors.StreamIncident
	lostInc *collectors.StreamIncident // open while history is lost
	lateInc *collectors.StreamIncident // open while joined late
	discInc *collectors.StreamIncident // open while disconnected

	dirty     bool
	sentOnce  bool
	sentAt    time.Time
	sentState collectors.StreamState
	toldSkip  bool // unknown input reported once per stream
}

func newStream(e env, o *Options, worker string, rank int, endpoint, replay, topic string, monitored bool) *stream {
	s := &stream{env: e, o: o, monitored: monitored}
	s.source = fmt.Sprintf("%s events rank %d", worker, rank)
	s.st.Worker, s.st.Rank = worker, rank
	s.st.Endpoint, s.st.Replay, s.st.Topic = endpoint, replay, topic
	return s
}

// state derives the published state; the order is the priority.
func (s *stream) state() collectors.StreamState {
	switch {
	case s.monitored && !s.connected && !s.everConnected:
		return collectors.StreamConnecting
	case s.monitored && !s.connected:
		return collectors.StreamDisconnected
	case s.job != nil:
		return collectors.StreamReplaying
	case s.lostInc != nil:
		return collectors.StreamHistoryLost
	case s.lateInc != nil:
		return collectors.StreamJoinedLate
	}
	return collectors.StreamLive
}

// ---------------------------------------------------------------------------
// Inputs (each ends with a status flush)

func (s *stream) onBatch(b inBatch, now time.Time) {
	s.setConnected(now)
	s.st.LastMessage = now
	if b.topic != "" {
		s.st.Topic = b.topic
	}
	s.dirty = true
	if s.job != nil && len(s.held) >= s.o.HoldBack {
		s.abandon(now, fmt.Sprintf("replay given up: %d live batches held behind it", len(s.held)))
	}
	if s.job != nil {
		s.held = append(s.held, b)
	} else {
		s.process(b, nil, now)
	}
	s.flush(now, false)
}

func (s *stream) onResult(r *replayResult, now time.Time) {
	j := s.job
	if j == nil || r.id != j.id {
		return // abandoned or superseded
	}
	s.job = nil
	s.dirty = true
	if r.err != nil {
		kind := "replay"
		if errors.Is(r.err, errReplayTimeout) {
			kind = "timeout"
		}
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: kind, At: now,
			Message: fmt.Sprintf("replay from seq %d via %s: %v", j.from, s.st.Replay, r.err)})
	}
	if j.join {
		s.fillJoin(j, r, now)
	} else {
		s.fillGap(j.from, j.to, r, j.inc, now)
	}
	s.drain(r, now)
	s.flush(now, false)
}

func (s *stream) onConnected(now time.Time) {
	s.setConnected(now)
	s.flush(now, false)
}

func (s *stream) setConnected(now time.Time) {
	if s.connected {
		return
	}
	s.connected, s.everConnected, s.dirty = true, true, true
	if s.discInc != nil {
		s.discInc.End = now
		s.discInc = nil
	}
}

func (s *stream) onDisconnected(now time.Time) {
	if !s.connected {
		return
	}
	s.connected, s.dirty = false, true
	s.discInc = s.incident("disconnected", s.last, s.last, now)
	s.discInc.Note = "TCP connection to the publisher lost; libzmq reconnects"
	s.flush(now, false)
}

// tick starts a replay whose cooldown has passed and sends pending status.
func (s *stream) tick(now time.Time) {
	if j := s.job; j != nil && !j.started && !now.Before(j.due) {
		s.launch(now)
	}
	s.flush(now, false)
}

// ---------------------------------------------------------------------------
// The seq machine

// process applies one batch in order. extra is a finished replay whose
// batches may fill a gap found among the batches held behind it.
func (s *stream) process(b inBatch, extra *replayResult, now time.Time) {
	switch {
	case !s.hasSeq:
		s.first(b, now)
	case b.seq == s.last+1:
		s.apply(b, false, now)
	case b.seq > s.last+1:
		s.gap(b, extra, now)
	case s.isDuplicate(b):
		s.st.Duplicates++
	default:
		s.restart(b, now)
	}
}

// first handles the first batch of a run of the publisher.
func (s *stream) first(b inBatch, now time.Time) {
	s.hasSeq, s.st.HasSeq, s.st.FirstSeq = true, true, b.seq
	switch {
	case b.seq == 0:
		s.apply(b, false, now)
	case s.st.Replay == "":
		s.last = b.seq - 1
		s.openLate(0, b.seq-1, 0, 0, now,
			fmt.Sprintf("first seq %d and no replay endpoint: earlier blocks unknown", b.seq))
		s.apply(b, false, now)
	default:
		s.last = b.seq - 1
		s.hold(b)
		s.startJob(&replayJob{from: 0, to: b.seq - 1, join: true}, now)
	}
}

func (s *stream) gap(b inBatch, extra *replayResult, now time.Time) {
	from, to := s.last+1, b.seq-1
	n := to - from + 1
	s.st.Gaps++
	s.st.Missing += n
	inc := s.incident("gap", from, to, now)
	inc.Missing = n
	switch {
	case extra.covers(to): // the replay that just ended already holds them
		s.fillGap(from, to, extra, inc, now)
		s.apply(b, false, now)
	case s.st.Replay == "":
		s.fillGap(from, to, nil, inc, now)
		inc.Note = "no replay endpoint"
		s.apply(b, false, now)
	default:
		s.hold(b)
		s.startJob(&replayJob{from: from, to: to, inc: inc}, now)
	}
}

func (s *stream) restart(b inBatch, now time.Time) {
	prev := s.last
	s.env.emit(&collectors.StreamReset{Worker: s.st.Worker, Rank: s.st.Rank, Reason: "restart", At: now})
	s.st.Restarts++
	inc := s.incident("restart", b.seq, b.seq, now)
	inc.End = now
	inc.Note = fmt.Sprintf("seq went back from %d to %d: publisher restarted, its blocks dropped", prev, b.seq)
	s.clearIncomplete(now, "publisher restarted")
	s.hasSeq = false
	s.recent = [recentSeqs]struct {
		seq, fp uint64
		ok      bool
	}{}
	s.first(b, now)
}

func (s *stream) isDuplicate(b inBatch) bool {
	r := s.recent[b.seq%recentSeqs]
	return r.ok && r.seq == b.seq && r.fp == b.fp
}

// hold puts b in front of the held batches: it is older than all of them.
func (s *stream) hold(b inBatch) {
	s.held = append(s.held, inBatch{})
	copy(s.held[1:], s.held)
	s.held[0] = b
}

// drain applies held batches in order until none is left or one opens a
// new replay.
func (s *stream) drain(extra *replayResult, now time.Time) {
	for len(s.held) > 0 && s.job == nil {
		b := s.held[0]
		s.held[0] = inBatch{}
		s.held = s.held[1:]
		s.process(b, extra, now)
	}
	if len(s.held) == 0 {
		s.held = nil
	}
}

// apply sends one batch to the pool and counts it.
func (s *stream) apply(b inBatch, replayed bool, now time.Time) {
	s.last = b.seq
	s.st.LastSeq = b.seq
	slot := &s.recent[b.seq%recentSeqs]
	slot.seq, slot.fp, slot.ok = b.seq, b.fp, true
	if b.err != nil {
		s.st.DecodeErrors++
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("batch seq %d: %v", b.seq, b.err)})
		s.openLost(b.seq, b.seq, now, fmt.Sprintf("batch seq %d could not be decoded: its events are unknown", b.seq))
		return
	}
	topic := b.topic
	if topic == "" { // legacy replay replies carry no topic
		topic = s.st.Topic
	}
	s.env.emit(&collectors.EventBatch{
		Worker: s.st.Worker, Rank: s.st.Rank, Endpoint: s.st.Endpoint, Topic: topic,
		Seq: b.seq, TS: b.batch.TS, Events: b.batch.Events, Replayed: replayed, At: now,
	})
	s.st.Batches++
	s.st.Events += uint64(len(b.batch.Events))
	s.st.LastTS = b.batch.TS
	st := b.batch.Stats
	s.st.UnknownEvents += uint64(st.Skipped())
	if st.Malformed > 0 {
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("batch seq %d: %d malformed event(s) skipped, rest kept (%s)", b.seq, st.Malformed, st.FirstMalformed)})
	}
	if !s.toldSkip && st.UnknownEvents+st.UnknownFields > 0 {
		s.toldSkip = true
		what := fmt.Sprintf("%d unknown field(s)", st.UnknownFields)
		if st.UnknownEvents > 0 {
			what = fmt.Sprintf("%d event(s) of unknown type %q and %s", st.UnknownEvents, st.FirstUnknown, what)
		}
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("batch seq %d: skipped %s; counted in unknown_events from now on", b.seq, what)})
	}
	for i := range b.batch.Events {
		if b.batch.Events[i].Kind == collectors.AllBlocksCleared {
			s.clearIncomplete(now, fmt.Sprintf("AllBlocksCleared at seq %d", b.seq))
		}
	}
}
