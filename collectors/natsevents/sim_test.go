package natsevents

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// simPool runs the simulator publishing to NATS in Dynamo's format and
// kvtop's collector folding what it receives into a pool.
type simPool struct {
	s  *sim.Sim
	mu sync.Mutex
	st *pool.State
}

func startSimPool(t *testing.T, srv interface{ NumSubscriptions() uint32 }, o sim.Options, co Options) *simPool {
	t.Helper()
	base := srv.NumSubscriptions()
	return startSimPoolWhen(t, func(*sim.Sim) bool { return srv.NumSubscriptions() > base }, o, co)
}

// startSimPoolWhen starts the sim and kvtop's collector, and the sim's
// clock once listening says kvtop listens.
func startSimPoolWhen(t *testing.T, listening func(*sim.Sim) bool, o sim.Options, co Options) *simPool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The clock waits until kvtop listens: no event is published before.
	o.Manual = true
	s, err := sim.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var specs []pool.WorkerSpec
	for _, w := range s.Endpoints().Workers {
		specs = append(specs, pool.WorkerSpec{Name: w.Name})
	}
	// A worker's name from its Dynamo id, as config aliases give it; a
	// restarted worker's new id is looked up when it first appears.
	var idsMu sync.Mutex
	ids := map[uint64]string{}
	co.Resolve = func(id uint64) string {
		idsMu.Lock()
		defer idsMu.Unlock()
		if n, ok := ids[id]; ok {
			return n
		}
		for _, w := range s.Endpoints().Workers {
			ids[w.DynamoID] = w.Name
		}
		return ids[id]
	}
	if o.EventPlane == "dynamo-zmq" && len(co.ZMQ) == 0 {
		co.ZMQ = s.Endpoints().DynamoZMQ
	}
	c, err := New(co)
	if err != nil {
		t.Fatal(err)
	}
	p := &simPool{s: s, st: pool.NewState(pool.Options{Workers: specs})}
	out := make(chan collectors.Observation, 4096)
	go func() { _ = c.Run(ctx, out) }()
	deadline := time.Now().Add(10 * time.Second)
	for !listening(s) {
		if time.Now().After(deadline) {
			t.Fatal("kvtop did not subscribe within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if s.Advance(50*time.Millisecond) != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		for {
			select {
			case o := <-out:
				p.mu.Lock()
				p.st.Apply(o)
				p.mu.Unlock()
				if b, ok := o.(*collectors.EventBatch); ok {
					b.Applied()
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

func (p *simPool) snapshot() *snapshot.Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Snapshot(time.Now())
}

func (p *simPool) waitFor(t *testing.T, what string, ok func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := p.snapshot()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, streamsOf(s))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func streamsOf(s *snapshot.Snapshot) map[string][]snapshot.Stream {
	m := map[string][]snapshot.Stream{}
	for _, w := range s.Workers {
		m[w.Name] = w.Streams
	}
	return m
}

// settled: every worker's stream is live, the index complete, and kvtop
// holds exactly the blocks each simulated engine holds.
func (p *simPool) settled(t *testing.T, n int) *snapshot.Snapshot {
	t.Helper()
	if err := p.s.Inject(sim.SetRate{Factor: 0}); err != nil {
		t.Fatal(err)
	}
	return p.waitFor(t, "kvtop's index to match the engines' caches", func(s *snapshot.Snapshot) bool {
		for i, w := range s.Workers[:n] {
			if len(w.Streams) != 1 || w.Streams[0].State != "live" || !w.IndexComplete || w.Blocks == nil {
				return false
			}
			if want := p.s.ResidentBlocks(i, 0); *w.Blocks != want {
				return false
			}
		}
		return true
	})
}

// The simulator publishes Dynamo's durable KV events into JetStream;
// kvtop reads them, names the workers by their config aliases, loses five
// of w0's events on the way (a forced gap), replays them from the stream,
// and ends with exactly the blocks each engine holds.
func TestSimulatorOverJetStream(t *testing.T) {
	srv := startNATS(t, 0)
	var (
		armed   atomic.Bool
		dropped atomic.Int64
		w0      atomic.Uint64
	)
	testHookDrop = func(ev *Event) bool {
		if armed.Load() && ev.WorkerID == w0.Load() && dropped.Load() < 5 {
			dropped.Add(1)
			return true
		}
		return false
	}
	defer func() { testHookDrop = nil }()
	p := startSimPool(t, srv, sim.Options{Workers: 2, Seed: 3, Rate: 20, EventPlane: "nats", NATS: srv.ClientURL()},
		Options{URL: srv.ClientURL(), JetStream: &JetStream{Stream: sim.DynamoStream}})
	w0.Store(p.s.Endpoints().Workers[0].DynamoID)
	p.waitFor(t, "both workers' streams live with events", func(s *snapshot.Snapshot) bool {
		for _, w := range s.Workers {
			if len(w.Streams) != 1 || w.Streams[0].State != "live" || w.Streams[0].Batches < 20 {
				return false
			}
		}
		return true
	})
	armed.Store(true)
	s := p.waitFor(t, "w0's gap replayed from JetStream", func(s *snapshot.Snapshot) bool {
		st := s.Workers[0].Streams[0]
		return dropped.Load() == 5 && st.Gaps >= 1 && st.Replayed >= 5 && st.State == "live"
	})
	st := s.Workers[0].Streams[0]
	if st.Lost != 0 || st.Missing != st.Replayed || st.Endpoint != srv.ClientURL() {
		t.Errorf("w0 stream after the replay: missing %d replayed %d lost %d endpoint %s", st.Missing, st.Replayed, st.Lost, st.Endpoint)
	}
	s = p.settled(t, 2)
	for _, w := range s.Workers {
		if w.Name != "w0" && w.Name != "w1" {
			t.Errorf("a worker kvtop did not map to its alias: %s", w.Name)
		}
	}
	t.Logf("w0: %d blocks, %d events, replayed %d", *s.Workers[0].Blocks, s.Workers[0].Streams[0].Events, s.Workers[0].Streams[0].Replayed)
}

// The event plane's core NATS subject with msgpack envelopes: the same
// blocks arrive; a restarted worker comes back under a new worker id, and
// kvtop drops its old blocks.
func TestSimulatorOverCoreEventPlane(t *testing.T) {
	srv := startNATS(t, 0)
	p := startSimPool(t, srv, sim.Options{Workers: 2, Seed: 5, Rate: 20, EventPlane: "nats", NATS: srv.ClientURL(), DynamoEvents: "core"},
		Options{URL: srv.ClientURL()})
	p.waitFor(t, "both workers' streams with events", func(s *snapshot.Snapshot) bool {
		for _, w := range s.Workers {
			if len(w.Streams) != 1 || w.Streams[0].Batches < 10 {
				return false
			}
		}
		return true
	})
	if err := p.s.Inject(sim.WorkerRestart{Worker: 0, Down: time.Second}); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "w0 restarted under a new id, its new run live", func(s *snapshot.Snapshot) bool {
		st := s.Workers[0].Streams
		return len(st) == 1 && st[0].Restarts >= 1 && st[0].State == "live"
	})
	s := p.settled(t, 2)
	if st := s.Workers[1].Streams[0]; st.Gaps != 0 || st.Restarts != 0 || len(st.History) != 0 {
		t.Errorf("w1 (never restarted, read from its first event): %+v", st)
	}
}
