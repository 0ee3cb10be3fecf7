package kvevents

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

type jobKind uint8

const (
	jobGap   jobKind = iota // recover the seqs of a gap
	jobJoin                 // recover the history before the first live batch
	jobCheck                // after a reconnect: same run, or a restarted publisher?
)

// maxExtraBytes bounds the replayed batches past a job's range kept to fill
// gaps among the held live batches (batchCost bytes; they also count in
// what replays hold, and take at most a quarter of it). Past it the replay
// stops: a later gap gets its own replay.
const maxExtraBytes = 32 << 20

// vllmRing is the replay buffer of vLLM and SGLang by default
// (buffer_steps), in batches: a ring that evicted seq 0 holds that many.
const vllmRing = 10000

// Why seqs of a gap were not recovered (incident notes).
const (
	noteEvicted    = "seqs no longer in the publisher's replay buffer"
	noteIncomplete = "replay incomplete: seqs the publisher holds did not arrive"
)

// replayJob is the one replay a publisher may have open. Its batches arrive
// in chunks, in seq order, and are applied as they come: a replay holds
// little memory however long it is.
type replayJob struct {
	id       uint64
	kind     jobKind
	from, to uint64 // seqs wanted (jobCheck: from is the seq to compare)
	checkFP  uint64 // jobCheck: fingerprint kvtop applied for seq from
	inc      *collectors.StreamIncident
	since    time.Time // when the job was opened
	due      time.Time // cooldown: not before
	started  bool
	cancel   func()

	next       uint64 // lowest seq of from..to not yet accounted for
	first      uint64 // first seq the publisher replayed (hasFirst)
	hasFirst   bool
	got        uint64 // seqs of from..to recovered
	evicted    uint64 // missing before the first replayed seq: gone from the buffer
	incomplete uint64 // missing after it: the publisher had them, they did not arrive
	extra      []inBatch
	extraBytes int64
}

// replayChunk is what a replay goroutine hands over as replies arrive.
type replayChunk struct {
	stream  *stream
	id      uint64
	batches []inBatch // in seq order, unique, above those of earlier chunks
	done    bool      // the last chunk of this replay: f says how it ended
	f       fetched
}

// cost is what the chunk's batches hold (counted in runner.held).
func (c *replayChunk) cost() int64 { return costOf(c.batches) }

func costOf(bs []inBatch) int64 {
	var n int64
	for i := range bs {
		n += bs[i].cost
	}
	return n
}

// replayed is what a finished replay leaves for the held batches: its
// batches past the job's range, in seq order, and the first seq it brought
// at all (the publisher's buffer held everything from there on).
type replayed struct {
	batches []inBatch
	first   uint64
}

// covers reports whether the replay answered past to: what is absent up to
// there did not arrive although the publisher had it.
func (r *replayed) covers(to uint64) bool {
	return r != nil && len(r.batches) > 0 && r.batches[len(r.batches)-1].seq >= to
}

// in returns the replayed batches with from ≤ seq ≤ to.
func (r *replayed) in(from, to uint64) []inBatch {
	if r == nil {
		return nil
	}
	i := sort.Search(len(r.batches), func(i int) bool { return r.batches[i].seq >= from })
	j := sort.Search(len(r.batches), func(i int) bool { return r.batches[i].seq > to })
	return r.batches[i:j]
}

// startJob opens the publisher's one replay job: launched at once, or by
// tick once the cooldown since the previous replay has passed.
func (s *stream) startJob(j *replayJob, now time.Time) {
	j.id = s.env.nextID()
	j.since, j.due, j.next = now, now, j.from
	if !s.lastJob.IsZero() {
		if due := s.lastJob.Add(s.o.ReplayCooldown); due.After(now) {
			j.due = due
		}
	}
	s.job = j
	if !now.Before(j.due) {
		s.launch(now)
	}
}

func (s *stream) launch(now time.Time) {
	s.job.started = true
	s.lastJob = now
	s.env.launchReplay(s, s.job)
}

// onChunk applies replayed batches of the open job as they arrive. Every
// batch's cost is given back to the budget, except the extra ones it keeps.
func (s *stream) onChunk(c *replayChunk, now time.Time) {
	j := s.job
	if j == nil || c.id != j.id {
		s.env.holdBytes(-c.cost()) // abandoned or superseded
		return
	}
	s.Dirty = true
	for i, b := range c.batches {
		if j.kind == jobCheck {
			s.env.holdBytes(-b.cost) // the compared batch itself was applied long ago
			if !s.sameRun(j, &b, now) {
				s.env.holdBytes(-costOf(c.batches[i+1:]))
				s.flush(now, false)
				return
			}
			continue
		}
		if !s.take(j, b, now) {
			s.env.holdBytes(-costOf(c.batches[i:]))
			s.stop(j, now)
			s.flush(now, false)
			return
		}
	}
	if c.done {
		if c.f.oversized {
			s.St.Oversized++
		}
		if err := c.f.err; err != nil {
			kind := "replay"
			switch {
			case errors.Is(err, errReplayTimeout):
				kind = "timeout"
			case errors.Is(err, errReplayOversized), errors.Is(err, errReplayFull):
				kind = "too_large"
			}
			s.env.emit(&collectors.SourceError{Source: s.source, Kind: kind, At: now,
				Message: fmt.Sprintf("replay from seq %d via %s: %v", j.from, s.St.Replay, err)})
		}
		s.finish(j, c.f, now)
	}
	s.flush(now, false)
}

