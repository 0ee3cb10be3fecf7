package kvevents

import (
	"fmt"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// What libzmq 4.3.4 does with a frame over ZMQ_MAXMSGSIZE (read in its
// source, session_base_t::engine_error, and checked on real sockets): the
// decoder fails on the frame's header, before reading its body, as a
// protocol error; the engine reports EVENT_DISCONNECTED and the session
// ends. On a socket that connected, a protocol error is never redialled:
// the endpoint stays dead, silently, until the socket disconnects and
// connects it again. A link lost for any other reason is redialled, and
// EVENT_CONNECT_RETRIED follows EVENT_DISCONNECTED at once (same I/O
// thread call). On a bound socket the session ends the same way and the
// peer redials by itself: from that side an oversized message and a peer
// that left look alike. The messages before the big one are delivered;
// those after it in the TCP stream are lost (a seq gap).

// linkEvents are the monitor events a linkWatch needs.
const linkEvents = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED

// deadLinkGrace is how long a disconnect may go without its redial before
// the link is taken as closed for good. libzmq sends both events in one go;
// the margin is for a loaded machine.
const deadLinkGrace = 500 * time.Millisecond

// linkWatch reads the monitor of one connecting socket and tells a link
// libzmq will redial from one it closed for good (a protocol error: almost
// surely a message over MaxMsgSize). Used by one goroutine.
type linkWatch struct {
	mon    *zmq.Socket
	shook  bool      // the current link completed its ZMTP handshake
	lostAt time.Time // a disconnect not (yet) followed by a redial
	lostOK bool      // that link had completed its handshake
}

// watchLink starts a monitor on sock (before it connects); nil if libzmq
// cannot (the socket then works, without disconnect reports).
func watchLink(zctx *zmq.Context, sock *zmq.Socket) *linkWatch {
	addr := fmt.Sprintf("inproc://kvtop-kvevents-monitor-%d", monitorSeq.Add(1))
	if err := sock.Monitor(addr, linkEvents); err != nil {
		return nil
	}
	mon, err := zctx.NewSocket(zmq.PAIR)
	if err != nil {
		return nil
	}
	_ = mon.SetLinger(0)
	if err := mon.Connect(addr); err != nil {
		mon.Close()
		return nil
	}
	return &linkWatch{mon: mon}
}

func (w *linkWatch) close() { w.mon.Close() }

// read takes the pending monitor events, calling on for each connect and
// disconnect (false: stop, on shutdown).
func (w *linkWatch) read(now time.Time, on func(connected bool) bool) bool {
	for {
		ev, _, _, err := w.mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return true
		}
		switch ev {
		case zmq.EVENT_HANDSHAKE_SUCCEEDED:
			w.shook = true
		case zmq.EVENT_CONNECT_RETRIED:
			w.lostAt = time.Time{}
		case zmq.EVENT_CONNECTED:
			w.lostAt = time.Time{}
			if !on(true) {
				return false
			}
		case zmq.EVENT_DISCONNECTED:
			w.lostAt, w.lostOK, w.shook = now, w.shook, false
			if !on(false) {
				return false
			}
		}
	}
}

// wait shortens a poll timeout to notice a dead link on time.
func (w *linkWatch) wait(d time.Duration, now time.Time) time.Duration {
	if w.lostAt.IsZero() {
		return d
	}
	return max(min(d, w.lostAt.Add(deadLinkGrace).Sub(now)), time.Millisecond)
}

// deadline is when a disconnect not followed by a redial is taken as a
// link closed for good (zero: none pending).
func (w *linkWatch) deadline() time.Time {
	if w.lostAt.IsZero() {
		return time.Time{}
	}
	return w.lostAt.Add(deadLinkGrace)
}

// dead reports, once, a link libzmq will not redial, and whether it had
// completed its handshake (then a message was refused: MaxMsgSize).
func (w *linkWatch) dead(now time.Time) (dead, shook bool) {
	if w.lostAt.IsZero() || now.Sub(w.lostAt) < deadLinkGrace {
		return false, false
	}
	w.lostAt = time.Time{}
	return true, w.lostOK
}

// oversizedNote is what an operator reads about a dropped link.
func oversizedNote(what string, maxMsg int64) string {
	return fmt.Sprintf("%s over %s from the publisher: libzmq closed the connection; counted in oversized", what, mib(maxMsg))
}
