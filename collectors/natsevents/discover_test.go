package natsevents

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
	"github.com/kvtop/kvtop/snapshot"
)

// fakeDiscovery hands the test's sets to the reader.
type fakeDiscovery struct {
	sets chan Channels
	err  error
}

func (f *fakeDiscovery) Name() string { return "fake" }

func (f *fakeDiscovery) Watch(ctx context.Context, sets chan<- Channels, _ chan<- collectors.Observation) error {
	if f.err != nil {
		return f.err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-f.sets:
			select {
			case sets <- s:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// fakePub is one publisher of Dynamo's ZMQ event plane: an XPUB (it
// hears its subscribers come and go) sending the four frames.
type fakePub struct {
	t        *testing.T
	sock     *zmq.Socket
	ep       string
	pid, seq uint64
	worker   uint64
	rank     int
	next     uint64 // next event id
}

func newFakePub(t *testing.T, zctx *zmq.Context, worker uint64, rank int, pid uint64) *fakePub {
	t.Helper()
	s, err := zctx.NewSocket(zmq.XPUB)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetLinger(0)
	if err := s.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ep, _ := s.GetLastEndpoint()
	return &fakePub{t: t, sock: s, ep: ep, pid: pid, worker: worker, rank: rank, next: 1}
}

// heard waits for a subscription (1) or an unsubscription (0).
func (p *fakePub) heard(sub byte) {
	p.t.Helper()
	_ = p.sock.SetRcvtimeo(10 * time.Second)
	for {
		msg, err := p.sock.RecvBytes(0)
		if err != nil {
			p.t.Fatalf("%s: no %s heard: %v", p.ep, map[byte]string{0: "unsubscription", 1: "subscription"}[sub], err)
		}
		if len(msg) > 0 && msg[0] == sub {
			return
		}
	}
}

// store publishes one message of one stored block under publisher id pid.
func (p *fakePub) store(pid uint64, hash uint64) {
	p.t.Helper()
	ev := wire.AppendDynamoMsgpack(nil, p.worker, p.next, p.rank, &kvcache.Event{Kind: kvcache.Stored, Hashes: []uint64{hash}, Tokens: make([]uint32, 16)})
	p.next++
	payload := append(wire.AppendArrayHeader(nil, 1), ev...)
	f := wire.DynamoFrames("kv-events", pid, p.seq, wire.AppendDynamoEnvelope(nil, "kv-events", pid, p.seq, uint64(time.Now().UnixMilli()), payload))
	p.seq++
	if _, err := p.sock.SendMessage(f[0], f[1], f[2], f[3]); err != nil {
		p.t.Fatal(err)
	}
}

func (p *fakePub) channel(owner string) Channel {
	return Channel{Endpoint: p.ep, PublisherID: p.pid, Owner: owner}
}

// snapshot is what was recorded so far.
func (r *recorder) snapshot() []collectors.Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]collectors.Observation(nil), r.obs...)
}

func find[T collectors.Observation](obs []collectors.Observation, ok func(T) bool) T {
	var zero T
	for _, o := range obs {
		if v, is := o.(T); is && ok(v) {
			return v
		}
	}
	return zero
}

