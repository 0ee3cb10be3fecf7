package snapshot

// Latency is a latency distribution over the window, in milliseconds:
// p50, p95 and p99 as PromQL's histogram_quantile(q, rate(x_bucket[window]))
// computes them from the engines' bucket increases (linear inside the
// bucket). Every value is nil when unknown, and Reason says why ("no
// requests in the window", "no TTFT histogram on its page", "one scrape so
// far").
type Latency struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
	// Capped names the quantiles whose rank fell in the +Inf bucket: the
	// value is the highest finite bucket bound, a floor ("≥"). [] when none.
	Capped []string `json:"capped"`
	// Observations is how many the window's buckets counted: requests
	// (TTFT, queue, e2e) or output tokens after each first one (ITL).
	Observations *float64 `json:"observations"`
	CoveredS     float64  `json:"covered_s"`
	// Merged says the parts had different bucket layouts and were merged
	// on their common bounds (coarser buckets, wider interpolation):
	// "2 bucket layouts merged on 9 common bounds". "" otherwise.
	// Both keys are always in the JSON (README: stable keys).
	Merged string `json:"merged"`
	// Reason says why the values are null ("" when they are known).
	Reason string `json:"reason"`
}

// Tokens is a pair of token rates, per second over the window; nil when
// unknown (no counter, or one scrape so far), never 0.
type Tokens struct {
	Prompt     *float64 `json:"prompt"`
	Generation *float64 `json:"generation"`
}

// RequestQuantiles are exact quantiles of one value of a class of requests.
type RequestQuantiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
	// N is the requests with the value in the window.
	N int `json:"n"`
	// Reason says why the quantiles are null ("" when known; always in
	// the JSON).
	Reason string `json:"reason"`
}

// RequestLatency is a class of requests' TTFT and queue time, ms.
type RequestLatency struct {
	TTFTMS  RequestQuantiles `json:"ttft_ms"`
	QueueMS RequestQuantiles `json:"queue_ms"`
}
