package natsevents

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvtop/kvtop/collectors"
)

// replayJob is the one replay a publisher may have open: the event ids of
// a gap, and the stream positions between which they must be (after the
// last event applied, before the one that showed the gap).
type replayJob struct {
	id             uint64
	from, to       uint64 // event ids wanted
	fromSeq, toSeq uint64 // stream sequences to read
	inc            *collectors.StreamIncident
	since          time.Time
	cancel         func()

	next    uint64 // lowest id of from..to not yet accounted for
	got     uint64
	purged  bool // the stream no longer starts at fromSeq
	started uint64
}

// replayChunk is what a replay goroutine hands over as messages arrive.
type replayChunk struct {
	key   pubKey
	id    uint64
	msgs  []inMsg // this publisher's events of the range, in stream order
	first uint64  // (first chunk) the first stream sequence delivered
	done  bool
	err   error
}

// replayChunkMsgs bounds a hand-over: a replay holds little memory however
// long its range.
const replayChunkMsgs = 256

func (p *pub) startJob(j *replayJob, now time.Time) {
	j.id = p.r.nextID()
	j.since, j.next = now, j.from
	p.job = j
	p.r.launchReplay(p, j)
}

// launchReplay reads the stream range in a goroutine of its own (at most
// MaxReplays at once), with an ordered consumer from fromSeq, keeping only
// this publisher's events.
func (r *runner) launchReplay(p *pub, j *replayJob) {
	ctx, cancel := context.WithCancel(r.ctx)
	j.cancel = cancel
	r.mu.Lock()
	st := r.js
	r.mu.Unlock()
	key, id, workerID := p.key, j.id, p.workerID
	r.replays.Add(1)
	go func() {
		defer r.replays.Done()
		defer cancel()
		send := func(c *replayChunk) bool {
			select {
			case r.chunks <- c:
				return true
			case <-ctx.Done():
				return false
			}
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-r.sem }()
		if st == nil {
			send(&replayChunk{key: key, id: id, done: true, err: errors.New("no JetStream stream")})
			return
		}
		first, err := r.readRange(ctx, st, j.fromSeq, j.toSeq, func(m inMsg) bool { return r.belongs(m, key, workerID) }, func(c []inMsg, first uint64) bool {
			return send(&replayChunk{key: key, id: id, msgs: c, first: first})
		})
		if ctx.Err() != nil {
			return
		}
		send(&replayChunk{key: key, id: id, first: first, done: true, err: err})
	}()
}

// belongs reports whether a replayed message is the publisher's.
func (r *runner) belongs(m inMsg, key pubKey, workerID uint64) bool {
	if !m.ev.HasWorker || !m.ev.HasID || m.ev.WorkerID != workerID || m.ev.Rank != key.rank {
		return false
	}
	name := ""
	if r.o.Resolve != nil {
		name = r.o.Resolve(m.ev.WorkerID)
	}
	if name == "" {
		name = workerName(m.ev.WorkerID)
	}
	return name == key.name
}

