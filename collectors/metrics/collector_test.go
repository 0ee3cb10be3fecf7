package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/collectors"
)

const deadline = 10 * time.Second

// inbox holds a running collector's observations; waitFor keeps the ones
// it does not want for later calls.
type inbox struct {
	ch   <-chan collectors.Observation
	held []collectors.Observation
}

// run starts a collector and stops it when the test ends, checking that Run
// returns nil promptly.
func run(t *testing.T, o Options) *inbox {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	out := make(chan collectors.Observation, 256)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v on cancel", err)
			}
		case <-time.After(deadline):
			t.Errorf("Run did not return after cancel")
		}
	})
	return &inbox{ch: out}
}

// waitFor returns the first observation that matches, held or new, within
// the deadline.
func waitFor[T collectors.Observation](t *testing.T, in *inbox, match func(T) bool) T {
	t.Helper()
	for i, o := range in.held {
		if x, ok := o.(T); ok && match(x) {
			in.held = append(in.held[:i], in.held[i+1:]...)
			return x
		}
	}
	timeout := time.After(deadline)
	for {
		select {
		case o := <-in.ch:
			if x, ok := o.(T); ok && match(x) {
				return x
			}
			in.held = append(in.held, o)
		case <-timeout:
			var zero T
			t.Fatalf("no matching %T within %s", zero, deadline)
			return zero
		}
	}
}

func scrapeOf(target string) func(*collectors.MetricsScrape) bool {
	return func(s *collectors.MetricsScrape) bool { return s.Target == target }
}

// serve returns a test server on 127.0.0.1 answering every request with h.
func serve(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func page(body []byte, ct string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(body)
	}
}

// omOf re-encodes a real text page as OpenMetrics, as a Python server
// would send it.
func omOf(t testing.TB, text []byte) []byte {
	t.Helper()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var om bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToOpenMetrics(&om, f); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = expfmt.FinalizeOpenMetrics(&om)
	return om.Bytes()
}

func TestScrapeRealPages(t *testing.T) {
	var mu sync.Mutex
	var hdr http.Header
	w0 := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hdr = r.Header.Clone()
		mu.Unlock()
		page(load(t, peers+"metrics-6.txt"), textType)(w, r)
	})
	// Like Python's prometheus_client: OpenMetrics whenever it is listed.
	sg := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept"), "application/openmetrics-text") {
			page(omOf(t, load(t, real+"sglang-docs-production-metrics.txt")), omType)(w, r)
			return
		}
		page(load(t, real+"sglang-docs-production-metrics.txt"), textType)(w, r)
	})
	r0 := serve(t, page(load(t, real+"router-sgl-router-pr6537-fragment.txt"), "text/plain; version=0.0.4"))

	out := run(t, Options{Interval: 50 * time.Millisecond, Targets: []Target{
		{Name: "w0", Role: collectors.RoleWorker, URL: w0.URL + "/metrics"},
		{Name: "w1", Role: collectors.RoleWorker, URL: sg.URL + "/metrics"},
		{Name: "r0", Role: collectors.RoleRouter, URL: r0.URL + "/metrics"},
	}})

	s := waitFor(t, out, scrapeOf("w0"))
	if s.Err != nil || s.Profile != ProfileVLLM || s.Role != collectors.RoleWorker || s.URL != w0.URL+"/metrics" {
		t.Fatalf("w0 scrape: err %v profile %q role %v url %q", s.Err, s.Profile, s.Role, s.URL)
	}
	if len(s.Engines) != 1 || *s.Engines[0].Running != 5 || *s.Engines[0].Waiting != 3 {
		t.Errorf("w0 engines %s, want running 5 waiting 3", show(s.Engines))
	}
	if s.Duration <= 0 || s.At.IsZero() {
		t.Errorf("duration %v at %v", s.Duration, s.At)
	}

	s = waitFor(t, out, scrapeOf("w1"))
	if s.Err != nil || s.Profile != ProfileSGLang || len(s.Engines) != 1 || *s.Engines[0].Waiting != 2826 {
		t.Errorf("w1 (OpenMetrics): err %v profile %q engines %s", s.Err, s.Profile, show(s.Engines))
	}

	s = waitFor(t, out, scrapeOf("r0"))
	if s.Err != nil || s.Profile != ProfileSGLangRouter || s.Router == nil || s.Router.Processed["http://localhost:8080"] != 9 {
		t.Errorf("r0: err %v profile %q router %+v", s.Err, s.Profile, s.Router)
	}

	mu.Lock()
	defer mu.Unlock()
	if got := hdr.Get("Accept-Encoding"); got != "gzip" {
		t.Errorf("Accept-Encoding %q", got)
	}
	// A Go server that offers both formats picks the classic text.
	if f := expfmt.NegotiateIncludingOpenMetrics(hdr); f.FormatType() != expfmt.TypeTextPlain {
		t.Errorf("Accept %q negotiates %q, want text", hdr.Get("Accept"), f)
	}
	if !strings.Contains(hdr.Get("Accept"), expfmt.OpenMetricsType) {
		t.Errorf("Accept %q does not offer OpenMetrics", hdr.Get("Accept"))
	}
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", textType)
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(body)
	}
}

