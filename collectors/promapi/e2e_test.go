package promapi_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/collectors/promapi"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// side is one way of reading the pool: the observations it produced,
// folded into a pool of its own, and the latest scrape per worker.
type side struct {
	mu   sync.Mutex
	st   *pool.State
	last map[string]*collectors.MetricsScrape
	errs []*collectors.SourceError
}

func newSide(t *testing.T, in <-chan collectors.Observation) *side {
	s := &side{st: pool.NewState(pool.Options{Window: 60 * time.Second}), last: map[string]*collectors.MetricsScrape{}}
	go func() {
		for o := range in {
			s.mu.Lock()
			s.st.Apply(o)
			switch v := o.(type) {
			case *collectors.MetricsScrape:
				s.last[v.Target] = v
			case *collectors.SourceError:
				s.errs = append(s.errs, v)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *side) scrape(w string) *collectors.MetricsScrape {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[w]
}

func (s *side) snapshot() *snapshot.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Snapshot(time.Now())
}

func (s *side) errors() []*collectors.SourceError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*collectors.SourceError(nil), s.errs...)
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPrometheusMatchesDirectScrape: a real Prometheus scrapes the
// simulated pool every second; kvtop reads the workers back through its
// HTTP API (selector, pod label) and, beside it, scrapes them directly.
// Once the traffic stops, both read the same figures: every engine's
// gauges, counters and histograms field for field, and the pools built
// from them agree on queue, KV use and the token hit rate. The workers
// read through Prometheus say so, with its scrape interval, and a worker
// Prometheus stops scraping is down, "absent in Prometheus".
func TestPrometheusMatchesDirectScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 3, Scenario: "steady", Seed: 7, Rate: 12})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	eps := s.Endpoints()
	var targets []promTarget
	var direct []metrics.Target
	for _, w := range eps.Workers {
		u, _ := url.Parse(w.Metrics)
		targets = append(targets, promTarget{addr: u.Host, labels: map[string]string{"pod": w.Name, "namespace": "llm"}})
		direct = append(direct, metrics.Target{Name: w.Name, URL: w.Metrics})
	}
	// Another namespace's target: the selector must leave it out.
	u0, _ := url.Parse(eps.Workers[0].Metrics)
	other := promTarget{addr: u0.Host, labels: map[string]string{"pod": "stranger", "namespace": "other"}}
	prom := startPrometheus(t, time.Second, append(targets, other))
	// Both readers start together, once Prometheus holds a scrape of every
	// worker: their windows then begin within one scrape of each other.
	waitFor(t, "Prometheus to scrape every worker", 30*time.Second, func() bool {
		n, err := upCount(prom.base, `up{namespace="llm"} == 1`)
		return err == nil && n == len(targets)
	})
	// The caches warm up first: a cold start's hit rate moves by the
	// second, and the two readers' windows start one scrape apart.
	time.Sleep(8 * time.Second)
	started := time.Now()

	mc, err := metrics.New(metrics.Options{Targets: direct, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := promapi.New(promapi.Options{URL: prom.base, Selector: `{namespace="llm"}`, Interval: 500 * time.Millisecond,
		Window: 60 * time.Second, Workers: []promapi.Worker{{Name: "w0"}, {Name: "w1"}, {Name: "w2"}}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newSide(t, collect(t, ctx, mc)), newSide(t, collect(t, ctx, pc))

	waitFor(t, "every worker read through Prometheus with its scrape interval and some prefix queries", 60*time.Second, func() bool {
		for _, w := range eps.Workers {
			m := b.scrape(w.Name)
			if m == nil || m.Err != nil || m.Interval == 0 || len(m.Engines) == 0 || m.Engines[0].PrefixQueries == nil || *m.Engines[0].PrefixQueries == 0 {
				return false
			}
		}
		return true
	})

	// Ten seconds of traffic in both windows, then stop it and wait until
	// the direct scrapes stand still.
	time.Sleep(time.Until(started.Add(10 * time.Second)))
	if err := s.Inject(sim.SetRate{Factor: 0}); err != nil {
		t.Fatal(err)
	}
	var frozen map[string]*collectors.MetricsScrape
	waitFor(t, "the pool to settle (two direct scrapes alike, queues empty)", 60*time.Second, func() bool {
		cur := map[string]*collectors.MetricsScrape{}
		still := frozen != nil
		for _, w := range eps.Workers {
			m := a.scrape(w.Name)
			if m == nil || m.Err != nil {
				return false
			}
			cur[w.Name] = m
			if still && (m.At.Equal(frozen[w.Name].At) || !reflect.DeepEqual(m.Engines, frozen[w.Name].Engines)) {
				still = false
			}
			for _, e := range m.Engines {
				if e.Waiting == nil || *e.Waiting != 0 || e.Running == nil || *e.Running != 0 {
					still = false
				}
			}
		}
		if still {
			return true
		}
		frozen = cur
		return false
	})
	settled := time.Now()
	waitFor(t, "a scrape through Prometheus taken after the pool settled", 30*time.Second, func() bool {
		for _, w := range eps.Workers {
			if m := b.scrape(w.Name); m == nil || !m.At.After(settled.Add(time.Second)) {
				return false
			}
		}
		return true
	})

	for _, w := range eps.Workers {
		da, pb := a.scrape(w.Name), b.scrape(w.Name)
		if pb.Via != "prometheus" || da.Via != "" {
			t.Errorf("%s: via %q (prometheus source), %q (direct)", w.Name, pb.Via, da.Via)
		}
		if pb.Interval != time.Second {
			t.Errorf("%s: scrape interval seen through Prometheus %s, configured 1s", w.Name, pb.Interval)
		}
		if pb.Profile != da.Profile || !reflect.DeepEqual(pb.Engines, da.Engines) || !reflect.DeepEqual(pb.WorkerTotals, da.WorkerTotals) ||
			!reflect.DeepEqual(pb.ProcessStart, da.ProcessStart) || len(pb.Invalid) != len(da.Invalid) {
			t.Errorf("%s: read through Prometheus differs from the direct scrape:\nprometheus %s\ndirect     %s", w.Name, dump(pb), dump(da))
		}
		if pb.Duration <= 0 || pb.Duration > 5*time.Second {
			t.Errorf("%s: scrape duration %s: want Prometheus' own measure", w.Name, pb.Duration)
		}
	}

	sa, sb := a.snapshot(), b.snapshot()
	rates := 0
	for _, wa := range sa.Workers {
		wb := findWorker(sb, wa.Name)
		if wb == nil || !wb.Up {
			t.Fatalf("%s: read through Prometheus %+v", wa.Name, wb)
		}
		for _, f := range []struct {
			what string
			x, y *float64
			tol  float64
		}{{"queue", wa.Queue, wb.Queue, 0}, {"running", wa.Running, wb.Running, 0}, {"kv_usage", wa.KVUsage, wb.KVUsage, 1e-9},
			// Windowed over each source's own samples: one scrape apart at most.
			{"hit rate", wa.PrefixHitRate.Tokens, wb.PrefixHitRate.Tokens, 0.05}} {
			switch {
			case (f.x == nil || f.y == nil) && f.what == "hit rate":
				// A worker the router sent (almost) nothing since both
				// started: one request within the scrape between them
				// makes a rate on one side only.
				t.Logf("%s hit rate: direct %v, via prometheus %v", wa.Name, deref(f.x), deref(f.y))
			case f.x == nil || f.y == nil || math.Abs(*f.x-*f.y) > f.tol:
				t.Errorf("%s %s: direct %v, via prometheus %v", wa.Name, f.what, deref(f.x), deref(f.y))
			case f.what == "hit rate":
				rates++
			}
		}
		if wb.MetricsVia != "prometheus" || wb.MetricsIntervalS == nil || *wb.MetricsIntervalS != 1 || wa.MetricsVia != "" {
			t.Errorf("%s: snapshot says metrics via %q every %v s (direct: %q)", wb.Name, wb.MetricsVia, deref(wb.MetricsIntervalS), wa.MetricsVia)
		}
		if age := sb.At.Sub(*wb.LastScrape); age < 0 || age > 3*time.Second {
			t.Errorf("%s: data through Prometheus is %s old; its scrape is every 1 s", wb.Name, age)
		}
	}
	if rates == 0 {
		t.Error("no worker had a token hit rate to compare")
	}
	if sa.Pool.PrefixHitRate.Tokens == nil || sb.Pool.PrefixHitRate.Tokens == nil ||
		math.Abs(*sa.Pool.PrefixHitRate.Tokens-*sb.Pool.PrefixHitRate.Tokens) > 0.05 {
		t.Errorf("pool hit rate: direct %v, via prometheus %v", deref(sa.Pool.PrefixHitRate.Tokens), deref(sb.Pool.PrefixHitRate.Tokens))
	}
	t.Logf("pool token hit rate: direct %v, via prometheus %v", deref(sa.Pool.PrefixHitRate.Tokens), deref(sb.Pool.PrefixHitRate.Tokens))
	for _, w := range sb.Workers {
		if w.Name == "stranger" {
			t.Errorf("a target outside the selector became a worker: %+v", w)
		}
	}

	// A selector Prometheus rejects is said, with Prometheus' words.
	bad, err := promapi.New(promapi.Options{URL: prom.base, Selector: `{namespace=~"(llm"}`})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(ctx)
	e := (<-collect(t, bctx, bad)).(*collectors.SourceError)
	bcancel()
	if e.Kind != "config" || !strings.Contains(e.Message, "rejected kvtop's query") || !strings.Contains(e.Message, "missing closing )") {
		t.Errorf("bad selector: %s: %s", e.Kind, e.Message)
	}

	// Prometheus stops scraping w2: kvtop shows it down, absent.
	prom.reload(time.Second, append(targets[:2:2], other))
	waitFor(t, "w2 down after Prometheus stopped scraping it", 30*time.Second, func() bool {
		for _, w := range b.snapshot().Workers {
			if w.Name == "w2" {
				return !w.Up && strings.Contains(w.Reason, "absent in Prometheus")
			}
		}
		return false
	})
	for _, e := range b.errors() {
		if e.Kind != "absent" {
			t.Errorf("unexpected source error: %s", e)
		}
	}
}

func findWorker(s *snapshot.Snapshot, name string) *snapshot.Worker {
	for i := range s.Workers {
		if s.Workers[i].Name == name {
			return &s.Workers[i]
		}
	}
	return nil
}

// upCount is the number of series an instant query returns.
func upCount(base, q string) (int, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	return len(r.Data.Result), err
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func dump(m *collectors.MetricsScrape) string {
	var b strings.Builder
	for _, e := range m.Engines {
		b.WriteString("[" + e.Engine + " q=" + f(e.Waiting) + " run=" + f(e.Running) + " kv=" + f(e.KVUsage) +
			" pq=" + f(e.PrefixQueries) + " ph=" + f(e.PrefixHits) + " prompt=" + f(e.PromptTokens) + " fin=" + f(e.RequestsFinished))
		if e.TTFT != nil {
			b.WriteString(" ttft.count=" + f(&e.TTFT.Count))
		}
		b.WriteString("]")
	}
	return m.Profile + " " + b.String()
}

func f(p *float64) string {
	if p == nil {
		return "nil"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}