// Discovered publishers come and go with their advertisements: a SUB per
// advertised endpoint; a message under a publisher id discovery does not
// advertise there is counted and said, not applied; a rank withdrawn while
// its worker keeps another drops its blocks; a worker whose publishers are
// all withdrawn leaves the pool (not a gap, not a disconnection), and its
// endpoint is closed; the same worker back under a new publisher joins
// again.
func TestDiscoveredPublishersComeAndGo(t *testing.T) {
	zctx, _ := zmq.NewContext()
	t.Cleanup(func() { _ = zctx.Term() }) // last: after the sockets' cleanups
	a := newFakePub(t, zctx, 42, 0, 100)  // pod p0, worker 42 rank 0
	b := newFakePub(t, zctx, 42, 1, 101)  // pod p0, worker 42 rank 1
	c := newFakePub(t, zctx, 7, 0, 200)   // pod p1, worker 7
	fd := &fakeDiscovery{sets: make(chan Channels)}
	rec, _ := record(t, Options{Discover: fd})
	fd.sets <- Channels{Channels: []Channel{a.channel("pod p0"), b.channel("pod p0"), c.channel("pod p1")}}
	for _, p := range []*fakePub{a, b, c} {
		p.heard(1)
	}
	a.store(100, 1)
	b.store(101, 2)
	c.store(200, 3)
	c.store(999, 4) // not the publisher advertised there
	rec.wait(t, "three streams, the impostor said", func(obs []collectors.Observation) bool {
		said := find(obs, func(e *collectors.SourceError) bool {
			return e.Kind == "identity_mismatch" && strings.Contains(e.Message, "publisher id 999") && strings.Contains(e.Message, "200 (pod p1)")
		})
		return said != nil && len(batches(obs, "worker_42")) == 2 && len(batches(obs, "worker_7")) == 1
	})
	if bs := batches(rec.snapshot(), "worker_7"); len(bs) != 1 || bs[0].Seq != 1 {
		t.Fatalf("worker_7: the impostor's event applied: %v", seqs(bs))
	}

	// Rank 1 withdrawn: its blocks go, the worker stays.
	fd.sets <- Channels{Channels: []Channel{a.channel("pod p0"), c.channel("pod p1")}}
	b.heard(0)
	rec.wait(t, "rank 1 gone", func(obs []collectors.Observation) bool {
		r := find(obs, func(r *collectors.StreamReset) bool {
			return r.Worker == "worker_42" && r.Rank == 1 && r.Reason == "gone"
		})
		return r != nil
	})
	if l := find(rec.snapshot(), func(c *collectors.TargetChange) bool { return true }); l != nil {
		t.Fatalf("a worker with a rank still advertised left: %+v", l)
	}
	st := rec.stat(pubKey{"worker_42", 1})
	if st == nil || st.Gaps != 0 || st.Missing != 0 || len(st.History) == 0 || st.History[len(st.History)-1].Kind != "gone" ||
		!strings.Contains(st.History[len(st.History)-1].Note, "pod p0 no longer advertises publisher 101") {
		t.Fatalf("rank 1's last status: %+v", st)
	}

	// Pod p1 deleted: worker_7 leaves, its SUB closes, nothing more of it
	// is applied.
	fd.sets <- Channels{Channels: []Channel{a.channel("pod p0")}, Left: map[string]string{"pod p1": "pod p1 gone (its DynamoWorkerMetadata p1 was deleted)"}}
	c.heard(0)
	rec.wait(t, "worker_7 left", func(obs []collectors.Observation) bool {
		l := find(obs, func(c *collectors.TargetChange) bool { return c.Name == "worker_7" && c.Kind == collectors.TargetLeft })
		return l != nil && strings.Contains(l.Reason, "pod p1 gone")
	})
	c.store(200, 5)
	a.store(100, 6)
	rec.wait(t, "worker_42 rank 0's second batch", func(obs []collectors.Observation) bool {
		bs := batches(obs, "worker_42")
		return len(bs) == 3 && bs[2].Seq == 2
	})
	if bs := batches(rec.snapshot(), "worker_7"); len(bs) != 1 {
		t.Fatalf("worker_7 applied after it left: %v", seqs(bs))
	}
	if st := rec.stat(pubKey{"worker_7", 0}); st == nil || st.Gaps != 0 || st.State != snapshot.StreamDisconnected || st.History[len(st.History)-1].Kind != "gone" {
		t.Fatalf("worker_7's last status: %+v", st)
	}

	// Pod p0's worker re-registers under a new publisher on a new port,
	// same worker id: the old incarnation leaves, the new one joins.
	a2 := newFakePub(t, zctx, 42, 0, 300)
	fd.sets <- Channels{Channels: []Channel{a2.channel("pod p0")}}
	a.heard(0)
	a2.heard(1)
	rec.wait(t, "worker_42 left", func(obs []collectors.Observation) bool {
		return find(obs, func(c *collectors.TargetChange) bool { return c.Name == "worker_42" && c.Kind == collectors.TargetLeft }) != nil
	})
	a2.store(300, 7)
	rec.wait(t, "worker_42 joined again, its new run applied", func(obs []collectors.Observation) bool {
		j := -1
		for i, o := range obs {
			if c, ok := o.(*collectors.TargetChange); ok && c.Name == "worker_42" && c.Kind == collectors.TargetJoined {
				j = i
			}
			if b, ok := o.(*collectors.EventBatch); ok && b.Worker == "worker_42" && b.Endpoint == a2.ep {
				return j >= 0 && j < i && b.Seq == 1
			}
		}
		return false
	})
}

// A discovery that cannot run at all (its API is not there) is the
// collector's error.
func TestDiscoveryFatal(t *testing.T) {
	c, err := New(Options{Discover: &fakeDiscovery{err: errors.New("no such API")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make(chan collectors.Observation, 16)
	err = c.Run(ctx, out)
	if err == nil || !strings.Contains(err.Error(), "no such API") || ctx.Err() != nil {
		t.Fatalf("Run: %v (ctx %v)", err, ctx.Err())
	}
}
