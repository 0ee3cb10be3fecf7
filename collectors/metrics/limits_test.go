package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// enginesPage is a vLLM page whose series spread over n engines, lines
// series in all (waiting, running, KV usage, prompt tokens in turn), plus
// as many lines of a family kvtop does not read.
func enginesPage(n, lines, unread int) []byte {
	fams := [...]string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total"}
	var b bytes.Buffer
	for i := range lines {
		e, f := i%n, i/n
		fmt.Fprintf(&b, "%s{engine=\"%d\",model_name=\"m\",x=\"%d\"} %d\n", fams[f%len(fams)], e, f/len(fams), e%2)
	}
	for i := range unread {
		fmt.Fprintf(&b, "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"%d\"} 1\n", i)
	}
	return b.Bytes()
}

// hostilePage is 350 000 series, each of its own engine: under 16 MiB,
// and quadratic for a fold with a linear engine lookup.
func hostilePage(t testing.TB) []byte {
	var b bytes.Buffer
	for i := range 350_000 {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{engine=\"%d\"} 1\n", i)
	}
	if b.Len() >= DefaultBodyLimit {
		t.Fatalf("hostile page is %d bytes, over the body limit", b.Len())
	}
	return b.Bytes()
}

func limitErr(t *testing.T, err error, kind, msg string) {
	t.Helper()
	var le *limitError
	if !errors.As(err, &le) || le.kind != kind || !strings.Contains(le.msg, msg) {
		t.Fatalf("error %v, want %s saying %q", err, kind, msg)
	}
}

// TestHostilePageDoesNotStallOthers: a target serving 350 000 series with
// distinct engine labels next to a normal one. The hostile target fails
// as too_large, with the count and the limit, every time it is scraped;
// the normal target keeps its scrapes coming all along.
func TestHostilePageDoesNotStallOthers(t *testing.T) {
	body := hostilePage(t)
	var mu sync.Mutex
	var served int      // hostile bodies written in full
	var first time.Time // when the hostile target was first asked
	hostile := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if first.IsZero() {
			first = time.Now()
		}
		mu.Unlock()
		w.Header().Set("Content-Type", textType)
		if _, err := w.Write(body); err == nil {
			mu.Lock()
			served++
			mu.Unlock()
		}
	})
	normal := serve(t, page(load(t, peers+"metrics-6.txt"), textType))
	const interval = 50 * time.Millisecond
	out := run(t, Options{Interval: interval, Timeout: 20 * time.Second, Targets: []Target{
		{Name: "hostile", URL: hostile.URL + "/metrics?token=q-s3cr3t"},
		{Name: "normal", URL: normal.URL + "/metrics"},
	}})

	var normalAt []time.Time
	var last *collectors.MetricsScrape
	for range 3 {
		last = waitFor(t, out, func(s *collectors.MetricsScrape) bool {
			if s.Target == "normal" {
				if s.Err != nil || len(s.Engines) != 1 || *s.Engines[0].Running != 5 {
					t.Errorf("normal target: err %v engines %s", s.Err, show(s.Engines))
				}
				normalAt = append(normalAt, s.At)
			}
			return s.Target == "hostile"
		})
		e := last.Err
		want := "GET " + hostile.URL + "/metrics: 350 000 series kvtop reads, over the limit of 50 000 (limits.series)"
		if e == nil || e.Kind != "too_large" || e.Message != want {
			t.Fatalf("hostile target: %v, want too_large %q", e, want)
		}
		if last.Engines != nil {
			t.Fatalf("a rejected page carries %d engines", len(last.Engines))
		}
	}
	mu.Lock()
	window, n := last.At.Sub(first), served
	mu.Unlock()
	if n < 3 {
		t.Errorf("the hostile body was written in full %d times, want 3", n)
	}
	// One scrape per interval is expected; a loaded machine may lose
	// some, not most.
	expected := int(window / interval)
	inWindow := 0
	for _, at := range normalAt {
		if !at.Before(first) {
			inWindow++
		}
	}
	if inWindow < 3 || inWindow < expected/4 {
		t.Errorf("normal target scraped %d times in the %v the hostile one was served (%d intervals)", inWindow, window, expected)
	}
}

