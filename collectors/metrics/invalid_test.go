package metrics

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/collectors"
)

// TestRealPagesHoldNoInvalidValues: every captured page (peers, real
// engines and routers, as text and as OpenMetrics) reads without a value
// rejected, apart from the two with a KV usage outside 0..1.
func TestRealPagesHoldNoInvalidValues(t *testing.T) {
	files, _ := filepath.Glob(real + "*.txt")
	more, _ := filepath.Glob(peers + "metrics-*.txt")
	gold, _ := filepath.Glob(golden + "*.txt")
	own, _ := filepath.Glob("testdata/*.txt")
	all := slices.Concat(files, more, gold, own)
	if len(all) < 30 {
		t.Fatalf("only %d pages found", len(all))
	}
	for _, file := range all {
		name := filepath.Base(file)
		body := load(t, file)
		forms := []struct {
			body []byte
			ct   string
		}{{body, textType}}
		if om := omIfWhole(t, body); om != nil { // fragments are not whole pages
			forms = append(forms, struct {
				body []byte
				ct   string
			}{om, omType})
		}
		for _, tc := range forms {
			role := collectors.RoleWorker
			if strings.HasPrefix(name, "router-") || filepath.Dir(file)+"/" == golden {
				role = collectors.RoleRouter
			}
			p := parseBody(t, tc.body, tc.ct, role, "")
			note, n := p.invalidSummary()
			want := 0
			if strings.HasPrefix(name, "vllm-0.4-") || strings.HasPrefix(name, "vllm-ascend") {
				want = 1
			}
			if n != want || len(p.Invalid) != want {
				t.Errorf("%s (%s): %d values rejected (%q), want %d", name, tc.ct, n, note, want)
			}
		}
	}
}

// omIfWhole is omOf for a page the text parser reads whole, else nil.
func omIfWhole(t *testing.T, text []byte) []byte {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := tp.TextToMetricFamilies(bytes.NewReader(text)); err != nil {
		return nil
	}
	return omOf(t, text)
}

// invalidPage parses a hand-written worker page and checks the rejected
// values: exactly want, in order.
func invalidPage(t *testing.T, body string, want ...collectors.InvalidValue) *Page {
	t.Helper()
	p := parseBody(t, []byte(body), textType, collectors.RoleWorker, "")
	if !slices.Equal(p.Invalid, want) {
		t.Errorf("invalid:\n got %+v\nwant %+v", p.Invalid, want)
	}
	return p
}

func engineOf(t *testing.T, p *Page, id string) collectors.EngineMetrics {
	t.Helper()
	for _, e := range p.Engines {
		if e.Engine == id {
			return e
		}
	}
	if id == "" && p.WorkerTotals != nil {
		return *p.WorkerTotals
	}
	t.Fatalf("no engine %q in %s", id, show(p.Engines))
	return collectors.EngineMetrics{}
}

