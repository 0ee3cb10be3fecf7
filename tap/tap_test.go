package tap

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Each chunk reaches the client before the upstream sends the next one:
// the upstream's second write waits until the client has read the first
// through the tap (a handshake, not a clock), so a tap that held the
// response back would hang here. Every byte arrives unchanged, and the
// record says what the client got.
func TestStreamArrivesChunkByChunkUnchanged(t *testing.T) {
	gate := make(chan struct{})
	steps := []step{
		{data: roleChunk()},
		{wait: 20 * time.Millisecond, data: chatChunk("Hel")},
		{gate: gate, data: chatChunk("lo")},
		{data: finishChunk("stop")},
		{data: usageChunk(320, 256, 2)},
		{data: doneEvent},
	}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{Name: "t0"})

	req, _ := http.NewRequest(http.MethodPost, tp.URL+"/v1/chat/completions", strings.NewReader(chatBody("You are terse.", "Say hello", true)))
	req.Header.Set("X-Request-Id", "r-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	// Read until the "Hel" event has arrived, then open the gate.
	for !strings.Contains(got.String(), `"Hel"`) {
		line, err := br.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			t.Fatalf("stream ended before the first content: %v (%q)", err, got.String())
		}
	}
	close(gate)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	got.Write(rest)
	if want := joinSteps(steps); got.String() != want {
		t.Fatalf("client got\n%q\nwant\n%q", got.String(), want)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	r := tp.next(t)
	if r.End != EndDone || r.Class() != "finished" || !r.SawDone || r.Finish != "stop" {
		t.Fatalf("end %s (%s), done %v, finish %q; want done", r.End, r.Class(), r.SawDone, r.Finish)
	}
	if r.RequestID != "r-1" || r.Model != "qwen3-8b" || !r.Stream || r.Endpoint != "/v1/chat/completions" {
		t.Fatalf("request: %+v", r)
	}
	if r.PromptTokens == nil || *r.PromptTokens != 320 || r.CachedTokens == nil || *r.CachedTokens != 256 || r.OutputTokens == nil || *r.OutputTokens != 2 {
		t.Fatalf("usage: prompt %v cached %v output %v", r.PromptTokens, r.CachedTokens, r.OutputTokens)
	}
	// The role chunk has no content: the first token is "Hel", sent 20 ms
	// after the headers (a lower bound whatever the machine's load: the
	// headers' own time is not, so only their order is held).
	if r.TTFB == nil || r.TTFT == nil || *r.TTFT <= *r.TTFB || *r.TTFT < 20*time.Millisecond {
		t.Fatalf("TTFB %v, TTFT %v: the first token came at least 20 ms after the headers", r.TTFB, r.TTFT)
	}
	if r.Events != 5 || r.HTTPStatus != 200 || r.Unread != "" {
		t.Fatalf("events %d, status %d, unread %q", r.Events, r.HTTPStatus, r.Unread)
	}
	if r.PromptChars == nil || *r.PromptChars != len("You are terse.")+len("Say hello") {
		t.Fatalf("prompt chars %v", r.PromptChars)
	}
}

// Seed 000's third request: HTTP 200, some content, then the upstream
// closes the stream without finish_reason and [DONE]. The client gets
// those bytes and a clean end of the HTTP body — exactly what the upstream
// sent — and the record says truncated.
func TestStreamCutBeforeFinishIsTruncated(t *testing.T) {
	steps := []step{{data: roleChunk()}, {data: chatChunk("Hel")}, {data: chatChunk("lo")}}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{})
	resp, body, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
	if err != nil || resp.StatusCode != 200 || string(body) != joinSteps(steps) {
		t.Fatalf("status %v err %v body %q", resp, err, body)
	}
	r := tp.next(t)
	if r.End != EndUpstreamClosed || r.Class() != "truncated" || r.Done() || r.SawDone || r.Finish != "" {
		t.Fatalf("end %s class %s", r.End, r.Class())
	}
	if r.TTFT == nil {
		t.Fatal("the client got content: TTFT must be known")
	}
}

// A finish_reason without [DONE], or [DONE] without a finish_reason, is
// not a finished stream either.
func TestStreamNeedsFinishAndDone(t *testing.T) {
	for name, steps := range map[string][]step{
		"finish only": {{data: chatChunk("a")}, {data: finishChunk("stop")}},
		"done only":   {{data: chatChunk("a")}, {data: doneEvent}},
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
			tp := newTap(t, up.URL, Options{})
			post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
			if r := tp.next(t); r.Class() != "truncated" {
				t.Fatalf("%s: %s", r.End, r.Class())
			}
		})
	}
}

