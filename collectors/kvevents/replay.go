package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors/internal/zlink"
)

// EndSeq is the seq of the replay end marker (ff×8).
const EndSeq = ^uint64(0)

// ReplayReply is one message of a replay answer as received on a DEALER.
type ReplayReply struct {
	Topic   string // "" in the legacy layout
	Seq     uint64
	Payload []byte
	End     bool // the end marker: no more replies for this request
}

// ParseReplayReply parses the frames of one replay reply received on a
// DEALER (which keeps the ROUTER's leading empty delimiter):
//
//	vLLM ≥ 0.26: ["", topic, seq8, payload], end ["", "", ff×8, ""]
//	legacy/SGLang: ["", seq8, payload],       end ["", ff×8, ""]
func ParseReplayReply(frames [][]byte) (ReplayReply, error) {
	var rr ReplayReply
	var seq []byte
	switch {
	case len(frames) == 4 && len(frames[0]) == 0:
		rr.Topic, seq, rr.Payload = string(frames[1]), frames[2], frames[3]
	case len(frames) == 3 && len(frames[0]) == 0:
		seq, rr.Payload = frames[1], frames[2]
	default:
		return rr, fmt.Errorf("replay reply has %d frames (%s), want [\"\", topic, seq, payload] or [\"\", seq, payload]",
			len(frames), frameLens(frames))
	}
	if len(seq) != 8 {
		return rr, fmt.Errorf("replay reply seq frame has %d bytes, want 8", len(seq))
	}
	rr.Seq = binary.BigEndian.Uint64(seq)
	rr.End = rr.Seq == EndSeq
	return rr, nil
}

// ReplayRequest is the two frames a DEALER sends: ["", seq8].
func ReplayRequest(from uint64) [][]byte {
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], from)
	return [][]byte{{}, seq[:]}
}

func frameLens(frames [][]byte) string {
	s := ""
	for i, f := range frames {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(len(f))
	}
	return "sizes " + s
}

// errReplayTimeout means the publisher made no progress for the idle time,
// or the exchange outlasted its deadline.
var errReplayTimeout = errors.New("replay timed out")

// errReplayOversized means libzmq closed the DEALER's link for good: a reply
// over MaxMsgSize (link.go).
var errReplayOversized = errors.New("replay reply too large")

// fetchOptions bound one replay exchange.
type fetchOptions struct {
	endpoint string
	from     uint64
	upTo     uint64        // replies past this seq are not needed: stop there
	idle     time.Duration // give up after this long without progress
	deadline time.Duration // give up after this long in all
	maxMsg   int64         // ZMQ_MAXMSGSIZE
	hwm      int           // ZMQ_RCVHWM
	// work, if set, does a small step of the caller's deferred work
	// between polls; more: some is left (then the next poll does not
	// wait). quiet: the last poll brought nothing and no work was left.
	work func(quiet bool) (more bool)
}

// fetched is how a replay exchange ended.
type fetched struct {
	ended     bool   // end marker seen (or everything needed arrived)
	marker    bool   // the end marker itself: the publisher sent all it has from `from` on
	replies   uint64 // replies handed to onReply
	ignored   uint64 // replies below `from` or not past the last one: no progress
	oversized bool   // libzmq closed the link: a reply over maxMsg
	err       error  // timeout, socket or protocol error (replies may have come before)
}

// pollStep is the longest a replay waits in one poll.
const pollStep = 50 * time.Millisecond

