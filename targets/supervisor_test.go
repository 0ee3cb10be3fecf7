package targets_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/targets"
)

// pushed is a Source the test drives: each set it is given is sent.
type pushed chan targets.Set

func (pushed) Name() string { return "test" }
func (p pushed) Watch(ctx context.Context, sets chan<- targets.Set, _ chan<- collectors.Observation) error {
	for {
		select {
		case s := <-p:
			select {
			case sets <- s:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

type recorder struct {
	mu  sync.Mutex
	obs []collectors.Observation
}

func (r *recorder) all() []collectors.Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]collectors.Observation(nil), r.obs...)
}

func run(t *testing.T, src targets.Source) *recorder {
	t.Helper()
	sup, err := targets.New(targets.Options{}, src)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan collectors.Observation, 1024)
	r := &recorder{}
	done := make(chan struct{}, 2)
	go func() { _ = sup.Run(ctx, out); done <- struct{}{} }()
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			select {
			case o := <-out:
				r.mu.Lock()
				r.obs = append(r.obs, o)
				r.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// simWorker is simulated worker i as a target.
func simWorker(s *sim.Sim, i int, name string) targets.Worker {
	we := s.Endpoints().Workers[i]
	return targets.Worker{Name: name, Metrics: we.Metrics, Events: we.Events[0], Replay: we.Replay[0], DPRanks: 1}
}

// The order the pool relies on: a worker's TargetChange joined comes
// before anything its collectors send, and nothing of it comes after its
// TargetChange left; a worker whose endpoints move is restarted, the
// others run on.
func TestSupervisorOrder(t *testing.T) {
	s, err := sim.Start(nil, sim.Options{Workers: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := make(pushed, 1)
	r := run(t, src)
	src <- targets.Set{Workers: []targets.Worker{simWorker(s, 0, "a"), simWorker(s, 1, "b")}}
	delivered := func(name string) func() bool {
		return func() bool {
			scrapes, batches := 0, 0
			for _, o := range r.all() {
				switch v := o.(type) {
				case *collectors.MetricsScrape:
					if v.Target == name && v.Err == nil {
						scrapes++
					}
				case *collectors.EventBatch:
					if v.Worker == name {
						batches++
					}
				}
			}
			return scrapes > 0 && batches > 0
		}
	}
	waitFor(t, "a and b scraped and streaming", func() bool { return delivered("a")() && delivered("b")() })

	src <- targets.Set{Workers: []targets.Worker{simWorker(s, 1, "b")}, Left: map[string]string{"a": "pod deleted"}}
	waitFor(t, "a left", func() bool {
		for _, o := range r.all() {
			if c, ok := o.(*collectors.TargetChange); ok && c.Name == "a" && c.Kind == collectors.TargetLeft {
				return true
			}
		}
		return false
	})
	time.Sleep(1500 * time.Millisecond) // a scrape interval and status ticks
	of := func(o collectors.Observation) string {
		switch v := o.(type) {
		case *collectors.MetricsScrape:
			return v.Target
		case *collectors.EventBatch:
			return v.Worker
		case *collectors.StreamStatus:
			return v.Worker
		case *collectors.TargetChange:
			return v.Name
		}
		return ""
	}
	joinedAt, leftAt, firstOwn, lastOwn := -1, -1, -1, -1
	for i, o := range r.all() {
		if of(o) != "a" {
			continue
		}
		if c, ok := o.(*collectors.TargetChange); ok {
			switch c.Kind {
			case collectors.TargetJoined:
				joinedAt = i
			case collectors.TargetLeft:
				leftAt = i
				if c.Reason != "pod deleted" {
					t.Errorf("left reason %q", c.Reason)
				}
			}
			continue
		}
		if firstOwn < 0 {
			firstOwn = i
		}
		lastOwn = i
	}
	if joinedAt < 0 || firstOwn < joinedAt || lastOwn > leftAt {
		t.Fatalf("order: joined %d, first own %d, last own %d, left %d", joinedAt, firstOwn, lastOwn, leftAt)
	}
	n := len(r.all())
	waitFor(t, "b still delivers", func() bool {
		for _, o := range r.all()[n:] {
			if b, ok := o.(*collectors.EventBatch); ok && b.Worker == "b" {
				return true
			}
		}
		return false
	})
}

// The config's workers are a Static set: the same collectors as before
// the targets layer, a bad endpoint an error at start.
func TestStaticSetChecked(t *testing.T) {
	_, err := targets.New(targets.Options{}, targets.Static{Set: targets.Set{Workers: []targets.Worker{{Name: "w0", Events: "tcp://0.0.0.0:5557"}}}})
	if err == nil || err.Error() != `kvevents: w0 events rank 0: "tcp://0.0.0.0:5557" is a bind address: kvtop connects to the worker, give its host` {
		t.Fatalf("err = %v", err)
	}
	_, err = targets.New(targets.Options{}, targets.Static{Set: targets.Set{Workers: []targets.Worker{{Name: "w0", Metrics: "ftp://x/metrics"}}}})
	if err == nil || err.Error() != `metrics target "w0": url "ftp://x/metrics" is not an http(s) URL` {
		t.Fatalf("err = %v", err)
	}
}

// With metrics_source (Prometheus) the discovered workers' metrics come
// from there: a pod's own /metrics is not scraped as well, and a worker
// without a URL is not "no metrics configured" while Prometheus answers.
func TestMetricsElsewhereNotScraped(t *testing.T) {
	var hits sync.Map
	srv := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			n, _ := hits.LoadOrStore(name, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			_, _ = w.Write([]byte("vllm:num_requests_waiting{engine=\"0\"} 0\n"))
		}))
		t.Cleanup(s.Close)
		return s.URL + "/metrics"
	}
	count := func(name string) int64 {
		n, ok := hits.Load(name)
		if !ok {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}
	set := targets.Set{Workers: []targets.Worker{{Name: "via-prom", Metrics: srv("via-prom")}}}
	direct := targets.Set{Workers: []targets.Worker{{Name: "direct", Metrics: srv("direct")}}}

	viaProm := run(t, targets.MetricsElsewhere(targets.Static{Set: set}))
	run(t, targets.Static{Set: direct})
	waitFor(t, "the direct worker's first two scrapes", func() bool { return count("direct") >= 2 })
	if n := count("via-prom"); n != 0 {
		t.Fatalf("a worker read from Prometheus was scraped directly %d times", n)
	}
	var joined *collectors.TargetChange
	for _, o := range viaProm.all() {
		if c, ok := o.(*collectors.TargetChange); ok && c.Name == "via-prom" {
			joined = c
		}
	}
	if joined == nil || joined.Kind != collectors.TargetJoined || joined.NoMetrics {
		t.Fatalf("want via-prom joined with metrics (from Prometheus), got %+v", joined)
	}
}
