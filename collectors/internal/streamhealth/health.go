// Package streamhealth is what every KV event reader keeps of one
// publisher's health, whatever its wire (vLLM's and SGLang's ZMQ streams,
// Dynamo's event plane on NATS or ZMQ): the status it sends (counters and
// identity), its incidents (bounded), the losses, late joins and
// disconnects open now, the state they make, and when the status is due.
// The readers' own machines (seqs and replay, event ids and JetStream)
// drive it; the pool reads what it sends.
package streamhealth

import (
	"maps"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Health is one publisher's. Owned by its reader's state goroutine: no
// locks.
type Health struct {
	St      collectors.StreamStatus      // counters and identity; State and History filled on send
	History []*collectors.StreamIncident // the latest Limit incidents, oldest first
	Limit   int                          // incidents kept
	// Open now: a loss of history, a late join, a disconnect.
	LostInc, LateInc, DiscInc *collectors.StreamIncident
	Dirty                     bool // something changed since the last status
	ToldSkip                  bool // unknown input reported once

	sentOnce  bool
	sentAt    time.Time
	sentState snapshot.StreamState
}

// Incident records a new incident; only the latest Limit are kept.
func (h *Health) Incident(kind string, from, to uint64, now time.Time) *collectors.StreamIncident {
	inc := &collectors.StreamIncident{Kind: kind, FromSeq: from, ToSeq: to, Start: now}
	h.History = append(h.History, inc)
	if over := len(h.History) - h.Limit; over > 0 {
		copy(h.History, h.History[over:])
		clear(h.History[len(h.History)-over:])
		h.History = h.History[:len(h.History)-over]
	}
	h.Dirty = true
	return inc
}

// OpenGap counts a gap of from..to (seqs missing, a replay may still
// fill them) and records its incident.
func (h *Health) OpenGap(from, to uint64, now time.Time) *collectors.StreamIncident {
	n := to - from + 1
	h.St.Gaps++
	h.St.Missing += n
	inc := h.Incident("gap", from, to, now)
	inc.Missing = n
	return inc
}

// Lose counts from..to as lost for good (on the gap's incident inc, when
// there is one) and enters or extends history_lost, saying why.
func (h *Health) Lose(from, to uint64, inc *collectors.StreamIncident, why string, now time.Time) {
	n := to - from + 1
	h.St.Lost += n
	if inc != nil {
		inc.Lost += n
	}
	l := h.OpenLost(from, to, now, why)
	l.Missing += n
	l.Lost += n
}

// OpenLost enters history_lost (or extends the open loss).
func (h *Health) OpenLost(from, to uint64, now time.Time, note string) *collectors.StreamIncident {
	if h.LostInc == nil {
		h.LostInc = h.Incident("history_lost", from, to, now)
		h.LostInc.Note = note
	} else if to > h.LostInc.ToSeq {
		h.LostInc.ToSeq = to
	}
	return h.LostInc
}

// ClearIncomplete ends history_lost and joined_late: after a restart or a
// clear of every block the publisher's block set is fully known again.
func (h *Health) ClearIncomplete(now time.Time, why string) {
	for _, inc := range []**collectors.StreamIncident{&h.LostInc, &h.LateInc} {
		if *inc != nil {
			(*inc).End = now
			(*inc).Note += "; ended by " + why
			*inc = nil
			h.Dirty = true
		}
	}
}

// State is the published state of a connected publisher, after what the
// reader says of its link: replaying, then history lost, then joined
// late, else live (the order is the priority).
func (h *Health) State(replaying bool) snapshot.StreamState {
	switch {
	case replaying:
		return snapshot.StreamReplaying
	case h.LostInc != nil:
		return snapshot.StreamHistoryLost
	case h.LateInc != nil:
		return snapshot.StreamJoinedLate
	}
	return snapshot.StreamLive
}

// Due returns the status to send now, in state: at once on a state
// change, else at most every `every` while something changed (force:
// now, whatever the interval). nil when nothing is due. The status holds
// copies: the reader goes on changing its own.
func (h *Health) Due(state snapshot.StreamState, now time.Time, force bool, every time.Duration) *collectors.StreamStatus {
	switch {
	case !h.sentOnce || state != h.sentState:
	case h.Dirty && (force || now.Sub(h.sentAt) >= every):
	default:
		return nil
	}
	st := h.St
	st.State = state
	st.At = now
	st.UnknownByType = maps.Clone(st.UnknownByType)
	st.History = make([]collectors.StreamIncident, len(h.History))
	for i, inc := range h.History {
		st.History[i] = *inc
	}
	h.Dirty, h.sentOnce, h.sentAt, h.sentState = false, true, now, state
	return &st
}

// Bounds are the limits every reader's options share, by address, so that
// each package keeps its own Options type (and its literals).
type Bounds struct {
	MaxReplays, HoldBack, Incidents, MaxPublishers *int
	StatusEvery, IdleEvict                         *time.Duration
}

// Defaults fills the bounds left at zero: 4 replays at once, 10 000 live
// batches held behind one, a status at most every 250 ms, 50 incidents
// a publisher, 4 096 publishers, one silent for 10 minutes forgotten.
func (b Bounds) Defaults() {
	for _, f := range []struct {
		p *int
		v int
	}{{b.MaxReplays, 4}, {b.HoldBack, 10000}, {b.Incidents, 50}, {b.MaxPublishers, 4096}} {
		if *f.p <= 0 {
			*f.p = f.v
		}
	}
	for _, f := range []struct {
		p *time.Duration
		v time.Duration
	}{{b.StatusEvery, 250 * time.Millisecond}, {b.IdleEvict, 10 * time.Minute}} {
		if *f.p <= 0 {
			*f.p = f.v
		}
	}
}
