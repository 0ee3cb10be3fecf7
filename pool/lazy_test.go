package pool

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/metrics"
)

// Engines that create their series lazily: llm-d-inference-sim (and vLLM
// for labelled series) exposes only gauges until the first request, then
// each counter and histogram from its first observation on, and a
// restarted process has none of them again. These tests scrape the real
// captured pages of llm-d-inference-sim (testdata/peers) from a real HTTP
// server on 127.0.0.1 with kvtop's own metrics collector, and apply what it
// read to the pool on the tests' clock.

const peerPages = "../testdata/peers/llm-d-inference-sim/"

// pageScrapes serves the captured pages, one per request in order (the
// last again after that), to a running metrics collector of target "w0".
type pageScrapes struct {
	t   *testing.T
	out chan collectors.Observation
}

func scrapePages(t *testing.T, files ...string) *pageScrapes {
	t.Helper()
	pages := make([][]byte, len(files))
	for i, f := range files {
		b, err := os.ReadFile(filepath.Join(peerPages, f))
		if err != nil {
			t.Fatal(err)
		}
		pages[i] = b
	}
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := pages[min(n, len(pages)-1)]
		n++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	c, err := metrics.New(metrics.Options{Interval: 10 * time.Millisecond, Targets: []metrics.Target{
		{Name: "w0", Role: collectors.RoleWorker, URL: srv.URL + "/metrics"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Unbuffered: the collector fetches its next page only after the test
	// took the last scrape, so scrape k is page k.
	p := &pageScrapes{t: t, out: make(chan collectors.Observation)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, p.out) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// next is the scrape of the next page, stamped sec seconds after t0.
func (p *pageScrapes) next(sec float64) *collectors.MetricsScrape {
	p.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case o := <-p.out:
			m, ok := o.(*collectors.MetricsScrape)
			if !ok {
				continue // a note beside a scrape
			}
			if m.Err != nil {
				p.t.Fatalf("scrape failed: %s", m.Err.Message)
			}
			m.At = at(sec)
			return m
		case <-timeout:
			p.t.Fatal("no scrape within 10 s")
			return nil
		}
	}
}

// Instance B of the captures, scraped idle after start, then after 6, 14,
// 17 and 18 requests: TTFT, e2e and ITL appear with the first requests
// already in them, queue time only at the fourth scrape (with 3). Every
// request counts: TTFT read 12 of 18 (the first 6 taken as a baseline)
// and queue time "no requests in the window" with 3 in it.
func TestLateHistogramsCountFromZero(t *testing.T) {
	s := newTestState("w0")
	p := scrapePages(t, "metrics-2.txt", "metrics-4.txt", "metrics-6.txt", "metrics-8.txt", "metrics-10.txt")
	for k := 0; k < 5; k++ {
		s.Apply(p.next(float64(10 * k)))
	}
	w := row(t, s.Snapshot(at(40)), "w0")
	for _, c := range []struct {
		what string
		l    Latency
		want float64
	}{{"TTFT", w.TTFTMS, 18}, {"queue time", w.QueueMS, 3}, {"e2e", w.E2EMS, 18}, {"ITL", w.ITLMS, 399}} {
		if !eqp(c.l.Observations, f(c.want)) || c.l.P50 == nil {
			t.Errorf("%s: %v observations (p50 %v, reason %q); want all %v since kvtop's first scrape",
				c.what, show(c.l.Observations), show(c.l.P50), c.l.Reason, c.want)
		}
	}
}

// kvtop started after the first 6 requests: the histograms on its first
// page counted before it looked, and stay a baseline.
func TestHistogramAtFirstScrapeIsABaseline(t *testing.T) {
	s := newTestState("w0")
	p := scrapePages(t, "metrics-4.txt", "metrics-6.txt", "metrics-8.txt", "metrics-10.txt")
	for k := 0; k < 4; k++ {
		s.Apply(p.next(float64(10 * k)))
	}
	w := row(t, s.Snapshot(at(30)), "w0")
	if !eqp(w.TTFTMS.Observations, f(12)) || !eqp(w.QueueMS.Observations, f(3)) {
		t.Errorf("TTFT %v observations, queue time %v; want 12 (18 − the 6 on the first page) and 3 (appeared later)",
			show(w.TTFTMS.Observations), show(w.QueueMS.Observations))
	}
}
