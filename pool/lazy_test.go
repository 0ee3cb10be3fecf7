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
	"github.com/kvtop/kvtop/snapshot"
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
		l    snapshot.Latency
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

// Instance B restarts between two scrapes, every one of which succeeds:
// after 6 and 14 requests its page is the idle one of a fresh process
// (gauges only), and no counter goes backwards for lack of counters. It
// is a restart: counted, the 3 blocks its old process indexed dropped
// (the new cache is empty, and idle it sends no event that would say so),
// an incident in its stream's history and an alert. It read restarts 0
// with the 3 blocks resident. When the new process has served 6 requests,
// they count from zero beside the old process's 8 in the window.
func TestRestartBetweenScrapesSeenFromVanishedSeries(t *testing.T) {
	s := newTestState("w0")
	p := scrapePages(t, "metrics-4.txt", "metrics-6.txt", "metrics-2.txt", "metrics-4.txt")
	s.Apply(p.next(0))
	s.Apply(batch("w0", 0, 1, at(1), stored(0, false, 1, 2, 3)))
	s.Apply(p.next(10))
	s.Apply(p.next(20)) // restarted: only gauges on the page
	snap := s.Snapshot(at(20))
	w := row(t, snap, "w0")
	if w.Restarts != 1 || blocksOf(w.Blocks) != 0 || blocksOf(snap.Pool.Blocks) != 0 {
		t.Fatalf("restarts %d, blocks %d (pool %d); want 1 restart and its 3 blocks dropped", w.Restarts, blocksOf(w.Blocks), blocksOf(snap.Pool.Blocks))
	}
	ins := restartIncidents(&w.Streams[0])
	want := "engine restarted between two scrapes (every counter and histogram gone or lower): 3 indexed blocks dropped"
	if len(ins) != 1 || ins[0].Note != want || !ins[0].Start.Equal(at(20)) {
		t.Fatalf("stream history %+v, want one restart incident %q", w.Streams[0].History, want)
	}
	a := alertOf(snap, snapshot.AlertWorkerRestart)
	if a == nil || a.Text != "w0 restarted 14:00:20: 3 indexed blocks dropped (a restarted engine's cache is empty) — every counter and histogram it had vanished or went back at once" {
		t.Fatalf("alert %+v", a)
	}
	s.Apply(p.next(30)) // the new process after 6 requests
	w = row(t, s.Snapshot(at(30)), "w0")
	if w.Restarts != 1 || !eqp(w.TTFTMS.Observations, f(8+6)) {
		t.Fatalf("restarts %d, TTFT %v observations; want still 1, and 8 before the restart + 6 after", w.Restarts, show(w.TTFTMS.Observations))
	}
}

// Between two good scrapes without process_start_time, a restart is
// every cumulative series of the last page gone, or each gone or lower
// (the new process already observed something), over every engine of a
// data-parallel page: counted, blocks dropped, an incident. What is no
// restart: a series that appears (engines create them lazily), one that
// goes away or back while the others stay, one engine's series while its
// sibling keeps its own, a page whose only cumulative series goes, and a
// page whose process_start_time says the process is the same.
func TestRestartSeenFromSeriesGone(t *testing.T) {
	full := func(engine string) em {
		e := counters(engine, 0, 1000, 800)
		e.PromptTokens, e.GenerationTokens, e.RequestsFinished = f(5000), f(700), f(10)
		e.TTFT = hg(layoutA, 2, 5, 8, 10)
		return e
	}
	with := func(e em, change func(*em)) em { change(&e); return e }
	onlyGen := with(idle(""), func(e *em) { e.GenerationTokens = f(700) })
	cases := []struct {
		name        string
		first, next []em
		start       *float64 // process_start_time on both pages
		restart     bool
		// totals: the first page has worker-level series (SGLang's
		// token counters and TTFT beside its per-rank gauges), the
		// next none.
		totals bool
	}{
		{"all gone", []em{full("")}, []em{idle("")}, nil, true, false},
		{"each gone or lower", []em{full("")}, []em{with(idle(""), func(e *em) {
			e.PromptTokens, e.TTFT = f(40), hg(layoutA, 1, 1, 1, 1)
		})}, nil, true, false},
		{"both engines of two", []em{full("0"), full("1")}, []em{idle("0"), idle("1")}, nil, true, false},
		{"one engine of two", []em{full("0"), full("1")}, []em{idle("0"), full("1")}, nil, false, false},
		{"a lazy series appears", []em{full("")}, []em{with(full(""), func(e *em) {
			e.Preemptions, e.QueueTime = f(1), hg(layoutA, 1, 1, 1, 1)
		})}, nil, false, false},
		{"one series goes", []em{full("")}, []em{with(full(""), func(e *em) { e.PromptTokens = nil })}, nil, false, false},
		{"one series goes, another back", []em{full("")}, []em{with(full(""), func(e *em) {
			e.PromptTokens, e.RequestsFinished = nil, f(3)
		})}, nil, false, false},
		{"the only counter goes", []em{onlyGen}, []em{idle("")}, nil, false, false},
		{"all gone, same process_start_time", []em{full("")}, []em{idle("")}, f(1000), false, false},
		{"data-parallel page, its worker-level series gone", []em{idle("0"), idle("1")}, []em{idle("0"), idle("1")}, nil, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newTestState("w0")
			first := scrape("w0", at(0), c.first...)
			first.ProcessStart = c.start
			if c.totals {
				tot := full("")
				first.WorkerTotals = &tot
			}
			s.Apply(first)
			s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1, 2, 3)))
			next := scrape("w0", at(10), c.next...)
			next.ProcessStart = c.start
			s.Apply(next)
			w := row(t, s.Snapshot(at(10)), "w0")
			restarts, blocks, incidents := 0, 3, 0
			if c.restart {
				restarts, blocks, incidents = 1, 0, 1
			}
			if w.Restarts != restarts || blocksOf(w.Blocks) != blocks || len(restartIncidents(&w.Streams[0])) != incidents {
				t.Fatalf("restarts %d blocks %d history %+v; want %d restart(s), %d blocks", w.Restarts, blocksOf(w.Blocks), w.Streams[0].History, restarts, blocks)
			}
		})
	}
}
