package natsevents

import (
	"fmt"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/internal/streamhealth"
	"github.com/kvtop/kvtop/snapshot"
)

// pubKey is one publisher as kvtop shows it: a worker's dp rank.
type pubKey struct {
	name string
	rank int
}

const recentIDs = 256 // event ids remembered to tell a redelivery from a restart

type applied struct {
	id, fp uint64
	ok     bool
}

// pub is the event-id machine of one publisher. The state goroutine owns
// it: no locks.
type pub struct {
	r      *runner
	key    pubKey
	source string

	workerID uint64 // the Dynamo worker id of the current run
	pubID    uint64 // the ZMQ event plane publisher id of its last message
	// Health is its status, incidents and open losses (streamhealth).
	streamhealth.Health
	hasID  bool
	last   uint64 // highest event id accounted for
	seqAt  uint64 // JetStream stream sequence of the last event applied
	recent [recentIDs]applied

	connected, everConnected, evicted bool

	job  *replayJob
	held []inMsg                // live events waiting behind job, in arrival order
	acc  *collectors.EventBatch // events applied, not sent yet (apply)

}

func newPub(r *runner, k pubKey, subject string, now time.Time) *pub {
	p := &pub{r: r, key: k, source: fmt.Sprintf("%s events rank %d", k.name, k.rank)}
	p.Limit = r.o.Incidents
	p.St.Worker, p.St.Rank = k.name, k.rank
	p.St.Endpoint, p.St.Topic = r.shown, subject
	if j := r.o.JetStream; j != nil {
		p.St.Replay = "jetstream " + j.Stream
	}
	return p
}

// state derives the published state; the order is the priority.
func (p *pub) state() snapshot.StreamState {
	switch {
	case p.evicted, p.everConnected && !p.connected:
		return snapshot.StreamDisconnected
	case !p.everConnected:
		return snapshot.StreamConnecting
	}
	return p.State(p.job != nil)
}

func (p *pub) setConnected(up bool, now time.Time) {
	if up == p.connected {
		return
	}
	p.connected, p.Dirty = up, true
	switch {
	case up:
		p.everConnected = true
		if p.DiscInc != nil {
			p.DiscInc.End = now
			p.DiscInc = nil
		}
	case p.everConnected:
		p.DiscInc = p.Incident("disconnected", p.last, p.last, now)
		switch {
		case p.r.zup != nil:
			p.DiscInc.Note = "link to the publisher lost; libzmq reconnects (events published meanwhile are lost: the event plane keeps none)"
		case p.r.o.JetStream == nil:
			p.DiscInc.Note = "NATS connection lost; nats.go reconnects (core NATS: events published meanwhile are lost)"
		default:
			p.DiscInc.Note = "NATS connection lost; nats.go reconnects"
		}
	}
	p.flush(now, false)
}

// end is the publisher's last status: discovery withdrew it (its pod
// deleted, its worker re-registered under a new publisher). Not a gap,
// nor a disconnection to wait out: it is gone.
func (p *pub) end(why string, now time.Time) {
	p.evicted = true
	if p.DiscInc != nil {
		p.DiscInc.End = now
		p.DiscInc = nil
	}
	inc := p.Incident("gone", p.last, p.last, now)
	inc.End, inc.Note = now, why
	p.flush(now, true)
}

// onMsg takes one live message.
func (p *pub) onMsg(m inMsg, now time.Time) {
	p.setConnected(true, now)
	p.St.LastMessage = now
	p.Dirty = true
	if p.job != nil && len(p.held) >= p.r.o.HoldBack {
		p.abandon(now, fmt.Sprintf("replay given up: %d live events held behind it", len(p.held)))
	}
	if p.job != nil {
		p.held = append(p.held, m)
	} else {
		p.process(m, now)
	}
	p.flush(now, false)
}