// fetchReplay runs one DEALER exchange on its own socket (used only by the
// calling goroutine), handing each reply that makes progress (from ≤ seq,
// above every earlier one) to onReply as it arrives; onReply returning
// false stops the exchange. It returns promptly when ctx is done.
//
// Two clocks bound it. idle: a publisher that makes no progress for that
// long is given up; a reply below `from`, a repeat or one out of order does
// not count, so stale replies trickled forever cannot hold it open.
// deadline: however it trickles, the exchange ends after that long.
//
// The DEALER's receive high-water mark is hwm messages of at most maxMsg
// bytes: libzmq then stops reading and the publisher's ROUTER drops what
// its pipe cannot take (holes). So the loop takes everything libzmq has
// queued before each step of work (the caller decodes there, one reply at
// a time), and the caller never waits on the state goroutine: libzmq's
// queue stays short (doc.go).
func fetchReplay(ctx context.Context, zctx *zmq.Context, o fetchOptions, onReply func(ReplayReply) bool) (f fetched) {
	sock, err := zctx.NewSocket(zmq.DEALER)
	if err != nil {
		f.err = err
		return f
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	if err := sock.SetRcvhwm(o.hwm); err != nil {
		f.err = fmt.Errorf("replay socket: %w", err)
		return f
	}
	if o.maxMsg > 0 {
		if err := sock.SetMaxmsgsize(o.maxMsg); err != nil {
			f.err = fmt.Errorf("replay socket: %w", err)
			return f
		}
	}
	link := zlink.New(zctx, sock)
	if link != nil {
		defer link.Close()
	}
	if err := sock.Connect(o.endpoint); err != nil {
		f.err = fmt.Errorf("connect %s: %w", o.endpoint, err)
		return f
	}
	req := ReplayRequest(o.from)
	poller := zmq.NewPoller()
	poller.Add(sock, zmq.POLLIN)
	if link != nil {
		poller.Add(link.Monitor(), zmq.POLLIN)
	}
	start := time.Now()
	if o.deadline <= 0 {
		o.deadline = 24 * time.Hour // no deadline (kvtop always sets one)
	}
	end := start.Add(o.deadline)
	idleEnd := start.Add(o.idle)
	var last uint64 // highest seq handed over (f.replies > 0)
	sent := false
	for {
		if ctx.Err() != nil {
			f.err = ctx.Err()
			return f
		}
		more := o.work != nil && o.work(false)
		now := time.Now()
		switch {
		case !now.Before(end):
			f.err = fmt.Errorf("%w: still unfinished after the %v deadline (%s)", errReplayTimeout, o.deadline, f.progress(o.from))
			return f
		case !now.Before(idleEnd):
			f.err = fmt.Errorf("%w: no progress from %s for %v (%s)", errReplayTimeout, o.endpoint, o.idle, f.progress(o.from))
			return f
		}
		if link != nil {
			if dead, _ := link.Dead(now); dead {
				f.oversized = true
				f.err = fmt.Errorf("%w: %s", errReplayOversized, zlink.OversizedNote("a reply", o.maxMsg))
				return f
			}
		}
		if !sent {
			// DONTWAIT: a DEALER with no peer yet would block; retry instead.
			if _, err := sock.SendMessageDontwait(req[0], req[1]); err == nil {
				sent = true
			} else if zmq.AsErrno(err) != zmq.Errno(syscall.EAGAIN) {
				f.err = fmt.Errorf("send replay request: %w", err)
				return f
			}
		}
		wait := min(idleEnd.Sub(now), end.Sub(now), pollStep)
		if link != nil {
			wait = link.Wait(wait, now)
		}
		if more {
			wait = 0
		}
		polled, err := poller.Poll(wait)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EINTR) {
				continue
			}
			f.err = fmt.Errorf("poll: %w", err)
			return f
		}
		if len(polled) == 0 && !more && o.work != nil {
			o.work(true)
		}
		for _, p := range polled {
			if link != nil && p.Socket == link.Monitor() {
				link.Read(time.Now(), func(bool) bool { return true })
			}
		}
		// What libzmq has queued (a bounded burst), then poll again.
		for k := 0; k < 256; k++ {
			frames, err := sock.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				if zmq.AsErrno(err) != zmq.Errno(syscall.EAGAIN) {
					f.err = fmt.Errorf("receive: %w", err)
					return f
				}
				break
			}
			rr, err := ParseReplayReply(frames)
			if err != nil {
				f.err = err
				return f
			}
			if rr.End {
				f.ended, f.marker = true, true
				return f
			}
			if rr.Seq < o.from || f.replies > 0 && rr.Seq <= last {
				f.ignored++ // not asked for, or a repeat: no progress
				continue
			}
			last = rr.Seq
			f.replies++
			if !onReply(rr) {
				f.err = ctx.Err()
				if f.err == nil {
					f.err = errors.New("replay stopped")
				}
				return f
			}
			// Idle means the publisher's silence, not the time kvtop took to
			// hand the reply over.
			idleEnd = time.Now().Add(o.idle)
			if rr.Seq >= o.upTo {
				f.ended = true // everything needed is here; drop the rest with the socket
				return f
			}
		}
	}
}

// progress says what an unfinished exchange brought, for messages.
func (f *fetched) progress(from uint64) string {
	s := fmt.Sprintf("%d reply(ies) from seq %d on", f.replies, from)
	if f.ignored > 0 {
		s += fmt.Sprintf(", %d ignored (below seq %d or repeated)", f.ignored, from)
	}
	return s
}
