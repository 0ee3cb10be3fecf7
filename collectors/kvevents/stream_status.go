package kvevents

import "time"

func (s *stream) openLate(from, to, unknown, replayed uint64, now time.Time, note string) {
	if s.LateInc == nil {
		s.LateInc = s.Incident("joined_late", from, to, now)
	}
	s.LateInc.Missing, s.LateInc.Replayed, s.LateInc.Note = unknown, replayed, note
}

// flush sends the status at once on a state change, else at most every
// StatusEvery while something changed.
func (s *stream) flush(now time.Time, force bool) {
	if st := s.Due(s.state(), now, force, s.o.StatusEvery); st != nil {
		s.env.emit(st)
	}
}
