package metrics

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/collectors"
)

const (
	peers    = "../../testdata/peers/llm-d-inference-sim/"
	real     = "../../testdata/real/metrics/"
	golden   = real + "router-llm-d-epp-golden/"
	textType = "text/plain; version=0.0.4; charset=utf-8"
	omType   = "application/openmetrics-text; version=1.0.0; charset=utf-8"
)

func load(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseBody(t testing.TB, body []byte, ct string, role collectors.Role, profile string) *Page {
	t.Helper()
	p, err := Parse(body, ct, role, profile)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// val checks a value that must be present.
func val(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: missing (nil), want %g", what, want)
		return
	}
	if *got != want && math.Abs(*got-want) > 1e-9*math.Abs(want) {
		t.Errorf("%s = %g, want %g", what, *got, want)
	}
}

// absent checks a value that must be unknown (nil), never 0.
func absent(t *testing.T, what string, got *float64) {
	t.Helper()
	if got != nil {
		t.Errorf("%s = %g, want absent (nil)", what, *got)
	}
}

func hist(t *testing.T, what string, h *collectors.Histogram, count, sum float64) {
	t.Helper()
	if h == nil {
		t.Errorf("%s: histogram missing", what)
		return
	}
	if h.Count != count || math.Abs(h.Sum-sum) > 1e-9 {
		t.Errorf("%s: count %g sum %g, want %g %g", what, h.Count, h.Sum, count, sum)
	}
	n := len(h.Buckets)
	if n == 0 || !math.IsInf(h.Buckets[n-1].UpperBound, 1) || h.Buckets[n-1].Count != count {
		t.Errorf("%s: last bucket %v, want +Inf with the count", what, h.Buckets)
	}
	if !slices.IsSortedFunc(h.Buckets, cmpBucket) {
		t.Errorf("%s: buckets not sorted: %v", what, h.Buckets)
	}
}

func oneEngine(t *testing.T, p *Page) collectors.EngineMetrics {
	t.Helper()
	if len(p.Engines) != 1 {
		t.Fatalf("engines = %d, want 1", len(p.Engines))
	}
	if p.WorkerTotals != nil {
		t.Errorf("worker totals %s on a page with one engine", show([]collectors.EngineMetrics{*p.WorkerTotals}))
	}
	return p.Engines[0]
}

// TestRealEnginePages reads captured vLLM and SGLang pages and checks the
// numbers an operator would see.
func TestRealEnginePages(t *testing.T) {
	tests := []struct {
		file    string
		profile string
		check   func(t *testing.T, p *Page)
	}{
		{peers + "metrics-6.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			// The burst on instance B: 5 running, 3 waiting (README).
			e := oneEngine(t, p)
			if e.Engine != "" || e.Model != "sim-org/sim-model-1b" {
				t.Errorf("engine %q model %q", e.Engine, e.Model)
			}
			val(t, "running", e.Running, 5)
			val(t, "waiting", e.Waiting, 3)
			val(t, "kv usage", e.KVUsage, 0.21875)
			val(t, "prefix queries", e.PrefixQueries, 3784)
			val(t, "prefix hits", e.PrefixHits, 1904)
			val(t, "prompt tokens", e.PromptTokens, 2599)
			val(t, "generation tokens", e.GenerationTokens, 38)
			val(t, "finished", e.RequestsFinished, 9)
			val(t, "gpu blocks", e.NumGPUBlocks, 64)
			val(t, "block size", e.BlockSize, 16)
			absent(t, "preemptions (the simulator has none)", e.Preemptions)
			absent(t, "external queries", e.ExternalQueries)
			hist(t, "ttft", e.TTFT, 14, 0.651)
			hist(t, "e2e", e.E2E, 9, 0.816293416)
			// Both ITL names carry the same observations: the current one read, never summed.
			hist(t, "itl (inter_token_latency, not also time_per_output_token)", e.ITL, 104, 1.0400000000000007)
			if e.QueueTime != nil {
				t.Errorf("queue time present before any request waited")
			}
		}},
		{peers + "metrics-8.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			hist(t, "queue time", e.QueueTime, 3, 1.048027709)
			val(t, "waiting after the burst", e.Waiting, 0)
		}},
		{peers + "metrics-1.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			// Idle, before the first request: only the gauges exist.
			e := oneEngine(t, p)
			val(t, "waiting", e.Waiting, 0)
			val(t, "kv usage", e.KVUsage, 0)
			absent(t, "prefix queries before any request", e.PrefixQueries)
			absent(t, "prompt tokens before any request", e.PromptTokens)
		}},
		{real + "vllm-dynamo-worker-qwen3-0.6b.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			if e.Engine != "0" || e.Model != "Qwen/Qwen3-0.6B" {
				t.Errorf("engine %q model %q", e.Engine, e.Model)
			}
			val(t, "prefix queries (caching off)", e.PrefixQueries, 0)
			val(t, "external queries", e.ExternalQueries, 66)
			val(t, "external hits", e.ExternalHits, 0)
			val(t, "prompt tokens", e.PromptTokens, 66)
			val(t, "generation tokens", e.GenerationTokens, 600)
			val(t, "preemptions", e.Preemptions, 0)
			val(t, "finished (summed over finished_reason)", e.RequestsFinished, 2)
			val(t, "gpu blocks", e.NumGPUBlocks, 5943)
			val(t, "block size", e.BlockSize, 16)
			hist(t, "ttft", e.TTFT, 2, 0.4143967628479004)
			hist(t, "queue", e.QueueTime, 2, 1.883227378129959e-05)
			hist(t, "itl", e.ITL, 598, 3.1598554495722055)
			if p.Skipped != 15 {
				t.Errorf("skipped = %d, want the 15 _created samples of read families (ITL's among them)", p.Skipped)
			}
		}},
		{real + "vllm-0.4-v0-happy-vllm.txt", ProfileVLLMLegacy, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			absent(t, "kv usage 4.2 (not a fraction)", e.KVUsage)
			val(t, "running", e.Running, 2)
			val(t, "waiting", e.Waiting, 1)
			val(t, "finished", e.RequestsFinished, 53693)
			val(t, "gpu blocks", e.NumGPUBlocks, 27798)
			val(t, "process start", p.ProcessStart, 1.71592759687e+09)
			hist(t, "ttft", e.TTFT, 53694, 149737.30035066605)
			hist(t, "itl (vllm:time_per_output_token_seconds, the only name then)", e.ITL, 3.073096e+06, 202693.24174451828)
			want := []collectors.InvalidValue{{Engine: "", Field: "kv_usage",
				Note: `vllm:gpu_cache_usage_perc{model_name="/home/data/models/Meta-Llama-3-8B-Instruct"} = 4.2: a fraction must be within 0..1`}}
			if !slices.Equal(p.Invalid, want) || len(p.Warnings) != 0 {
				t.Errorf("invalid = %+v, warnings %q; want %+v", p.Invalid, p.Warnings, want)
			}
		}},
		{real + "vllm-0.10.0-glm45-fragment.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			val(t, "kv usage", e.KVUsage, 9.75010481363281e-06)
			val(t, "prefix queries (current name)", e.PrefixQueries, 32)
			val(t, "prefix hits (deprecated name, the only one here)", e.PrefixHits, 0)
			if p.Skipped != 2 {
				t.Errorf("skipped = %d, want 2 _created samples", p.Skipped)
			}
		}},
		{real + "vllm-v1-0.8-router318-fragment.txt", ProfileVLLMLegacy, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			val(t, "kv usage (gpu_cache_usage_perc)", e.KVUsage, 0)
			val(t, "process start", p.ProcessStart, 1.74262400557e+09)
		}},
		{real + "vllm-dp-engine01-gaie2950-fragment.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			if len(p.Engines) != 2 || p.Engines[0].Engine != "0" || p.Engines[1].Engine != "1" {
				t.Fatalf("engines = %+v, want 0 and 1", p.Engines)
			}
			val(t, "engine 1 running", p.Engines[1].Running, 0)
		}},
		{real + "vllm-ascend-0.20.2rc1-dp-negative-kv-fragment.txt", ProfileVLLM, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			if e.Engine != "3" {
				t.Errorf("engine %q, want 3", e.Engine)
			}
			// A negative fraction is a bug report: unknown, and said why.
			absent(t, "kv usage", e.KVUsage)
			if len(p.Invalid) != 1 || p.Invalid[0].Engine != "3" || p.Invalid[0].Field != "kv_usage" ||
				!strings.HasSuffix(p.Invalid[0].Note, "} = -0.3875395987328405: a fraction must be within 0..1") {
				t.Errorf("invalid = %+v", p.Invalid)
			}
			if e.Model != "DeepSeek-V4-Flash" {
				t.Errorf("the engine is still there with its model: %q", e.Model)
			}
		}},
		{real + "sglang-dynamo-worker-qwen3-0.6b.txt", ProfileSGLang, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			if e.Model != "Qwen/Qwen3-0.6B" {
				t.Errorf("model %q", e.Model)
			}
			val(t, "waiting", e.Waiting, 0)
			val(t, "running", e.Running, 0)
			val(t, "kv usage (token_usage)", e.KVUsage, 0)
			val(t, "cache hit rate gauge", e.CacheHitRate, 0)
			val(t, "prompt tokens", e.PromptTokens, 33)
			val(t, "generation tokens", e.GenerationTokens, 300)
			// No cached_tokens sample before the first hit, but realtime_tokens
			// counts 33 computed and 0 cached prompt tokens: a known 0%.
			val(t, "prefix queries (realtime prefill_cache + prefill_compute)", e.PrefixQueries, 33)
			val(t, "prefix hits (realtime prefill_cache)", e.PrefixHits, 0)
			absent(t, "gpu blocks without page_size", e.NumGPUBlocks)
			hist(t, "ttft", e.TTFT, 1, 1.5573770999908447)
			hist(t, "queue", e.QueueTime, 1, 0.0018392642959952354)
			hist(t, "e2e", e.E2E, 1, 2.171226978302002)
			hist(t, "itl", e.ITL, 299, 0.6138594150543213)
			val(t, "finished (num_requests_total)", e.RequestsFinished, 1)
		}},
		{real + "sglang-docs-production-metrics.txt", ProfileSGLang, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			val(t, "waiting (num_queue_reqs)", e.Waiting, 2826)
			val(t, "running", e.Running, 162)
			val(t, "kv usage", e.KVUsage, 0.28)
			val(t, "cache hit rate", e.CacheHitRate, 0.007507552643049313)
			val(t, "prompt tokens", e.PromptTokens, 8.128902e+06)
			// Neither realtime_tokens nor cached_tokens: unknown, never 0%.
			absent(t, "prefix hits", e.PrefixHits)
			absent(t, "prefix queries", e.PrefixQueries)
			hist(t, "ttft", e.TTFT, 11008, 2.3518979474117756e+06)
			// time_per_output_token there is each request's running mean
			// since its first token, not the gap between two tokens.
			if e.ITL != nil {
				t.Errorf("itl read from sglang:time_per_output_token_seconds: %+v", e.ITL)
			}
		}},
		{real + "sglang-2024-11-pr1853-fragment.txt", ProfileSGLang, func(t *testing.T, p *Page) {
			e := oneEngine(t, p)
			if !strings.HasPrefix(e.Model, "/shared/public/elr-models/meta-llama/Llama-3.2-3B/") {
				t.Errorf("model from the oldest `name` label: %q", e.Model)
			}
			val(t, "prompt tokens", e.PromptTokens, 230794)
		}},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			p := parseBody(t, load(t, tc.file), textType, collectors.RoleWorker, "")
			if p.Profile != tc.profile {
				t.Errorf("profile = %q, want %q", p.Profile, tc.profile)
			}
			if p.Router != nil {
				t.Errorf("router metrics on an engine page")
			}
			if p.BadLines != 0 {
				t.Errorf("bad lines = %d (%q)", p.BadLines, p.Warnings)
			}
			// Only the two pages with a KV usage outside 0..1 hold values
			// that cannot be true.
			if name := filepath.Base(tc.file); !strings.HasPrefix(name, "vllm-0.4-") && !strings.HasPrefix(name, "vllm-ascend") && p.Invalid != nil {
				t.Errorf("invalid values on a real page: %+v", p.Invalid)
			}
			tc.check(t, p)
		})
	}
}

