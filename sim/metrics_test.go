package sim_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

// TestCountersOnlyGrow: between scrapes, every counter and histogram count
// stays or grows, and the process start time holds.
func TestCountersOnlyGrow(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 2})
	advance(t, s, 10*time.Second)
	before := map[string]page{}
	for _, w := range s.Endpoints().Workers {
		before[w.Name] = scrape(t, w.Metrics)
	}
	routerBefore := scrape(t, s.Endpoints().RouterMetrics)
	advance(t, s, 10*time.Second)
	grew := 0
	for _, w := range s.Endpoints().Workers {
		after := scrape(t, w.Metrics)
		for name, f := range after {
			if !strings.HasSuffix(name, "_total") && f.GetType().String() != "HISTOGRAM" {
				continue
			}
			for _, m := range f.GetMetric() {
				prev := matching(before[w.Name][name], m)
				if prev < 0 {
					t.Errorf("%s %s: new series", w.Name, name)
				}
				if sampleValue(m) < prev {
					t.Errorf("%s %s went down: %v -> %v", w.Name, name, prev, sampleValue(m))
				}
				if sampleValue(m) > prev {
					grew++
				}
			}
		}
		if after.sum("process_start_time_seconds") != before[w.Name].sum("process_start_time_seconds") {
			t.Errorf("%s: process start time changed without a restart", w.Name)
		}
	}
	if grew == 0 {
		t.Fatal("no counter grew in 10 s")
	}
	routerAfter := scrape(t, s.Endpoints().RouterMetrics)
	if routerAfter.sum("vllm_router_processed_requests_total") <= routerBefore.sum("vllm_router_processed_requests_total") {
		t.Error("router processed counter did not grow")
	}
}

func matching(f *dtoFamily, m *dtoMetric) float64 {
	if f == nil {
		return -1
	}
next:
	for _, o := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if label(o, l.GetName()) != l.GetValue() {
				continue next
			}
		}
		return sampleValue(o)
	}
	return -1
}

// TestMetricsAgreeWithOutcomes: stop the workload, let the pool drain, and
// compare the worker counters with the router's audit records: prefix
// cache hits are the cached tokens the requests were served, prompt tokens
// are the prompts', one decision and one outcome per attempt.
func TestMetricsAgreeWithOutcomes(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 4})
	zc := zctx(t)
	subs := map[string]*zmqSocket{}
	for _, w := range s.Endpoints().Workers {
		subs[w.Name] = subscribe(t, zc, w.Events[0])
	}
	advance(t, s, 30*time.Second)
	if err := s.Inject(sim.SetRate{Factor: 0}); err != nil {
		t.Fatal(err)
	}
	advance(t, s, 60*time.Second) // every request in flight finishes
	recs := readRecords(t, s.Endpoints().Decisions)

	decisions, outcomes := map[string]map[string]any{}, map[string]map[string]any{}
	var cached, prompt float64
	for _, r := range recs {
		key := r["request_id"].(string) + "/" + r["attempt_id"].(string)
		switch r["kind"] {
		case "decision":
			if decisions[key] != nil {
				t.Fatalf("two decisions for %s", key)
			}
			decisions[key] = r
			p := r["prediction"].(map[string]any)
			if p["owner"] == "" || r["chosen"] == "" || p["source"] != "kv-events" || p["units"] != "blocks" {
				t.Fatalf("decision without owner/chosen: %v", r)
			}
		case "outcome":
			if outcomes[key] != nil {
				t.Fatalf("two outcomes for %s", key)
			}
			outcomes[key] = r
			if r["http_status"].(float64) != 200 || r["done"] != true {
				t.Fatalf("steady outcome not done: %v", r)
			}
			c, p := r["cached_tokens"].(float64), r["prompt_tokens"].(float64)
			if math.Mod(c, 16) != 0 || c >= p {
				t.Errorf("%s: cached %v of %v prompt tokens: want whole blocks, below the prompt", key, c, p)
			}
			cached += c
			prompt += p
		}
	}
	if len(decisions) < 100 || len(decisions) != len(outcomes) {
		t.Fatalf("%d decisions, %d outcomes: want one of each per attempt", len(decisions), len(outcomes))
	}
	for k, d := range decisions {
		if outcomes[k] == nil || outcomes[k]["worker"] != d["chosen"] {
			t.Fatalf("%s: decision chose %v, outcome %v", k, d["chosen"], outcomes[k])
		}
	}
	var hits, prompts, preempt, processed float64
	for _, w := range s.Endpoints().Workers {
		pg := scrape(t, w.Metrics)
		hits += pg.sum("vllm:prefix_cache_hits_total")
		prompts += pg.sum("vllm:prompt_tokens_total")
		preempt += pg.sum("vllm:num_preemptions_total")
		if pg.sum("vllm:num_requests_running")+pg.sum("vllm:num_requests_waiting") != 0 {
			t.Errorf("%s still busy after draining", w.Name)
		}
	}
	processed = scrape(t, s.Endpoints().RouterMetrics).sum("vllm_router_processed_requests_total")
	if preempt != 0 {
		t.Fatalf("%v preemptions in steady state: hits would count twice", preempt)
	}
	if hits != cached || prompts != prompt {
		t.Errorf("workers count %v hit / %v prompt tokens; outcomes report %v cached / %v prompt", hits, prompts, cached, prompt)
	}
	if processed != float64(len(decisions)) {
		t.Errorf("router counted %v requests, wrote %d decisions", processed, len(decisions))
	}
	if cached/prompt < 0.3 {
		t.Errorf("token hit rate %.2f: a cache-aware router on shared prefixes should do better", cached/prompt)
	}

	// Each prediction names a block that the owner's event stream stored.
	stored := map[string]map[string]bool{}
	for _, w := range s.Endpoints().Workers {
		stored[w.Name] = map[string]bool{}
		for _, msg := range pending(t, subs[w.Name], 300*time.Millisecond) {
			_, _, b, err := wirecheck.Live(msg, wirecheck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range b.Events {
				if e.Kind == "BlockStored" {
					for _, k := range e.Keys {
						stored[w.Name][fmt.Sprintf("%016x", k)] = true
					}
				}
			}
		}
	}
	named := 0
	for k, d := range decisions {
		if pfx, ok := d["prefix"].(string); ok {
			named++
			owner := d["prediction"].(map[string]any)["owner"].(string)
			if !stored[owner][pfx] {
				t.Fatalf("%s: prefix %s predicted on %s, which never stored it", k, pfx, owner)
			}
		}
	}
	if named == 0 {
		t.Fatal("no decision named a prefix")
	}
}

