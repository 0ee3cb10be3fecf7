package kvevents

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// readyWaiter parks a socket's goroutine in Go's netpoller (one epoll for
// every socket of the process) until the socket may have input, instead
// of in a blocking zmq_poll through cgo. A goroutine blocked in cgo holds
// an OS thread and its P in a syscall state; with one such reader per
// publisher the runtime's sysmon took those Ps back every 10 ms and ran at
// its fastest tick for ever: 28 % of kvtop's CPU on a busy 16-worker pool,
// more than the metrics parser.
//
// ZMQ_FD is libzmq's mailbox signal for the socket, edge-triggered: it
// turns readable when commands arrive, and ZMQ_EVENTS (which reads them)
// says whether a message is queued. So a waiter checks ZMQ_EVENTS before
// every wait (inside RawConn.Read, after the poller's readiness was reset,
// so no edge between the check and the wait is lost) and the reader then
// receives until EAGAIN.
type readyWaiter struct {
	f  *os.File // a dup of ZMQ_FD, so closing it never closes libzmq's
	rc syscall.RawConn
}

func newReadyWaiter(sock *zmq.Socket) (*readyWaiter, error) {
	fd, err := sock.GetFd()
	if err != nil {
		return nil, fmt.Errorf("ZMQ_FD: %w", err)
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return nil, fmt.Errorf("dup ZMQ_FD: %w", err)
	}
	syscall.CloseOnExec(dup)
	// O_NONBLOCK is shared with libzmq's descriptor; libzmq makes its
	// signaler non-blocking itself, so this only makes os.NewFile sure.
	if err := syscall.SetNonblock(dup, true); err != nil {
		_ = syscall.Close(dup)
		return nil, fmt.Errorf("ZMQ_FD non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(dup), "zmq-fd")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("ZMQ_FD: %w", err)
	}
	return &readyWaiter{f: f, rc: rc}, nil
}

// wait returns once ready reports true, or the waiter was woken (wake or
// a passed deadline). ready runs on the caller's goroutine, first before
// any wait: it is where the socket's owner reads ZMQ_EVENTS.
func (w *readyWaiter) wait(ready func() bool) error {
	err := w.rc.Read(func(uintptr) bool { return ready() })
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// wake ends the current or next wait (any goroutine). The owner clears it
// with until before its next wait, after reading what it was woken for.
func (w *readyWaiter) wake() { _ = w.f.SetReadDeadline(time.Unix(1, 0)) }

// until makes waits end at t at the latest (zero: no limit).
func (w *readyWaiter) until(t time.Time) { _ = w.f.SetReadDeadline(t) }

func (w *readyWaiter) close() { _ = w.f.Close() }

// waitInput returns once sock has a message queued (ZMQ_EVENTS), stop
// reports true, or the waiter was woken; the error is the wait's or
// ZMQ_EVENTS'. The socket's owner calls it.
func (w *readyWaiter) waitInput(sock *zmq.Socket, stop func() bool) error {
	var evErr error
	err := w.wait(func() bool {
		if stop() {
			return true
		}
		ev, err := sock.GetEvents()
		evErr = err
		return err != nil || ev&zmq.POLLIN != 0
	})
	if err == nil {
		err = evErr
	}
	return err
}