// TestPeerCountersAsExposed: counters are reported cumulative, as the page
// has them, across the scrapes of instance A (the pool does the rates).
func TestPeerCountersAsExposed(t *testing.T) {
	want := map[string]float64{"metrics-3.txt": 2349, "metrics-5.txt": 3669, "metrics-7.txt": 4254, "metrics-9.txt": 4840}
	for file, q := range want {
		p := parseBody(t, load(t, peers+file), textType, collectors.RoleWorker, "")
		val(t, file+" prefix queries", oneEngine(t, p).PrefixQueries, q)
	}
}

// TestCreatedNeverAValue builds a vLLM page whose counters and histograms
// carry `_created` samples next to `_total` (text, and the OpenMetrics way
// where _created belongs to the counter family).
func TestCreatedNeverAValue(t *testing.T) {
	text := `# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 640.0
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7682643398899e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 320.0
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7682643398899e+09
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.768e+09
vllm:request_success_created{engine="0",finished_reason="length",model_name="m"} 1.768e+09
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.25
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.768e+09
`
	om := `# TYPE vllm:prompt_tokens counter
# UNIT vllm:prompt_tokens tokens
vllm:prompt_tokens_total{engine="0",model_name="m"} 640.0
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7682643398899e+09
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 320.0 1.7682650e+09
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7682643398899e+09
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 4.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.768e+09
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
vllm:request_success_created{engine="0",finished_reason="length",model_name="m"} 1.768e+09
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0 # {trace_id="a1"} 0.05 1.768e+09
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.25
vllm:time_to_first_token_seconds_created{engine="0",model_name="m"} 1.768e+09
# EOF
`
	for _, tc := range []struct{ name, body, ct string }{{"text", text, textType}, {"openmetrics", om, omType}} {
		t.Run(tc.name, func(t *testing.T) {
			p := parseBody(t, []byte(tc.body), tc.ct, collectors.RoleWorker, "")
			e := oneEngine(t, p)
			val(t, "prompt tokens", e.PromptTokens, 640)
			val(t, "prefix hits", e.PrefixHits, 320)
			val(t, "finished", e.RequestsFinished, 5)
			hist(t, "ttft", e.TTFT, 5, 1.25)
			if e.TTFT != nil && (len(e.TTFT.Buckets) != 2 || e.TTFT.Buckets[0] != (collectors.Bucket{UpperBound: 0.1, Count: 2})) {
				t.Errorf("ttft buckets %v", e.TTFT.Buckets)
			}
			if p.Skipped != 5 || p.BadLines != 0 {
				t.Errorf("skipped %d (bad %d, %q), want the 5 _created samples", p.Skipped, p.BadLines, p.Warnings)
			}
		})
	}
}

