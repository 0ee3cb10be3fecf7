package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// TestSGLangDataParallel reads an SGLang worker with two dp_ranks (the real
// Dynamo SGLang page with its scheduler series per rank, see
// testdata/README.md): two engines, each with its own queue and token hit
// rate, and the tokenizer's unlabelled counters as worker totals, never as
// a third engine "".
func TestSGLangDataParallel(t *testing.T) {
	p := parseBody(t, load(t, "testdata/sglang-dp2-dynamo-worker.txt"), textType, collectors.RoleWorker, "")
	if p.Profile != ProfileSGLang || p.BadLines != 0 {
		t.Fatalf("profile %q bad lines %d", p.Profile, p.BadLines)
	}
	if len(p.Engines) != 2 || p.Engines[0].Engine != "0" || p.Engines[1].Engine != "1" {
		t.Fatalf("engines %s, want dp_rank 0 and 1 only", show(p.Engines))
	}
	e0, e1 := p.Engines[0], p.Engines[1]
	val(t, "rank 0 waiting", e0.Waiting, 0)
	val(t, "rank 1 waiting", e1.Waiting, 5)
	val(t, "rank 1 running", e1.Running, 3)
	val(t, "rank 1 kv usage", e1.KVUsage, 0.25)
	val(t, "rank 0 hits", e0.PrefixHits, 0)
	val(t, "rank 0 queries", e0.PrefixQueries, 33)
	val(t, "rank 1 hits (prefill_cache)", e1.PrefixHits, 24)
	val(t, "rank 1 queries (prefill_cache + prefill_compute)", e1.PrefixQueries, 33)
	hist(t, "rank 1 queue time", e1.QueueTime, 1, 0.0018392642959952354)
	for _, e := range p.Engines {
		absent(t, "rank "+e.Engine+" prompt tokens (the tokenizer's, not a rank's)", e.PromptTokens)
		if e.TTFT != nil {
			t.Errorf("rank %s has the worker's TTFT", e.Engine)
		}
		if e.Model != "Qwen/Qwen3-0.6B" {
			t.Errorf("rank %s model %q", e.Engine, e.Model)
		}
	}

	w := p.WorkerTotals
	if w == nil {
		t.Fatal("no worker totals")
	}
	if w.Engine != "" || w.Model != "Qwen/Qwen3-0.6B" {
		t.Errorf("totals engine %q model %q", w.Engine, w.Model)
	}
	val(t, "worker prompt tokens", w.PromptTokens, 66)
	val(t, "worker generation tokens", w.GenerationTokens, 600)
	hist(t, "worker ttft", w.TTFT, 1, 1.5573770999908447)
	hist(t, "worker e2e", w.E2E, 1, 2.171226978302002)
	// The ranks carry the hit counters (realtime_tokens): cached_tokens is
	// not a second source of the same figure.
	absent(t, "worker hits", w.PrefixHits)
	absent(t, "worker queries", w.PrefixQueries)
	absent(t, "worker waiting", w.Waiting)
}

// TestScrapeSGLangDataParallel: what the pool receives from that worker
// over HTTP: two engines, and the worker totals beside them.
func TestScrapeSGLangDataParallel(t *testing.T) {
	srv := serve(t, page(load(t, "testdata/sglang-dp2-dynamo-worker.txt"), textType))
	out := run(t, Options{Interval: 50 * time.Millisecond, Targets: []Target{
		{Name: "w0", Role: collectors.RoleWorker, URL: srv.URL + "/metrics"},
	}})
	s := waitFor(t, out, scrapeOf("w0"))
	if s.Err != nil || s.Profile != ProfileSGLang {
		t.Fatalf("err %v profile %q", s.Err, s.Profile)
	}
	if len(s.Engines) != 2 || s.Engines[0].Engine != "0" || s.Engines[1].Engine != "1" {
		t.Fatalf("engines %s, want dp_rank 0 and 1 only", show(s.Engines))
	}
	val(t, "rank 1 hits", s.Engines[1].PrefixHits, 24)
	if s.WorkerTotals == nil {
		t.Fatal("scrape without worker totals")
	}
	val(t, "worker prompt tokens", s.WorkerTotals.PromptTokens, 66)
}

