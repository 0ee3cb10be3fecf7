package kvevents

import (
	"fmt"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// startJob opens the publisher's one replay job: launched at once, or by
// tick once the cooldown since the previous replay has passed.
func (s *stream) startJob(j *replayJob, now time.Time) {
	j.id = s.env.nextID()
	j.due = now
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

// abandon gives up the open replay: its seqs are lost (or, for a late join,
// stay unknown) and the held batches are applied.
func (s *stream) abandon(now time.Time, why string) {
	j := s.job
	s.job = nil
	if j.cancel != nil {
		j.cancel()
	}
	s.env.emit(&collectors.SourceError{Source: s.source, Kind: "replay", At: now, Message: why})
	if j.join {
		s.fillJoin(j, &replayResult{}, now)
	} else {
		s.fillGap(j.from, j.to, nil, j.inc, now)
		j.inc.Note = why
	}
	s.drain(nil, now)
}

// fillGap applies the replayed batches of from..to in order; every seq
// without one is lost. Applying in seq order keeps an AllBlocksCleared
// inside the range meaningful: it ends a loss that happened before it.
func (s *stream) fillGap(from, to uint64, r *replayResult, inc *collectors.StreamIncident, now time.Time) {
	next := from
	for _, b := range r.in(from, to) {
		if b.seq > next {
			s.lose(next, b.seq-1, inc, now)
		}
		s.apply(b, true, now)
		s.st.Replayed++
		inc.Replayed++
		next = b.seq + 1
	}
	if next <= to {
		s.lose(next, to, inc, now)
	}
	s.last = to
	inc.End = now
	if inc.Lost > 0 && inc.Note == "" {
		inc.Note = fmt.Sprintf("%d of %d seqs no longer in the publisher's replay buffer", inc.Lost, inc.Missing)
	}
}

func (s *stream) lose(from, to uint64, inc *collectors.StreamIncident, now time.Time) {
	n := to - from + 1
	s.st.Lost += n
	inc.Lost += n
	l := s.openLost(from, to, now, "seqs missing and not recovered by replay")
	l.Missing += n
	l.Lost += n
}

// fillJoin applies what a replay from 0 recovered after a late join. The
// history is complete when the replay starts at 0, or at 1 (publishers such
// as llm-d-inference-sim count from 1), and nothing is missing up to the
// first live batch. Otherwise the stream stays joined_late: that is not a
// loss of anything kvtop ever had, so missing/lost are not counted.
func (s *stream) fillJoin(j *replayJob, r *replayResult, now time.Time) {
	got := r.in(j.from, j.to)
	for _, b := range got {
		s.apply(b, true, now)
	}
	s.last = j.to
	start := j.to + 1 // first seq the replay began at (within the range)
	if len(got) > 0 {
		start = got[0].seq
	}
	contiguous := uint64(len(got)) == j.to+1-start
	if r.ended && r.err == nil && r.hasFirst && r.first <= 1 && contiguous {
		return
	}
	unknown := j.to + 1 - uint64(len(got))
	note := fmt.Sprintf("first live seq %d; replay from 0 recovered %d batch(es)", j.to+1, len(got))
	if r.err != nil {
		note += fmt.Sprintf(" (%v)", r.err)
	} else if r.hasFirst && r.first > 1 {
		note += fmt.Sprintf("; the publisher's buffer starts at seq %d", r.first)
	}
	s.openLate(0, j.to, unknown, uint64(len(got)), now, note)
}
