package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Front is the router's HTTP face: /v1/chat/completions and /v1/completions
// forwarded to a worker the way vllm-router's HTTP path does it (router.rs
// @ 03e9af5c, PROTOCOLS.md §13): every request header goes along, the
// worker's response headers and body come back as they arrive, and the
// outcome it counts (its circuit breaker's record_outcome) is the HTTP
// status alone — a stream cut before finish_reason and [DONE] is a
// success. Its cache_aware policy matches a chat request by its session
// id, not its messages: without one the routing string is empty, nothing
// matches, and the least loaded worker (router-local in-flight) is chosen.
// Each request gets a decision and an outcome record (kvtop format), by
// the client's x-request-id; the outcome's done says whether data: [DONE]
// passed through (vllm-router looks for it too, to release its load
// count), which its success count ignores.
type Front struct {
	r      *Router
	up     func(w int) bool // the worker is not restarting
	client *http.Client

	mu       sync.Mutex
	inflight []int
	turn     int
	n        int
	success  []float64 // record_outcome(success) per worker
	failure  []float64
}

// NewFront is r's HTTP face; up says whether a worker takes requests.
func (r *Router) NewFront(up func(w int) bool) *Front {
	n := len(r.cfg.URLs)
	return &Front{r: r, up: up, client: &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 256}},
		inflight: make([]int, n), success: make([]float64, n), failure: make([]float64, n)}
}

// Outcomes are the circuit breaker outcomes counted per worker: successes
// (HTTP 2xx and 4xx, as vllm-router counts them) and failures.
func (f *Front) Outcomes() (success, failure []float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]float64(nil), f.success...), append([]float64(nil), f.failure...)
}

// pick is the least loaded worker that is up (ties rotate).
func (f *Front) pick() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	best := -1
	n := len(f.inflight)
	for k := 0; k < n; k++ {
		w := (f.turn + k) % n
		if f.up != nil && !f.up(w) {
			continue
		}
		if best < 0 || f.inflight[w] < f.inflight[best] {
			best = w
		}
	}
	f.turn++
	if best < 0 {
		best = f.turn % n // all restarting: it still tries one
	}
	f.inflight[best]++
	return best, f.n
}

func (f *Front) release(w int, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight[w]--
	if status >= 500 || status == 0 {
		f.failure[w]++
	} else {
		f.success[w]++
	}
}

func (f *Front) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(rw, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 32<<20))
	if err != nil {
		return
	}
	var head struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &head)
	w, n := f.pick()
	id := req.Header.Get("X-Request-Id")
	if id == "" {
		id = fmt.Sprintf("http-%07d", n)
	}
	r := f.r
	start := time.Now() // the HTTP face runs on the wall clock, whatever the sim's
	model := head.Model
	if model == "" {
		model = r.cfg.Model
	}
	f.r.mu.Lock()
	r.m.Processed[w]++
	r.m.Decisions[w]++
	load := f.inflight[w] - 1
	f.r.mu.Unlock()
	r.writeHTTP(decisionRec{
		Kind: "decision", TS: stamp(start), RequestID: id, AttemptID: "1", Router: r.cfg.Name, RouterVersion: "kvtop-sim",
		Model: model, Pool: "default", Endpoint: req.URL.Path,
		// vllm-router's cache_aware on a chat request without a session
		// id: the routing string is empty, 0 of 0 characters match.
		Prediction: prediction{Source: "text-tree", Input: "chars", Units: "chars"},
		Chosen:     r.cfg.Workers[w], Reason: "fallback",
		Load: loadRec{Kind: "inflight", Value: load, Scope: "router-local"},
	})

	out, _ := http.NewRequestWithContext(req.Context(), http.MethodPost, r.cfg.URLs[w]+req.URL.Path, bytes.NewReader(body))
	for k, vs := range req.Header {
		switch strings.ToLower(k) {
		case "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-authorization":
			continue
		}
		out.Header[k] = vs
	}
	out.Header.Set("X-Request-Id", id)
	resp, err := f.client.Do(out)
	if err != nil {
		f.release(w, 0)
		msg := "upstream connection failed"
		r.writeHTTP(outcomeRec{Kind: "outcome", TS: stamp(time.Now()), RequestID: id, AttemptID: "1", Worker: r.cfg.Workers[w],
			HTTPStatus: 500, Error: &msg, E2EMS: ms(time.Since(start))})
		http.Error(rw, "Request failed", http.StatusInternalServerError)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		switch strings.ToLower(k) {
		case "connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding":
			continue
		}
		rw.Header()[k] = vs
	}
	rw.WriteHeader(resp.StatusCode)
	fl := http.NewResponseController(rw)
	sawDone := false
	var tail []byte // the end of the last read: [DONE] may straddle two
	buf := make([]byte, 32<<10)
	for {
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			look := append(tail, buf[:k]...)
			sawDone = sawDone || bytes.Contains(look, []byte("data: [DONE]"))
			tail = append(tail[:0], look[max(0, len(look)-11):]...)
			if _, err := rw.Write(buf[:k]); err != nil {
				break
			}
			fl.Flush()
		}
		if rerr != nil {
			break
		}
	}
	f.release(w, resp.StatusCode)
	o := outcomeRec{Kind: "outcome", TS: stamp(time.Now()), RequestID: id, AttemptID: "1", Worker: r.cfg.Workers[w],
		HTTPStatus: resp.StatusCode, E2EMS: ms(time.Since(start)), Done: sawDone}
	r.writeHTTP(o)
}

// writeHTTP writes one record of the HTTP face (its own goroutines) and
// flushes it at once: a kvtop audit log only (the other formats describe
// the synthetic workload).
func (r *Router) writeHTTP(v any) {
	if r.cfg.Format != FormatKvtop {
		return
	}
	r.audit.write(v)
	if err := r.audit.flush(time.Time{}, false); err != nil {
		return // kept by the audit; the loop's Flush reports it
	}
}
