package kvevents

import (
	"fmt"
	"math"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/streamhealth"
	"github.com/kvtop/kvtop/collectors/internal/zlink"
	"github.com/kvtop/kvtop/snapshot"
)

// inBatch is one received (live or replayed) batch, decoded off the state
// goroutine.
type inBatch struct {
	seq   uint64
	topic string
	batch Batch
	err   error  // the payload is not a batch
	fp    uint64 // fingerprint: tells a duplicate from a restarted publisher
	cost  int64  // what keeping it costs (batchCost): the queue budgets count this
	// check marks a live batch that arrived after a reconnect, before the
	// stream was seen to continue in order: a seq jump must be verified.
	check bool
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

// env is what a stream needs from the collector's state goroutine.
type env interface {
	emit(collectors.Observation)
	launchReplay(s *stream, j *replayJob)
	nextID() uint64
	// holdBytes counts n bytes more (negative: fewer) held for replays.
	holdBytes(n int64)
	// makeRoom gives replays up (this stream's or others') until n more
	// bytes fit what replays may hold.
	makeRoom(n int64, now time.Time)
}

const recentSeqs = 256 // seqs remembered for duplicate detection

// applied remembers one applied batch: its seq and fingerprint.
type applied struct {
	seq, fp uint64
	ok      bool
}

// stream is the seq state machine of one publisher (worker, rank). It is
// owned by the collector's single state goroutine: no locks.
type stream struct {
	env    env
	o      *Options
	source string // "w0 events rank 0"

	monitored     bool       // connect mode: the socket monitor reports the TCP link
	rd            *subReader // connect mode: the SUB reader (its lifetime and drops)
	connected     bool
	everConnected bool
	evicted       bool // centralized layout: forgotten after IdleEvict without a batch

	// Health is its status, incidents and open losses (streamhealth).
	streamhealth.Health
	hasSeq bool
	last   uint64 // highest seq accounted for (applied or given up)
	job    *replayJob
	held   []inBatch // live batches waiting behind job, in arrival order
	// heldBytes is the cost of held and of the job's replayed batches past
	// its range (extra): what giving this replay up would free.
	heldBytes int64
	lastJob   time.Time // start of the last replay (cooldown)
	recent    [recentSeqs]applied
	lastApp   applied // the last batch applied: what a reconnect is checked against
	// unverified is set by a disconnect: the publisher may have restarted
	// meanwhile, so the first seq jump after it is checked by replay.
	unverified bool
	firstSeq   uint64 // configured: no seq below it exists (Endpoint.FirstSeq)
	from1      bool   // the publisher was seen to count from 1 (llm-d-inference-sim)

	// Rate limits of the errors about oversized messages and drops.
	saidOversized, saidDropped time.Time
}

func newStream(e env, o *Options, worker string, rank int, endpoint, replay, topic string, firstSeq uint64, monitored bool) *stream {
	s := &stream{env: e, o: o, monitored: monitored, firstSeq: firstSeq}
	s.Limit = o.Incidents
	s.source = fmt.Sprintf("%s events rank %d", worker, rank)
	s.St.Worker, s.St.Rank = worker, rank
	s.St.Endpoint, s.St.Replay, s.St.Topic = endpoint, replay, topic
	return s
}

// state derives the published state; the order is the priority.
func (s *stream) state() snapshot.StreamState {
	switch {
	case s.evicted:
		return snapshot.StreamDisconnected
	case s.monitored && !s.connected && !s.everConnected:
		return snapshot.StreamConnecting
	case s.monitored && !s.connected:
		return snapshot.StreamDisconnected
	}
	return s.State(s.job != nil)
}

// ---------------------------------------------------------------------------
// Inputs (each ends with a status flush)

func (s *stream) onBatch(b inBatch, now time.Time) {
	s.setConnected(now)
	s.St.LastMessage = now
	if b.topic != "" {
		s.St.Topic = b.topic
	}
	b.check = s.unverified
	s.Dirty = true
	if s.job != nil && len(s.held) >= s.o.HoldBack {
		s.abandon(now, fmt.Sprintf("replay given up: %d live batches held behind it", len(s.held)))
	}
	if s.job != nil {
		s.env.makeRoom(b.cost, now) // may give this replay up
	}
	if s.job != nil {
		s.held = append(s.held, b)
		s.heldBytes += b.cost
		s.env.holdBytes(b.cost)
	} else {
		s.process(b, nil, now)
	}
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
	s.connected, s.everConnected, s.Dirty = true, true, true
	if s.DiscInc != nil {
		s.DiscInc.End = now
		s.DiscInc = nil
	}
}

func (s *stream) onDisconnected(now time.Time) {
	if !s.connected {
		return
	}
	s.connected, s.Dirty = false, true
	s.unverified = s.unverified || s.hasSeq
	s.DiscInc = s.Incident("disconnected", s.last, s.last, now)
	s.DiscInc.Note = "TCP connection to the publisher lost; libzmq reconnects"
	s.flush(now, false)
}

// tick starts a replay whose cooldown has passed and sends pending status.
// It reports whether the stream still owes a status or waits to replay.
func (s *stream) tick(now time.Time) bool {
	if j := s.job; j != nil && !j.started && !now.Before(j.due) {
		s.launch(now)
	}
	s.flush(now, false)
	return s.Dirty || (s.job != nil && !s.job.started)
}

// ---------------------------------------------------------------------------
// The seq machine

// process applies one batch in order. extra holds replayed batches past the
// range of a replay that just ended: they may fill a gap found among the
// batches held behind it.
func (s *stream) process(b inBatch, extra *replayed, now time.Time) {
	switch {
	case !s.hasSeq:
		s.first(b, now)
	case b.seq == s.last+1:
		if b.check {
			s.unverified = false // the publisher continued where it was
		}
		s.apply(b, false, now)
	case b.seq > s.last+1 && b.check && s.unverified:
		s.checkJump(b, now)
	case b.seq > s.last+1:
		s.gap(b, extra, now)
	case s.isDuplicate(b):
		s.St.Duplicates++
	default:
		s.restart(b, now, fmt.Sprintf("seq went back from %d to %d: publisher restarted, its blocks dropped", s.last, b.seq))
	}
}

// first handles the first batch of a run of the publisher.
func (s *stream) first(b inBatch, now time.Time) {
	s.hasSeq, s.St.HasSeq, s.St.FirstSeq = true, true, b.seq
	from := s.lowestSeq()
	switch {
	case b.seq <= from:
		s.apply(b, false, now)
	case s.St.Replay == "":
		s.last = b.seq - 1
		// Every seq before the first one seen is unknown (as after a
		// replay that recovered nothing).
		s.openLate(from, b.seq-1, b.seq-from, 0, now,
			fmt.Sprintf("first seq %d and no replay endpoint: earlier blocks unknown", b.seq))
		s.apply(b, false, now)
	default:
		s.last = b.seq - 1
		s.hold(b, now)
		s.startJob(&replayJob{kind: jobJoin, from: from, to: b.seq - 1}, now)
	}
}

// lowestSeq is the first seq a run of the publisher can have: 0, or 1 for
// one configured or seen to count from 1.
func (s *stream) lowestSeq() uint64 {
	if s.from1 {
		return max(s.firstSeq, 1)
	}
	return s.firstSeq
}

func (s *stream) gap(b inBatch, extra *replayed, now time.Time) {
	from, to := s.last+1, b.seq-1
	inc := s.OpenGap(from, to, now)
	switch {
	case extra.covers(to): // the replay that just ended already holds them
		s.fillGap(from, to, extra, inc, "", now)
		s.apply(b, false, now)
	case s.St.Replay == "":
		s.fillGap(from, to, nil, inc, "no replay endpoint", now)
		s.apply(b, false, now)
	default:
		s.hold(b, now)
		s.startJob(&replayJob{kind: jobGap, from: from, to: to, inc: inc}, now)
	}
}

// checkJump handles the first seq jump after a reconnect. vLLM has no
// epoch: a publisher that restarted while kvtop was away and is already
// past the old seq looks like a gap. The replay from the last applied seq
// tells: the same run still holds that batch, byte for byte.
func (s *stream) checkJump(b inBatch, now time.Time) {
	if s.St.Replay == "" || !s.lastApp.ok {
		why := "no replay endpoint to tell a gap from a restart"
		if s.St.Replay != "" {
			why = "no applied batch to compare"
		}
		s.restart(b, now, fmt.Sprintf("seq jumped from %d to %d across a disconnect and %s: taken as a restart, its blocks dropped",
			s.last, b.seq, why))
		return
	}
	s.hold(b, now)
	s.startJob(&replayJob{kind: jobCheck, from: s.lastApp.seq, to: b.seq - 1, checkFP: s.lastApp.fp}, now)
}

// restart drops the publisher's blocks and starts a new run with b.
func (s *stream) restart(b inBatch, now time.Time, why string) {
	s.reset(b.seq, now, why)
	s.first(b, now)
}

// reset tells the pool to drop every block of the publisher: it restarted.
func (s *stream) reset(seq uint64, now time.Time, why string) {
	s.env.emit(&collectors.StreamReset{Worker: s.St.Worker, Rank: s.St.Rank, Reason: "restart", At: now})
	s.St.Restarts++
	inc := s.Incident("restart", seq, seq, now)
	inc.End = now
	inc.Note = why
	s.ClearIncomplete(now, "publisher restarted")
	s.hasSeq, s.unverified = false, false
	s.recent = [recentSeqs]applied{}
	s.lastApp = applied{}
}

func (s *stream) isDuplicate(b inBatch) bool {
	r := s.recent[b.seq%recentSeqs]
	return r.ok && r.seq == b.seq && r.fp == b.fp
}

// hold puts b in front of the held batches: it is older than all of them.
func (s *stream) hold(b inBatch, now time.Time) {
	s.held = append(s.held, inBatch{})
	copy(s.held[1:], s.held)
	s.held[0] = b
	s.env.makeRoom(b.cost, now) // others' replays: this one has not started
	s.heldBytes += b.cost
	s.env.holdBytes(b.cost)
}

// drain applies held batches in order until none is left or one opens a
// new replay.
func (s *stream) drain(extra *replayed, now time.Time) {
	for len(s.held) > 0 && s.job == nil {
		b := s.held[0]
		s.held[0] = inBatch{}
		s.held = s.held[1:]
		s.heldBytes -= b.cost
		s.env.holdBytes(-b.cost)
		s.process(b, extra, now)
	}
	if len(s.held) == 0 {
		s.held = nil
	}
}

// onOversized counts a live message libzmq refused (over MaxMsgSize) and
// closed the link for: the reader connects again.
func (s *stream) onOversized(now time.Time) {
	s.St.Oversized++
	s.Dirty = true
	note := zlink.OversizedNote("a message", s.o.MaxMsgSize) + "; kvtop connects again"
	if s.DiscInc != nil {
		s.DiscInc.Note = note
	}
	if s.saidOversized.IsZero() || now.Sub(s.saidOversized) >= refusalEvery {
		s.saidOversized = now
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "too_large", At: now,
			Message: fmt.Sprintf("%s (%d so far); the batches after it show as a gap", note, s.St.Oversized)})
	}
	s.flush(now, false)
}

