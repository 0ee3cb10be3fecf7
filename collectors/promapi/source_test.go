package promapi_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/promapi"
)

// run starts a source on the fake and returns what it sends.
func run(t *testing.T, o promapi.Options) (<-chan collectors.Observation, context.CancelFunc) {
	t.Helper()
	if o.Interval == 0 {
		o.Interval = 50 * time.Millisecond
	}
	src, err := promapi.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return collect(t, ctx, src), cancel
}

// next waits for the first observation ok accepts.
func next[T collectors.Observation](t *testing.T, in <-chan collectors.Observation, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case o := <-in:
			if v, is := o.(T); is && ok(v) {
				return v
			}
		case <-deadline:
			var zero T
			t.Fatalf("no %s within 10 s", what)
			return zero
		}
	}
}

func TestWorkersReadFromFakeAPI(t *testing.T) {
	f := newFakeProm(t)
	f.set("w0", vllmWorker(f.eval-3, 5))
	f.set("w1", vllmWorker(f.eval-1, 0))
	in, _ := run(t, promapi.Options{URL: f.srv.URL, Selector: `{namespace="llm"}`})

	m := next(t, in, "w0's scrape", func(m *collectors.MetricsScrape) bool { return m.Target == "w0" })
	if m.Err != nil || m.Via != "prometheus" || m.Profile != "vllm" || len(m.Engines) != 1 {
		t.Fatalf("w0: %+v", m)
	}
	e := m.Engines[0]
	if *e.Waiting != 5 || *e.PrefixQueries != 1000 || *e.PrefixHits != 600 || e.Model != "m" || e.Engine != "0" {
		t.Errorf("w0's engine: %+v", e)
	}
	if e.TTFT == nil || e.TTFT.Count != 8 || len(e.TTFT.Buckets) != 3 || e.TTFT.Buckets[1].Count != 7 {
		t.Errorf("w0's TTFT histogram: %+v", e.TTFT)
	}
	if m.Duration != 12*time.Millisecond {
		t.Errorf("scrape duration %s, Prometheus measured 12ms", m.Duration)
	}
	// Scraped 3 s before the evaluation (Prometheus' clock): the data is
	// 3 s old on kvtop's clock too.
	if age := time.Since(m.At); age < 2900*time.Millisecond || age > 5*time.Second {
		t.Errorf("w0 scraped 3 s before the answer; At is %s ago", age)
	}
	// Nothing new: no second scrape of w0. Then Prometheus scrapes again,
	// 15 s later: one more, with the interval learnt.
	f.tick(15, 10)
	m2 := next(t, in, "w0's next scrape", func(m *collectors.MetricsScrape) bool { return m.Target == "w0" })
	if m2.Interval != 17800*time.Millisecond {
		// w0 was 3 s old, then 0.25 s: the first spacing is 17.75 s.
		t.Errorf("interval after two scrapes: %s", m2.Interval)
	}
	if *m2.Engines[0].PrefixQueries != 1010 {
		t.Errorf("second scrape: %+v", m2.Engines[0])
	}
	f.tick(15, 10)
	m3 := next(t, in, "w0's third scrape", func(m *collectors.MetricsScrape) bool { return m.Target == "w0" })
	if m3.Interval != 15*time.Second {
		t.Errorf("interval after three scrapes 15 s apart: %s", m3.Interval)
	}
	qs, _ := f.seen()
	for _, q := range qs {
		if strings.Contains(q, "__name__") && !strings.Contains(q, `namespace="llm"`) {
			t.Errorf("a data query without the selector: %s", q)
		}
	}
}

// Each worker's scrape is fetched once: refreshes in between ask only the
// small targets query.
func TestOnlyNewScrapesAreFetched(t *testing.T) {
	f := newFakeProm(t)
	for _, w := range []string{"w0", "w1", "w2", "w3"} {
		f.set(w, vllmWorker(f.eval-1, 1))
	}
	in, _ := run(t, promapi.Options{URL: f.srv.URL, Interval: 20 * time.Millisecond})
	seen := map[string]int{}
	for len(seen) < 4 {
		m := next(t, in, "a scrape", func(*collectors.MetricsScrape) bool { return true })
		seen[m.Target]++
	}
	time.Sleep(300 * time.Millisecond)
	f.mu.Lock()
	f.workers["w2"].ts = f.eval + 1 // only w2 was scraped again
	f.eval += 2
	f.mu.Unlock()
	m := next(t, in, "w2's new scrape", func(m *collectors.MetricsScrape) bool { return true })
	if m.Target != "w2" {
		t.Errorf("after only w2 was scraped again, got %s", m.Target)
	}
	time.Sleep(200 * time.Millisecond)
	qs, _ := f.seen()
	data := 0
	for _, q := range qs {
		if strings.Contains(q, "__name__") {
			data++
			if data == 2 && !strings.Contains(q, `pod=~"w2"`) {
				t.Errorf("second data query should name w2 alone: %s", q)
			}
		}
	}
	if data != 2 {
		t.Errorf("%d data queries over %d refreshes; want 2 (all at first, then w2)", data, len(qs))
	}
}

