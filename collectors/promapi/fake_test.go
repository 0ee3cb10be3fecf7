package promapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeProm answers kvtop's two queries the way Prometheus' HTTP API does,
// from a table of workers the test edits; a test can replace the answer
// with something hostile.
type fakeProm struct {
	mu       sync.Mutex
	srv      *httptest.Server
	eval     float64 // evaluation time, unix seconds
	workers  map[string]*fakeWorker
	warnings []string
	hostile  http.HandlerFunc // when set, answers every request
	queries  []string
	auth     []string
}

type fakeWorker struct {
	up     float64
	ts     float64 // time of its last scrape
	series []fakeSeries
}

type fakeSeries struct {
	name   string
	labels map[string]string
	value  float64
}

func newFakeProm(t *testing.T) *fakeProm {
	f := &fakeProm{eval: 1_700_000_000, workers: map[string]*fakeWorker{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProm) set(pod string, w *fakeWorker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w == nil {
		delete(f.workers, pod)
		return
	}
	f.workers[pod] = w
}

// tick moves time on: every up worker is scraped again, its counters
// grown by n.
func (f *fakeProm) tick(d float64, n float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eval += d
	for _, w := range f.workers {
		w.ts = f.eval - 0.25
		for i := range w.series {
			if strings.HasSuffix(w.series[i].name, "_total") {
				w.series[i].value += n
			}
		}
	}
}

func (f *fakeProm) setHostile(h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hostile = h
}

func (f *fakeProm) seen() (queries, auth []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries...), append([]string(nil), f.auth...)
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

var podRe = regexp.MustCompile(`pod=~("(?:[^"\\]|\\.)*")`)

func (f *fakeProm) serve(rw http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	q := r.Form.Get("query")
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	hostile := f.hostile
	f.mu.Unlock()
	if hostile != nil {
		hostile(rw, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(rw, r)
		return
	}
	var want *regexp.Regexp
	if m := podRe.FindStringSubmatch(q); m != nil {
		s, _ := strconv.Unquote(m[1])
		want = regexp.MustCompile("^(?:" + s + ")$")
	}
	var res []sample
	val := func(v float64) [2]any { return [2]any{f.eval, strconv.FormatFloat(v, 'g', -1, 64)} }
	target := func(pod string) map[string]string {
		return map[string]string{"pod": pod, "namespace": "llm", "job": "engines", "instance": pod + ":8000"}
	}
	for pod, w := range f.workers {
		if want != nil && !want.MatchString(pod) {
			continue
		}
		switch {
		case strings.HasPrefix(q, "max by"):
			res = append(res, sample{Metric: map[string]string{"pod": pod}, Value: val(w.up)},
				sample{Metric: map[string]string{"pod": pod, "kvtop_q": "ts"}, Value: val(w.ts)})
		case strings.Contains(q, "__name__=~"):
			up := target(pod)
			up["__name__"] = "up"
			ts := target(pod)
			ts["kvtop_q"] = "ts"
			res = append(res, sample{Metric: up, Value: val(w.up)}, sample{Metric: ts, Value: val(w.ts)})
			if w.up == 0 {
				continue // Prometheus marks a failed target's series stale
			}
			for _, s := range w.series {
				m := target(pod)
				for k, v := range s.labels {
					m[k] = v
				}
				m["__name__"] = s.name
				res = append(res, sample{Metric: m, Value: val(s.value)})
			}
		}
	}
	body := map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": res}}
	if len(f.warnings) > 0 {
		body["warnings"] = f.warnings
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(body)
}

// vllmWorker is a small vLLM engine as Prometheus holds it: gauges,
// token counters and a TTFT histogram.
func vllmWorker(ts, queue float64) *fakeWorker {
	e := map[string]string{"engine": "0", "model_name": "m"}
	le := func(b string) map[string]string { return map[string]string{"engine": "0", "model_name": "m", "le": b} }
	return &fakeWorker{up: 1, ts: ts, series: []fakeSeries{
		{"vllm:num_requests_waiting", e, queue},
		{"vllm:num_requests_running", e, 2},
		{"vllm:kv_cache_usage_perc", e, 0.25},
		{"vllm:prefix_cache_queries_total", e, 1000},
		{"vllm:prefix_cache_hits_total", e, 600},
		{"vllm:prompt_tokens_total", e, 1000},
		{"vllm:time_to_first_token_seconds_bucket", le("0.1"), 3},
		{"vllm:time_to_first_token_seconds_bucket", le("1"), 7},
		{"vllm:time_to_first_token_seconds_bucket", le("+Inf"), 8},
		{"vllm:time_to_first_token_seconds_sum", e, 4.5},
		{"vllm:time_to_first_token_seconds_count", e, 8},
		{"scrape_duration_seconds", nil, 0.012},
	}}
}
