package promapi_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/collectors/promapi"
	"github.com/kvtop/kvtop/internal/testproc"
)

// benchWorkers is the pool size of the benchmarks: the thousand.
const benchWorkers = 1000

// enginePage is a real vLLM worker's page (Dynamo's vLLM worker, Qwen3
// 0.6B) cut to the families kvtop reads: what Prometheus would hold per
// worker for kvtop's selector (121 series).
func enginePage(b *testing.B) []byte {
	b.Helper()
	raw, err := os.ReadFile("../../testdata/real/metrics/vllm-dynamo-worker-qwen3-0.6b.txt")
	if err != nil {
		b.Fatal(err)
	}
	want := map[string]bool{}
	for _, f := range metrics.WorkerFamilies() {
		for _, s := range []string{"", "_total", "_bucket", "_sum", "_count"} {
			want[f+s] = true
		}
	}
	var out bytes.Buffer
	for _, line := range strings.Split(string(raw), "\n") {
		name := line
		if strings.HasPrefix(line, "# TYPE ") {
			name = strings.Fields(line)[2]
		} else if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		if want[name] || want[strings.TrimSuffix(name, "_total")] {
			out.WriteString(line + "\n")
		}
	}
	return out.Bytes()
}

// benchProm is one Prometheus holding benchWorkers workers' series, shared
// by every run of the benchmarks (started once, stopped by TestMain).
var benchProm struct {
	once sync.Once
	base string
	stop func()
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchProm.stop != nil {
		benchProm.stop()
	}
	os.Exit(code)
}

// thousandWorkers starts an HTTP server with benchWorkers /metrics pages
// and a real Prometheus scraping all of them (5 s interval), and waits
// until it holds a scrape of every one.
func thousandWorkers(b *testing.B) string {
	bin, err := exec.LookPath("prometheus")
	if err != nil || testing.Short() {
		b.Skip("needs Debian's prometheus (make test-deps)")
	}
	benchProm.once.Do(func() {
		page := enginePage(b)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			benchProm.err = err
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
			rw.Write(page)
		})}
		go srv.Serve(ln)
		dir, _ := os.MkdirTemp("", "kvtop-bench-prom-")
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "global:\n  scrape_interval: 5s\n  scrape_timeout: 4s\nscrape_configs:\n  - job_name: engines\n    static_configs:\n")
		for i := 0; i < benchWorkers; i++ {
			fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {pod: w%d, namespace: llm, __metrics_path__: /w/%d/metrics}\n", ln.Addr().String(), i, i)
		}
		os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644)
		web := testproc.FreeAddr(b)
		cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+web, "--log.level=warn")
		if err := cmd.Start(); err != nil {
			benchProm.err = err
			return
		}
		benchProm.base = "http://" + web
		benchProm.stop = func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			srv.Close()
			os.RemoveAll(dir)
		}
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			if n, err := upCount(benchProm.base, `up{namespace="llm"} == 1`); err == nil && n == benchWorkers {
				return
			}
			time.Sleep(time.Second)
		}
		benchProm.err = fmt.Errorf("prometheus did not scrape %d targets within 3 minutes", benchWorkers)
	})
	if benchProm.err != nil {
		b.Fatal(benchProm.err)
	}
	return benchProm.base
}

// bodyRecorder is an http.ResponseWriter into a buffer.
type bodyRecorder struct {
	h    http.Header
	body bytes.Buffer
}

func (r *bodyRecorder) Header() http.Header         { return r.h }
func (r *bodyRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *bodyRecorder) WriteHeader(int)             {}

// countScrapes checks a round's answer: one good scrape per worker.
func countScrapes(b *testing.B, obs []collectors.Observation) int {
	n := 0
	for _, o := range obs {
		if m, ok := o.(*collectors.MetricsScrape); ok {
			if m.Err != nil || len(m.Engines) == 0 {
				b.Fatalf("%s: %+v", m.Target, m.Err)
			}
			n++
		}
	}
	return n
}