// The upstream's connection breaks mid-stream (cut inside the chunked
// body, or a TCP reset): the record says reset, and the client's response
// is cut too — it must not look like a finished one.
func TestUpstreamResetCutsTheClient(t *testing.T) {
	for _, end := range []string{"abort", "rst"} {
		t.Run(end, func(t *testing.T) {
			steps := []step{{data: chatChunk("Hel")}, {data: chatChunk("lo")}}
			up := newUpstream(t, func(*http.Request) script { return script{steps: steps, end: end} })
			tp := newTap(t, up.URL, Options{})
			_, body, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
			if err == nil {
				t.Fatal("the client's body ended cleanly; it must see the break")
			}
			if string(body) != joinSteps(steps) {
				t.Fatalf("client got %q before the break, want %q", body, joinSteps(steps))
			}
			r := tp.next(t)
			if r.End != EndReset || r.Class() != "truncated" {
				t.Fatalf("end %s class %s", r.End, r.Class())
			}
		})
	}
}

// The client leaves after the first token: the upstream sees its request
// cancelled (as it would see the client's own disconnect) and the record
// says client_gone — not a truncation by the pool.
func TestClientGoneCancelsUpstream(t *testing.T) {
	steps := []step{{data: chatChunk("Hel")}, {wait: time.Hour, data: chatChunk("lo")}}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tp.URL+"/v1/chat/completions", strings.NewReader(chatBody("s", "u", true)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-up.canceled:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	if r := tp.next(t); r.End != EndClientGone || r.Class() != "left" {
		t.Fatalf("end %s class %s", r.End, r.Class())
	}
}

// Nothing comes for the idle timeout: tap gives up on the upstream, cuts
// the client, and says timeout.
func TestIdleTimeout(t *testing.T) {
	steps := []step{{data: chatChunk("Hel")}}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps, end: "hang"} })
	tp := newTap(t, up.URL, Options{IdleTimeout: 100 * time.Millisecond})
	_, body, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
	if err == nil || string(body) != joinSteps(steps) {
		t.Fatalf("err %v body %q", err, body)
	}
	if r := tp.next(t); r.End != EndTimeout || r.Class() != "truncated" {
		t.Fatalf("end %s class %s", r.End, r.Class())
	}
}

// An HTTP error is forwarded as is (status, headers, body) and recorded as
// failed; its body, which may quote the prompt, is not read.
func TestHTTPErrorForwardedNotRead(t *testing.T) {
	errBody := `{"error":{"message":"prompt 'SECRET-PROMPT-TEXT' is too long"}}`
	up := newUpstream(t, func(*http.Request) script {
		return script{status: 400, ctype: "application/json", header: map[string]string{"X-Upstream": "yes"}, steps: []step{{data: errBody}}}
	})
	tp := newTap(t, up.URL, Options{})
	resp, body, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "SECRET-PROMPT-TEXT", false), nil)
	if err != nil || resp.StatusCode != 400 || string(body) != errBody || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("status %d err %v body %q", resp.StatusCode, err, body)
	}
	r := tp.next(t)
	if r.End != EndHTTPError || r.Class() != "failed" || r.HTTPStatus != 400 {
		t.Fatalf("end %s class %s status %d", r.End, r.Class(), r.HTTPStatus)
	}
	if strings.Contains(recordLine(r), "SECRET") {
		t.Fatalf("record quotes the prompt: %s", recordLine(r))
	}
}

// No upstream at all: the client gets tap's 502 naming the upstream, and
// the record says no_response.
func TestNoResponse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tp := newTap(t, "http://"+addr, Options{})
	resp, body, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
	if err != nil || resp.StatusCode != 502 || !strings.Contains(string(body), addr) || !strings.Contains(string(body), "connection refused") {
		t.Fatalf("status %v body %q err %v", resp, body, err)
	}
	if r := tp.next(t); r.End != EndNoResponse || r.Class() != "failed" || r.HTTPStatus != 0 {
		t.Fatalf("end %s class %s", r.End, r.Class())
	}
}

