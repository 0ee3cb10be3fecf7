package natsevents

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/sim/wire"
	"github.com/kvtop/kvtop/snapshot"
)

// TestSimulatorOverDynamoZMQ: Dynamo's ZMQ event plane as its source
// defines it — a PUB per worker rank, four frames, batched envelopes — from
// the simulator. kvtop's index equals the engines' caches block for block;
// events withheld before publishing (a forced gap) are lost, honestly (the
// event plane keeps no history), within one refresh; a restarted worker
// (a new publisher, a new worker id) drops its old blocks.
func TestSimulatorOverDynamoZMQ(t *testing.T) {
	o := sim.Options{Workers: 2, Seed: 7, Rate: 20, EventPlane: "dynamo-zmq"}
	p := startSimPoolWhen(t, (*sim.Sim).DynamoSubscribed, o, Options{}) // endpoints: the sim's
	p.waitFor(t, "both workers' streams with events", func(s *snapshot.Snapshot) bool {
		for _, w := range s.Workers {
			if len(w.Streams) != 1 || w.Streams[0].Batches < 10 {
				return false
			}
		}
		return true
	})
	s := p.settled(t, 2)
	for _, w := range s.Workers {
		st := w.Streams[0]
		if st.Gaps != 0 || st.Restarts != 0 || st.Lost != 0 || !strings.HasPrefix(st.Endpoint, "tcp://127.0.0.1:") {
			t.Fatalf("%s from its first envelope: %+v", w.Name, st)
		}
	}
	if err := p.s.Inject(sim.SetRate{Factor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.s.Inject(scenario.EventLoss{Worker: 0, Batches: 5}); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	s = p.waitFor(t, "w0's withheld events lost", func(s *snapshot.Snapshot) bool {
		st := s.Workers[0].Streams[0]
		return st.Gaps >= 1 && st.Lost >= 5
	})
	st := s.Workers[0].Streams[0]
	if st.State != "history_lost" || s.Workers[0].IndexComplete || !strings.Contains(lastNote(st.History), "keeps no history") {
		t.Fatalf("w0 after the gap: state %s complete %v history %+v", st.State, s.Workers[0].IndexComplete, st.History)
	}
	t.Logf("gap seen %v after it was made", time.Since(at).Round(time.Millisecond))
	if err := p.s.Inject(sim.WorkerRestart{Worker: 0, Down: time.Second}); err != nil {
		t.Fatal(err)
	}
	p.waitFor(t, "w0 restarted under a new worker id, its new run live", func(s *snapshot.Snapshot) bool {
		st := s.Workers[0].Streams
		return len(st) == 1 && st[0].Restarts >= 1 && st[0].State == "live"
	})
	s = p.settled(t, 2)
	if st := s.Workers[1].Streams[0]; st.Gaps != 0 || st.Restarts != 0 {
		t.Errorf("w1 (never restarted): %+v", st)
	}
}

func lastNote(h []snapshot.Incident) string {
	var b strings.Builder
	for _, in := range h {
		b.WriteString(in.Note + " | ")
	}
	return b.String()
}

// TestZMQFramesChecked: messages that are not the event plane's four
// frames, or whose envelope disagrees with its id frames, are counted and
// said, never applied; a good one next to them is.
func TestZMQFramesChecked(t *testing.T) {
	zctx, _ := zmq.NewContext()
	defer zctx.Term()
	pub, _ := zctx.NewSocket(zmq.XPUB)
	defer pub.Close()
	_ = pub.SetLinger(0)
	if err := pub.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	ep, _ := pub.GetLastEndpoint()
	rec, _ := record(t, Options{ZMQ: []string{ep}})
	if _, err := pub.RecvBytes(0); err != nil { // kvtop subscribed
		t.Fatal(err)
	}
	ev := wire.AppendDynamoMsgpack(nil, 42, 1, 0, &kvcache.Event{Kind: kvcache.Cleared})
	good := func(pid, seq uint64) [][]byte {
		payload := append(wire.AppendArrayHeader(nil, 1), ev...)
		return wire.DynamoFrames("kv-events", pid, seq, wire.AppendDynamoEnvelope(nil, "kv-events", pid, seq, 1, payload))
	}
	liar := good(9, 0)
	binary.BigEndian.PutUint64(liar[2], 3) // the frame says sequence 3, the envelope 0
	short := good(9, 0)[:3]
	badLen := good(9, 0)
	badLen[3][4]++ // the length says one byte more
	for _, m := range [][][]byte{short, liar, badLen, good(9, 0)} {
		if _, err := pub.SendMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	rec.wait(t, "the good message applied, the three others said", func(obs []collectors.Observation) bool {
		said := false
		for _, o := range obs {
			if e, ok := o.(*collectors.SourceError); ok && e.Kind == "decode" && strings.Contains(e.Message, "not Dynamo's event plane") {
				said = true
			}
		}
		bs := batches(obs, "worker_42")
		return said && len(bs) == 1 && bs[0].Seq == 1 && bs[0].Events[0].Kind == collectors.AllBlocksCleared
	})
	if n := batches(rec.obs, "worker_42"); len(n) != 1 {
		t.Fatalf("%d batches applied, want only the good one", len(n))
	}
}