// TestSGLangTokenHits: where SGLang's token hit rate comes from, on each
// generation of its counters. Unknown stays nil; a known zero is 0.
func TestSGLangTokenHits(t *testing.T) {
	const (
		prompt   = "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name=\"m\"} 500\n"
		cached   = "# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{model_name=\"m\"} 200\n"
		declared = "# HELP sglang:cached_tokens_total Number of cached prompt tokens.\n# TYPE sglang:cached_tokens_total counter\n"
		rtType   = "# TYPE sglang:realtime_tokens_total counter\n"
		gauge    = "sglang:num_queue_reqs{model_name=\"m\"} 1\n"
	)
	rt := func(mode string, v string) string {
		return `sglang:realtime_tokens_total{engine_type="unified",mode="` + mode + `",model_name="m",tp_rank="0"} ` + v + "\n"
	}
	tests := []struct {
		name          string
		page          string
		hits, queries *float64
		textOnly      bool // re-encoding drops a family without samples
	}{
		{"realtime wins over cached_tokens", gauge + prompt + cached + rtType +
			rt("prefill_compute", "300") + rt("prefill_cache", "700") + rt("decode", "9000"), collectors.F(700), collectors.F(1000), false},
		{"realtime without a prefill_cache child yet: 0 hits", gauge + prompt + rtType +
			rt("prefill_compute", "120") + rt("decode", "40"), collectors.F(0), collectors.F(120), false},
		{"realtime children per priority add up", gauge + rtType +
			`sglang:realtime_tokens_total{mode="prefill_cache",priority=""} 10` + "\n" +
			`sglang:realtime_tokens_total{mode="prefill_cache",priority="1"} 5` + "\n" +
			`sglang:realtime_tokens_total{mode="prefill_compute",priority=""} 85` + "\n", collectors.F(15), collectors.F(100), false},
		{"cached vs prompt tokens", gauge + prompt + cached, collectors.F(200), collectors.F(500), false},
		{"declared cached_tokens without a sample: 0 hits", gauge + prompt + declared, collectors.F(0), collectors.F(500), true},
		{"declared in OpenMetrics", "# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total{model_name=\"m\"} 500\n" +
			"# TYPE sglang:cached_tokens counter\n# EOF\n", collectors.F(0), collectors.F(500), true},
		{"no cached_tokens family at all: unknown", gauge + prompt, nil, nil, false},
		{"declared cached_tokens but no prompt tokens: unknown", gauge + declared, nil, nil, true},
		{"only decode tokens: unknown", gauge + rtType + rt("decode", "7"), nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, om := range []bool{false, true} {
				body, ct := []byte(tc.page), textType
				if strings.HasSuffix(tc.page, "# EOF\n") {
					ct = omType
				}
				if om && tc.textOnly {
					continue
				}
				if om {
					body, ct = omOf(t, body), omType
				}
				e := oneEngine(t, parseBody(t, body, ct, collectors.RoleWorker, ""))
				for _, c := range []struct {
					what      string
					got, want *float64
				}{{"hits", e.PrefixHits, tc.hits}, {"queries", e.PrefixQueries, tc.queries}} {
					if c.want == nil {
						absent(t, c.what, c.got)
					} else {
						val(t, c.what, c.got, *c.want)
					}
				}
			}
		})
	}
}

// TestVLLMPrefixUnits: vllm:gpu_prefix_cache_* count tokens, except in the
// first V1 releases whose HELP says blocks (the real 0.8 page's HELP
// lines); those become tokens with the block size, or stay unknown.
func TestVLLMPrefixUnits(t *testing.T) {
	frag := string(load(t, real+"vllm-v1-0.8-router318-fragment.txt"))
	i := strings.Index(frag, "# HELP vllm:gpu_prefix_cache_queries_total")
	if i < 0 {
		t.Fatal("fixture lacks the blocks HELP line")
	}
	const (
		model   = `{model_name="Qwen/Qwen2.5-Coder-32B-Instruct"}`
		samples = "vllm:gpu_prefix_cache_queries_total" + model + " 100.0\n" +
			"# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of cached blocks.\n" +
			"# TYPE vllm:gpu_prefix_cache_hits_total counter\n" +
			"vllm:gpu_prefix_cache_hits_total" + model + " 40.0\n"
		geometry = `vllm:cache_config_info{block_size="16",num_gpu_blocks="5943"} 1.0` + "\n"
	)
	blocks := frag[:i] + frag[i:] + "\n" + samples // the fragment ends on the queries TYPE line
	tokens := strings.ReplaceAll(strings.ReplaceAll(blocks, "queried blocks", "queried tokens"), "cached blocks", "cached tokens")

	t.Run("blocks with a block size become tokens", func(t *testing.T) {
		p := parseBody(t, []byte(blocks+geometry), textType, collectors.RoleWorker, "")
		e := oneEngine(t, p)
		val(t, "queries", e.PrefixQueries, 1600)
		val(t, "hits", e.PrefixHits, 640)
		if len(p.Warnings) != 0 {
			t.Errorf("warnings %q", p.Warnings)
		}
	})
	t.Run("blocks without a block size are unknown, and said", func(t *testing.T) {
		p := parseBody(t, []byte(blocks), textType, collectors.RoleWorker, "")
		e := oneEngine(t, p)
		absent(t, "queries", e.PrefixQueries)
		absent(t, "hits", e.PrefixHits)
		if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "count blocks") {
			t.Errorf("warnings %q", p.Warnings)
		}
	})
	t.Run("tokens stay as exposed", func(t *testing.T) {
		e := oneEngine(t, parseBody(t, []byte(tokens+geometry), textType, collectors.RoleWorker, ""))
		val(t, "queries", e.PrefixQueries, 100)
		val(t, "hits", e.PrefixHits, 40)
	})
	t.Run("0.10 deprecated names in tokens next to current ones", func(t *testing.T) {
		e := oneEngine(t, parseBody(t, load(t, real+"vllm-0.10.0-glm45-fragment.txt"), textType, collectors.RoleWorker, ""))
		val(t, "queries", e.PrefixQueries, 32)
		val(t, "hits", e.PrefixHits, 0)
	})
}
