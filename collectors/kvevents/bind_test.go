package kvevents

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// The centralized layout creates a publisher per topic id and rank it
// hears: beyond MaxPublishers, and for ranks outside 0..255, batches are
// refused with a counted, rate-limited error; the publishers it has keep
// working.
func TestCentralizedBounds(t *testing.T) {
	bind := freeTCP(t)
	h := runCollector(t, Options{Bind: bind, MaxPublishers: 2})
	var pubs []*testPub
	for _, topic := range []string{"kv@10.0.0.1:8000@m", "kv@10.0.0.2:8000@m", "kv@10.0.0.3:8000@m", "kv@10.0.0.4:8000@m"} {
		p := newTestPub(t, pubOpts{connect: bind, topic: topic})
		p.waitSubscribed()
		pubs = append(pubs, p)
	}
	a, b, c, d := pubs[0], pubs[1], pubs[2], pubs[3]
	d.publish(mpEncode([]any{1.8e9, []any{removedMap(h1)}, 300})) // a bogus rank
	a.publish(batchSeq(0, 0))
	b.publish(batchSeq(0, 0))
	h.waitStatus("10.0.0.1:8000", 0, "a live", func(s *collectors.StreamStatus) bool { return s.HasSeq })
	h.waitStatus("10.0.0.2:8000", 0, "b live", func(s *collectors.StreamStatus) bool { return s.HasSeq })
	c.publish(batchSeq(0, 0)) // a third publisher: over the limit
	c.publish(batchSeq(0, 1))
	a.publish(batchSeq(0, 1))
	h.waitStatus("10.0.0.1:8000", 0, "a goes on", func(s *collectors.StreamStatus) bool { return s.LastSeq == 1 })

	over := h.sourceErrors("too_large")
	if len(over) != 1 || !strings.Contains(over[0].Message, `topic "kv@10.0.0.3:8000@m" rank 0 dropped: already tracking 2 publishers`) ||
		over[0].Source != "events bind "+bind {
		t.Errorf("limit errors %+v, want one (rate-limited) naming the topic and the limit", over)
	}
	bad := h.sourceErrors("decode")
	if len(bad) != 1 || !strings.Contains(bad[0].Message, "data_parallel_rank 300, outside 0..255") {
		t.Errorf("rank errors %+v, want one naming rank 300", bad)
	}
	for _, o := range h.all() {
		switch o := o.(type) {
		case *collectors.StreamStatus:
			if o.Worker == "10.0.0.3:8000" || o.Worker == "10.0.0.4:8000" {
				t.Errorf("a refused publisher got a stream: %s rank %d", o.Worker, o.Rank)
			}
		case *collectors.EventBatch:
			if o.Worker == "10.0.0.3:8000" || o.Worker == "10.0.0.4:8000" {
				t.Errorf("a refused batch was applied: %s seq %d", o.Worker, o.Seq)
			}
		}
	}
}