// TestDuplicateSeries: two samples of one series for one engine are never
// summed: the field is unknown for that engine, the note names the series
// and both lines; the other engines and the other fields still read.
// Series that differ in any label (finish reason, cache tier, model) do
// add up, as before.
func TestDuplicateSeries(t *testing.T) {
	t.Run("vllm gauge and counter", func(t *testing.T) {
		p := invalidPage(t, `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 4
vllm:num_requests_waiting{model_name="m",engine="0"} 3
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 2
vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} 2
vllm:num_requests_running{engine="0",model_name="a"} 1
vllm:num_requests_running{engine="0",model_name="b"} 2
`,
			collectors.InvalidValue{Engine: "0", Field: "queue",
				Note: `vllm:num_requests_waiting{model_name="m",engine="0"} appears twice (lines 2 and 4): never summed`},
			collectors.InvalidValue{Engine: "1", Field: "requests_finished",
				Note: `vllm:request_success_total{engine="1",finished_reason="stop",model_name="m"} appears twice (lines 8 and 9): never summed`},
		)
		e0, e1 := engineOf(t, p, "0"), engineOf(t, p, "1")
		absent(t, "engine 0 queue (repeated, labels in another order)", e0.Waiting)
		val(t, "engine 1 queue", e1.Waiting, 4)
		val(t, "engine 0 finished, over finish reasons", e0.RequestsFinished, 5)
		absent(t, "engine 1 finished (repeated)", e1.RequestsFinished)
		val(t, "engine 0 running, over models", e0.Running, 3)
	})
	t.Run("vllm histogram bucket", func(t *testing.T) {
		p := invalidPage(t, `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 5
vllm:time_to_first_token_seconds_count{engine="0"} 5
vllm:time_to_first_token_seconds_sum{engine="0"} 1.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 5
vllm:time_to_first_token_seconds_count{engine="1"} 5
vllm:time_to_first_token_seconds_sum{engine="1"} 1.5
`, collectors.InvalidValue{Engine: "0", Field: "ttft",
			Note: `vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} appears twice (lines 2 and 3): never summed`})
		if engineOf(t, p, "0").TTFT != nil {
			t.Errorf("engine 0 ttft kept")
		}
		hist(t, "engine 1 ttft", engineOf(t, p, "1").TTFT, 5, 1.5)
	})
	t.Run("vllm cache config", func(t *testing.T) {
		p := invalidPage(t, `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1
vllm:num_requests_waiting{engine="0"} 1
`,
			collectors.InvalidValue{Engine: "0", Field: "block_size", Note: `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} appears twice (lines 1 and 2): never summed`},
			collectors.InvalidValue{Engine: "0", Field: "num_gpu_blocks", Note: `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} appears twice (lines 1 and 2): never summed`},
		)
		e := engineOf(t, p, "0")
		absent(t, "blocks", e.NumGPUBlocks)
		absent(t, "block size", e.BlockSize)
		val(t, "waiting", e.Waiting, 1)
	})
	t.Run("sglang dp ranks and cache tiers", func(t *testing.T) {
		p := invalidPage(t, `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="m"} 2
sglang:num_running_reqs{dp_rank="1",model_name="m"} 2
sglang:num_running_reqs{dp_rank="1",model_name="m"} 2
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",dp_rank="0",model_name="m"} 300
sglang:cached_tokens_total{cache_source="host",dp_rank="0",model_name="m"} 100
sglang:cached_tokens_total{cache_source="device",dp_rank="1",model_name="m"} 300
sglang:cached_tokens_total{dp_rank="1",cache_source="device",model_name="m"} 300
sglang:prompt_tokens_total{dp_rank="0",model_name="m"} 1000
sglang:prompt_tokens_total{dp_rank="1",model_name="m"} 1000
`,
			collectors.InvalidValue{Engine: "1", Field: "running", Note: `sglang:num_running_reqs{dp_rank="1",model_name="m"} appears twice (lines 3 and 4): never summed`},
			collectors.InvalidValue{Engine: "1", Field: "prefix_queries", Note: `sglang:cached_tokens_total{dp_rank="1",cache_source="device",model_name="m"} appears twice (lines 8 and 9): never summed`},
			collectors.InvalidValue{Engine: "1", Field: "prefix_hits", Note: `sglang:cached_tokens_total{dp_rank="1",cache_source="device",model_name="m"} appears twice (lines 8 and 9): never summed`},
		)
		e0, e1 := engineOf(t, p, "0"), engineOf(t, p, "1")
		val(t, "rank 0 hits, over cache tiers", e0.PrefixHits, 400)
		val(t, "rank 0 queries", e0.PrefixQueries, 1000)
		val(t, "rank 0 running", e0.Running, 2)
		absent(t, "rank 1 running", e1.Running)
		absent(t, "rank 1 hits", e1.PrefixHits)
		absent(t, "rank 1 queries (no hit rate without the hits)", e1.PrefixQueries)
		val(t, "rank 1 prompt tokens", e1.PromptTokens, 1000)
	})
	t.Run("a deprecated family the current one shadows", func(t *testing.T) {
		p := invalidPage(t, `vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:gpu_cache_usage_perc{engine="0"} 0.5
vllm:gpu_cache_usage_perc{engine="0"} 0.5
`)
		val(t, "kv usage (current name)", engineOf(t, p, "0").KVUsage, 0.5)
	})
	t.Run("a page of repeats stays linear and bounded", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("vllm:num_requests_waiting{engine=\"0\"} 1\n")
		for range 30_000 {
			b.WriteString("vllm:num_requests_waiting{engine=\"0\"} 1\n")
		}
		p := invalidPage(t, b.String(), collectors.InvalidValue{Engine: "0", Field: "queue",
			Note: `vllm:num_requests_waiting{engine="0"} appears twice (lines 1 and 2): never summed`})
		absent(t, "waiting", engineOf(t, p, "0").Waiting)
	})
}