// TestOpenMetricsMatchesText re-encodes real pages with expfmt's
// OpenMetrics encoder and checks they read exactly as the text pages do.
func TestOpenMetricsMatchesText(t *testing.T) {
	for _, file := range []string{peers + "metrics-8.txt", real + "vllm-dynamo-worker-qwen3-0.6b.txt", real + "sglang-dynamo-worker-qwen3-0.6b.txt"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			text := load(t, file)
			tp := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := tp.TextToMetricFamilies(bytes.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			names := make([]string, 0, len(fams))
			for n := range fams {
				names = append(names, n)
			}
			slices.Sort(names)
			var om bytes.Buffer
			for _, n := range names {
				if _, err := expfmt.MetricFamilyToOpenMetrics(&om, fams[n], expfmt.WithCreatedLines()); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := expfmt.FinalizeOpenMetrics(&om); err != nil {
				t.Fatal(err)
			}
			want := parseBody(t, text, textType, collectors.RoleWorker, "")
			got := parseBody(t, om.Bytes(), omType, collectors.RoleWorker, "")
			if got.Profile != want.Profile || got.BadLines != 0 {
				t.Errorf("profile %q bad lines %d (%q)", got.Profile, got.BadLines, got.Warnings)
			}
			if show(got.Engines) != show(want.Engines) {
				t.Errorf("OpenMetrics read differs:\n got %s\nwant %s", show(got.Engines), show(want.Engines))
			}
		})
	}
}