func TestDownAndAbsentWorkers(t *testing.T) {
	f := newFakeProm(t)
	f.set("w0", vllmWorker(f.eval-1, 1))
	down := vllmWorker(f.eval-1, 1)
	down.up = 0
	f.set("w1", down)
	in, _ := run(t, promapi.Options{URL: f.srv.URL, Workers: []promapi.Worker{{Name: "w0"}, {Name: "gpu-7", Aliases: []string{"w7"}}}})
	first := map[string]*collectors.MetricsScrape{}
	for len(first) < 3 {
		m := next(t, in, "a scrape", func(*collectors.MetricsScrape) bool { return true })
		if first[m.Target] == nil {
			first[m.Target] = m
		}
	}
	if m := first["w1"]; m.Err == nil || !strings.Contains(m.Err.Message, "Prometheus cannot scrape it (up = 0") {
		t.Errorf("w1 with up = 0: %+v", m.Err)
	}
	if a := first["gpu-7"]; a == nil || a.Err == nil || a.Err.Kind != "absent" || !strings.Contains(a.Err.Message, `no up series with pod="gpu-7" (or an alias)`) {
		t.Errorf("configured worker missing from Prometheus: %+v", a)
	}
	if m := first["w0"]; m == nil || m.Err != nil {
		t.Errorf("w0: %+v", m)
	}
	f.set("w0", nil) // the pod is deleted
	g := next(t, in, "w0 gone", func(m *collectors.MetricsScrape) bool { return m.Target == "w0" && m.Err != nil })
	if g.Err.Kind != "absent" || !strings.Contains(g.Err.Message, "absent in Prometheus") {
		t.Errorf("w0 vanished: %+v", g.Err)
	}
}