// TestImpossibleValues: negative queues, running counts, geometry and
// counters, fractions outside 0..1 and histograms whose buckets cannot be
// cumulative are rejected the same way: unknown, with a note naming the
// series and the value.
func TestImpossibleValues(t *testing.T) {
	t.Run("vllm", func(t *testing.T) {
		p := invalidPage(t, `vllm:num_requests_waiting{engine="0"} -3
vllm:num_requests_running{engine="0"} -1
vllm:kv_cache_usage_perc{engine="0"} 1.5
vllm:prompt_tokens_total{engine="0"} -10
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="-5"} 1
vllm:num_requests_waiting{engine="1"} 2
vllm:num_requests_running{engine="1"} 0
vllm:kv_cache_usage_perc{engine="1"} 1
vllm:kv_cache_usage_perc{engine="2"} 0
vllm:generation_tokens_total{engine="1"} 0
`,
			collectors.InvalidValue{Engine: "0", Field: "queue", Note: `vllm:num_requests_waiting{engine="0"} = -3: a queue cannot be negative`},
			collectors.InvalidValue{Engine: "0", Field: "running", Note: `vllm:num_requests_running{engine="0"} = -1: a running count cannot be negative`},
			collectors.InvalidValue{Engine: "0", Field: "kv_usage", Note: `vllm:kv_cache_usage_perc{engine="0"} = 1.5: a fraction must be within 0..1`},
			collectors.InvalidValue{Engine: "0", Field: "prompt_tokens", Note: `vllm:prompt_tokens_total{engine="0"} = -10: a counter cannot be negative`},
			collectors.InvalidValue{Engine: "0", Field: "num_gpu_blocks", Note: `vllm:cache_config_info{engine="0"} num_gpu_blocks="-5": a block count cannot be negative`},
		)
		e0, e1 := engineOf(t, p, "0"), engineOf(t, p, "1")
		for what, v := range map[string]*float64{"waiting": e0.Waiting, "running": e0.Running, "kv": e0.KVUsage, "prompt": e0.PromptTokens, "blocks": e0.NumGPUBlocks} {
			absent(t, "engine 0 "+what, v)
		}
		val(t, "engine 0 block size (the valid half of the info)", e0.BlockSize, 16)
		val(t, "engine 1 waiting", e1.Waiting, 2)
		val(t, "engine 1 running 0", e1.Running, 0)
		val(t, "engine 1 kv usage 1 (full)", e1.KVUsage, 1)
		val(t, "engine 2 kv usage 0", engineOf(t, p, "2").KVUsage, 0)
		val(t, "engine 1 generation 0", e1.GenerationTokens, 0)
	})
	t.Run("one bad series of several", func(t *testing.T) {
		// model b's negative queue makes engine 0's total unknown, not 5-1.
		p := invalidPage(t, `vllm:num_requests_waiting{engine="0",model_name="a"} 5
vllm:num_requests_waiting{engine="0",model_name="b"} -1
`, collectors.InvalidValue{Engine: "0", Field: "queue", Note: `vllm:num_requests_waiting{engine="0",model_name="b"} = -1: a queue cannot be negative`})
		absent(t, "waiting", engineOf(t, p, "0").Waiting)
	})
	t.Run("sglang", func(t *testing.T) {
		p := invalidPage(t, `sglang:num_queue_reqs{dp_rank="0"} -2
sglang:token_usage{dp_rank="0"} -0.1
sglang:cache_hit_rate{dp_rank="0"} 7
sglang:page_size{dp_rank="0"} -16
sglang:max_total_num_tokens{dp_rank="0"} 1000
sglang:realtime_tokens_total{dp_rank="0",mode="prefill_cache"} -5
sglang:realtime_tokens_total{dp_rank="0",mode="prefill_compute"} 10
sglang:realtime_tokens_total{dp_rank="0",mode="decode"} -1
sglang:num_queue_reqs{dp_rank="1"} 0
sglang:cache_hit_rate{dp_rank="1"} 0.25
sglang:realtime_tokens_total{dp_rank="1",mode="prefill_cache"} 5
sglang:realtime_tokens_total{dp_rank="1",mode="prefill_compute"} 10
`,
			collectors.InvalidValue{Engine: "0", Field: "queue", Note: `sglang:num_queue_reqs{dp_rank="0"} = -2: a queue cannot be negative`},
			collectors.InvalidValue{Engine: "0", Field: "kv_usage", Note: `sglang:token_usage{dp_rank="0"} = -0.1: a fraction must be within 0..1`},
			collectors.InvalidValue{Engine: "0", Field: "prefix_queries", Note: `sglang:realtime_tokens_total{dp_rank="0",mode="prefill_cache"} = -5: a counter cannot be negative`},
			collectors.InvalidValue{Engine: "0", Field: "prefix_hits", Note: `sglang:realtime_tokens_total{dp_rank="0",mode="prefill_cache"} = -5: a counter cannot be negative`},
			collectors.InvalidValue{Engine: "0", Field: "cache_hit_rate", Note: `sglang:cache_hit_rate{dp_rank="0"} = 7: a fraction must be within 0..1`},
			collectors.InvalidValue{Engine: "0", Field: "block_size", Note: `sglang:page_size{dp_rank="0"} = -16: a block size cannot be negative`},
		)
		e0, e1 := engineOf(t, p, "0"), engineOf(t, p, "1")
		absent(t, "rank 0 blocks (no page size to divide by)", e0.NumGPUBlocks)
		absent(t, "rank 0 hits", e0.PrefixHits)
		absent(t, "rank 0 queries", e0.PrefixQueries)
		val(t, "rank 1 hit rate", e1.CacheHitRate, 0.25)
		val(t, "rank 1 hits", e1.PrefixHits, 5)
		val(t, "rank 1 queries", e1.PrefixQueries, 15)
	})
	t.Run("histograms", func(t *testing.T) {
		p := invalidPage(t, `# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5"} 9
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1"} 7
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf"} 9
vllm:e2e_request_latency_seconds_count{engine="0"} 9
vllm:e2e_request_latency_seconds_sum{engine="0"} 4
vllm:e2e_request_latency_seconds_bucket{engine="1",le="0.5"} 1
vllm:e2e_request_latency_seconds_bucket{engine="1",le="+Inf"} 3
vllm:e2e_request_latency_seconds_count{engine="1"} 4
vllm:e2e_request_latency_seconds_sum{engine="1"} 4
vllm:e2e_request_latency_seconds_bucket{engine="2",le="0.5"} 5
vllm:e2e_request_latency_seconds_count{engine="2"} 4
vllm:e2e_request_latency_seconds_sum{engine="2"} 4
vllm:e2e_request_latency_seconds_bucket{engine="3",le="0.5"} 1
vllm:e2e_request_latency_seconds_count{engine="3"} 4
vllm:e2e_request_latency_seconds_sum{engine="3"} 4
`,
			collectors.InvalidValue{Engine: "0", Field: "e2e", Note: `vllm:e2e_request_latency_seconds{engine="0"}: cumulative counts go down (le="0.5" 9, le="1" 7)`},
			collectors.InvalidValue{Engine: "1", Field: "e2e", Note: `vllm:e2e_request_latency_seconds{engine="1"}: the +Inf bucket (3) is not the count (4)`},
			collectors.InvalidValue{Engine: "2", Field: "e2e", Note: `vllm:e2e_request_latency_seconds{engine="2"}: bucket le="0.5" counts 5, more than the count (4)`},
		)
		hist(t, "engine 3 e2e (+Inf from the count)", engineOf(t, p, "3").E2E, 4, 4)
	})
}