func TestBodies(t *testing.T) {
	real6 := load(t, peers+"metrics-6.txt")                                // 24 KB
	bomb := gz(t, bytes.Repeat([]byte("# padding comment line\n"), 1<<16)) // 1.5 MB of text, a few KB gzipped
	tests := []struct {
		name    string
		h       http.HandlerFunc
		limit   int64
		kind    string // "" = success
		message string
	}{
		{"gzip", gzipped(gz(t, real6)), 0, "", ""},
		{"over the limit", page(real6, textType), 4 << 10, "too_large", "body larger than 4 KiB"},
		{"gzip over the limit once decompressed", gzipped(bomb), 64 << 10, "too_large", "body larger than 64 KiB"},
		{"not gzip", gzipped(real6), 0, "parse", "body is not valid gzip"},
		{"exactly the limit", page(real6, textType), int64(len(real6)), "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, tc.h)
			out := run(t, Options{Interval: time.Hour, BodyLimit: tc.limit, Targets: []Target{{Name: "w0", URL: srv.URL + "/metrics"}}})
			s := waitFor(t, out, scrapeOf("w0"))
			if tc.kind == "" {
				if s.Err != nil || len(s.Engines) != 1 || *s.Engines[0].Running != 5 {
					t.Fatalf("err %v engines %s", s.Err, show(s.Engines))
				}
				return
			}
			if s.Err == nil || s.Err.Kind != tc.kind || !strings.Contains(s.Err.Message, tc.message) {
				t.Fatalf("err %v, want %s containing %q", s.Err, tc.kind, tc.message)
			}
			if s.Engines != nil || s.Profile != "" {
				t.Errorf("a failed scrape carries samples: %q %s", s.Profile, show(s.Engines))
			}
		})
	}
}

func TestFailures(t *testing.T) {
	unavailable := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine is starting", http.StatusServiceUnavailable)
	})
	html := serve(t, page([]byte("<!DOCTYPE html>\n<html><body>login</body></html>\n"), "text/html; charset=utf-8"))
	hang := serve(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/metrics"
	ln.Close()

	tests := []struct {
		url, kind, message string
	}{
		{unavailable.URL + "/metrics", "http_status", "GET " + unavailable.URL + "/metrics: 503 Service Unavailable"},
		{closed, "refused", "GET " + closed + ": connection refused"},
		{html.URL + "/metrics", "parse", "GET " + html.URL + "/metrics: no metrics in body (content type text/html; charset=utf-8"},
		{hang.URL + "/metrics", "timeout", "GET " + hang.URL + "/metrics: no answer within 300ms"},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			out := run(t, Options{Interval: time.Hour, Timeout: 300 * time.Millisecond, Targets: []Target{{Name: "w2", URL: tc.url}}})
			s := waitFor(t, out, scrapeOf("w2"))
			e := s.Err
			if e == nil || e.Kind != tc.kind || e.Source != "w2 metrics" || e.At.IsZero() {
				t.Fatalf("err %+v, want kind %s from w2 metrics", e, tc.kind)
			}
			if !strings.HasPrefix(e.Message, tc.message) || strings.Contains(e.Message, "\n") {
				t.Errorf("message %q, want one line starting %q", e.Message, tc.message)
			}
		})
	}
}