// TestCaps: pages just under the bounds fold in full; one series or one
// engine more fails with the number seen and the limit. Only the families
// kvtop reads count.
func TestCaps(t *testing.T) {
	t.Run("256 engines fold", func(t *testing.T) {
		p := parseBody(t, enginesPage(DefaultMaxEngines, 4*DefaultMaxEngines, 0), textType, collectors.RoleWorker, "")
		if len(p.Engines) != DefaultMaxEngines {
			t.Fatalf("%d engines, want %d", len(p.Engines), DefaultMaxEngines)
		}
		for i, e := range p.Engines {
			if e.Engine != strconv.Itoa(i) {
				t.Fatalf("engine %d is %q: not in order", i, e.Engine)
			}
			val(t, "engine "+e.Engine+" running", e.Running, float64(i%2))
			val(t, "engine "+e.Engine+" prompt tokens", e.PromptTokens, float64(i%2))
		}
	})
	t.Run("257 engines", func(t *testing.T) {
		_, err := Parse(enginesPage(DefaultMaxEngines+1, DefaultMaxEngines+1, 0), textType, collectors.RoleWorker, "")
		limitErr(t, err, "too_large", "257 engines (engine label), over the limit of 256 (limits.engines)")
	})
	t.Run("4 000 engines, counted", func(t *testing.T) {
		_, err := Parse(enginesPage(4000, 4000, 0), textType, collectors.RoleWorker, "")
		limitErr(t, err, "too_large", "4 000 engines (engine label), over the limit of 256 (limits.engines)")
	})
	t.Run("40 000 engines, counted as far as needed", func(t *testing.T) {
		_, err := Parse(enginesPage(40_000, 40_000, 0), textType, collectors.RoleWorker, "")
		limitErr(t, err, "too_large", "at least 4 096 engines (engine label), over the limit of 256 (limits.engines)")
	})
	t.Run("sglang dp_rank", func(t *testing.T) {
		var b strings.Builder
		for i := range 300 {
			fmt.Fprintf(&b, "sglang:num_queue_reqs{dp_rank=\"%d\"} 1\n", i)
		}
		_, err := Parse([]byte(b.String()), textType, collectors.RoleWorker, "")
		limitErr(t, err, "too_large", "300 engines (dp_rank label), over the limit of 256 (limits.engines)")
	})
	t.Run("a router's workers are not engines", func(t *testing.T) {
		var b strings.Builder
		for i := range 300 {
			fmt.Fprintf(&b, "vllm_router_processed_requests_total{worker=\"http://w%d:8000\"} 1\n", i)
		}
		p := parseBody(t, []byte(b.String()), textType, collectors.RoleRouter, "")
		if len(p.Router.Processed) != 300 {
			t.Errorf("%d workers, want 300", len(p.Router.Processed))
		}
	})

	// Through the collector, with the bounds configured.
	at := enginesPage(4, 1000, 5000) // 1000 series read, 5000 lines not read
	over := enginesPage(4, 1001, 0)
	five := enginesPage(5, 10, 0)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		body := map[string][]byte{"/at": at, "/over": over, "/five": five}[r.URL.Path]
		page(body, textType)(w, r)
	})
	out := run(t, Options{Interval: time.Hour, MaxSeries: 1000, MaxEngines: 4, Targets: []Target{
		{Name: "at", URL: srv.URL + "/at"},
		{Name: "over", URL: srv.URL + "/over"},
		{Name: "five", URL: srv.URL + "/five"},
	}})
	if s := waitFor(t, out, scrapeOf("at")); s.Err != nil || len(s.Engines) != 4 {
		t.Errorf("1000 series in 4 engines: err %v, %d engines", s.Err, len(s.Engines))
	}
	for name, want := range map[string]string{
		"over": "GET " + srv.URL + "/over: 1 001 series kvtop reads, over the limit of 1 000 (limits.series)",
		"five": "GET " + srv.URL + "/five: 5 engines (engine label), over the limit of 4 (limits.engines)",
	} {
		s := waitFor(t, out, scrapeOf(name))
		if s.Err == nil || s.Err.Kind != "too_large" || s.Err.Message != want {
			t.Errorf("%s: %v, want too_large %q", name, s.Err, want)
		}
	}
}

