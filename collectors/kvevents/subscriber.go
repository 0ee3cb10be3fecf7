package kvevents

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// inMsg is what a SUB reader hands the state goroutine.
type inMsg struct {
	src     int // endpoint index; -1 for the bound (centralized) SUB
	kind    msgKind
	b       inBatch
	text    string // msgBad / msgError
	errKind string // msgError
	at      time.Time
}

type msgKind uint8

const (
	msgBatch msgKind = iota
	msgBad           // a message that is not [topic, seq8, payload]
	msgConnected
	msgDisconnected
	msgError // socket trouble (bad endpoint, bind failure)
)

var monitorSeq atomic.Uint64

// parseLive turns the frames of one live message into a batch.
func parseLive(src int, frames [][]byte, at time.Time) inMsg {
	m := inMsg{src: src, at: at}
	if len(frames) != 3 {
		m.kind, m.text = msgBad, fmt.Sprintf("live message has %d frames, want [topic, seq, payload]", len(frames))
		return m
	}
	if len(frames[1]) != 8 {
		m.kind, m.text = msgBad, fmt.Sprintf("live message seq frame is %s, want 8 bytes", shortSeq(frames[1]))
		return m
	}
	b, err := DecodeBatch(frames[2])
	m.b = inBatch{
		seq: binary.BigEndian.Uint64(frames[1]), topic: string(frames[0]),
		batch: b, err: err, fp: fingerprint(frames[2], b), at: at,
	}
	return m
}

// pollTimeout is how often an idle subscriber checks for cancellation.
const pollTimeout = time.Second

// subscribe owns one SUB socket (and its monitor) until r.ctx is done.
func (r *runner) subscribe(src int, endpoint string, bind bool, topic string) {
	report := func(kind, text string) {
		r.send(inMsg{src: src, kind: msgError, errKind: kind, text: text, at: time.Now()})
	}
	sock, err := r.zctx.NewSocket(zmq.SUB)
	if err != nil {
		report("config", fmt.Sprintf("SUB socket: %v", err))
		return
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	_ = sock.SetRcvhwm(subRcvHWM)
	if err := sock.SetSubscribe(topic); err != nil {
		report("config", fmt.Sprintf("subscribe %q: %v", topic, err))
		return
	}
	var mon *zmq.Socket
	if !bind {
		// The monitor is what turns a dead worker into "disconnected":
		// silence alone is not death (there is no heartbeat).
		addr := fmt.Sprintf("inproc://kvtop-kvevents-monitor-%d", monitorSeq.Add(1))
		if err := sock.Monitor(addr, zmq.EVENT_CONNECTED|zmq.EVENT_DISCONNECTED); err == nil {
			if mon, err = r.zctx.NewSocket(zmq.PAIR); err == nil {
				_ = mon.SetLinger(0)
				if err := mon.Connect(addr); err != nil {
					mon.Close()
					mon = nil
				}
			}
		}
		if mon != nil {
			defer mon.Close()
		}
		if err := sock.Connect(endpoint); err != nil {
			report("config", fmt.Sprintf("connect %s: %v", endpoint, err))
			return
		}
	} else if !r.bindRetrying(sock, endpoint, report) {
		return
	}
	poller := zmq.NewPoller()
	poller.Add(sock, zmq.POLLIN)
	if mon != nil {
		poller.Add(mon, zmq.POLLIN)
	}
	for r.ctx.Err() == nil {
		// The timeout only bounds how long a cancelled collector takes to
		// notice: a longer one keeps an idle pool of many workers from
		// waking the process (a cgo call and a thread switch each) ten
		// times a second per publisher.
		polled, err := poller.Poll(pollTimeout)
		if err != nil {
			if zmq.AsErrno(err) == zmq.Errno(syscall.EINTR) {
				continue
			}
			report("config", fmt.Sprintf("poll: %v", err))
			return
		}
		for _, p := range polled {
			if p.Socket == mon {
				r.readMonitor(src, mon)
				continue
			}
			// Drain a bounded burst, then look at the monitor again.
			for k := 0; k < 256; k++ {
				frames, err := sock.RecvMessageBytes(zmq.DONTWAIT)
				if err != nil {
					break
				}
				if !r.send(parseLive(src, frames, time.Now())) {
					return
				}
			}
		}
	}
}

// bindRetrying binds the centralized SUB, retrying every second while the
// address is unavailable (another process may still hold it).
func (r *runner) bindRetrying(sock *zmq.Socket, endpoint string, report func(kind, text string)) bool {
	for {
		err := sock.Bind(endpoint)
		if err == nil {
			return true
		}
		report("bind", fmt.Sprintf("bind %s: %v (retrying)", endpoint, err))
		select {
		case <-r.ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

func (r *runner) readMonitor(src int, mon *zmq.Socket) {
	for {
		ev, _, _, err := mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return
		}
		m := inMsg{src: src, at: time.Now()}
		switch ev {
		case zmq.EVENT_CONNECTED:
			m.kind = msgConnected
		case zmq.EVENT_DISCONNECTED:
			m.kind = msgDisconnected
		default:
			continue
		}
		if !r.send(m) {
			return
		}
	}
}

// send hands a message to the state goroutine; false on shutdown.
func (r *runner) send(m inMsg) bool {
	select {
	case r.msgs <- m:
		return true
	case <-r.ctx.Done():
		return false
	}
}