// onDropped takes the reader's count of live batches dropped over the
// hand-off budget.
func (s *stream) onDropped(n uint64, now time.Time) {
	s.St.Dropped = n
	s.Dirty = true
	if s.saidDropped.IsZero() || now.Sub(s.saidDropped) >= refusalEvery {
		s.saidDropped = now
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "too_large", At: now,
			Message: dropMessage(n, s.o.handoffBudget())})
	}
	s.flush(now, false)
}

// apply sends one batch to the pool and counts it.
func (s *stream) apply(b inBatch, replayed bool, now time.Time) {
	s.last = b.seq
	s.St.LastSeq = b.seq
	s.lastApp = applied{seq: b.seq, fp: b.fp, ok: true}
	s.recent[b.seq%recentSeqs] = s.lastApp
	if b.err != nil {
		s.St.DecodeErrors++
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("batch seq %d: %v", b.seq, b.err)})
		s.OpenLost(b.seq, b.seq, now, fmt.Sprintf("batch seq %d could not be decoded: its events are unknown", b.seq))
		return
	}
	topic := b.topic
	if topic == "" { // legacy replay replies carry no topic
		topic = s.St.Topic
	}
	s.env.emit(&collectors.EventBatch{
		Worker: s.St.Worker, Rank: s.St.Rank, Endpoint: s.St.Endpoint, Topic: topic,
		Seq: b.seq, TS: b.batch.TS, Events: b.batch.Events, Replayed: replayed, At: now,
	})
	s.St.Batches++
	s.St.Events += uint64(len(b.batch.Events))
	s.St.LastTS = b.batch.TS
	for i := range b.batch.Events {
		if b.batch.Events[i].Kind == collectors.AllBlocksCleared {
			s.ClearIncomplete(now, fmt.Sprintf("AllBlocksCleared at seq %d", b.seq))
		}
	}
	s.countSkipped(b.seq, b.batch.Stats, now)
}

