// Package zlink watches a ZMQ socket's links through libzmq's monitor: it
// tells a link libzmq redials from one it closed for good (a protocol
// error: almost surely a message over ZMQ_MAXMSGSIZE), for every kvtop
// reader of a ZMQ event stream (vLLM's and SGLang's, Dynamo's event plane).
package zlink

import (
	"fmt"
	"sync/atomic"
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

// Events are the monitor events a Watch needs.
const Events = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED

// DeadLinkGrace is how long a disconnect may go without its redial before
// the link is taken as closed for good. libzmq sends both events in one go;
// the margin is for a loaded machine.
const DeadLinkGrace = 500 * time.Millisecond

// Watch reads the monitor of one connecting socket and tells a link
// libzmq will redial from one it closed for good (a protocol error: almost
// surely a message over MaxMsgSize). Used by one goroutine.
type Watch struct {
	mon    *zmq.Socket
	shook  bool      // the current link completed its ZMTP handshake
	lostAt time.Time // a disconnect not (yet) followed by a redial
	lostOK bool      // that link had completed its handshake
}

// monitorSeq numbers the monitors' inproc addresses, process-wide.
var monitorSeq atomic.Uint64

// New starts a monitor on sock (before it connects); nil if libzmq
// cannot (the socket then works, without disconnect reports).
func New(zctx *zmq.Context, sock *zmq.Socket) *Watch {
	addr := fmt.Sprintf("inproc://kvtop-zlink-monitor-%d", monitorSeq.Add(1))
	if err := sock.Monitor(addr, Events); err != nil {
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
	return &Watch{mon: mon}
}

// Close closes the monitor socket.
func (w *Watch) Close() { w.mon.Close() }

// Read takes the pending monitor events, calling on for each connect and
// disconnect (false: stop, on shutdown).
func (w *Watch) Read(now time.Time, on func(connected bool) bool) bool {
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

// Wait shortens a poll timeout to notice a dead link on time.
func (w *Watch) Wait(d time.Duration, now time.Time) time.Duration {
	if w.lostAt.IsZero() {
		return d
	}
	return max(min(d, w.lostAt.Add(DeadLinkGrace).Sub(now)), time.Millisecond)
}

// Deadline is when a disconnect not followed by a redial is taken as a
// link closed for good (zero: none pending).
func (w *Watch) Deadline() time.Time {
	if w.lostAt.IsZero() {
		return time.Time{}
	}
	return w.lostAt.Add(DeadLinkGrace)
}

// Dead reports, once, a link libzmq will not redial, and whether it had
// completed its handshake (then a message was refused: MaxMsgSize).
func (w *Watch) Dead(now time.Time) (dead, shook bool) {
	if w.lostAt.IsZero() || now.Sub(w.lostAt) < DeadLinkGrace {
		return false, false
	}
	w.lostAt = time.Time{}
	return true, w.lostOK
}

// OversizedNote is what an operator reads about a dropped link.
func OversizedNote(what string, maxMsg int64) string {
	return fmt.Sprintf("%s over %s from the publisher: libzmq closed the connection; counted in oversized", what, MiB(maxMsg))
}

// MiB prints a byte size for messages: "8 MiB", "1.5 MiB", "64 KiB",
// "900 bytes".
func MiB(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Monitor is the monitor socket, to poll or wait on beside others (its
// events are read with Read).
func (w *Watch) Monitor() *zmq.Socket { return w.mon }