// TestSlowTargetDoesNotDelayOthers: a target that takes 3 s to answer sits
// next to a fast one; the fast one's scrapes keep arriving every interval.
func TestSlowTargetDoesNotDelayOthers(t *testing.T) {
	body := load(t, peers+"metrics-6.txt")
	slow := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
			page(body, textType)(w, r)
		case <-r.Context().Done():
		}
	})
	fast := serve(t, page(body, textType))
	out := run(t, Options{Interval: 100 * time.Millisecond, Timeout: 8 * time.Second, Targets: []Target{
		{Name: "slow", URL: slow.URL + "/metrics"},
		{Name: "fast", URL: fast.URL + "/metrics"},
	}})

	var fastAt []time.Time
	s := waitFor(t, out, func(s *collectors.MetricsScrape) bool {
		if s.Target == "fast" {
			if s.Err != nil {
				t.Errorf("fast target failed: %v", s.Err)
			}
			fastAt = append(fastAt, s.At)
		}
		return s.Target == "slow"
	})
	if s.Err != nil || s.Duration < 3*time.Second || len(s.Engines) != 1 {
		t.Fatalf("slow scrape: err %v duration %v", s.Err, s.Duration)
	}
	// 30 expected at 100 ms; a loaded machine may lose some, not most.
	if len(fastAt) < 10 {
		t.Fatalf("only %d fast scrapes while the slow target answered", len(fastAt))
	}
	for i := 1; i < len(fastAt); i++ {
		if gap := fastAt[i].Sub(fastAt[i-1]); gap > time.Second {
			t.Errorf("fast scrapes %d and %d are %v apart; the slow target held it up", i-1, i, gap)
		}
	}
}

// tokenServer answers 200 only to the expected bearer token.
type tokenServer struct {
	mu   sync.Mutex
	want string
	seen []string
}

func (ts *tokenServer) expect(tok string) { ts.mu.Lock(); ts.want = tok; ts.mu.Unlock() }

func (ts *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	ts.seen = append(ts.seen, got)
	if got != ts.want {
		http.Error(w, "bad token "+got, http.StatusUnauthorized) // echoes it: kvtop must not
		return
	}
	page([]byte("vllm:num_requests_waiting 7\n"), textType)(w, r)
}

func TestBearerToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("s3cr3t-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := &tokenServer{want: "s3cr3t-one"}
	srv := serve(t, ts.ServeHTTP)
	t.Setenv("KVTOP_TEST_METRICS_TOKEN", "  env-s3cr3t \n")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()

	out := run(t, Options{Interval: 50 * time.Millisecond, Timeout: time.Second, Targets: []Target{
		{Name: "file", URL: srv.URL + "/metrics", BearerTokenFile: file},
		{Name: "env", URL: srv.URL + "/metrics", BearerTokenEnv: "KVTOP_TEST_METRICS_TOKEN"},
		{Name: "gone", URL: "http://scraper:pass-s3cr3t@" + closed + "/metrics?token=q-s3cr3t", BearerTokenFile: file},
		{Name: "nofile", URL: srv.URL + "/metrics", BearerTokenFile: filepath.Join(dir, "missing")},
	}})

	ok := func(s *collectors.MetricsScrape) bool { return s.Err == nil }
	if s := waitFor(t, out, func(s *collectors.MetricsScrape) bool { return s.Target == "file" && ok(s) }); *s.Engines[0].Waiting != 7 {
		t.Errorf("file token scrape %s", show(s.Engines))
	}
	// Rotation: the file is read again for every scrape.
	ts.expect("s3cr3t-two")
	if err := os.WriteFile(file, []byte("s3cr3t-two"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, func(s *collectors.MetricsScrape) bool { return s.Target == "file" && ok(s) })

	// The env token is trimmed; the server wants the file's: 401, and the
	// message must not repeat any token.
	s := waitFor(t, out, func(s *collectors.MetricsScrape) bool { return s.Target == "env" && s.Err != nil })
	if s.Err.Kind != "http_status" || !strings.HasSuffix(s.Err.Message, ": 401 Unauthorized") {
		t.Errorf("env: %v", s.Err)
	}
	gone := waitFor(t, out, scrapeOf("gone"))
	nofile := waitFor(t, out, scrapeOf("nofile"))
	if nofile.Err == nil || nofile.Err.Kind != "config" || !strings.Contains(nofile.Err.Message, filepath.Join(dir, "missing")) {
		t.Errorf("missing token file: %v", nofile.Err)
	}
	if gone.Err == nil || gone.URL != "http://"+closed+"/metrics" {
		t.Errorf("gone: url %q err %v", gone.URL, gone.Err)
	}
	for _, e := range []*collectors.SourceError{s.Err, gone.Err, nofile.Err} {
		if e != nil && strings.Contains(e.Error(), "s3cr3t") {
			t.Errorf("a secret leaked into %q", e.Error())
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var sawEnv bool
	for _, tok := range ts.seen {
		sawEnv = sawEnv || tok == "env-s3cr3t"
	}
	if !sawEnv {
		t.Errorf("env token never sent trimmed; saw %q", ts.seen)
	}
}

func TestTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(page(load(t, peers+"metrics-6.txt"), textType))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	url := srv.URL + "/metrics"
	out := run(t, Options{Interval: time.Hour, Targets: []Target{
		{Name: "system-roots", URL: url},
		{Name: "ca-file", URL: url, CAFile: ca},
		{Name: "skip-verify", URL: url, InsecureSkipVerify: true},
	}})
	if s := waitFor(t, out, scrapeOf("system-roots")); s.Err == nil || s.Err.Kind != "tls" {
		t.Errorf("unknown CA: err %v, want tls", s.Err)
	}
	for _, name := range []string{"ca-file", "skip-verify"} {
		if s := waitFor(t, out, scrapeOf(name)); s.Err != nil || len(s.Engines) != 1 || *s.Engines[0].Running != 5 {
			t.Errorf("%s: err %v engines %s", name, s.Err, show(s.Engines))
		}
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Target{Name: "w0", URL: "http://127.0.0.1:8000/metrics"}
	tests := []struct {
		name    string
		targets []Target
		want    []string
	}{
		{"unreadable CA", []Target{ok, {Name: "w1", URL: "https://w1:8000/metrics", CAFile: filepath.Join(dir, "nope.pem")}}, []string{`metrics target "w1"`, "nope.pem"}},
		{"CA without PEM", []Target{{Name: "w1", URL: "https://w1/metrics", CAFile: notPEM}}, []string{`"w1"`, "no PEM certificate"}},
		{"not http", []Target{{Name: "w3", URL: "tcp://w3:5557"}}, []string{`"w3"`, "not an http(s) URL"}},
		{"no host", []Target{{Name: "w3", URL: "http:///metrics"}}, []string{`"w3"`}},
		{"unknown profile", []Target{{Name: "r0", URL: "http://r0/metrics", Profile: "nginx"}}, []string{`"r0"`, `"nginx"`, "production-stack"}},
		{"name twice", []Target{ok, ok}, []string{`"w0"`, "twice"}},
		{"two token sources", []Target{{Name: "w4", URL: "http://w4/metrics", BearerTokenFile: "/t", BearerTokenEnv: "T"}}, []string{`"w4"`, "both"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{Targets: tc.targets})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if c, err := New(Options{Targets: []Target{ok}}); err != nil || c.Name() != "metrics" {
		t.Errorf("valid options: %v", err)
	}
}

// TestWarningsAndCounterReset: a page with a KV usage out of range is read,
// the usage rejected (unknown, and why) and the problem sent as a
// SourceError of kind invalid; when the engine restarts and its counters
// go down, the lower value is reported as exposed (the pool turns the
// decrease into a reset).
func TestWarningsAndCounterReset(t *testing.T) {
	pages := []string{
		"vllm:kv_cache_usage_perc{engine=\"3\"} -0.3875395987328405\nvllm:prompt_tokens_total{engine=\"3\"} 1000\n",
		"vllm:kv_cache_usage_perc{engine=\"3\"} 0.1\nvllm:prompt_tokens_total{engine=\"3\"} 12\n",
	}
	var mu sync.Mutex
	n := 0
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body := pages[min(n, len(pages)-1)]
		n++
		mu.Unlock()
		page([]byte(body), textType)(w, r)
	})
	out := run(t, Options{Interval: 50 * time.Millisecond, Targets: []Target{{Name: "w5", URL: srv.URL + "/metrics"}}})

	first := waitFor(t, out, scrapeOf("w5"))
	note := `vllm:kv_cache_usage_perc{engine="3"} = -0.3875395987328405: a fraction must be within 0..1`
	if first.Err != nil || first.Engines[0].KVUsage != nil || *first.Engines[0].PromptTokens != 1000 {
		t.Fatalf("first scrape: %v %s", first.Err, show(first.Engines))
	}
	if len(first.Invalid) != 1 || first.Invalid[0] != (collectors.InvalidValue{Engine: "3", Field: "kv_usage", Note: note}) {
		t.Errorf("invalid %+v", first.Invalid)
	}
	warn := waitFor(t, out, func(e *collectors.SourceError) bool { return true })
	if warn.Source != "w5 metrics" || warn.Kind != "invalid" || warn.Message != note || warn.At.IsZero() {
		t.Errorf("warning %+v", warn)
	}
	second := waitFor(t, out, scrapeOf("w5"))
	if second.Err != nil || *second.Engines[0].PromptTokens != 12 || *second.Engines[0].KVUsage != 0.1 || second.Invalid != nil {
		t.Errorf("after the reset: %v %s %+v, want 12 as exposed", second.Err, show(second.Engines), second.Invalid)
	}
}
