package tap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A chat completion stream as vLLM writes it (chunks of one delta each,
// then a usage chunk with stream_options.include_usage, then [DONE]).
func chatChunk(content string) string {
	return fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`+"\n\n", content)
}

func roleChunk() string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"
}

func finishChunk(reason string) string {
	return fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":%q}]}`+"\n\n", reason)
}

func usageChunk(prompt, cached, completion int) string {
	return fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n", prompt, prompt+completion, completion, cached)
}

const doneEvent = "data: [DONE]\n\n"

// step is one write of a scripted upstream: bytes, flushed, after a wait
// (or after a gate closes: a test's handshake instead of a clock).
type step struct {
	wait time.Duration
	gate chan struct{}
	data string
}

// upstream is a real HTTP server on 127.0.0.1 that answers every request
// with a script, and remembers what it received.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	requests []seen
	canceled chan struct{} // closed when a request's context ends before its script
}

type seen struct {
	path   string
	header http.Header
	body   []byte
}

// script is how the upstream answers: status, headers, steps, and how
// the response ends: "" cleanly, "abort" cut inside the chunked body,
// "rst" a TCP reset, "hang" never.
type script struct {
	status  int
	header  map[string]string
	steps   []step
	end     string
	ctype   string
	nochunk bool
}

func newUpstream(t *testing.T, sc func(r *http.Request) script) *upstream {
	u := &upstream{canceled: make(chan struct{}, 16)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.requests = append(u.requests, seen{r.URL.Path, r.Header.Clone(), body})
		u.mu.Unlock()
		s := sc(r)
		ct := s.ctype
		if ct == "" {
			ct = "text/event-stream"
		}
		w.Header().Set("Content-Type", ct)
		for k, v := range s.header {
			w.Header().Set(k, v)
		}
		if s.nochunk {
			n := 0
			for _, st := range s.steps {
				n += len(st.data)
			}
			w.Header().Set("Content-Length", fmt.Sprint(n))
		}
		w.WriteHeader(max(s.status, 200))
		w.(http.Flusher).Flush()
		for _, st := range s.steps {
			if st.gate != nil {
				select {
				case <-st.gate:
				case <-r.Context().Done():
					u.canceled <- struct{}{}
					return
				}
			}
			if st.wait > 0 {
				select {
				case <-time.After(st.wait):
				case <-r.Context().Done():
					u.canceled <- struct{}{}
					return
				}
			}
			if _, err := io.WriteString(w, st.data); err != nil {
				u.canceled <- struct{}{}
				return
			}
			w.(http.Flusher).Flush()
		}
		switch s.end {
		case "abort":
			panic(http.ErrAbortHandler)
		case "rst":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		case "hang":
			<-r.Context().Done()
			u.canceled <- struct{}{}
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) got() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.requests...)
}

// tapped is a Proxy in front of an upstream, served on 127.0.0.1, and the
// records it made.
type tapped struct {
	*httptest.Server
	proxy   *Proxy
	records chan *Record
}

func newTap(t *testing.T, up string, o Options) *tapped {
	t.Helper()
	o.Upstream = up
	recs := make(chan *Record, 1024)
	o.Record = func(r *Record) { recs <- r }
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(p)
	t.Cleanup(s.Close)
	return &tapped{Server: s, proxy: p, records: recs}
}

// next waits for the next record.
func (tp *tapped) next(t *testing.T) *Record {
	t.Helper()
	select {
	case r := <-tp.records:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no record")
		return nil
	}
}

// chatBody is a chat request with a system and a user message.
func chatBody(system, user string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"model": "qwen3-8b", "stream": stream, "stream_options": map[string]any{"include_usage": true},
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
	})
	return string(b)
}

// post sends body through the tap and returns the response with its whole
// body (and the read error, if the body was cut).
func post(t *testing.T, ctx context.Context, url, path, body string, h map[string]string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = io.Copy(&buf, resp.Body)
	return resp, buf.Bytes(), err
}

func joinSteps(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s.data)
	}
	return b.String()
}

func recordLine(r *Record) string { return string(r.AppendJSON(nil)) }