// TestLatencyHistograms: the engines export TTFT, queue time, e2e and
// inter-token latency in vLLM's (or SGLang's) real bucket layouts, one ITL
// observation per output token after each request's first, and a TTFT
// that holds the request's wait in the queue.
func TestLatencyHistograms(t *testing.T) {
	bounds := func(f *dto.MetricFamily) []float64 {
		var out []float64
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			out = append(out, b.GetUpperBound())
		}
		return out
	}
	for _, c := range []struct {
		engine string
		want   map[string][]float64
		gen    string
	}{
		{"vllm", map[string][]float64{
			"vllm:time_to_first_token_seconds": engine.TTFTBounds, "vllm:inter_token_latency_seconds": engine.ITLBounds,
			"vllm:request_queue_time_seconds": engine.LatencyBounds, "vllm:e2e_request_latency_seconds": engine.LatencyBounds,
		}, "vllm:generation_tokens_total"},
		{"sglang", map[string][]float64{
			"sglang:time_to_first_token_seconds": engine.SGLangTTFTBounds, "sglang:inter_token_latency_seconds": engine.SGLangITLBounds,
			"sglang:queue_time_seconds": engine.SGLangQueueBounds, "sglang:e2e_request_latency_seconds": engine.SGLangE2EBounds,
		}, "sglang:generation_tokens_total"},
	} {
		t.Run(c.engine, func(t *testing.T) {
			s := startSim(t, sim.Options{Seed: 3, Engine: c.engine, Workers: 2})
			advance(t, s, 20*time.Second)
			if err := s.Inject(sim.SetRate{Factor: 0}); err != nil {
				t.Fatal(err)
			}
			advance(t, s, 60*time.Second) // every request finishes
			for _, w := range s.Endpoints().Workers {
				pg := scrape(t, w.Metrics)
				var ttft string
				for name, want := range c.want {
					f := pg[name]
					if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
						t.Fatalf("%s: no %s histogram", w.Name, name)
					}
					if got := bounds(f); !slices.Equal(got[:len(got)-1], want) || !math.IsInf(got[len(got)-1], 1) {
						t.Errorf("%s %s buckets %v, want %v and +Inf", w.Name, name, got, want)
					}
					if strings.Contains(name, "first_token") {
						ttft = name
					}
				}
				itl := strings.Replace(ttft, "time_to_first_token", "inter_token_latency", 1)
				if n, gen, first := pg.sum(itl), pg.sum(c.gen), pg.sum(ttft); n <= 0 || n != gen-first {
					t.Errorf("%s: %v ITL observations for %v output tokens of %v requests: want one per token after each first", w.Name, n, gen, first)
				}
			}
		})
	}
}
