package metrics

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// FuzzParse feeds the adapter arbitrary bodies, seeded with every real page
// in the repo's testdata (text and as OpenMetrics) and the corpus in
// testdata/fuzz/FuzzParse (repeated series, negative and out-of-range
// values, broken histograms). It must never panic, and what it returns
// must keep its promises: no NaN or Inf values, no negative counts or
// gauges, fractions within 0..1, cumulative histograms, every rejected
// value nil where it is named, sorted engines and buckets, the same
// result from a reused parser.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(real + "*.txt")
	more, _ := filepath.Glob(peers + "metrics-*.txt")
	gold, _ := filepath.Glob(golden + "*.txt")
	own, _ := filepath.Glob("testdata/sglang-*.txt")
	for _, file := range append(append(append(files, more...), gold...), own...) {
		b := load(f, file)
		f.Add(b, false, false)
		f.Add(b, true, true)
	}
	f.Add([]byte("vllm:num_requests_running{engine=\"1\"} NaN\nvllm:num_requests_running{engine=\"0\",server=\"x\"} 1 # {a=\"b\"} 1 2\n# EOF\n"), true, false)
	f.Add([]byte("# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"x\"} 1\n"), false, false)
	f.Add([]byte("sglang:num_queue_reqs{dp_rank=\"0\"} -Inf\r\n{\"utf8.name\"} 1\n<html>\n"), false, true)
	f.Add([]byte("# TYPE sglang:cached_tokens_total counter\nsglang:prompt_tokens_total 5\nsglang:realtime_tokens_total{dp_rank=\"1\",mode=\"prefill_cache\"} 1e308\nsglang:realtime_tokens_total{dp_rank=\"1\",mode=\"prefill_compute\"} 1e308\n"), false, false)
	f.Add([]byte("# HELP vllm:gpu_prefix_cache_hits_total in blocks\nvllm:gpu_prefix_cache_hits_total 1e308\nvllm:cache_config_info{block_size=\"1e10\"} 1\n"), false, false)

	reused := NewParser()
	f.Fuzz(func(t *testing.T, body []byte, om, router bool) {
		ct, role := textType, collectors.RoleWorker
		if om {
			ct = omType
		}
		if router {
			role = collectors.RoleRouter
		}
		p, err := Parse(body, ct, role, "")
		again, err2 := reused.Parse(body, ct, role, "")
		if (err == nil) != (err2 == nil) {
			t.Fatalf("reused parser disagrees: %v vs %v", err, err2)
		}
		if err != nil {
			return
		}
		if show(p.Engines) != show(again.Engines) || show(totals(p)) != show(totals(again)) ||
			p.Profile != again.Profile || p.Skipped != again.Skipped || !slices.Equal(p.Invalid, again.Invalid) {
			t.Fatalf("reused parser disagrees:\n%s\n%s", show(p.Engines), show(again.Engines))
		}
		if w := p.WorkerTotals; w != nil && (w.Engine != "" || len(p.Engines) == 0 ||
			slices.ContainsFunc(p.Engines, func(e collectors.EngineMetrics) bool { return e.Engine == "" })) {
			t.Fatalf("worker totals %q beside engines %s", w.Engine, show(p.Engines))
		}
		if p.Profile == "" || p.Skipped < p.BadLines || len(p.Warnings) > maxWarnings {
			t.Fatalf("profile %q skipped %d bad %d warnings %d", p.Profile, p.Skipped, p.BadLines, len(p.Warnings))
		}
		if !slices.IsSortedFunc(p.Engines, func(a, b collectors.EngineMetrics) int { return collectors.CompareEngines(a.Engine, b.Engine) }) {
			t.Fatalf("engines not sorted")
		}
		all := append(p.Engines, totals(p)...)
		for _, e := range all {
			for _, v := range []*float64{e.Waiting, e.Running, e.KVUsage, e.PrefixQueries, e.PrefixHits,
				e.ExternalQueries, e.ExternalHits, e.CacheHitRate, e.PromptTokens, e.GenerationTokens,
				e.Preemptions, e.RequestsFinished, e.NumGPUBlocks, e.BlockSize} {
				checkFinite(t, v)
				checkNotNegative(t, v)
			}
			checkFraction(t, e.KVUsage)
			checkFraction(t, e.CacheHitRate)
			for _, h := range []*collectors.Histogram{e.TTFT, e.QueueTime, e.E2E, e.ITL} {
				checkHistogram(t, h)
			}
		}
		for i, iv := range p.Invalid {
			if i > 0 && collectors.CompareEngines(p.Invalid[i-1].Engine, iv.Engine) > 0 {
				t.Fatalf("invalid values not sorted by engine: %+v", p.Invalid)
			}
			if iv.Note == "" || strings.Contains(iv.Note, "\n") {
				t.Fatalf("invalid note %q", iv.Note)
			}
			i := slices.IndexFunc(all, func(e collectors.EngineMetrics) bool { return e.Engine == iv.Engine })
			if i < 0 {
				t.Fatalf("invalid value of engine %q, not on the page: %s", iv.Engine, show(all))
			}
			if shown(all[i], iv.Field) {
				t.Fatalf("%s of engine %q is rejected (%s) and still shown: %s", iv.Field, iv.Engine, iv.Note, show(all[i:i+1]))
			}
		}
		if r := p.Router; r != nil {
			for _, v := range []*float64{r.Requests, r.Retries, r.Errors, r.CacheHits, r.CacheMisses, r.PredictedHit} {
				checkFinite(t, v)
				checkNotNegative(t, v)
			}
			checkFraction(t, r.PredictedHit)
			for _, m := range []map[string]float64{r.Processed, r.Running} {
				for w, v := range m {
					if v < 0 {
						t.Fatalf("worker %q: %g", w, v)
					}
				}
			}
			checkHistogram(t, r.TTFT)
		}
		checkFinite(t, p.ProcessStart)
	})
}

