package kvevents

import (
	"maps"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// incident records a new incident; only the latest Incidents are kept.
func (s *stream) incident(kind string, from, to uint64, now time.Time) *collectors.StreamIncident {
	inc := &collectors.StreamIncident{Kind: kind, FromSeq: from, ToSeq: to, Start: now}
	s.history = append(s.history, inc)
	if over := len(s.history) - s.o.Incidents; over > 0 {
		copy(s.history, s.history[over:])
		clear(s.history[len(s.history)-over:])
		s.history = s.history[:len(s.history)-over]
	}
	s.dirty = true
	return inc
}

// openLost enters history_lost (or extends the open loss).
func (s *stream) openLost(from, to uint64, now time.Time, note string) *collectors.StreamIncident {
	if s.lostInc == nil {
		s.lostInc = s.incident("history_lost", from, to, now)
		s.lostInc.Note = note
	} else if to > s.lostInc.ToSeq {
		s.lostInc.ToSeq = to
	}
	return s.lostInc
}

func (s *stream) openLate(from, to, unknown, replayed uint64, now time.Time, note string) {
	if s.lateInc == nil {
		s.lateInc = s.incident("joined_late", from, to, now)
	}
	s.lateInc.Missing, s.lateInc.Replayed, s.lateInc.Note = unknown, replayed, note
}

// clearIncomplete ends history_lost and joined_late: after a restart or an
// AllBlocksCleared the publisher's block set is fully known again.
func (s *stream) clearIncomplete(now time.Time, why string) {
	for _, inc := range []**collectors.StreamIncident{&s.lostInc, &s.lateInc} {
		if *inc != nil {
			(*inc).End = now
			(*inc).Note += "; ended by " + why
			*inc = nil
			s.dirty = true
		}
	}
}

// ---------------------------------------------------------------------------
// Status

// flush sends the status at once on a state change, else at most every
// StatusEvery while something changed.
func (s *stream) flush(now time.Time, force bool) {
	state := s.state()
	switch {
	case !s.sentOnce || state != s.sentState:
	case s.dirty && (force || now.Sub(s.sentAt) >= s.o.StatusEvery):
	default:
		return
	}
	st := s.st
	st.State = state
	st.At = now
	st.UnknownByType = maps.Clone(st.UnknownByType)
	st.History = make([]collectors.StreamIncident, len(s.history))
	for i, inc := range s.history {
		st.History[i] = *inc
	}
	s.env.emit(&st)
	s.dirty, s.sentOnce, s.sentAt, s.sentState = false, true, now, state
}