// countSkipped counts what the decoder stepped over. Unknown event types
// and fields are a newer producer: harmless, counted apart. A malformed
// known event is data loss: its blocks are unknown, so the history is
// incomplete. It is counted after the batch's AllBlocksCleared, if any: the
// decoder does not say which came first, and "incomplete" is the safe side.
func (s *stream) countSkipped(seq uint64, st Stats, now time.Time) {
	s.St.UnknownEvents += uint64(st.UnknownEvents)
	for tag, n := range st.UnknownByType {
		collectors.CountUnknown(&s.St.UnknownByType, tag, uint64(n))
	}
	s.St.UnknownFields += uint64(st.UnknownFields)
	if st.Malformed > 0 {
		s.St.Malformed += uint64(st.Malformed)
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("batch seq %d: %d malformed event(s) skipped, their blocks are unknown (%s)", seq, st.Malformed, st.FirstMalformed)})
		s.OpenLost(seq, seq, now, fmt.Sprintf("batch seq %d: %d event(s) could not be read: their blocks are unknown", seq, st.Malformed))
	}
	if !s.ToldSkip && st.UnknownEvents+st.UnknownFields > 0 {
		s.ToldSkip = true
		what := fmt.Sprintf("%d unknown field(s) (counted in unknown_fields)", st.UnknownFields)
		if st.UnknownEvents > 0 {
			what = fmt.Sprintf("%d event(s) of unknown type %q (counted in unknown_events) and %s", st.UnknownEvents, st.FirstUnknown, what)
		}
		s.env.emit(&collectors.SourceError{Source: s.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("batch seq %d: skipped %s; a newer producer, harmless; reported once", seq, what)})
	}
}
