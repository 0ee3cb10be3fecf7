package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/serve"
)

// serving is `kvtop serve` run in-process on a scenario's engine: the
// command's own serveEngine on a free 127.0.0.1 port.
type serving struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func startServing(t *testing.T, r *scnRun, o serve.Options) *serving {
	t.Helper()
	return startServingOn(t, r, "127.0.0.1:0", o)
}

// startServingOn serves on addr: a collector restarted on its port (which
// may take a moment to be free again).
func startServingOn(t *testing.T, r *scnRun, addr string, o serve.Options) *serving {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	sv := &serving{addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { sv.done <- serveEngine(ctx, io.Discard, r.e, ln, o, "", "") }()
	t.Cleanup(sv.stop)
	return sv
}

// stop ends the server (its port closes); safe to call twice.
func (sv *serving) stop() {
	sv.cancel()
	if sv.done != nil {
		<-sv.done
		sv.done = nil
	}
}

// scrapeMetrics reads a /metrics page as Prometheus would.
func scrapeMetrics(url string) (map[string]*dto.MetricFamily, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	return fams, string(b), err
}

// recorder captures kvtop_* series of a /metrics page over time, one
// capture per tick, as promtool's input_series: a series absent from a
// capture after being present is "stale" once (Prometheus' staleness
// marker when a target stops exporting it), then missing. A failed
// scrape records up=0 and no kvtop_* series.
type recorder struct {
	url, job, instance string

	mu       sync.Mutex
	captures []map[string]float64
	ups      []bool
}

func newRecorder(addr string) *recorder {
	return &recorder{url: "http://" + addr + "/metrics", job: "kvtop", instance: addr}
}

// capture takes one scrape.
func (rc *recorder) capture() {
	fams, _, err := scrapeMetrics(rc.url)
	c := map[string]float64{}
	if err == nil {
		for name, f := range fams {
			if !strings.HasPrefix(name, "kvtop_") || strings.HasPrefix(name, "kvtop_serve_") || name == "kvtop_build_info" {
				continue
			}
			for _, m := range f.Metric {
				c[rc.key(name, m)] = sampleValue(m)
			}
		}
	}
	rc.mu.Lock()
	rc.captures = append(rc.captures, c)
	rc.ups = append(rc.ups, err == nil)
	rc.mu.Unlock()
}

// every captures each d until stop is closed; the returned channel is
// closed when the last capture is taken.
func (rc *recorder) every(d time.Duration, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			rc.capture()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return done
}

func (rc *recorder) n() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.captures)
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// key is a series in PromQL selector syntax, with the target's labels.
func (rc *recorder) key(name string, m *dto.Metric) string {
	labels := []string{fmt.Sprintf("instance=%q", rc.instance), fmt.Sprintf("job=%q", rc.job)}
	for _, l := range m.Label {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

// inputSeries renders the captures in promtool's input_series format
// (YAML), up{} included.
func (rc *recorder) inputSeries() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	names := map[string]bool{}
	for _, c := range rc.captures {
		for k := range c {
			names[k] = true
		}
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	up := make([]string, len(rc.ups))
	for i, ok := range rc.ups {
		up[i] = "0"
		if ok {
			up[i] = "1"
		}
	}
	fmt.Fprintf(&b, "      - series: %q\n        values: %q\n", fmt.Sprintf("up{instance=%q,job=%q}", rc.instance, rc.job), strings.Join(up, " "))
	for _, k := range keys {
		vals := make([]string, len(rc.captures))
		present := false
		for i, c := range rc.captures {
			v, ok := c[k]
			switch {
			case ok:
				vals[i] = model.SampleValue(v).String()
				present = true
			case present:
				vals[i] = "stale"
				present = false
			default:
				vals[i] = "_"
			}
		}
		fmt.Fprintf(&b, "      - series: %q\n        values: %q\n", k, strings.Join(vals, " "))
	}
	return b.String()
}

// series returns one series' captured values (NaN-free: absent is -1), for
// the test's own checks.
func (rc *recorder) series(name string, labels ...string) []float64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make([]float64, len(rc.captures))
	for i, c := range rc.captures {
		out[i] = -1
	keys:
		for k, v := range c {
			if !strings.HasPrefix(k, name+"{") {
				continue
			}
			for j := 0; j < len(labels); j += 2 {
				if !strings.Contains(k, fmt.Sprintf("%s=%q", labels[j], labels[j+1])) {
					continue keys
				}
			}
			out[i] = v
			break
		}
	}
	return out
}