// show renders engines with their values (not pointers) for comparison.
func show(es []collectors.EngineMetrics) string {
	var b strings.Builder
	f := func(p *float64) string {
		if p == nil {
			return "nil"
		}
		return strconvG(*p)
	}
	h := func(x *collectors.Histogram) string {
		if x == nil {
			return "nil"
		}
		s := strconvG(x.Count) + "/" + strconvG(x.Sum) + "["
		for _, bk := range x.Buckets {
			s += strconvG(bk.UpperBound) + ":" + strconvG(bk.Count) + " "
		}
		return s + "]"
	}
	for _, e := range es {
		b.WriteString(strings.Join([]string{e.Engine, e.Model, f(e.Waiting), f(e.Running), f(e.KVUsage),
			f(e.PrefixQueries), f(e.PrefixHits), f(e.ExternalQueries), f(e.ExternalHits), f(e.CacheHitRate),
			f(e.PromptTokens), f(e.GenerationTokens), f(e.Preemptions), f(e.RequestsFinished),
			f(e.NumGPUBlocks), f(e.BlockSize), h(e.TTFT), h(e.QueueTime), h(e.E2E)}, "|"))
		b.WriteString("\n")
	}
	return b.String()
}

func strconvG(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TestBadInputLosesNothing: unparsable lines, NaN and Inf are dropped and
// counted; every other number on the page is still read.
func TestBadInputLosesNothing(t *testing.T) {
	page := `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4
vllm:num_requests_running{engine="1",model_name="m"} NaN
this line is not a metric
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2
vllm:num_requests_waiting{engine="1",model_name="m} 7
vllm:num_requests_waiting{engine="1",model_name="m"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} +Inf
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
vllm:generation_tokens_total{engine="0",model_name="m"} twelve
vllm:prompt_tokens_total{engine="0",model_name="m"} 12
`
	p := parseBody(t, []byte(page), textType, collectors.RoleWorker, "")
	if len(p.Engines) != 2 {
		t.Fatalf("engines %d", len(p.Engines))
	}
	e0, e1 := p.Engines[0], p.Engines[1]
	val(t, "engine 0 running", e0.Running, 4)
	absent(t, "engine 1 running (NaN)", e1.Running)
	val(t, "engine 0 waiting", e0.Waiting, 2)
	val(t, "engine 1 waiting (line after the broken one)", e1.Waiting, 1)
	absent(t, "engine 0 kv (+Inf)", e0.KVUsage)
	val(t, "engine 1 kv", e1.KVUsage, 0.5)
	absent(t, "engine 0 generation tokens", e0.GenerationTokens)
	val(t, "engine 0 prompt tokens", e0.PromptTokens, 12)
	// not a metric, the unclosed quote, "twelve" (a bad line each) + NaN + Inf
	if p.BadLines != 3 || p.Skipped != 5 {
		t.Errorf("bad lines %d skipped %d (%q), want 3 and 5", p.BadLines, p.Skipped, p.Warnings)
	}
	joined := strings.Join(p.Warnings, "; ")
	for _, want := range []string{"line 4:", "line 7:", "line 12:"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings %q lack %q (page line numbers)", joined, want)
		}
	}
}

