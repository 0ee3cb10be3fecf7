package metrics

import (
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

func TestRealRouterPages(t *testing.T) {
	t.Run("dynamo frontend", func(t *testing.T) {
		p := parseBody(t, load(t, real+"router-dynamo-frontend.txt"), textType, collectors.RoleRouter, "")
		if p.Profile != ProfileDynamo || p.Router == nil || p.Engines != nil {
			t.Fatalf("profile %q router %v engines %v", p.Profile, p.Router, p.Engines)
		}
		val(t, "requests", p.Router.Requests, 1)
		val(t, "errors (all status=success)", p.Router.Errors, 0)
		hist(t, "ttft", p.Router.TTFT, 1, 1.5625701570000001)
		absent(t, "predicted hit without the router histogram", p.Router.PredictedHit)
	})
	t.Run("sgl-router fragment", func(t *testing.T) {
		p := parseBody(t, load(t, real+"router-sgl-router-pr6537-fragment.txt"), textType, collectors.RoleRouter, "")
		if p.Profile != ProfileSGLangRouter {
			t.Fatalf("profile %q", p.Profile)
		}
		r := p.Router
		if r.Processed["http://localhost:8081"] != 7 || r.Processed["http://localhost:8080"] != 9 || len(r.Processed) != 2 {
			t.Errorf("processed = %v", r.Processed)
		}
		if r.Running["http://localhost:8081"] != 1 || len(r.Running) != 2 {
			t.Errorf("running = %v", r.Running)
		}
		val(t, "cache hits (requests)", r.CacheHits, 2)
		val(t, "cache misses", r.CacheMisses, 14)
		absent(t, "requests", r.Requests)
	})
	t.Run("llm-d EPP goldens", func(t *testing.T) {
		one := func(files ...string) *collectors.RouterMetrics {
			var body []byte
			for _, f := range files {
				body = append(body, load(t, golden+f)...)
			}
			p := parseBody(t, body, textType, collectors.RoleRouter, "")
			if p.Profile != ProfileLLMDEPP {
				t.Fatalf("%v: profile %q", files, p.Profile)
			}
			return p.Router
		}
		val(t, "predicted hit = mean hit ratio", one("llm_d_prefix_indexer_hit_ratio_metric.txt").PredictedHit, 2.7/6)
		val(t, "requests", one("llm_d_request_total_metric.txt").Requests, 4)
		val(t, "errors", one("llm_d_request_error_total_metric.txt").Errors, 4)
		r := one("llm_d_scheduler_attempts_with_result_metrics.txt")
		if len(r.Processed) != 1 || r.Processed["pod-1"] != 2 {
			t.Errorf("processed = %v, want pod-1: 2", r.Processed)
		}
		if r := one("scheduler_attempts_total_metrics.txt"); r.Processed != nil {
			t.Errorf("attempts without a pod name are not a worker's: %v", r.Processed)
		}
		// Deprecated and current names side by side count once.
		r = one("request_total_metric.txt", "llm_d_request_total_metric.txt",
			"prefix_indexer_hit_ratio_metric.txt", "llm_d_prefix_indexer_hit_ratio_metric.txt")
		val(t, "requests, both generations", r.Requests, 4)
		val(t, "predicted hit, both generations", r.PredictedHit, 0.45)
		val(t, "requests, deprecated only", one("request_total_metric.txt").Requests, 4)
	})
}

// Router pages for which no real capture exists; built from the metric
// names and labels in each router's source (see the profile tables).
func TestRouterProfiles(t *testing.T) {
	tests := []struct {
		name, page, profile string
		check               func(t *testing.T, r *collectors.RouterMetrics)
	}{
		{"vllm-router", `# TYPE vllm_router_processed_requests_total counter
vllm_router_processed_requests_total{worker="http://10.0.0.5:8000"} 120
vllm_router_processed_requests_total{worker="http://10.0.0.6:8000"} 80
# TYPE vllm_router_running_requests gauge
vllm_router_running_requests{worker="http://10.0.0.5:8000"} 7
# TYPE vllm_router_cb_state gauge
vllm_router_cb_state{worker="http://10.0.0.6:8000"} 1
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/chat/completions"} 190
vllm_router_requests_total{route="/v1/completions"} 10
# TYPE vllm_router_retries_total counter
vllm_router_retries_total{route="/v1/chat/completions"} 3
# TYPE vllm_router_request_errors_total counter
vllm_router_request_errors_total{route="/v1/chat/completions",error_type="timeout"} 2
# TYPE vllm_router_cache_hits_total counter
vllm_router_cache_hits_total 150
# TYPE vllm_router_cache_misses_total counter
vllm_router_cache_misses_total 50
`, ProfileVLLMRouter, func(t *testing.T, r *collectors.RouterMetrics) {
			if r.Processed["http://10.0.0.5:8000"] != 120 || r.Processed["http://10.0.0.6:8000"] != 80 {
				t.Errorf("processed %v", r.Processed)
			}
			if r.Running["http://10.0.0.5:8000"] != 7 || r.CBState["http://10.0.0.6:8000"] != 1 {
				t.Errorf("running %v cb %v", r.Running, r.CBState)
			}
			val(t, "requests", r.Requests, 200)
			val(t, "retries", r.Retries, 3)
			val(t, "errors", r.Errors, 2)
			val(t, "cache hits", r.CacheHits, 150)
		}},
		{"sglang model gateway", `# TYPE smg_worker_requests_active gauge
smg_worker_requests_active{worker="http://w0:30000"} 4
# TYPE smg_worker_requests_total counter
smg_worker_requests_total{worker="http://w0:30000",model="m"} 41
# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{worker="http://w0:30000"} 2
# TYPE smg_router_requests_total counter
smg_router_requests_total{router_type="http",model="m",endpoint="chat",streaming="true"} 41
# TYPE smg_worker_retries_total counter
smg_worker_retries_total{worker_type="regular",endpoint="chat"} 1
`, ProfileSGLangRouter, func(t *testing.T, r *collectors.RouterMetrics) {
			if r.Running["http://w0:30000"] != 4 || r.Processed["http://w0:30000"] != 41 || r.CBState["http://w0:30000"] != 2 {
				t.Errorf("running %v processed %v cb %v", r.Running, r.Processed, r.CBState)
			}
			val(t, "requests", r.Requests, 41)
			val(t, "retries", r.Retries, 1)
		}},
		{"production-stack", `# HELP vllm:num_requests_running Number of running requests
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{server="http://10.0.0.5:8000"} 3.0
vllm:num_requests_running{server="http://10.0.0.6:8000"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{server="http://10.0.0.5:8000"} 9.0
# TYPE vllm:num_incoming_requests_total counter
vllm:num_incoming_requests_total{model="m"} 25.0
# TYPE vllm:num_incoming_requests_created gauge
vllm:num_incoming_requests_created{model="m"} 1.75e+09
# TYPE vllm:request_errors_total counter
vllm:request_errors_total{server="http://10.0.0.6:8000",model="m",error_type="503"} 1.0
# TYPE vllm:request_latency_seconds histogram
vllm:request_latency_seconds_bucket{le="1.0",server="http://10.0.0.5:8000",model="m",status="200"} 20.0
vllm:request_latency_seconds_bucket{le="+Inf",server="http://10.0.0.5:8000",model="m",status="200"} 24.0
vllm:request_latency_seconds_count{server="http://10.0.0.5:8000",model="m",status="200"} 24.0
vllm:request_latency_seconds_sum{server="http://10.0.0.5:8000",model="m",status="200"} 13.5
`, ProfileProductionStack, func(t *testing.T, r *collectors.RouterMetrics) {
			if r.Running["http://10.0.0.5:8000"] != 3 || len(r.Running) != 2 {
				t.Errorf("running %v", r.Running)
			}
			if r.Processed["http://10.0.0.5:8000"] != 24 {
				t.Errorf("processed %v", r.Processed)
			}
			val(t, "requests", r.Requests, 25)
			val(t, "errors", r.Errors, 1)
		}},
		{"dynamo router hit rate", `# TYPE dynamo_component_router_kv_hit_rate histogram
dynamo_component_router_kv_hit_rate_bucket{le="0.5"} 1
dynamo_component_router_kv_hit_rate_bucket{le="1"} 4
dynamo_component_router_kv_hit_rate_bucket{le="+Inf"} 4
dynamo_component_router_kv_hit_rate_sum 2.6
dynamo_component_router_kv_hit_rate_count 4
`, ProfileDynamo, func(t *testing.T, r *collectors.RouterMetrics) {
			val(t, "predicted hit", r.PredictedHit, 0.65)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A production-stack page collides with engine names: it must be
			// read as a router even on a target configured as a worker.
			for _, role := range []collectors.Role{collectors.RoleRouter, collectors.RoleWorker} {
				p := parseBody(t, []byte(tc.page), textType, role, "")
				if p.Profile != tc.profile || p.Router == nil || p.Engines != nil {
					t.Fatalf("%s role: profile %q, router %v, engines %v", role, p.Profile, p.Router, p.Engines)
				}
				tc.check(t, p.Router)
			}
		})
	}
}
