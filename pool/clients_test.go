package pool

import (
	"fmt"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// clientOutcome is what kvtop tap records for a request: no attempt, the
// end it saw.
func clientOutcome(req, end string, status int, ttft float64, sec float64) *collectors.Outcome {
	return &collectors.Outcome{RequestID: req, HTTPStatus: status, End: end, Observer: collectors.ObserverClient,
		TTFTMS: f(ttft), TTFBMS: f(5), E2EMS: f(900), Breaks: ip(0), CachedTokens: ip(0), Done: bp(end == "done"),
		Format: "kvtop", Source: "tap t0", At: at(sec), TS: at(sec)}
}

// Seed 000 through the pool: three decisions for w0, the router's three
// outcomes (HTTP 200: three successes for its circuit breaker) and the
// client's three records (two done, one cut before finish_reason and
// [DONE]), in any order. The router's success count stands beside the
// client's finished count; only the cut request is flagged truncated.
func TestClientsBesideRouter(t *testing.T) {
	for _, order := range []string{"decision, router, client", "client first"} {
		t.Run(order, func(t *testing.T) {
			s := newTestState("w0", "w1")
			var obs []collectors.Observation
			for i, end := range []string{"done", "done", "upstream_closed"} {
				id := fmt.Sprintf("r-%d", i)
				d := &collectors.Decision{RequestID: id, AttemptID: "1", Chosen: "w0", Format: "kvtop", At: at(1), TS: at(1)}
				o := &collectors.Outcome{RequestID: id, AttemptID: "1", Worker: "w0", HTTPStatus: 200, Format: "kvtop", At: at(2), TS: at(2)}
				c := clientOutcome(id, end, 200, 100+float64(i), 3)
				if order == "client first" {
					obs = append(obs, c, d, o)
				} else {
					obs = append(obs, d, o, c)
				}
			}
			for _, o := range obs {
				s.Apply(o)
			}
			snap := s.Snapshot(at(4))
			want := snapshot.Clients{Requests: 3, Finished: 2, Truncated: 1, RouterKnown: 3, RouterOK: 3}
			got := snap.Pool.Clients
			got.TTFTMS = snapshot.RequestQuantiles{}
			if got != want {
				t.Fatalf("pool clients %+v, want %+v", got, want)
			}
			if w0 := row(t, snap, "w0").Clients; w0.Requests != 3 || w0.Finished != 2 || w0.RouterOK != 3 {
				t.Fatalf("w0 clients %+v", w0)
			}
			if w1 := row(t, snap, "w1").Clients; w1.Requests != 0 || w1.TTFTMS.Reason == "" {
				t.Fatalf("w1 clients %+v", w1)
			}
			d := snap.Decisions
			if d.Truncated != 1 || d.WithOutcome != 3 || len(d.Recent) != 3 {
				t.Fatalf("decisions: truncated %d, with outcome %d, rows %d", d.Truncated, d.WithOutcome, len(d.Recent))
			}
			for _, r := range d.Recent {
				cut := r.RequestID == "r-2"
				if r.Client == nil || (flags(r) == "truncated") != cut || *r.Done == cut || r.Outcome == nil || r.Outcome.HTTPStatus != 200 {
					t.Fatalf("%s: flags %q done %v client %+v", r.RequestID, flags(r), r.Done, r.Client)
				}
				if cut && (r.Client.Class != snapshot.ClientTruncated || r.Client.End != "upstream_closed" || r.Client.Source != "tap t0") {
					t.Fatalf("the cut request: %+v", r.Client)
				}
			}
		})
	}
}

// Without router outcomes (vllm-router writes none), the client's record
// is the request's outcome: the worker comes from the decision, the router
// verdict is unknown (not "0 ok"); a failed or broken stream is flagged.
func TestClientsWithoutRouterOutcomes(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(&collectors.Decision{RequestID: "a", Chosen: "w1", Format: "kvtop", At: at(1)})
	s.Apply(&collectors.Decision{RequestID: "b", Chosen: "w1", Format: "kvtop", At: at(1)})
	broken := clientOutcome("a", "done", 200, 80, 2)
	broken.Breaks = ip(2)
	s.Apply(broken)
	s.Apply(clientOutcome("b", "no_response", 0, 0, 2))
	snap := s.Snapshot(at(3))
	w1 := row(t, snap, "w1").Clients
	if w1.Requests != 2 || w1.Finished != 1 || w1.Failed != 1 || w1.Breaks != 2 || w1.BrokenStreams != 1 || w1.RouterKnown != 0 {
		t.Fatalf("w1 clients %+v", w1)
	}
	for _, r := range snap.Decisions.Recent {
		want := map[string]string{"a": "stream_break", "b": "error"}[r.RequestID]
		if flags(r) != want {
			t.Fatalf("%s flags %q, want %q", r.RequestID, flags(r), want)
		}
	}
}

// A worker named by the response (x-smg-routed-worker-id: its URL) wins
// over the decision's; a request seen only by the tap is an orphan outcome
// of that worker; a record older than the window is out; TTFT quantiles
// come from 20 requests on.
func TestClientsWorkerWindowQuantiles(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"http://10.0.0.5:8000"}}, {Name: "w1"}}, Window: 60e9})
	for i := 0; i < 20; i++ {
		c := clientOutcome(fmt.Sprintf("q-%d", i), "done", 200, float64(10*(i+1)), 50)
		c.Worker = "http://10.0.0.5:8000"
		s.Apply(c)
	}
	s.Apply(clientOutcome("old", "done", 200, 5, 1)) // no worker, and soon out of the window
	snap := s.Snapshot(at(70))
	w0 := row(t, snap, "w0").Clients
	if w0.Requests != 20 || w0.TTFTMS.N != 20 || *w0.TTFTMS.P50 != 100 || *w0.TTFTMS.P95 != 190 || *w0.TTFTMS.P99 != 200 {
		t.Fatalf("w0 clients %+v ttft %+v", w0, w0.TTFTMS)
	}
	if p := snap.Pool.Clients; p.Requests != 20 || snap.Decisions.OrphanOutcomes != 21 {
		t.Fatalf("pool %+v, orphans %d", p, snap.Decisions.OrphanOutcomes)
	}
}

// A router's retry: the tap's record (no attempt id) goes with the last
// attempt the journal holds.
func TestClientJoinsLastAttempt(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(&collectors.Decision{RequestID: "r", AttemptID: "1", Chosen: "w0", At: at(1)})
	s.Apply(&collectors.Decision{RequestID: "r", AttemptID: "2", Chosen: "w1", Reason: "retry", At: at(1)})
	s.Apply(clientOutcome("r", "done", 200, 50, 2))
	for _, r := range s.Snapshot(at(3)).Decisions.Recent {
		if (r.Client != nil) != (r.AttemptID == "2") {
			t.Fatalf("attempt %s client %+v", r.AttemptID, r.Client)
		}
	}
}