func TestNotAMetricsPage(t *testing.T) {
	tests := []struct{ name, body, ct string }{
		{"html error page", "<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n", "text/html"},
		{"json", `{"error": "not found"}` + "\n", "application/json"},
		{"plain words", "Not Found\n", "text/plain"},
		{"protobuf", "\x0a\x05hello", "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if p, err := Parse([]byte(tc.body), tc.ct, collectors.RoleWorker, ""); err == nil {
				t.Errorf("no error; page %+v", p)
			}
		})
	}
	p := parseBody(t, nil, textType, collectors.RoleWorker, "")
	if p.Profile != ProfileUnknown || p.Engines != nil {
		t.Errorf("empty page: profile %q engines %v", p.Profile, p.Engines)
	}
}

func TestForcedProfile(t *testing.T) {
	body := load(t, peers+"metrics-6.txt")
	p := parseBody(t, body, textType, collectors.RoleWorker, ProfileSGLang)
	if p.Profile != ProfileSGLang {
		t.Errorf("profile %q", p.Profile)
	}
	if len(p.Engines) != 0 {
		t.Errorf("a vLLM page read as SGLang has no SGLang values: %s", show(p.Engines))
	}
	p = parseBody(t, load(t, real+"vllm-v1-0.8-router318-fragment.txt"), textType, collectors.RoleWorker, ProfileVLLM)
	if p.Profile != ProfileVLLMLegacy || oneEngine(t, p).KVUsage == nil {
		t.Errorf("forced vllm on old names: profile %q", p.Profile)
	}
	if _, err := Parse(body, textType, collectors.RoleWorker, "triton"); err == nil {
		t.Error("unknown profile accepted")
	}
}

