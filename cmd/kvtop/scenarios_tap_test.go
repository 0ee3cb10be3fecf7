package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/kvtop/kvtop/collectors/decisions"
	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
)

// Seed 000's experiment end to end (issue 28, item 4): one synthetic HTTP
// worker behind the sim's router, which forwards and counts outcomes the
// way vllm-router does (by HTTP status), and kvtop with a tap (taps:) in
// front of it. Three identical chat requests without session_id; the
// worker cuts the third stream before finish_reason and [DONE], then
// closes the connection. All three are HTTP 200 and the router counts
// three successes; the tap records two done and one truncated, and the
// console puts them side by side.
func TestSeed000ThreeRequestsThroughTheRouter(t *testing.T) {
	out := t.TempDir() + "/tap.jsonl"
	listen := freeAddr(t)
	r := startScenario(t, sim.Options{Workers: 1}, func(c *config.Config) {
		router := strings.TrimSuffix(c.Routers[0].Metrics, "/metrics")
		c.Taps = []config.Tap{{Name: "t0", Listen: listen, Upstream: router, Out: out}}
	})
	r.inject(sim.CutStreams{Worker: 0, Every: 3})

	body := `{"model":"kvtop-sim/model-8b","stream":true,"stream_options":{"include_usage":true},"max_tokens":6,` +
		`"messages":[{"role":"system","content":"SYSTEM-PROMPT-TEXT ` + strings.Repeat("be brief and exact. ", 10) + `"},{"role":"user","content":"Say hello"}]}`
	var bodies []string
	for i := 0; i < 3; i++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+listen+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer SECRET-TOKEN")
		resp := doWhenListening(t, req)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: HTTP %d, %v", i+1, resp.StatusCode, err)
		}
		bodies = append(bodies, string(b))
	}
	for i, b := range bodies {
		finished := strings.Contains(b, `"finish_reason":"length"`) && strings.HasSuffix(b, "data: [DONE]\n\n")
		if finished != (i < 2) {
			t.Fatalf("request %d: finished %v:\n%s", i+1, finished, b)
		}
	}

	// The router: three successes by its count, one worker, the same
	// empty routing string three times.
	success, failure := r.s.Front().Outcomes()
	if success[0] != 3 || failure[0] != 0 {
		t.Fatalf("the router's circuit breaker counted %v successes, %v failures; want 3, 0", success, failure)
	}

	// kvtop: the tap's records joined to the router's decisions and
	// outcomes by the request id the tap made up and sent along.
	snap := r.waitFor("three tapped requests joined to the router's", func(s *snapshot.Snapshot) bool {
		c := s.Pool.Clients
		return c.Requests == 3 && c.RouterKnown == 3
	})
	c := snap.Pool.Clients
	if c.Finished != 2 || c.Truncated != 1 || c.RouterOK != 3 || c.Failed != 0 {
		t.Fatalf("pool clients %+v: want 2 finished, 1 truncated, router 3 ok", c)
	}
	if w := snap.Workers[0].Clients; w.Requests != 3 || w.Finished != 2 || w.RouterOK != 3 {
		t.Fatalf("w0 clients %+v", w)
	}
	var rows []snapshot.DecisionRow
	for _, d := range snap.Decisions.Recent {
		if d.Client != nil {
			rows = append(rows, d)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows with the client's record", len(rows))
	}
	truncated := 0
	for _, d := range rows {
		p := d.Prediction
		if p == nil || p.Source != "text-tree" || p.Units != "chars" || *p.Matched != 0 || *p.Total != 0 || d.Chosen != "w0" {
			t.Fatalf("%s: prediction %+v chosen %s: vllm-router matches an empty string for a chat without session_id", d.RequestID, p, d.Chosen)
		}
		if d.Outcome == nil || d.Outcome.HTTPStatus != 200 || !strings.HasPrefix(d.RequestID, "tap-") {
			t.Fatalf("%s: router outcome %+v", d.RequestID, d.Outcome)
		}
		if strings.Contains(strings.Join(d.Flags, ","), "truncated") {
			truncated++
			if d.Client.End != "upstream_closed" || d.Client.TTFTMS == nil || *d.Done {
				t.Fatalf("the cut request's client record %+v", d.Client)
			}
		} else if d.Client.End != "done" || d.Client.CachedTokens == nil || d.Client.FinishReason != "length" {
			t.Fatalf("a finished request's client record %+v", d.Client)
		}
	}
	if truncated != 1 || snap.Decisions.Truncated != 1 {
		t.Fatalf("%d rows flagged truncated, journal says %d", truncated, snap.Decisions.Truncated)
	}

	// What the operator reads.
	lipgloss.SetColorProfile(termenv.Ascii)
	th, err := themes.Load("default", nil)
	if err != nil {
		t.Fatal(err)
	}
	screen := strings.Join(strings.Fields(views.Render(snap, views.State{Screen: views.Decisions, Follow: true}, 160, 30, th)), " ")
	if !strings.Contains(screen, "router: 3 ok · client: 2 finished, 1 truncated") {
		t.Fatalf("the decisions screen does not put the router's successes beside the client's:\n%s", screen)
	}

	// The tap's audit file: three outcome lines kvtop's reader takes, no
	// secret and no text in them.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) != 3 {
		t.Fatalf("%d lines in %s", len(lines), out)
	}
	for _, l := range lines {
		res, err := decisions.ParseLine(l, decisions.FormatKvtop)
		if err != nil || res.Outcome == nil || res.Outcome.Observer != "client" {
			t.Fatalf("%s: %v %+v", l, err, res)
		}
	}
	for _, secret := range []string{"SECRET-TOKEN", "Bearer", "SYSTEM-PROMPT", "be brief", "Say hello", "tok "} {
		if bytes.Contains(data, []byte(secret)) {
			t.Fatalf("the tap's records hold %q", secret)
		}
	}
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// doWhenListening sends req once the tap listens (the collectors start it
// with the engine, a moment after).
func doWhenListening(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	body, _ := io.ReadAll(req.Body)
	end := time.Now().Add(scnDeadline)
	for {
		req.Body = io.NopCloser(bytes.NewReader(body))
		ctx, cancel := context.WithTimeout(context.Background(), scnDeadline)
		t.Cleanup(cancel)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err == nil {
			return resp
		}
		if time.Now().After(end) {
			t.Fatalf("the tap does not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The tap scenario of the demo (issue 28, item 5): the sim's clients send
// through the tap its config names; w1's first tokens come 1.5 s late and
// w2 cuts every fourth stream. kvtop sees both where they happen: the cut
// streams truncated on w2 only, the late first tokens on w1 only — while
// the router counts every one of them a success.
func TestScenarioTap(t *testing.T) {
	r := startScenario(t, sim.Options{Scenario: "tap"}, nil)
	if len(r.c.Taps) != 1 || r.c.Taps[0].Upstream == "" {
		t.Fatalf("the tap scenario's config has no tap: %+v", r.c.Taps)
	}
	r.run(1) // the scenario's first cue starts the clients
	snap := r.waitFor("w2's streams cut and w1's first tokens late", func(s *snapshot.Snapshot) bool {
		w1, w2 := s.Workers[1].Clients, s.Workers[2].Clients
		return w2.Truncated >= 1 && w2.Finished >= 2 && w1.Finished >= 2 && s.Pool.Clients.RouterKnown >= 8
	})
	for i, w := range snap.Workers {
		if c := w.Clients; (c.Truncated > 0) != (i == 2) || c.Failed > 0 {
			t.Errorf("%s clients %+v: only w2 cuts streams", w.Name, c)
		}
	}
	if c := snap.Pool.Clients; c.RouterOK != c.RouterKnown {
		t.Errorf("the router counted %d of %d a success: it counts HTTP 200 whatever the stream did", c.RouterOK, c.RouterKnown)
	}
	for _, d := range snap.Decisions.Recent {
		if d.Client == nil || d.Client.TTFTMS == nil {
			continue
		}
		if late := *d.Client.TTFTMS >= 1500; late != (d.Chosen == "w1") {
			t.Errorf("%s on %s: client TTFT %.0f ms", d.RequestID, d.Chosen, *d.Client.TTFTMS)
		}
	}
}