// Hostile or broken servers: every failure is a SourceError that says
// what happened, never a crash, and the source keeps asking.
func TestQueryFailuresAreSourceErrors(t *testing.T) {
	cases := []struct {
		name  string
		h     http.HandlerFunc
		kind  string
		words string
	}{
		{"server error", func(rw http.ResponseWriter, _ *http.Request) { http.Error(rw, "boom", 500) }, "http_status", "server error: 500"},
		{"bad selector", func(rw http.ResponseWriter, _ *http.Request) {
			rw.WriteHeader(400)
			rw.Write([]byte(`{"status":"error","errorType":"bad_data","error":"1:15: parse error: unexpected character inside braces: '!'"}`))
		}, "config", "rejected kvtop's query: 1:15: parse error"},
		{"server timeout", func(rw http.ResponseWriter, _ *http.Request) {
			rw.WriteHeader(503)
			rw.Write([]byte(`{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`))
		}, "timeout", "query timed out on the server"},
		{"not an API", func(rw http.ResponseWriter, _ *http.Request) { rw.Write([]byte("<html>login</html>")) }, "parse", "not a Prometheus API response"},
		{"slow", func(rw http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
		}, "timeout", "no answer within 200ms"},
		{"redirect", func(rw http.ResponseWriter, r *http.Request) {
			http.Redirect(rw, r, "https://elsewhere.example/api/v1/query?token=x", http.StatusFound)
		}, "redirect", "https://elsewhere.example/api/v1/query: redirects are not followed"},
		{"huge", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[`))
			chunk := []byte(`{"metric":{"pod":"x"},"value":[1,"1"]},`)
			for i := 0; i < 5000; i++ {
				rw.Write(chunk)
			}
		}, "too_large", "over 65536 bytes"},
		{"matrix", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
		}, "parse", "want a vector"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeProm(t)
			f.setHostile(c.h)
			in, _ := run(t, promapi.Options{URL: f.srv.URL, Timeout: 200 * time.Millisecond, BodyLimit: 64 << 10})
			e := next(t, in, "a source error", func(*collectors.SourceError) bool { return true })
			if e.Kind != c.kind || !strings.Contains(e.Message, c.words) || strings.Contains(e.Message, "token=x") {
				t.Errorf("got %s: %s\nwant %s containing %q", e.Kind, e.Message, c.kind, c.words)
			}
			if len(e.Message) > 400 {
				t.Errorf("message of %d bytes: one line for the operator is enough", len(e.Message))
			}
			// And it goes on: a second refresh, a second error.
			next(t, in, "a second source error", func(*collectors.SourceError) bool { return true })
		})
	}
}

// A Prometheus that stops answering: its workers' figures are still
// recent for a while, then they are shown down with why; answering again
// brings them back.
func TestPrometheusDownMarksWorkersDown(t *testing.T) {
	f := newFakeProm(t)
	f.set("w0", vllmWorker(f.eval-1, 1))
	in, _ := run(t, promapi.Options{URL: f.srv.URL, Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond})
	next(t, in, "w0 up", func(m *collectors.MetricsScrape) bool { return m.Err == nil })
	failedAt := time.Now()
	f.setHostile(func(rw http.ResponseWriter, _ *http.Request) { http.Error(rw, "down for maintenance", 502) })
	m := next(t, in, "w0 down", func(m *collectors.MetricsScrape) bool { return m.Err != nil })
	if time.Since(failedAt) < 4*time.Second {
		t.Errorf("w0 marked down %s after the first failure; its data was still recent", time.Since(failedAt))
	}
	if !strings.Contains(m.Err.Message, "Prometheus is not answering") || !strings.Contains(m.Err.Message, "502") {
		t.Errorf("w0 down: %s", m.Err.Message)
	}
	f.setHostile(nil)
	f.tick(1, 1)
	next(t, in, "w0 back", func(m *collectors.MetricsScrape) bool { return m.Err == nil })
}

func TestPartialAnswerIsSaid(t *testing.T) {
	f := newFakeProm(t)
	f.set("w0", vllmWorker(f.eval-1, 1))
	f.warnings = []string{"partial response: store gateway eu-2 did not answer"}
	in, _ := run(t, promapi.Options{URL: f.srv.URL})
	e := next(t, in, "a partial answer", func(e *collectors.SourceError) bool { return e.Kind == "partial" })
	if !strings.Contains(e.Message, "store gateway eu-2 did not answer") {
		t.Errorf("partial: %s", e.Message)
	}
	// The figures still flow; the warning is said once a minute, not
	// every refresh.
	next(t, in, "w0's scrape", func(m *collectors.MetricsScrape) bool { return m.Err == nil })
	timeout := time.After(500 * time.Millisecond)
	for {
		select {
		case o := <-in:
			if e, ok := o.(*collectors.SourceError); ok && e.Kind == "partial" {
				t.Fatalf("partial answer said twice within 500 ms: %s", e.Message)
			}
		case <-timeout:
			return
		}
	}
}

func TestBearerTokenGoesOnlyInTheHeader(t *testing.T) {
	f := newFakeProm(t)
	f.set("w0", vllmWorker(f.eval-1, 1))
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret-tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in, _ := run(t, promapi.Options{URL: f.srv.URL, BearerTokenFile: file})
	next(t, in, "w0", func(m *collectors.MetricsScrape) bool { return m.Err == nil })
	_, auth := f.seen()
	for _, a := range auth {
		if a != "Bearer s3cret-tok" {
			t.Fatalf("Authorization %q", a)
		}
	}
	// The token file goes away: the error names the file, not the token.
	os.Remove(file)
	e := next(t, in, "token error", func(*collectors.SourceError) bool { return true })
	if e.Kind != "config" || !strings.Contains(e.Message, "bearer_token_file "+file) || strings.Contains(e.Message, "s3cret") {
		t.Errorf("missing token file: %s: %s", e.Kind, e.Message)
	}
}

// A window shorter than two of Prometheus' scrapes is said: the rates
// cannot be that fine.
func TestWindowFinerThanScrapesIsSaid(t *testing.T) {
	f := newFakeProm(t)
	f.set("w0", vllmWorker(f.eval-0.25, 1))
	in, _ := run(t, promapi.Options{URL: f.srv.URL, Window: 10 * time.Second})
	next(t, in, "w0", func(m *collectors.MetricsScrape) bool { return true })
	f.tick(15, 1)
	next(t, in, "w0 again", func(m *collectors.MetricsScrape) bool { return true })
	f.tick(15, 1)
	e := next(t, in, "window note", func(e *collectors.SourceError) bool { return e.Kind == "config" })
	if !strings.Contains(e.Message, "window 10s is shorter than two of Prometheus' scrapes (15s)") {
		t.Errorf("window note: %s", e.Message)
	}
}

func TestOptionsChecked(t *testing.T) {
	for _, c := range []struct {
		o     promapi.Options
		words string
	}{
		{promapi.Options{URL: "prometheus:9090"}, "not an http(s) URL"},
		{promapi.Options{URL: "http://p:9090", Selector: `namespace="llm"`}, "must be label matchers in braces"},
		{promapi.Options{URL: "http://p:9090", Selector: `{__name__="x"}`}, "kvtop chooses the families"},
		{promapi.Options{URL: "http://p:9090", WorkerLabel: "pod-name"}, "not a Prometheus label name"},
		{promapi.Options{URL: "http://p:9090", Profile: "trtllm"}, `engine: "trtllm"`},
		{promapi.Options{URL: "http://p:9090", BearerTokenFile: "a", BearerTokenEnv: "B"}, "both bearer_token_file and bearer_token_env"},
	} {
		if _, err := promapi.New(c.o); err == nil || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.words)
		}
	}
}