// TestEngines covers data-parallel layouts: per-engine geometry shared from
// an unlabelled info series, numeric order, SGLang dp_rank, page geometry.
func TestEngines(t *testing.T) {
	t.Run("vllm geometry for every engine", func(t *testing.T) {
		page := `vllm:cache_config_info{block_size="32",num_gpu_blocks="1000",num_cpu_blocks="None"} 1.0
vllm:num_requests_waiting{engine="10",model_name="m"} 1
vllm:num_requests_waiting{engine="2",model_name="m"} 9
vllm:num_requests_waiting{engine="0",model_name="m"} 0
`
		p := parseBody(t, []byte(page), textType, collectors.RoleWorker, "")
		var ids []string
		for _, e := range p.Engines {
			ids = append(ids, e.Engine)
			val(t, "engine "+e.Engine+" blocks", e.NumGPUBlocks, 1000)
			val(t, "engine "+e.Engine+" block size", e.BlockSize, 32)
		}
		if strings.Join(ids, ",") != "0,2,10" {
			t.Errorf("engines %v, want 0,2,10 (numeric order, no unlabelled entry)", ids)
		}
		val(t, "saturated engine 2 stays visible", p.Engines[1].Waiting, 9)
	})
	t.Run("a sum that overflows is unknown, not Inf", func(t *testing.T) {
		page := "vllm:num_requests_waiting{model_name=\"a\"} 1e308\nvllm:num_requests_waiting{model_name=\"b\"} 1e308\nvllm:num_requests_running 2\n"
		p := parseBody(t, []byte(page), textType, collectors.RoleWorker, "")
		e := oneEngine(t, p)
		absent(t, "waiting", e.Waiting)
		val(t, "running", e.Running, 2)
		if p.Skipped != 1 {
			t.Errorf("skipped %d, want 1", p.Skipped)
		}
	})
	t.Run("sglang dp ranks", func(t *testing.T) {
		page := `# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",model_name="m",tp_rank="0"} 0
sglang:num_queue_reqs{dp_rank="1",model_name="m",tp_rank="0"} 14
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",dp_rank="1",model_name="m"} 300
sglang:cached_tokens_total{cache_source="host",dp_rank="1",model_name="m"} 100
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{dp_rank="1",model_name="m"} 1000
sglang:prompt_tokens_total{dp_rank="0",model_name="m"} 50
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{dp_rank="1",model_name="m"} 6
sglang:page_size{dp_rank="1",model_name="m"} 16
sglang:max_total_num_tokens{dp_rank="1",model_name="m"} 100000
`
		p := parseBody(t, []byte(page), textType, collectors.RoleWorker, "")
		if p.Profile != ProfileSGLang || len(p.Engines) != 2 {
			t.Fatalf("profile %q engines %d", p.Profile, len(p.Engines))
		}
		e0, e1 := p.Engines[0], p.Engines[1]
		val(t, "rank 1 queue", e1.Waiting, 14)
		val(t, "rank 1 hits (all cache tiers)", e1.PrefixHits, 400)
		val(t, "rank 1 queries = prompt tokens", e1.PrefixQueries, 1000)
		absent(t, "rank 0 queries without cached_tokens", e0.PrefixQueries)
		val(t, "rank 1 preemptions (retractions)", e1.Preemptions, 6)
		val(t, "rank 1 pages from max tokens / page size", e1.NumGPUBlocks, 6250)
	})
}