// The Authorization header reaches the upstream unchanged and appears in
// no record; neither does a word of the prompt or of the completion.
func TestSecretsAndTextNeverRecorded(t *testing.T) {
	steps := []step{{data: chatChunk("COMPLETION-WORDS")}, {data: finishChunk("stop")}, {data: usageChunk(9, 0, 1)}, {data: doneEvent}}
	up := newUpstream(t, func(r *http.Request) script {
		return script{steps: steps, header: map[string]string{"X-Smg-Routed-Worker-Id": "http://10.0.0.7:8000"}}
	})
	tp := newTap(t, up.URL, Options{})
	system := strings.Repeat("SYSTEM-PROMPT-WORDS ", 30)
	for _, stream := range []bool{true, false} {
		resp, _, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody(system, "USER-PROMPT-WORDS", stream),
			map[string]string{"Authorization": "Bearer sk-VERY-SECRET"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatal(err)
		}
		r := tp.next(t)
		l := recordLine(r)
		for _, secret := range []string{"sk-VERY-SECRET", "Bearer", "SYSTEM-PROMPT", "USER-PROMPT", "COMPLETION-WORDS"} {
			if strings.Contains(l, secret) || strings.Contains(fmt.Sprintf("%+v", *r), secret) {
				t.Fatalf("record holds %q: %s", secret, l)
			}
		}
		if r.Worker != "http://10.0.0.7:8000" || r.WorkerFrom != "x-smg-routed-worker-id" {
			t.Fatalf("worker %q from %q", r.Worker, r.WorkerFrom)
		}
		if len(r.PrefixFP) != FPChunks {
			t.Fatalf("fingerprint %v: a 600-character prompt has %d whole chunks of %d", r.PrefixFP, FPChunks, FPChunkChars)
		}
	}
	for _, s := range up.got() {
		if s.header.Get("Authorization") != "Bearer sk-VERY-SECRET" {
			t.Fatalf("upstream got Authorization %q", s.header.Get("Authorization"))
		}
	}
}

// A client's x-request-id is forwarded and recorded; without one, tap
// makes one up, sends it upstream (so the router's records carry it) and
// records the same.
func TestRequestID(t *testing.T) {
	steps := []step{{data: chatChunk("a")}, {data: finishChunk("stop")}, {data: doneEvent}}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{})
	post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), map[string]string{"X-Request-Id": "client-7"})
	post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
	a, b := tp.next(t), tp.next(t)
	got := up.got()
	if a.RequestID != "client-7" || a.GeneratedID || got[0].header.Get("X-Request-Id") != "client-7" {
		t.Fatalf("client id: recorded %q, upstream got %q", a.RequestID, got[0].header.Get("X-Request-Id"))
	}
	if !b.GeneratedID || !strings.HasPrefix(b.RequestID, "tap-") || got[1].header.Get("X-Request-Id") != b.RequestID {
		t.Fatalf("generated id: recorded %q, upstream got %q", b.RequestID, got[1].header.Get("X-Request-Id"))
	}
}

// A response that does not stream: the whole body is one JSON object with
// its finish reason and usage.
func TestNonStreamed(t *testing.T) {
	body := `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}},"nvext":{"worker_id":{"prefill_worker_id":11,"decode_worker_id":12}}}`
	up := newUpstream(t, func(*http.Request) script {
		return script{ctype: "application/json", nochunk: true, steps: []step{{data: body[:30]}, {data: body[30:]}}}
	})
	tp := newTap(t, up.URL, Options{})
	resp, got, err := post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", false), nil)
	if err != nil || string(got) != body || resp.ContentLength != int64(len(body)) {
		t.Fatalf("err %v body %q length %d", err, got, resp.ContentLength)
	}
	r := tp.next(t)
	if r.End != EndDone || r.Finish != "length" || r.CachedTokens == nil || *r.CachedTokens != 32 || r.Stream {
		t.Fatalf("%+v", r)
	}
	if r.Worker != "worker_12" || r.WorkerFrom != "nvext.worker_id" {
		t.Fatalf("worker %q from %q: Dynamo's decode worker", r.Worker, r.WorkerFrom)
	}
}

// The Responses API streams typed events and ends with response.completed
// (no [DONE]).
func TestResponsesStream(t *testing.T) {
	steps := []step{
		{data: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\"}}\n\n"},
		{data: "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"},
		{data: "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1,\"input_tokens_details\":{\"cached_tokens\":0}}}}\n\n"},
	}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{})
	body := `{"model":"m","stream":true,"instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hello"}]}]}`
	post(t, context.Background(), tp.URL, "/v1/responses", body, nil)
	r := tp.next(t)
	if r.End != EndDone || r.Finish != "completed" || r.TTFT == nil || r.PromptTokens == nil || *r.PromptTokens != 12 || *r.PromptChars != len("be brief")+len("hello") {
		t.Fatalf("%+v", r)
	}
}