// bigPage is a page under the bounds that takes a while to read: 40 000
// series over 4 engines.
func bigPage() []byte { return enginesPage(4, 40_000, 0) }

var lateMessage = regexp.MustCompile(`^parse not done within \S+ after ([0-9 ]+) series$`)

// TestDeadlineStopsTheParse: the parse of a big page under the bounds
// stops at the deadline and says how far it got. The deadline is a
// quarter of what the same parse took at its fastest without one, so it
// falls inside the parse.
func TestDeadlineStopsTheParse(t *testing.T) {
	body := bigPage()
	p := NewParser()
	// The fastest of a few runs (the first also grows the parser's
	// buffers): on a shared machine one run can be preempted, and a
	// quarter of a slow run could outlast a fast parse.
	took := time.Duration(1<<63 - 1)
	for range 4 {
		start := time.Now()
		if _, err := p.Parse(body, textType, collectors.RoleWorker, ""); err != nil {
			t.Fatal(err)
		}
		took = min(took, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), took/4)
	defer cancel()
	b := defaultBudget()
	b.ctx, b.timeout = ctx, took/4
	_, err := p.parse(body, textType, collectors.RoleWorker, "", &b)
	var le *limitError
	if !errors.As(err, &le) || le.kind != "timeout" {
		t.Fatalf("error %v, want a timeout", err)
	}
	m := lateMessage.FindStringSubmatch(le.msg)
	if m == nil {
		t.Fatalf("message %q", le.msg)
	}
	if n, _ := strconv.Atoi(strings.ReplaceAll(m[1], " ", "")); n >= 40_000 {
		t.Errorf("stopped after %d series: the whole page", n)
	}

	// A deadline already past stops the prefilter at its first look.
	done, stop := context.WithCancel(context.Background())
	stop()
	b.ctx, b.timeout = done, 2*time.Second
	_, err = p.parse(body, textType, collectors.RoleWorker, "", &b)
	limitErr(t, err, "timeout", "parse not done within 2s after 4 095 series")

	// The parser is whole again for the next page.
	if pg, err := p.Parse(body, textType, collectors.RoleWorker, ""); err != nil || len(pg.Engines) != 4 {
		t.Errorf("after a timeout: %v", err)
	}
}

// TestScrapeDeadlineCoversTheParse: through the collector, a scrape whose
// Timeout is a quarter of what its fetch and parse take fails as a
// timeout of the parse, not of the fetch.
func TestScrapeDeadlineCoversTheParse(t *testing.T) {
	body := bigPage()
	srv := serve(t, page(body, textType))
	tg, err := newTarget(Target{Name: "big", URL: srv.URL + "/metrics"}, Options{Timeout: time.Minute, BodyLimit: DefaultBodyLimit, MaxSeries: DefaultMaxSeries, MaxEngines: DefaultMaxEngines})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.client.CloseIdleConnections()
	var took time.Duration
	for range 2 {
		start := time.Now()
		s, _ := tg.scrape(context.Background())
		if s.Err != nil || len(s.Engines) != 4 {
			t.Fatalf("scrape: %v", s.Err)
		}
		took = time.Since(start) // fetch, parse and fold
	}
	tg.timeout, tg.budget.timeout = took/4, took/4
	s, _ := tg.scrape(context.Background())
	prefix := "GET " + srv.URL + "/metrics: parse not done within " + (took / 4).String()
	if s.Err == nil || s.Err.Kind != "timeout" || !strings.HasPrefix(s.Err.Message, prefix) {
		t.Fatalf("err %v, want a timeout starting %q", s.Err, prefix)
	}
	if s.Engines != nil {
		t.Errorf("a timed out scrape carries engines")
	}
}
