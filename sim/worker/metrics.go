package worker

import (
	"net/http"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/kvcache"
)

func (w *Worker) serveMetrics(rw http.ResponseWriter, r *http.Request) {
	if d := time.Duration(w.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if w.down.Load() {
		http.Error(rw, "engine restarting", http.StatusServiceUnavailable)
		return
	}
	var p promtext.Writer
	w.WriteMetrics(&p)
	rw.Header().Set("Content-Type", promtext.ContentType)
	rw.Write(p.Bytes())
}

// WriteMetrics renders the worker's page: vLLM V1 names, or SGLang's.
func (w *Worker) WriteMetrics(p *promtext.Writer) {
	stats := make([]engine.Stats, len(w.Engines))
	for i, e := range w.Engines {
		stats[i] = e.Snapshot()
	}
	if w.cfg.Engine == "sglang" {
		w.writeSGLang(p, stats)
	} else {
		w.writeVLLM(p, stats)
	}
	p.Family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge")
	p.Sample("process_start_time_seconds", nil, w.StartTime())
}

type family struct {
	name, help, typ string
	value           func(s *engine.Stats) float64
}

// writeVLLM writes one series per engine (label engine = DP rank) with
// model_name, counters as _total plus a _created gauge, as vLLM V1 does.
func (w *Worker) writeVLLM(p *promtext.Writer, stats []engine.Stats) {
	created := w.StartTime() + 0.25 // registered just after start
	labels := func(r int, extra ...string) []string {
		return append([]string{"engine", strconv.Itoa(r), "model_name", w.cfg.Model}, extra...)
	}
	for _, f := range []family{
		{"vllm:num_requests_running", "Number of requests in model execution batches.", "gauge", func(s *engine.Stats) float64 { return float64(s.Running) }},
		{"vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge", func(s *engine.Stats) float64 { return float64(s.Waiting) }},
		{"vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge", func(s *engine.Stats) float64 { return s.KVUsage() }},
	} {
		p.Family(f.name, f.help, f.typ)
		for r := range stats {
			p.Sample(f.name, labels(r), f.value(&stats[r]))
		}
	}
	for _, f := range []family{
		{"vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", "counter", func(s *engine.Stats) float64 { return s.PrefixQueries }},
		{"vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "counter", func(s *engine.Stats) float64 { return s.PrefixHits }},
		{"vllm:num_preemptions", "Cumulative number of preemption from the engine.", "counter", func(s *engine.Stats) float64 { return s.Preemptions }},
		{"vllm:prompt_tokens", "Number of prefill tokens processed.", "counter", func(s *engine.Stats) float64 { return s.PromptTokens }},
		{"vllm:generation_tokens", "Number of generation tokens processed.", "counter", func(s *engine.Stats) float64 { return s.GenerationTokens }},
	} {
		p.Family(f.name+"_total", f.help, "counter")
		for r := range stats {
			p.Sample(f.name+"_total", labels(r), f.value(&stats[r]))
		}
		p.Family(f.name+"_created", f.help, "gauge")
		for r := range stats {
			p.Sample(f.name+"_created", labels(r), created)
		}
	}
	const success = "vllm:request_success"
	p.Family(success+"_total", "Count of successfully processed requests.", "counter")
	for r := range stats {
		for i, reason := range engine.FinishReasons {
			p.Sample(success+"_total", labels(r, "finished_reason", reason), stats[r].Finished[i])
		}
	}
	p.Family(success+"_created", "Count of successfully processed requests.", "gauge")
	for r := range stats {
		for _, reason := range engine.FinishReasons {
			p.Sample(success+"_created", labels(r, "finished_reason", reason), created)
		}
	}
	for _, h := range []struct {
		name, help string
		get        func(s *engine.Stats) *engine.Histogram
	}{
		{"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", func(s *engine.Stats) *engine.Histogram { return &s.TTFT }},
		{"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", func(s *engine.Stats) *engine.Histogram { return &s.E2E }},
		{"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", func(s *engine.Stats) *engine.Histogram { return &s.Queue }},
		{"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", func(s *engine.Stats) *engine.Histogram { return &s.ITL }},
	} {
		p.Family(h.name, h.help, "histogram")
		for r := range stats {
			writeHistogram(p, h.name, labels(r), h.get(&stats[r]))
		}
		p.Family(h.name+"_created", h.help, "gauge")
		for r := range stats {
			p.Sample(h.name+"_created", labels(r), created)
		}
	}
	w.writeTiers(p, stats, labels, created)
	p.Family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
	for r := range stats {
		p.Sample("vllm:cache_config_info", []string{
			"block_size", strconv.Itoa(kvcache.BlockSize), "cache_dtype", "auto", "enable_prefix_caching", "True",
			"engine", strconv.Itoa(r), "gpu_memory_utilization", "0.9", "num_cpu_blocks", "None",
			"num_gpu_blocks", strconv.Itoa(stats[r].NumBlocks), "prefix_caching_hash_algo", "sha256",
		}, 1)
	}
}

// writeSGLang writes SGLang's names: scheduler gauges per rank (label
// dp_rank when data-parallel), token counters and latency histograms per
// server with model_name only, no _created samples.
func (w *Worker) writeSGLang(p *promtext.Writer, stats []engine.Stats) {
	labels := func(r int) []string {
		l := []string{"engine_type", "unified", "model_name", w.cfg.Model, "moe_ep_rank", "0", "pp_rank", "0", "tp_rank", "0"}
		if len(stats) > 1 {
			l = append(l, "dp_rank", strconv.Itoa(r))
		}
		return l
	}
	perRank := []family{
		{"sglang:num_running_reqs", "The number of running requests.", "gauge", func(s *engine.Stats) float64 { return float64(s.Running) }},
		{"sglang:num_queue_reqs", "The number of requests in the waiting queue.", "gauge", func(s *engine.Stats) float64 { return float64(s.Waiting) }},
		{"sglang:token_usage", "The token usage.", "gauge", func(s *engine.Stats) float64 { return s.KVUsage() }},
		{"sglang:num_used_tokens", "The number of used tokens.", "gauge", func(s *engine.Stats) float64 { return float64(s.UsedBlocks * kvcache.BlockSize) }},
		{"sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", "gauge", func(s *engine.Stats) float64 { return float64(s.NumBlocks * kvcache.BlockSize) }},
		{"sglang:page_size", "The page size (tokens per KV page).", "gauge", func(*engine.Stats) float64 { return kvcache.BlockSize }},
		{"sglang:num_pages", "The number of KV cache pages.", "gauge", func(s *engine.Stats) float64 { return float64(s.NumBlocks) }},
		{"sglang:cache_hit_rate", "The prefix cache hit rate.", "gauge", func(s *engine.Stats) float64 {
			if s.PrefixQueries == 0 {
				return 0
			}
			return s.PrefixHits / s.PrefixQueries
		}},
		{"sglang:num_retracted_requests_total", "Total number of retracted requests.", "counter", func(s *engine.Stats) float64 { return s.Preemptions }},
	}
	for _, f := range perRank {
		p.Family(f.name, f.help, f.typ)
		for r := range stats {
			p.Sample(f.name, labels(r), f.value(&stats[r]))
		}
	}
	p.Family("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", "histogram")
	for r := range stats {
		writeHistogram(p, "sglang:queue_time_seconds", labels(r), &stats[r].Queue)
	}
	// The scheduler counts each admitted prefill's matched prefix
	// (prefill_cache) and computed tokens (prefill_compute) in one call,
	// and decode tokens per step (not the first token, which prefill
	// yields), so every mode has a sample from the first prefill on.
	const realtime = "sglang:realtime_tokens_total"
	p.Family(realtime, "Total number of tokens processed (updated on each log interval).", "counter")
	for r := range stats {
		s := &stats[r]
		for _, m := range []struct {
			mode string
			v    float64
		}{
			{"prefill_compute", s.PrefixQueries - s.PrefixHits},
			{"prefill_cache", s.PrefixHits},
			{"decode", s.GenerationTokens - s.TTFT.Count},
		} {
			p.Sample(realtime, append(labels(r), "mode", m.mode), m.v)
		}
	}
	// The tokenizer manager counts for the whole server.
	var total engine.Stats
	ttft, e2e, itl := sumHistograms(stats, func(s *engine.Stats) *engine.Histogram { return &s.TTFT }),
		sumHistograms(stats, func(s *engine.Stats) *engine.Histogram { return &s.E2E }),
		sumHistograms(stats, func(s *engine.Stats) *engine.Histogram { return &s.ITL })
	for i := range stats {
		total.PromptTokens += stats[i].PromptTokens
		total.GenerationTokens += stats[i].GenerationTokens
		total.PrefixHits += stats[i].PrefixHits
		for _, n := range stats[i].Finished {
			total.Finished[0] += n
		}
	}
	model := []string{"model_name", w.cfg.Model}
	for _, c := range []struct {
		name, help string
		v          float64
	}{
		{"sglang:prompt_tokens_total", "Number of prefill tokens processed.", total.PromptTokens},
		{"sglang:generation_tokens_total", "Number of generation tokens processed.", total.GenerationTokens},
		{"sglang:cached_tokens_total", "Number of cached prompt tokens.", total.PrefixHits},
		{"sglang:num_requests_total", "Number of requests processed.", total.Finished[0]},
	} {
		p.Family(c.name, c.help, "counter")
		p.Sample(c.name, model, c.v)
	}
	p.Family("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "histogram")
	writeHistogram(p, "sglang:time_to_first_token_seconds", model, &ttft)
	p.Family("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", "histogram")
	writeHistogram(p, "sglang:e2e_request_latency_seconds", model, &e2e)
	p.Family("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "histogram")
	writeHistogram(p, "sglang:inter_token_latency_seconds", model, &itl)
}

func sumHistograms(stats []engine.Stats, get func(*engine.Stats) *engine.Histogram) engine.Histogram {
	first := get(&stats[0])
	out := engine.Histogram{Bounds: first.Bounds, Counts: make([]float64, len(first.Counts))}
	for i := range stats {
		h := get(&stats[i])
		for j, c := range h.Counts {
			out.Counts[j] += c
		}
		out.Sum += h.Sum
		out.Count += h.Count
	}
	return out
}

func writeHistogram(p *promtext.Writer, name string, labels []string, h *engine.Histogram) {
	cum := h.Cumulative()
	for i, c := range cum {
		le := "+Inf"
		if i < len(h.Bounds) {
			le = promtext.Float(h.Bounds[i])
		}
		p.Sample(name+"_bucket", append(append([]string(nil), labels...), "le", le), c)
	}
	p.Sample(name+"_count", labels, h.Count)
	p.Sample(name+"_sum", labels, h.Sum)
}