// Other paths (model lists, health) pass through and are not recorded.
func TestOtherPathsPassThrough(t *testing.T) {
	up := newUpstream(t, func(*http.Request) script {
		return script{ctype: "application/json", steps: []step{{data: `{"data":[]}`}}}
	})
	tp := newTap(t, up.URL, Options{})
	resp, err := http.Get(tp.URL + "/v1/models?x=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"data":[]}` || up.got()[0].path != "/v1/models" {
		t.Fatalf("body %q", b)
	}
	select {
	case r := <-tp.records:
		t.Fatalf("recorded %+v", r)
	default:
	}
	if s := tp.proxy.Stats(); s.Requests != 1 || s.Recorded != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A gap after the first token longer than BreakAfter is a streaming break.
// The second chunk leaves the upstream only once the client has had the
// first and 100 ms more have passed (a handshake): the gap tap saw is at
// least that long whatever the machine's load.
func TestStreamingBreak(t *testing.T) {
	gate := make(chan struct{})
	steps := []step{{data: chatChunk("a")}, {gate: gate, data: chatChunk("b")}, {data: finishChunk("stop")}, {data: doneEvent}}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{BreakAfter: 50 * time.Millisecond})
	req, _ := http.NewRequest(http.MethodPost, tp.URL+"/v1/chat/completions", strings.NewReader(chatBody("s", "u", true)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(gate)
	io.Copy(io.Discard, br)
	r := tp.next(t)
	if r.Breaks < 1 || r.MaxGap == nil || *r.MaxGap < 100*time.Millisecond || r.End != EndDone {
		t.Fatalf("breaks %d, max gap %v, end %s", r.Breaks, r.MaxGap, r.End)
	}
}

// Sampling records a share of requests, by request id: the same id is
// always in or out.
func TestSample(t *testing.T) {
	steps := []step{{data: chatChunk("a")}, {data: finishChunk("stop")}, {data: doneEvent}}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{Sample: 0.25})
	in := map[string]bool{}
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("req-%d", i)
		post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), map[string]string{"X-Request-Id": id})
		in[id] = tp.proxy.sampled(id)
	}
	n := 0
	for _, v := range in {
		if v {
			n++
		}
	}
	if n < 25 || n > 75 {
		t.Fatalf("%d of 200 sampled at 0.25", n)
	}
	s := tp.proxy.Stats()
	if s.Recorded != int64(n) || s.Unsampled != int64(200-n) || len(up.got()) != 200 {
		t.Fatalf("stats %+v, upstream got %d", s, len(up.got()))
	}
	for i := 0; i < n; i++ {
		if r := tp.next(t); !in[r.RequestID] {
			t.Fatalf("recorded %s, which is out of the sample", r.RequestID)
		}
	}
}

// Bad input is counted and forwarded: a request body that is not JSON.
func TestBadRequestBodyForwarded(t *testing.T) {
	up := newUpstream(t, func(*http.Request) script {
		return script{status: 400, ctype: "application/json", steps: []step{{data: `{"error":"bad json"}`}}}
	})
	tp := newTap(t, up.URL, Options{})
	post(t, context.Background(), tp.URL, "/v1/chat/completions", "{not json", nil)
	r := tp.next(t)
	if r.Unread != "request body is not a JSON object" || string(up.got()[0].body) != "{not json" {
		t.Fatalf("unread %q, upstream got %q", r.Unread, up.got()[0].body)
	}
	if tp.proxy.Stats().Unread != 1 {
		t.Fatal("not counted")
	}
}

// A server that writes JSON with spaces (Python's json.dumps) ends its
// stream the same way, and tap sees it.
func TestSpacedJSONStream(t *testing.T) {
	steps := []step{
		{data: "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"Hi\"}, \"finish_reason\": null}]}\n\n"},
		{data: "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \" there\"}, \"finish_reason\": null}]}\n\n"},
		{data: "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}], \"usage\": {\"prompt_tokens\": 7, \"completion_tokens\": 2, \"prompt_tokens_details\": {\"cached_tokens\": 0}}}\n\n"},
		{data: doneEvent},
	}
	up := newUpstream(t, func(*http.Request) script { return script{steps: steps} })
	tp := newTap(t, up.URL, Options{})
	post(t, context.Background(), tp.URL, "/v1/chat/completions", chatBody("s", "u", true), nil)
	r := tp.next(t)
	if r.End != EndDone || r.Finish != "stop" || r.Events != 3 || r.PromptTokens == nil || *r.PromptTokens != 7 {
		t.Fatalf("end %s finish %q events %d prompt %v", r.End, r.Finish, r.Events, r.PromptTokens)
	}
}