// TestInvalidOnScreen: through the collector, the rejected values ride on
// the scrape (MetricsScrape.Invalid) and one SourceError of kind invalid
// says the first and how many more; the rest of the page is there.
func TestInvalidOnScreen(t *testing.T) {
	body := `vllm:num_requests_waiting{engine="0"} -3
vllm:num_requests_running{engine="0"} -1
vllm:num_requests_waiting{engine="1"} 4
vllm:num_requests_waiting{engine="1"} 4
vllm:num_requests_running{engine="1"} 2
`
	srv := serve(t, page([]byte(body), textType))
	out := run(t, Options{Interval: time.Hour, Targets: []Target{{Name: "w7", URL: srv.URL + "/metrics"}}})
	s := waitFor(t, out, scrapeOf("w7"))
	if s.Err != nil || len(s.Engines) != 2 || *s.Engines[1].Running != 2 {
		t.Fatalf("scrape: %v %s", s.Err, show(s.Engines))
	}
	var fields []string
	for _, iv := range s.Invalid {
		fields = append(fields, iv.Engine+":"+iv.Field)
	}
	if strings.Join(fields, " ") != "0:queue 0:running 1:queue" {
		t.Errorf("invalid %+v", s.Invalid)
	}
	e := waitFor(t, out, func(e *collectors.SourceError) bool { return e.Kind == "invalid" })
	want := `vllm:num_requests_waiting{engine="0"} = -3: a queue cannot be negative (and 2 more)`
	if e.Source != "w7 metrics" || e.Message != want || e.At.IsZero() {
		t.Errorf("source error %+v, want %q", e, want)
	}
}

