package router

import (
	"time"

	"github.com/kvtop/kvtop/sim/internal/promtext"
)

// Metrics are the router's counters since its (re)start.
type Metrics struct {
	Start     time.Time
	Processed []float64 // requests routed, per worker
	Decisions []float64 // policy decisions, per worker
	Running   []float64 // router-local in-flight, per worker
	CBState   []float64 // circuit breaker: 0 closed, 1 open
	Policy    Policy    // in force (a scenario may switch it)
}

func newMetrics(n int, start time.Time) Metrics {
	return Metrics{Start: start, Processed: make([]float64, n), Decisions: make([]float64, n),
		Running: make([]float64, n), CBState: make([]float64, n)}
}

// Snapshot copies the router's metrics.
func (r *Router) Snapshot() Metrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m
	m.Processed = append([]float64(nil), m.Processed...)
	m.Decisions = append([]float64(nil), m.Decisions...)
	m.Running = append([]float64(nil), m.Running...)
	m.CBState = append([]float64(nil), m.CBState...)
	return m
}

// WriteMetrics renders the router's /metrics page with vllm-router's names;
// the worker label is each worker's base URL. Safe from any goroutine.
func (r *Router) WriteMetrics(w *promtext.Writer) {
	m := r.Snapshot()
	policy := "cache_aware"
	if m.Policy == RoundRobin {
		policy = "round_robin"
	}
	perWorker := func(name, help, typ string, vals []float64, extra ...string) {
		w.Family(name, help, typ)
		for i, u := range r.cfg.URLs {
			w.Sample(name, append(append([]string(nil), extra...), "worker", u), vals[i])
		}
	}
	perWorker("vllm_router_processed_requests_total", "Total requests processed by each worker", "counter", m.Processed)
	perWorker("vllm_router_policy_decisions_total", "Routing policy decisions", "counter", m.Decisions, "policy", policy)
	perWorker("vllm_router_running_requests", "Number of running requests per worker", "gauge", m.Running)
	perWorker("vllm_router_cb_state", "Circuit breaker state per worker (0=closed, 1=open, 2=half-open)", "gauge", m.CBState)
	w.Family("vllm_router_retries_total", "Total request retries", "counter")
	w.Sample("vllm_router_retries_total", nil, 0)
	w.Family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge")
	w.Sample("process_start_time_seconds", nil, promtext.Unix(m.Start))
}
