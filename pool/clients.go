package pool

import (
	"strconv"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// What the clients received (kvtop tap). A tap's record is an outcome seen
// from the client's side; it joins the router's decision (and outcome) by
// request id and sits beside them, never in place of the router's: the
// point is to show both — "router: 3 ok · client: 2 finished, 1
// truncated". A tap does not know the router's attempt: its record goes
// with the request's last attempt the journal holds.

// maxClientAttempt bounds the attempts searched for a request's last.
const maxClientAttempt = 8

func (s *State) applyClientOutcome(o *collectors.Outcome) {
	c := s.copyOutcome(o)
	j := s.journal
	k := attemptKey(o.RequestID, o.AttemptID)
	if o.AttemptID == "" {
		for a := maxClientAttempt; a > 1; a-- {
			if kk := attemptKey(o.RequestID, strconv.Itoa(a)); j.byKey[kk] != nil {
				k = kk
				break
			}
		}
	}
	r := j.get(k, o.At)
	s.countHit(r, o)
	j.update(r, func() { r.c = c })
}

// clientFlags are the flags a client's outcome raises: truncated (a
// success status, cut short), an HTTP error or no response, a streaming
// break.
func clientFlags(c *collectors.Outcome) uint16 {
	if c == nil {
		return 0
	}
	var f uint16
	switch snapshot.ClassOfEnd(c.End, c.HTTPStatus) {
	case snapshot.ClientTruncated:
		f |= flagTruncated
	case snapshot.ClientFailed:
		if c.HTTPStatus >= 400 {
			f |= flagHTTPError
		} else {
			f |= flagError
		}
	}
	if c.Breaks != nil && *c.Breaks > 0 {
		f |= flagStreamBreak
	}
	return f
}

func clientInfo(c *collectors.Outcome) *snapshot.ClientInfo {
	return &snapshot.ClientInfo{
		At: c.TS, Source: c.Source, Worker: c.Worker, HTTPStatus: c.HTTPStatus, End: c.End,
		Class: snapshot.ClassOfEnd(c.End, c.HTTPStatus), FinishReason: c.FinishReason,
		TTFBMS: cp(c.TTFBMS), TTFTMS: cp(c.TTFTMS), E2EMS: cp(c.E2EMS), MaxGapMS: cp(c.MaxGapMS), Breaks: cpInt(c.Breaks),
		PromptChars: cpInt(c.PromptChars), PromptTokens: cpInt(c.PromptTokens), CachedTokens: cpInt(c.CachedTokens),
		OutputTokens: cpInt(c.OutputTokens), ClientSlow: c.ClientSlow,
	}
}

// clientAcc adds up one worker's (or the pool's) client figures.
type clientAcc struct {
	f    snapshot.Clients
	ttft []float64
}

func (a *clientAcc) add(r *record) {
	c := r.c
	f := &a.f
	f.Requests++
	switch snapshot.ClassOfEnd(c.End, c.HTTPStatus) {
	case snapshot.ClientFinished:
		f.Finished++
	case snapshot.ClientTruncated:
		f.Truncated++
	case snapshot.ClientFailed:
		f.Failed++
	case snapshot.ClientLeft:
		f.Left++
	default:
		f.Unknown++
	}
	if c.Breaks != nil && *c.Breaks > 0 {
		f.Breaks += *c.Breaks
		f.BrokenStreams++
	}
	if c.ClientSlow {
		f.SlowClients++
	}
	if c.TTFTMS != nil && *c.TTFTMS >= 0 {
		a.ttft = append(a.ttft, *c.TTFTMS)
	}
	if r.o != nil && r.o.HTTPStatus != 0 {
		f.RouterKnown++
		if r.o.HTTPStatus >= 200 && r.o.HTTPStatus < 300 {
			f.RouterOK++
		}
	}
}

func (a *clientAcc) figures(none string) snapshot.Clients {
	f := a.f
	f.TTFTMS = sampleQuantiles(a.ttft, none)
	return f
}

// buildClients fills the pool's and each worker's client figures from the
// records whose client outcome arrived within the window (kvtop clock;
// history read at start left out). A request counts under the worker its
// response named, else the one the decision chose.
func (s *State) buildClients(snap *snapshot.Snapshot, now time.Time) {
	var pool clientAcc
	per := map[string]*clientAcc{}
	from, to := now.Add(-s.window).UnixNano(), now.UnixNano()
	j := s.journal
	for i := 0; i < j.n; i++ {
		r := j.ring[(j.head+i)%j.limit]
		if t := r.clientAt; t == 0 || t <= from || t > to {
			continue
		}
		pool.add(r)
		name := r.c.Worker
		if name == "" {
			name = r.chosen
		}
		if name == "" && r.o != nil {
			name = r.o.Worker
		}
		if name == "" {
			continue
		}
		a := per[name]
		if a == nil {
			a = &clientAcc{}
			per[name] = a
		}
		a.add(r)
	}
	snap.Pool.Clients = pool.figures("no client records (kvtop tap) with a first token in the window")
	for i := range snap.Workers {
		w := &snap.Workers[i]
		if a := per[w.Name]; a != nil {
			w.Clients = a.figures("no client record of its requests with a first token in the window")
		} else {
			w.Clients = snapshot.Clients{TTFTMS: snapshot.RequestQuantiles{Reason: "no client records (kvtop tap) of its requests in the window"}}
		}
	}
}
