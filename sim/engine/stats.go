package engine

import "time"

// Bucket bounds of vLLM V1's histograms (seconds), as its /metrics shows them
// (vllm/v1/metrics/loggers.py).
var (
	TTFTBounds    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	ITLBounds     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	LatencyBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// SGLang's default bucket bounds (python/sglang/srt/metrics/collector.py):
// its queue time starts with a bucket at 0.
var (
	SGLangTTFTBounds  = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	SGLangITLBounds   = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000}
	SGLangE2EBounds   = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400}
	SGLangQueueBounds = []float64{0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000}
)

// Buckets are the bounds of an engine's four latency histograms.
type Buckets struct {
	TTFT, ITL, Queue, E2E []float64
}

// VLLMBuckets are vLLM V1's layouts (queue time and e2e share one).
func VLLMBuckets() Buckets {
	return Buckets{TTFT: TTFTBounds, ITL: ITLBounds, Queue: LatencyBounds, E2E: LatencyBounds}
}

// SGLangBuckets are SGLang's default layouts.
func SGLangBuckets() Buckets {
	return Buckets{TTFT: SGLangTTFTBounds, ITL: SGLangITLBounds, Queue: SGLangQueueBounds, E2E: SGLangE2EBounds}
}

// Histogram is a Prometheus-style histogram: Counts[i] counts observations
// <= Bounds[i] and above the previous bound; the last entry is +Inf.
type Histogram struct {
	Bounds []float64 // shared, read-only
	Counts []float64 // len(Bounds)+1, not cumulative
	Sum    float64
	Count  float64
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]float64, len(bounds)+1)}
}

// Observe adds one observation of d, in seconds.
func (h *Histogram) Observe(d time.Duration) {
	v := d.Seconds()
	i := 0
	for i < len(h.Bounds) && v > h.Bounds[i] {
		i++
	}
	h.Counts[i]++
	h.Sum += v
	h.Count++
}

// Cumulative returns the cumulative count per bound, +Inf last.
func (h *Histogram) Cumulative() []float64 {
	out := make([]float64, len(h.Counts))
	var acc float64
	for i, c := range h.Counts {
		acc += c
		out[i] = acc
	}
	return out
}

func (h Histogram) clone() Histogram {
	h.Counts = append([]float64(nil), h.Counts...)
	return h
}

// Finish reasons, in the order vLLM exposes vllm:request_success_total.
const (
	FinishStop = iota
	FinishLength
	FinishAbort
	FinishError
	numFinish
)

// FinishReasons names the finish reasons by index.
var FinishReasons = [numFinish]string{"stop", "length", "abort", "error"}

// Stats are one engine's metrics since its (re)start: what /metrics shows.
// Counters count tokens where vLLM does (prefix cache queries and hits are
// tokens, hits being the tokens the cache really served).
type Stats struct {
	Running, Waiting int
	UsedBlocks       int
	NumBlocks        int
	Resident         int // blocks holding a hash

	PromptTokens     float64
	GenerationTokens float64
	PrefixQueries    float64
	PrefixHits       float64
	Preemptions      float64
	Finished         [numFinish]float64
	Rejected         float64

	// Tiers (vLLM main): what the engine runs beside its GPU cache, and
	// its counters. Prompt tokens by source are counted with PromptTokens;
	// external queries and hits are tokens (the connector's lookups);
	// offload loads and stores are GPU blocks; Pinned is the CPU tier's
	// share held by the transfers of the step in flight.
	Tiers             Tiers
	PromptBySource    [numSources]float64
	ExtQueries        float64
	ExtHits           float64
	OffloadLoadBlocks float64
	// TransferBlocks and Transfers: a decode worker's KV received from
	// prefill workers (P/D), blocks and requests.
	TransferBlocks, Transfers float64
	OffloadStoreBlocks        float64
	Pinned                    float64
	LMCacheHit                float64
	LMCacheRequested          float64

	// TTFT, queue time and e2e observe one value per request; ITL one
	// per output token after the first (the gap since the one before).
	TTFT, Queue, E2E, ITL Histogram
}

func newStats(numBlocks int, b Buckets) Stats {
	if b.TTFT == nil {
		b = VLLMBuckets()
	}
	return Stats{
		NumBlocks: numBlocks,
		TTFT:      newHistogram(b.TTFT),
		Queue:     newHistogram(b.Queue),
		E2E:       newHistogram(b.E2E),
		ITL:       newHistogram(b.ITL),
	}
}

// KVUsage is the fraction of blocks referenced by requests (vLLM's
// kv_cache_usage_perc: idle cached blocks count as free).
func (s *Stats) KVUsage() float64 {
	if s.NumBlocks == 0 {
		return 0
	}
	return float64(s.UsedBlocks) / float64(s.NumBlocks)
}

func (s Stats) clone() Stats {
	s.TTFT, s.Queue, s.E2E, s.ITL = s.TTFT.clone(), s.Queue.clone(), s.E2E.clone(), s.ITL.clone()
	return s
}
