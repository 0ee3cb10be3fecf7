package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
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

// errReplayTimeout means the publisher went quiet before the end marker.
var errReplayTimeout = errors.New("replay timed out")

// fetchOptions bound one replay exchange.
type fetchOptions struct {
	endpoint string
	from     uint64
	upTo     uint64        // replies past this seq are not needed: stop there
	idle     time.Duration // give up after this long without a reply
}

// fetched is how a replay exchange ended.
type fetched struct {
	ended bool  // end marker seen (or everything needed arrived)
	err   error // timeout, socket or protocol error (replies may have come before)
}

// fetchReplay runs one DEALER exchange on its own socket (used only by the
// calling goroutine), handing each reply with from ≤ seq to onReply as it
// arrives; onReply returning false stops the exchange. It never blocks
// longer than idle between replies and returns promptly when ctx is done.
//
// The DEALER's receive high-water mark is off: a publisher answers a replay
// in one burst (vLLM loops over its whole buffer) and its ROUTER silently
// drops what does not fit the pipe, which would turn into holes. What libzmq
// may queue is bounded by the publisher's own replay buffer.
func fetchReplay(ctx context.Context, zctx *zmq.Context, o fetchOptions, onReply func(ReplayReply) bool) (f fetched) {
	sock, err := zctx.NewSocket(zmq.DEALER)
	if err != nil {
		f.err = err
		return f
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	if err := sock.SetRcvhwm(0); err != nil {
		f.err = fmt.Errorf("replay socket: %w", err)
		return f
	}
	if err := sock.Connect(o.endpoint); err != nil {
		f.err = fmt.Errorf("connect %s: %w", o.endpoint, err)
		return f
	}
	req := ReplayRequest(o.from)
	poller := zmq.NewPoller()
	poller.Add(sock, zmq.POLLIN)
	deadline := time.Now().Add(o.idle)
	sent := false
	for {
		if ctx.Err() != nil {
			f.err = ctx.Err()
			return f
		}
		now := time.Now()
		if now.After(deadline) {
			f.err = fmt.Errorf("%w: no reply from %s for %v", errReplayTimeout, o.endpoint, o.idle)
			return f
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
		wait := min(deadline.Sub(now), 50*time.Millisecond)
		polled, err := poller.Poll(wait)
		if err != nil {
			f.err = fmt.Errorf("poll: %w", err)
			return f
		}
		if len(polled) == 0 {
			continue
		}
		frames, err := sock.RecvMessageBytes(0)
		if err != nil {
			f.err = fmt.Errorf("receive: %w", err)
			return f
		}
		deadline = time.Now().Add(o.idle)
		rr, err := ParseReplayReply(frames)
		if err != nil {
			f.err = err
			return f
		}
		if rr.End {
			f.ended = true
			return f
		}
		if rr.Seq < o.from {
			continue // not asked for
		}
		if !onReply(rr) {
			f.err = ctx.Err()
			if f.err == nil {
				f.err = errors.New("replay stopped")
			}
			return f
		}
		// Idle means the publisher's silence, not the time kvtop took to
		// hand the reply over.
		deadline = time.Now().Add(o.idle)
		if rr.Seq >= o.upTo {
			f.ended = true // everything needed is here; drop the rest with the socket
			return f
		}
	}
}