// readRange reads stream sequences from..to with an ordered consumer,
// decoding each message and handing those keep accepts over in chunks. It
// returns the first sequence delivered (later than from: the stream was
// purged or aged meanwhile). It stops at to, after ReplayTimeout without a
// message, or at an error.
func (r *runner) readRange(ctx context.Context, st jetstream.Stream, from, to uint64, keep func(inMsg) bool, hand func([]inMsg, uint64) bool) (uint64, error) {
	var filter []string
	if r.o.Subject != "" {
		filter = []string{r.o.Subject}
	}
	cctx, cancel := context.WithTimeout(ctx, r.o.ReplayTimeout)
	cons, err := st.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filter, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		InactiveThreshold: time.Minute,
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("jetstream consumer from seq %d: %w", from, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, fmt.Errorf("jetstream messages: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var (
		first uint64
		chunk []inMsg
	)
	for {
		msg, err := nextWithin(it, r.o.ReplayTimeout)
		if err != nil {
			if len(chunk) > 0 && !hand(chunk, first) {
				return first, ctx.Err()
			}
			if ctx.Err() != nil {
				return first, ctx.Err()
			}
			return first, err
		}
		md, err := msg.Metadata()
		if err != nil {
			continue
		}
		seq := md.Sequence.Stream
		if first == 0 {
			first = seq
		}
		if seq > to {
			break
		}
		data := msg.Data()
		m := inMsg{size: len(data), subject: msg.Subject(), streamSeq: seq, at: time.Now()}
		if len(data) > r.o.MaxMessageBytes {
			m.err = errOversized
		} else {
			m.err = Decode(data, &m.ev) // a fresh Event: its hashes are its own
			m.fp = maphash.Bytes(r.seed, data)
		}
		if keep(m) {
			chunk = append(chunk, m)
			if len(chunk) >= replayChunkMsgs {
				if !hand(chunk, first) {
					return first, ctx.Err()
				}
				chunk = nil
			}
		}
		if seq >= to {
			break
		}
	}
	if len(chunk) > 0 && !hand(chunk, first) {
		return first, ctx.Err()
	}
	return first, nil
}

var errReplayIdle = errors.New("no message from JetStream")

// nextWithin is it.Next bounded by d: the stream may end before the range.
func nextWithin(it jetstream.MessagesContext, d time.Duration) (jetstream.Msg, error) {
	m, err := it.Next(jetstream.NextMaxWait(d))
	if errors.Is(err, nats.ErrTimeout) {
		return nil, fmt.Errorf("%w for %s", errReplayIdle, d)
	}
	return m, err
}

// onChunk applies replayed events of the open job as they arrive.
func (p *pub) onChunk(c *replayChunk, now time.Time) {
	j := p.job
	if j == nil || c.id != j.id {
		return // abandoned or superseded
	}
	p.Dirty = true
	if c.first > j.fromSeq && j.started == 0 {
		j.purged = true
	}
	if c.first > 0 && j.started == 0 {
		j.started = c.first
	}
	for _, m := range c.msgs {
		if m.err == errOversized {
			continue // its id stays missing: lost, said below
		}
		id := m.ev.ID
		if id < j.next || id > j.to {
			continue
		}
		if id > j.next {
			p.miss(j, j.next, id-1, now)
		}
		p.apply(m, true, now)
		p.St.Replayed++
		j.inc.Replayed++
		j.got++
		j.next = id + 1
	}
	if c.done {
		if c.err != nil {
			kind := "replay"
			if errors.Is(c.err, errReplayIdle) {
				kind = "timeout"
			}
			p.emit(&collectors.SourceError{Source: p.source, Kind: kind, At: now,
				Message: fmt.Sprintf("replay of event ids %d..%d from stream seq %d: %s", j.from, j.to, j.fromSeq, oneLine(c.err.Error()))})
		}
		p.finish(j, c.err, now)
	}
	p.flush(now, false)
}

// miss accounts for ids of the range the stream did not hold.
func (p *pub) miss(j *replayJob, from, to uint64, now time.Time) {
	why := "not in the JetStream stream between the events around them: the worker never published them (Dynamo counts these in engines_dropped_events)"
	if j.purged {
		why = "no longer in the JetStream stream (aged out, or purged after the router's snapshot)"
	}
	p.Lose(from, to, j.inc, why, now)
	if j.inc.Note == "" {
		j.inc.Note = why
	}
}

// finish closes the job: what is still missing of its range is lost, then
// the held live events are applied.
func (p *pub) finish(j *replayJob, err error, now time.Time) {
	p.job = nil
	if j.next <= j.to {
		if err != nil {
			p.Lose(j.next, j.to, j.inc, "replay incomplete: "+oneLine(err.Error()), now)
			if j.inc.Note == "" {
				j.inc.Note = "replay incomplete: " + oneLine(err.Error())
			}
		} else {
			p.miss(j, j.next, j.to, now)
		}
	}
	p.last = max(p.last, j.to)
	j.inc.End = now
	p.drain(now)
}

// abandon gives up the open replay: its unrecovered ids are lost and the
// held events are applied.
func (p *pub) abandon(now time.Time, why string) {
	j := p.job
	if j.cancel != nil {
		j.cancel()
	}
	p.emit(&collectors.SourceError{Source: p.source, Kind: "replay", At: now, Message: why})
	if j.inc.Note == "" {
		j.inc.Note = why
	}
	p.finish(j, errors.New(why), now)
}