// process applies one event in order. The rules are Dynamo's router's
// (lib/llm/src/kv_router/subscriber): ids grow by one per (worker,
// dp_rank); a jump is a gap; the first event of a worker may start late.
func (p *pub) process(m inMsg, now time.Time) {
	id := m.ev.ID
	switch {
	case !p.hasID:
		p.first(m, now)
	case m.ev.WorkerID != p.workerID:
		// Dynamo gives each worker process an id of its own: another id
		// for the same worker and rank is a new process.
		p.restart(m, now, fmt.Sprintf("worker id changed from %d to %d: a new Dynamo worker process; its old blocks dropped", p.workerID, m.ev.WorkerID))
	case id == p.last+1:
		p.apply(m, false, now)
	case id > p.last+1:
		p.gap(m, now)
	case p.isDuplicate(m):
		p.St.Duplicates++
	default:
		p.restart(m, now, fmt.Sprintf("event id went back from %d to %d with other content: the worker restarted under the same id; its blocks dropped", p.last, id))
	}
}

// first starts a run: Dynamo numbers a publisher's events from 1 (older
// releases from 0), so a later first id means kvtop joined late.
func (p *pub) first(m inMsg, now time.Time) {
	id := m.ev.ID
	p.hasID, p.St.HasSeq, p.St.FirstSeq, p.workerID = true, true, id, m.ev.WorkerID
	if id > 1 {
		p.last = id - 1
		inc := p.Incident("joined_late", 1, id-1, now)
		inc.Missing = id - 1
		inc.Note = p.lateNote(id)
		p.LateInc = inc
	}
	p.apply(m, false, now)
}

func (p *pub) lateNote(id uint64) string {
	j := p.r.o.JetStream
	switch {
	case p.r.zup != nil:
		return fmt.Sprintf("first event id %d: kvtop joined while the worker was publishing (Dynamo's ZMQ event plane keeps no history); blocks stored before are unknown", id)
	case j == nil:
		return fmt.Sprintf("first event id %d: kvtop joined while the worker was publishing (core NATS keeps no history); blocks stored before are unknown", id)
	}
	all, fresh, ago, _ := j.start()
	switch {
	case all:
		return fmt.Sprintf("first event id %d in stream %s: earlier ones are no longer in it (its max_age, or the router's purge after a snapshot); blocks stored before are unknown", id, j.Stream)
	case fresh:
		return fmt.Sprintf("first event id %d: kvtop reads %s from now on (start: new); blocks stored before are unknown", id, j.Stream)
	}
	return fmt.Sprintf("first event id %d: kvtop reads %s from %s ago (start); blocks stored before are unknown", id, j.Stream, ago)
}

func (p *pub) gap(m inMsg, now time.Time) {
	from, to := p.last+1, m.ev.ID-1
	inc := p.OpenGap(from, to, now)
	if p.r.o.JetStream != nil && p.seqAt > 0 && m.streamSeq > p.seqAt+1 {
		p.hold(m)
		p.startJob(&replayJob{from: from, to: to, fromSeq: p.seqAt + 1, toSeq: m.streamSeq - 1, inc: inc}, now)
		return
	}
	why := "core NATS keeps no history to replay from"
	switch {
	case p.r.zup != nil:
		why = "Dynamo's ZMQ event plane keeps no history (its own recovery is a request-plane query kvtop does not make)"
	case p.r.o.JetStream != nil && p.seqAt > 0 && m.streamSeq == p.seqAt+1:
		why = "not in the JetStream stream either: the worker never published them (Dynamo counts these in engines_dropped_events)"
	case p.r.o.JetStream != nil:
		why = "no stream position to replay from"
	}
	p.Lose(from, to, inc, why, now)
	inc.End, inc.Note = now, why
	p.apply(m, false, now)
}

// restart drops the publisher's blocks and starts a new run with m.
func (p *pub) restart(m inMsg, now time.Time, why string) {
	p.emit(&collectors.StreamReset{Worker: p.key.name, Rank: p.key.rank, Reason: "restart", At: now})
	p.St.Restarts++
	inc := p.Incident("restart", m.ev.ID, m.ev.ID, now)
	inc.End, inc.Note = now, why
	p.ClearIncomplete(now, "publisher restarted")
	p.hasID, p.seqAt = false, 0
	p.recent = [recentIDs]applied{}
	p.first(m, now)
}

func (p *pub) isDuplicate(m inMsg) bool {
	a := p.recent[m.ev.ID%recentIDs]
	return a.ok && a.id == m.ev.ID && a.fp == m.fp
}