// BenchmarkPrometheus1000: the source's cost against a real Prometheus
// holding 1000 workers' series (121 each). "status" is what every refresh
// costs (the targets query: 2 000 small series); "all-workers" reads every
// worker's series at once, as the first refresh does and as one refresh
// costs per Prometheus scrape interval in steady state (each refresh then
// fetches only the workers scraped since the last).
func BenchmarkPrometheus1000(b *testing.B) {
	base := thousandWorkers(b)
	ctx := context.Background()
	b.Run("status", func(b *testing.B) {
		src, err := promapi.New(promapi.Options{URL: base, Selector: `{namespace="llm"}`, Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		cpu := cpuTime()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if n, err := src.Status(ctx); err != nil || n != 2*benchWorkers {
				b.Fatalf("targets query: %d series, %v", n, err)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/float64(b.N), "kvtop-cpu-ms/op")
	})
	b.Run("all-workers", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime()
		for i := 0; i < b.N; i++ {
			src, err := promapi.New(promapi.Options{URL: base, Selector: `{namespace="llm"}`, Timeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			if n := countScrapes(b, src.Refresh(ctx)); n != benchWorkers {
				b.Fatalf("read %d workers", n)
			}
		}
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/float64(b.N), "kvtop-cpu-ms/op")
	})
}

// cpuTime is this process's user and system CPU so far: the benchmark's
// wall time includes Prometheus evaluating and encoding on the same cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRecorded1000: kvtop's side alone (decode, rebuild, parse) on an
// answer of the same size served by httptest from memory: the same 1000
// workers' 121 series, every worker new.
func BenchmarkRecorded1000(b *testing.B) {
	page := enginePage(b)
	ss, err := pageSeries(page)
	if err != nil {
		b.Fatal(err)
	}
	f := newFakeProm(&testing.T{})
	defer f.srv.Close()
	for i := 0; i < benchWorkers; i++ {
		f.set("w"+strconv.Itoa(i), &fakeWorker{up: 1, ts: f.eval - 1, series: ss})
	}
	// Record the two answers once; the server then replays the bytes, so
	// the benchmark times kvtop alone.
	answers := map[bool][]byte{}
	for _, data := range []bool{false, true} {
		q := "max by (pod) (up)"
		if data {
			q = `{__name__=~"x"}`
		}
		rec := &bodyRecorder{h: http.Header{}}
		req, _ := http.NewRequest(http.MethodPost, "/api/v1/query", strings.NewReader("query="+url.QueryEscape(q)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		f.serve(rec, req)
		answers[data] = rec.body.Bytes()
	}
	f.setHostile(func(rw http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		rw.Header().Set("Content-Type", "application/json")
		rw.Write(answers[strings.Contains(r.Form.Get("query"), "__name__")])
	})
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	defer func() {
		b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		b.ReportMetric(float64(len(answers[true]))/1e6, "MB/answer")
	}()
	for i := 0; i < b.N; i++ {
		src, err := promapi.New(promapi.Options{URL: f.srv.URL})
		if err != nil {
			b.Fatal(err)
		}
		if n := countScrapes(b, src.Refresh(ctx)); n != benchWorkers {
			b.Fatalf("read %d workers", n)
		}
	}
	b.ReportMetric(float64(len(ss)), "series/worker")
}

// pageSeries is what a Prometheus stores from one scrape of page: its
// samples with their labels, histograms as _bucket (le), _sum and _count.
func pageSeries(page []byte) ([]fakeSeries, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, err
	}
	var ss []fakeSeries
	for name, mf := range fams {
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			with := func(k, v string) map[string]string {
				out := map[string]string{k: v}
				for a, b := range labels {
					out[a] = b
				}
				return out
			}
			switch {
			case m.Counter != nil:
				ss = append(ss, fakeSeries{name, labels, m.Counter.GetValue()})
			case m.Gauge != nil:
				ss = append(ss, fakeSeries{name, labels, m.Gauge.GetValue()})
			case m.Histogram != nil:
				inf := false
				for _, bk := range m.Histogram.Bucket {
					ub := bk.GetUpperBound()
					inf = inf || math.IsInf(ub, 1)
					ss = append(ss, fakeSeries{name + "_bucket", with("le", appendLE(ub)), float64(bk.GetCumulativeCount())})
				}
				if !inf {
					ss = append(ss, fakeSeries{name + "_bucket", with("le", "+Inf"), float64(m.Histogram.GetSampleCount())})
				}
				ss = append(ss, fakeSeries{name + "_sum", labels, m.Histogram.GetSampleSum()}, fakeSeries{name + "_count", labels, float64(m.Histogram.GetSampleCount())})
			case m.Untyped != nil:
				ss = append(ss, fakeSeries{name, labels, m.Untyped.GetValue()})
			}
		}
	}
	return ss, nil
}

func appendLE(ub float64) string {
	if math.IsInf(ub, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(ub, 'g', -1, 64)
}