// TestLargeDPPage reads the benchmark page: five engines, each visible with
// its own queue and KV usage.
func TestLargeDPPage(t *testing.T) {
	p := parseBody(t, load(t, "testdata/vllm-v1-5engines-200k.txt"), textType, collectors.RoleWorker, "")
	if p.Profile != ProfileVLLM || len(p.Engines) != 5 || p.BadLines != 0 {
		t.Fatalf("profile %q engines %d bad %d", p.Profile, len(p.Engines), p.BadLines)
	}
	for k, e := range p.Engines {
		if e.Engine != strconv.Itoa(k) {
			t.Errorf("engine %d is %q", k, e.Engine)
		}
		val(t, "waiting "+e.Engine, e.Waiting, float64(3*k))
		val(t, "running "+e.Engine, e.Running, float64(k+1))
		val(t, "kv "+e.Engine, e.KVUsage, 0.1*float64(k))
		val(t, "blocks "+e.Engine, e.NumGPUBlocks, 5943)
		hist(t, "ttft "+e.Engine, e.TTFT, 2, 0.4143967628479004)
		hist(t, "itl "+e.Engine, e.ITL, 598, 3.1598554495722055)
	}
	if p.Skipped != 5*15 {
		t.Errorf("skipped %d, want 5 engines x 15 _created samples", p.Skipped)
	}
}

// TestRepeatedPage: an idle engine serves the same page scrape after
// scrape; kvtop reads it once and gives the same figures each time, and
// the first change is read at once, never a stale page.
func TestRepeatedPage(t *testing.T) {
	body := load(t, real+"vllm-dynamo-worker-qwen3-0.6b.txt")
	p := NewParser()
	first, err := p.Parse(body, textType, collectors.RoleWorker, "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Parse(body, textType, collectors.RoleWorker, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.last == nil {
		t.Fatal("a clean page is not remembered")
	}
	if show(again.Engines) != show(first.Engines) || again.Profile != first.Profile {
		t.Errorf("the same page read twice differs:\n%s\n%s", show(first.Engines), show(again.Engines))
	}
	// One value changes: the next scrape says so.
	changed := body
	i := bytes.Index(changed, []byte("\nvllm:num_requests_waiting{"))
	if i < 0 {
		t.Fatal("fixture has no vllm:num_requests_waiting")
	}
	end := i + 1 + bytes.IndexByte(changed[i+1:], '\n')
	sp := bytes.LastIndexByte(changed[:end], ' ')
	changed = append(append(append([]byte{}, changed[:sp+1]...), "7"...), changed[end:]...)
	now, err := p.Parse(changed, textType, collectors.RoleWorker, "")
	if err != nil {
		t.Fatal(err)
	}
	if q := now.Engines[0].Waiting; q == nil || *q != 7 {
		t.Errorf("the changed page still reads waiting %v", q)
	}
	// A page with a bad line warns at every scrape, remembered or not.
	bad := append(append([]byte{}, body...), "vllm:num_requests_running{engine=\"0\" oops\n"...)
	for i := 0; i < 2; i++ {
		pg, err := p.Parse(bad, textType, collectors.RoleWorker, "")
		if err != nil || len(pg.Warnings) == 0 || pg.BadLines != 1 {
			t.Fatalf("scrape %d of a page with a bad line: %v, warnings %v, bad lines %d", i, err, pg.Warnings, pg.BadLines)
		}
	}
}