// A centralized publisher silent for IdleEvict is forgotten: a last status
// says disconnected. When it comes back in order it resumes its stream (no
// reset, nothing re-applied); if it restarted meanwhile and runs ahead, the
// check of its last applied seq catches it.
func TestCentralizedIdleEvict(t *testing.T) {
	const topic = "kv@10.0.0.1:8000@m"
	for _, restart := range []bool{false, true} {
		name := map[bool]string{false: "resumes in order", true: "restarted while idle"}[restart]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bind := freeTCP(t)
			p := newTestPub(t, pubOpts{connect: bind, topic: topic, replay: true}) // dials until kvtop binds
			replay := p.Replay
			h := runCollector(t, Options{Bind: bind, IdleEvict: 300 * time.Millisecond, ReplayCooldown: 50 * time.Millisecond,
				ResolveEndpoint: func(string) Endpoint { return Endpoint{Worker: "w-a", Replay: replay} }})
			p.waitSubscribed()
			p.publish(batchSeq(0, 0))
			p.publish(batchSeq(0, 1))
			h.waitStatus("w-a", 0, "seq 1 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 1 })
			st := h.waitState("w-a", 0, snapshot.StreamDisconnected)
			if d := h.incidents("w-a", 0, "disconnected"); len(d) != 1 || !strings.Contains(d[0].Note, "no batch for 300ms") {
				t.Errorf("disconnected incidents %+v", d)
			}
			if st.Batches != 2 || st.LastSeq != 1 {
				t.Errorf("last status batches=%d last=%d, want 2 1", st.Batches, st.LastSeq)
			}

			want := []uint64{0, 1, 2}
			if restart {
				p.close()
				p = newTestPub(t, pubOpts{connect: bind, topic: topic, replay: true, replayPort: portOf(t, replay)})
				p.waitSubscribed()
				for seq := 0; seq < 4; seq++ {
					p.drop(batchSeq(1, seq))
				}
				want = []uint64{0, 1, 2, 3, 4}
			}
			last := p.publish(batchSeq(1, int(p.seq)))
			st = h.waitStatus("w-a", 0, "back", func(s *collectors.StreamStatus) bool { return s.LastSeq == last && s.State == live })
			if n := h.resets("w-a"); n != map[bool]int{false: 0, true: 1}[restart] {
				t.Errorf("%d resets", n)
			}
			after := h.afterReset("w-a")
			if got := seqsOf(after); !reflect.DeepEqual(got, want) {
				t.Errorf("applied %v since the last reset, want %v", got, want)
			}
			if restart {
				for _, b := range after {
					if runOf(b) != 1 {
						t.Errorf("seq %d after the reset is from the old run", b.Seq)
					}
				}
			}
			if !restart && st.Batches != 3 {
				t.Errorf("batches %d after resuming, want 3: the counters carry on", st.Batches)
			}
			if d := h.incidents("w-a", 0, "disconnected"); len(d) != 1 || d[0].End.IsZero() {
				t.Errorf("disconnected incidents %+v, want the one closed on return", d)
			}
		})
	}
}

// The centralized layout takes a publisher's FirstSeq from ResolveEndpoint:
// one counting from 1, without a replay endpoint, is complete from its
// first batch; the same batch from a publisher resolved without it leaves
// the history before seq 1 unknown.
func TestCentralizedFirstSeq(t *testing.T) {
	bind := freeTCP(t)
	h := runCollector(t, Options{Bind: bind, ResolveEndpoint: func(id string) Endpoint {
		if id == "127.0.0.1:8001" {
			return Endpoint{Worker: "sim", FirstSeq: 1}
		}
		return Endpoint{}
	}})
	sim := newTestPub(t, pubOpts{connect: bind, topic: "kv@127.0.0.1:8001@sim-org/sim-model-1b"})
	other := newTestPub(t, pubOpts{connect: bind, topic: "kv@10.0.0.9:8000@m"})
	for _, p := range []*testPub{sim, other} {
		p.waitSubscribed()
		p.seq = 1
		p.publish(batchSeq(0, 1))
		p.publish(batchSeq(0, 2))
	}
	st := h.waitStatus("sim", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	if st.State != live || st.FirstSeq != 1 || len(h.incidents("sim", 0, "joined_late")) != 0 {
		t.Errorf("first_seq 1 publisher: state %s first %d incidents %+v; want live from seq 1", st.State, st.FirstSeq, st.History)
	}
	st = h.waitStatus("10.0.0.9:8000", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	if st.State != late {
		t.Errorf("publisher without first_seq: state %s, want joined_late (no replay to tell)", st.State)
	}
	for _, w := range []string{"sim", "10.0.0.9:8000"} {
		if got := seqsOf(h.batches(w, 0)); !reflect.DeepEqual(got, []uint64{1, 2}) {
			t.Errorf("%s batches %v, want [1 2]", w, got)
		}
	}
}