// sameRun settles a check job on its first replayed batch: the same run
// still holds the batch kvtop applied last, byte for byte. If so the job
// becomes the repair of the gap; if not the publisher restarted.
func (s *stream) sameRun(j *replayJob, b *inBatch, now time.Time) bool {
	if b.seq == j.from && b.fp == j.checkFP {
		s.unverified = false
		from := s.last + 1
		j.kind, j.from, j.next = jobGap, from, from
		j.first, j.hasFirst = b.seq, true
		j.inc = s.OpenGap(from, j.to, j.since)
		return true
	}
	why := "differs from the one applied"
	if b.seq != j.from {
		why = fmt.Sprintf("is gone (the replay starts at seq %d)", b.seq)
	}
	s.restartAfterCheck(j, why, now)
	return false
}

// restartAfterCheck: the jump after a reconnect is a new run of the
// publisher. Its blocks are dropped and the new run joins from seq 0.
func (s *stream) restartAfterCheck(j *replayJob, why string, now time.Time) {
	s.job = nil
	if j.cancel != nil {
		j.cancel()
	}
	s.reset(j.to+1, now, fmt.Sprintf("after a reconnect seq jumped from %d to %d and the publisher's batch %d %s: it restarted, its blocks dropped",
		s.last, j.to+1, j.from, why))
	s.drain(nil, now)
}

// take accounts for one replayed batch of a gap or join job. false: the
// replay has sent more than kvtop keeps (b is not kept); stop it.
func (s *stream) take(j *replayJob, b inBatch, now time.Time) bool {
	if !j.hasFirst {
		j.first, j.hasFirst = b.seq, true
		if end := min(b.seq, j.to+1); end > j.next {
			s.miss(j, j.next, end-1, true, now)
			j.next = end
		}
	}
	switch {
	case b.seq < j.next: // below the range
		s.env.holdBytes(-b.cost)
	case b.seq <= j.to:
		if b.seq > j.next {
			s.miss(j, j.next, b.seq-1, false, now)
		}
		s.apply(b, true, now)
		s.env.holdBytes(-b.cost)
		j.got++
		if j.kind == jobGap {
			s.St.Replayed++
			j.inc.Replayed++
		}
		j.next = b.seq + 1
	default: // past the range: kept for gaps among the held batches
		if j.extraBytes+b.cost > min(maxExtraBytes, s.o.heldBudget()/4) {
			return false // (kept until the job ends: never most of the budget)
		}
		j.extra = append(j.extra, b)
		j.extraBytes += b.cost
		s.heldBytes += b.cost
	}
	return true
}

// miss accounts for seqs of the job's range the replay did not bring.
// evicted: before the first replayed seq, gone from the publisher's ring;
// otherwise the publisher had them (its buffer is contiguous) and they did
// not arrive.
func (s *stream) miss(j *replayJob, from, to uint64, evicted bool, now time.Time) {
	n := to - from + 1
	if evicted {
		j.evicted += n
	} else {
		j.incomplete += n
	}
	if j.kind == jobGap {
		why := noteIncomplete
		if evicted {
			why = noteEvicted
		}
		s.Lose(from, to, j.inc, why, now)
	}
}

// stop ends a replay that outgrew what kvtop keeps: its range is done.
func (s *stream) stop(j *replayJob, now time.Time) {
	if j.cancel != nil {
		j.cancel()
	}
	s.finish(j, fetched{ended: true}, now)
}

// finish closes the job: what is still missing of its range is lost (or,
// for a join, unknown), then the held batches are applied.
func (s *stream) finish(j *replayJob, f fetched, now time.Time) {
	s.job = nil
	if j.kind == jobCheck { // not a single batch came back
		why := "is not in its replay buffer"
		if f.err != nil {
			why = fmt.Sprintf("could not be checked (%v)", f.err)
		}
		s.restartAfterCheck(j, why, now)
		return
	}
	ended := f.ended && f.err == nil
	if j.next <= j.to {
		// Only the end marker: everything asked for is gone. Otherwise
		// the answer broke off.
		s.miss(j, j.next, j.to, ended && !j.hasFirst, now)
		j.next = j.to + 1
	}
	s.last = j.to
	if j.kind == jobJoin {
		s.endJoin(j, f, now)
	} else {
		s.endGap(j, f.err, now)
	}
	first := j.first
	if !j.hasFirst {
		first = EndSeq
	}
	s.drain(&replayed{batches: j.extra, first: first}, now)
	s.heldBytes -= j.extraBytes
	s.env.holdBytes(-j.extraBytes)
	j.extra, j.extraBytes = nil, 0
}

