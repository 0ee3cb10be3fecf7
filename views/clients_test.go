package views_test

import (
	"strings"
	"testing"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// Seed 000 on screen: the decisions screen puts the router's three
// successes beside the client's two finished streams and one truncated;
// the cut request's record says why, in words; without a tap, no line.
func TestClientsBesideRouterOnScreen(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	if out := views.Render(s, state(views.Decisions), 160, 30, th); strings.Contains(out, "CLIENTS") {
		t.Fatalf("a clients line without a tap:\n%s", out)
	}
	fp := func(v float64) *float64 { return &v }
	ip := func(v int) *int { return &v }
	p50, p95, p99 := 210.0, 480.0, 900.0
	s.Pool.Clients = snapshot.Clients{Requests: 3, Finished: 2, Truncated: 1, RouterKnown: 3, RouterOK: 3, Breaks: 1, BrokenStreams: 1,
		TTFTMS: snapshot.RequestQuantiles{P50: &p50, P95: &p95, P99: &p99, N: 20}}
	done := false
	s.Decisions.Recent = append(s.Decisions.Recent, snapshot.DecisionRow{
		At: s.At, RequestID: "cut-1", AttemptID: "1", Chosen: "w1", Format: "kvtop", Done: &done, Flags: []string{"truncated", "stream_break"},
		Outcome: &snapshot.OutcomeInfo{At: s.At, Worker: "w1", HTTPStatus: 200},
		Client: &snapshot.ClientInfo{At: s.At, Source: "tap t0", HTTPStatus: 200, End: "upstream_closed", Class: snapshot.ClientTruncated,
			TTFBMS: fp(4), TTFTMS: fp(210), E2EMS: fp(1900), MaxGapMS: fp(1500), Breaks: ip(1)},
	})
	out := views.Render(s, state(views.Decisions), 160, 30, th)
	flat := strings.Join(strings.Fields(out), " ")
	for _, w := range []string{"CLIENTS", "router: 3 ok · client: 2 finished, 1 truncated", "TTFT 210 ms p50, 480 ms p95, 900 ms p99", "1 streaming breaks"} {
		if !strings.Contains(flat, w) {
			t.Errorf("decisions screen lacks %q:\n%s", w, out)
		}
	}
	st := state(views.DecisionDetail)
	st.Decision = views.DecisionKey{RequestID: "cut-1", AttemptID: "1"}
	flat = strings.Join(strings.Fields(views.Render(s, st, 200, 50, th)), " ")
	for _, w := range []string{"TTFT 210 ms (headers 4 ms) · HTTP 200", "largest gap 1.5 s · 1 breaks", "ended early", "seen by tap t0",
		"HTTP 200 but the stream never finished: no finish_reason and [DONE] (ended early); the router counted it a success (HTTP 200)",
		"the stream stalled 1 times after its first token"} {
		if !strings.Contains(flat, w) {
			t.Errorf("record lacks %q:\n%s", w, flat)
		}
	}
	// Every screen still fits at 80×24 with the extra line.
	for _, n := range []int{24, 15} {
		if lines := strings.Split(views.Render(s, state(views.Decisions), 80, n, th), "\n"); len(lines) > n {
			t.Errorf("%d lines at 80×%d", len(lines), n)
		}
	}
}