// TestRouterImpossibleValues: a router's repeated series, negative
// counters and broken histograms leave the figure unknown (for that
// worker only, in the per-worker maps) and are reported the same way.
func TestRouterImpossibleValues(t *testing.T) {
	body := `vllm_router_processed_requests_total{worker="http://w0:8000"} 120
vllm_router_processed_requests_total{worker="http://w1:8000"} 80
vllm_router_processed_requests_total{worker="http://w1:8000"} 80
vllm_router_running_requests{worker="http://w0:8000"} -2
vllm_router_running_requests{worker="http://w1:8000"} 1
vllm_router_requests_total{route="/v1/chat"} 190
vllm_router_retries_total -1
`
	p := parseBody(t, []byte(body), textType, collectors.RoleRouter, "")
	r := p.Router
	if _, ok := r.Processed["http://w1:8000"]; ok || r.Processed["http://w0:8000"] != 120 {
		t.Errorf("processed %v, want w0 only", r.Processed)
	}
	if _, ok := r.Running["http://w0:8000"]; ok || r.Running["http://w1:8000"] != 1 {
		t.Errorf("running %v, want w1 only", r.Running)
	}
	val(t, "requests", r.Requests, 190)
	absent(t, "retries", r.Retries)
	note, n := p.invalidSummary()
	if n != 3 || note != "vllm_router_retries_total = -1: a counter cannot be negative" || p.Invalid != nil {
		t.Errorf("%d rejected, first %q; invalid %+v", n, note, p.Invalid)
	}

	hit := `# TYPE dynamo_component_router_kv_hit_rate histogram
dynamo_component_router_kv_hit_rate_bucket{le="1"} 4
dynamo_component_router_kv_hit_rate_bucket{le="+Inf"} 4
dynamo_component_router_kv_hit_rate_sum 9
dynamo_component_router_kv_hit_rate_count 4
`
	p = parseBody(t, []byte(hit), textType, collectors.RoleRouter, "")
	absent(t, "predicted hit, a mean of 2.25", p.Router.PredictedHit)
	if note, n := p.invalidSummary(); n != 1 || note != "dynamo_component_router_kv_hit_rate: mean 2.25 is outside 0..1" {
		t.Errorf("%d rejected, first %q", n, note)
	}
}