func (s *stream) endGap(j *replayJob, err error, now time.Time) {
	j.inc.End = now
	if j.inc.Note == "" {
		j.inc.Note = gapNote(j.evicted, j.incomplete, j.inc.Missing, err)
	}
}

// gapNote says why seqs of a gap were lost ("" when none was).
func gapNote(evicted, incomplete, missing uint64, err error) string {
	var note string
	if evicted > 0 {
		note = fmt.Sprintf("%d of %d seqs no longer in the publisher's replay buffer", evicted, missing)
	}
	if incomplete > 0 {
		if note != "" {
			note += "; "
		}
		note += fmt.Sprintf("replay incomplete: %d of %d seqs the publisher holds did not arrive", incomplete, missing)
		if err != nil {
			note += fmt.Sprintf(" (%v)", err)
		}
	}
	return note
}

// endJoin decides whether a late join recovered the whole history, from
// what the replay returned. It did when every seq from the publisher's
// lowest one (0, or FirstSeq) up to the first live batch arrived. A replay
// from 0 that starts at 1 is the whole history too when nothing before it
// can exist: the publisher sent all it has (end marker) and that is fewer
// than vllmRing batches. A publisher counting from 0 whose ring evicted
// seq 0 holds a full ring, and vLLM's and SGLang's is 10 000 by default;
// so this is a publisher counting from 1 (llm-d-inference-sim), and it is
// remembered as such. Otherwise the stream is joined_late: that is not a
// loss of anything kvtop ever had, so missing/lost are not counted.
func (s *stream) endJoin(j *replayJob, f fetched, now time.Time) {
	whole := j.hasFirst && j.incomplete == 0
	switch {
	case whole && j.first == j.from:
		return
	case whole && j.first == 1 && j.from == 0 && f.marker && f.err == nil && f.replies < vllmRing:
		s.from1 = true
		return
	}
	note := fmt.Sprintf("first live seq %d; replay from %d recovered %d batch(es)", j.to+1, j.from, j.got)
	switch {
	case f.err != nil:
		note += fmt.Sprintf(" (%v)", f.err)
	case j.incomplete > 0:
		note += fmt.Sprintf("; replay incomplete: %d seq(s) the publisher holds did not arrive", j.incomplete)
	case j.hasFirst && j.first == 1:
		note += fmt.Sprintf("; the publisher's buffer starts at seq 1 and holds %d batch(es) or more: seq 0 was evicted from a full ring (vLLM counts from 0), unless the publisher counts from 1 (say first_seq: 1 for it)", f.replies)
	case j.hasFirst && j.first > 1:
		note += fmt.Sprintf("; the publisher's buffer starts at seq %d", j.first)
	}
	s.openLate(j.from, j.to, j.to+1-j.from-j.got, j.got, now, note)
}

// abandon gives up the open replay: its unrecovered seqs are lost (or, for
// a late join, stay unknown) and the held batches are applied.
func (s *stream) abandon(now time.Time, why string) {
	j := s.job
	if j.cancel != nil {
		j.cancel()
	}
	s.env.emit(&collectors.SourceError{Source: s.source, Kind: "replay", At: now, Message: why})
	if j.kind == jobGap && j.inc.Note == "" {
		j.inc.Note = why
	}
	s.finish(j, fetched{err: errors.New(why)}, now)
}

// fillGap applies what src, a finished replay, holds of from..to in seq
// order; every other seq is lost: evicted below the replay's first seq,
// "replay incomplete" above it. Without a replay (src nil) they are lost
// for the reason why. Applying in seq order keeps an AllBlocksCleared
// inside the range meaningful: it ends a loss before it.
func (s *stream) fillGap(from, to uint64, src *replayed, inc *collectors.StreamIncident, why string, now time.Time) {
	var evicted, incomplete uint64
	missed := func(from, to uint64) {
		if src == nil {
			s.Lose(from, to, inc, why, now)
			return
		}
		if from < src.first {
			end := min(to, src.first-1)
			s.Lose(from, end, inc, noteEvicted, now)
			evicted += end - from + 1
			from = end + 1
		}
		if from <= to {
			s.Lose(from, to, inc, noteIncomplete, now)
			incomplete += to - from + 1
		}
	}
	next := from
	for _, b := range src.in(from, to) {
		if b.seq > next {
			missed(next, b.seq-1)
		}
		s.apply(b, true, now)
		s.St.Replayed++
		inc.Replayed++
		next = b.seq + 1
	}
	if next <= to {
		missed(next, to)
	}
	s.last = to
	inc.End = now
	switch {
	case inc.Lost == 0 || inc.Note != "":
	case src == nil:
		inc.Note = why
	default:
		inc.Note = gapNote(evicted, incomplete, inc.Missing, nil)
	}
}