func checkFinite(t *testing.T, v *float64) {
	t.Helper()
	if v != nil && !finite(*v) {
		t.Fatalf("non-finite value %g", *v)
	}
}

func checkNotNegative(t *testing.T, v *float64) {
	t.Helper()
	if v != nil && *v < 0 {
		t.Fatalf("negative value %g", *v)
	}
}

func checkFraction(t *testing.T, v *float64) {
	t.Helper()
	if v != nil && (*v < 0 || *v > 1) {
		t.Fatalf("fraction %g", *v)
	}
}

func checkHistogram(t *testing.T, h *collectors.Histogram) {
	t.Helper()
	if h == nil {
		return
	}
	n := len(h.Buckets)
	if !finite(h.Count) || !finite(h.Sum) || n == 0 || !math.IsInf(h.Buckets[n-1].UpperBound, 1) ||
		!slices.IsSortedFunc(h.Buckets, cmpBucket) || h.Buckets[n-1].Count != h.Count {
		t.Fatalf("bad histogram %+v", h)
	}
	for i := 1; i < n; i++ {
		if h.Buckets[i].Count < h.Buckets[i-1].Count || h.Buckets[i].UpperBound == h.Buckets[i-1].UpperBound {
			t.Fatalf("not a cumulative histogram %+v", h)
		}
	}
}

// shown reports whether the field an InvalidValue names has a value.
func shown(e collectors.EngineMetrics, field string) bool {
	switch field {
	case "ttft":
		return e.TTFT != nil
	case "queue_time":
		return e.QueueTime != nil
	case "e2e":
		return e.E2E != nil
	case "itl":
		return e.ITL != nil
	}
	p := map[string]*float64{"queue": e.Waiting, "running": e.Running, "kv_usage": e.KVUsage,
		"prefix_queries": e.PrefixQueries, "prefix_hits": e.PrefixHits, "external_queries": e.ExternalQueries,
		"external_hits": e.ExternalHits, "cache_hit_rate": e.CacheHitRate, "prompt_tokens": e.PromptTokens,
		"generation_tokens": e.GenerationTokens, "preemptions": e.Preemptions, "requests_finished": e.RequestsFinished,
		"num_gpu_blocks": e.NumGPUBlocks, "block_size": e.BlockSize}
	v, ok := p[field]
	if !ok {
		panic("unknown field " + field)
	}
	return v != nil
}

func totals(p *Page) []collectors.EngineMetrics {
	if p.WorkerTotals == nil {
		return nil
	}
	return []collectors.EngineMetrics{*p.WorkerTotals}
}