func (p *pub) hold(m inMsg) {
	p.held = append(p.held, inMsg{})
	copy(p.held[1:], p.held)
	p.held[0] = m
}

// apply sends one event to the pool and counts it.
func (p *pub) apply(m inMsg, replayed bool, now time.Time) {
	p.last = m.ev.ID
	p.St.LastSeq = m.ev.ID
	if m.streamSeq > p.seqAt {
		p.seqAt = m.streamSeq
	}
	p.recent[m.ev.ID%recentIDs] = applied{id: m.ev.ID, fp: m.fp, ok: true}
	if m.err != nil {
		p.St.DecodeErrors++
		p.St.Malformed++
		p.emit(&collectors.SourceError{Source: p.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("event id %d: %s", m.ev.ID, oneLine(m.err.Error()))})
		p.OpenLost(m.ev.ID, m.ev.ID, now, fmt.Sprintf("event id %d could not be read: its blocks are unknown", m.ev.ID))
		return
	}
	// The events of one message applied in a row go to the pool as one
	// batch (Dynamo sends up to 128 a message): one publisher lookup
	// there, its removals prefetched together. Seq is the last event id.
	// A message of one event is a batch of one, as before batching.
	if a := p.acc; a != nil && (a.Replayed != replayed || a.Topic != m.subject) {
		p.flushAcc()
	}
	b := p.acc
	if b == nil {
		b = &collectors.EventBatch{Worker: p.key.name, Rank: p.key.rank, Endpoint: p.St.Endpoint, Topic: m.subject, Replayed: replayed}
		p.acc = b
		p.r.accPubs = append(p.r.accPubs, p)
	}
	b.Seq, b.At = m.ev.ID, now
	if m.ev.PublishedMS > 0 {
		b.TS = float64(m.ev.PublishedMS) / 1000
		p.St.LastTS = b.TS
	}
	if m.ev.KV.Kind != 0 {
		b.Events = append(b.Events, m.ev.KV)
		p.St.Events++
	} else {
		p.St.UnknownEvents++
		collectors.CountUnknown(&p.St.UnknownByType, m.ev.Unknown, 1)
	}
	p.St.UnknownFields += uint64(m.ev.UnknownFields)
	p.St.Batches++
	if !m.more {
		defer p.flushAcc() // the message's last event: its batch goes now
	}
	if m.ev.KV.Kind == collectors.AllBlocksCleared {
		p.ClearIncomplete(now, fmt.Sprintf("cleared at event id %d", m.ev.ID))
	}
	if !p.ToldSkip && (m.ev.Unknown != "" || m.ev.UnknownFields > 0) {
		p.ToldSkip = true
		what := fmt.Sprintf("%d unknown field(s)", m.ev.UnknownFields)
		if m.ev.Unknown != "" {
			what = fmt.Sprintf("an event of kind %q (counted in unknown_events) and %s", m.ev.Unknown, what)
		}
		p.emit(&collectors.SourceError{Source: p.source, Kind: "decode", At: now,
			Message: fmt.Sprintf("event id %d: skipped %s; a newer Dynamo, harmless; reported once", m.ev.ID, what)})
	}
}

// flushAcc sends the batch of events applied so far, if any.
func (p *pub) flushAcc() {
	if b := p.acc; b != nil {
		p.acc = nil
		p.r.emit(b)
	}
}

// emit sends one observation of this publisher after the events applied
// before it: the pool sees them in the order they happened.
func (p *pub) emit(o collectors.Observation) {
	p.flushAcc()
	p.r.emit(o)
}

// drain applies held events in order until none is left or one opens a
// new replay.
func (p *pub) drain(now time.Time) {
	for len(p.held) > 0 && p.job == nil {
		m := p.held[0]
		p.held[0] = inMsg{}
		p.held = p.held[1:]
		p.process(m, now)
	}
	if len(p.held) == 0 {
		p.held = nil
	}
}

// ---------------------------------------------------------------------------
// Incidents and status

// flush sends the status at once on a state change, else at most every
// StatusEvery while something changed.
func (p *pub) flush(now time.Time, force bool) {
	if st := p.Due(p.state(), now, force, p.r.o.StatusEvery); st != nil {
		p.emit(st)
	}
}
