package hostile

import (
	"errors"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim/wire"
)

// Reply gives the k-th reply (k from 0) a trickler sends to a replay
// request for seqs from `from` on: its seq and payload.
type Reply func(from uint64, k int) (seq uint64, payload []byte)

// Stale replies with seqs below the one asked for (from-1, or 0): replies
// that make no progress toward the gap.
func Stale(payload func(seq uint64) []byte) Reply {
	return func(from uint64, _ int) (uint64, []byte) {
		seq := from
		if seq > 0 {
			seq--
		}
		return seq, payload(seq)
	}
}

// InRange replies with the next seq of the range asked for each time: real
// progress, too slow to finish a large gap.
func InRange(payload func(seq uint64) []byte) Reply {
	return func(from uint64, k int) (uint64, []byte) {
		seq := from + uint64(k)
		return seq, payload(seq)
	}
}

// maxRequests bounds the requests a trickler keeps answering: the oldest
// is forgotten (its DEALER is long gone: kvtop opens one per replay).
const maxRequests = 64

// Trickler is a hostile replay endpoint: a ROUTER that answers every
// replay request with one reply every Every, forever, and never the end
// marker. Replies use vLLM's v26 layout with an empty topic.
type Trickler struct {
	Endpoint string // where it is bound, tcp://127.0.0.1:port

	sock *zmq.Socket
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	requests int // replay requests received
	replies  int // replies sent
}

// NewTrickler binds a trickling ROUTER on a free loopback port (ctx nil:
// zmq's default context).
func NewTrickler(ctx *zmq.Context, every time.Duration, reply Reply) (*Trickler, error) {
	if every <= 0 || reply == nil {
		return nil, errors.New("trickler: a positive interval and a reply are needed")
	}
	s, ep, err := bindLoopback(ctx, zmq.ROUTER)
	if err != nil {
		return nil, err
	}
	t := &Trickler{Endpoint: ep, sock: s, stop: make(chan struct{}), done: make(chan struct{})}
	go t.run(every, reply)
	return t, nil
}

func (t *Trickler) run(every time.Duration, reply Reply) {
	defer close(t.done)
	defer t.sock.Close()
	type request struct {
		id   []byte
		from uint64
		k    int
	}
	var reqs []*request
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		for {
			f, err := t.sock.RecvMessageBytes(zmq.DONTWAIT)
			if err != nil {
				break
			}
			id, from, err := wire.ParseRequest(f)
			if err != nil {
				continue
			}
			if len(reqs) == maxRequests {
				reqs = reqs[1:]
			}
			reqs = append(reqs, &request{id: id, from: from})
			t.mu.Lock()
			t.requests++
			t.mu.Unlock()
		}
		for _, q := range reqs {
			seq, payload := reply(q.from, q.k)
			q.k++
			frames := wire.V26.Reply("", seq, payload)
			if _, err := t.sock.SendMessageDontwait(q.id, frames[0], frames[1], frames[2], frames[3]); err == nil {
				t.mu.Lock()
				t.replies++
				t.mu.Unlock()
			}
		}
	}
}

// Counts says how many replay requests came and how many replies left.
func (t *Trickler) Counts() (requests, replies int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests, t.replies
}

// Close stops the trickler and closes its socket.
func (t *Trickler) Close() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
}

// bindLoopback binds a socket of type typ on a free port of 127.0.0.1.
func bindLoopback(ctx *zmq.Context, typ zmq.Type) (*zmq.Socket, string, error) {
	var s *zmq.Socket
	var err error
	if ctx != nil {
		s, err = ctx.NewSocket(typ)
	} else {
		s, err = zmq.NewSocket(typ)
	}
	if err != nil {
		return nil, "", err
	}
	_ = s.SetLinger(0)
	if err := s.Bind("tcp://127.0.0.1:*"); err != nil {
		s.Close()
		return nil, "", err
	}
	ep, err := s.GetLastEndpoint()
	if err != nil {
		s.Close()
		return nil, "", err
	}
	return s, ep, nil
}
