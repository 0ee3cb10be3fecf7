package metrics

import (
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

func tierHits(t *testing.T, ts []collectors.TierCount, tier string) collectors.TierCount {
	t.Helper()
	for _, x := range ts {
		if x.Tier == tier {
			return x
		}
	}
	t.Fatalf("no tier %q in %+v", tier, ts)
	return collectors.TierCount{}
}

// TestOffloadPage: a vLLM page with the offloading connector and tiering
// on (testdata/README.md): load and store traffic from the flat names (the
// deprecated totals beside them are not added again), prompt tokens by
// source, tiering chunks per tier; the CPU "usage" gauge, which counts
// blocks pinned by transfers, is never read as the tier's use.
func TestOffloadPage(t *testing.T) {
	p := parseBody(t, load(t, "testdata/vllm-offload-0.27.txt"), textType, collectors.RoleWorker, "auto")
	e := oneEngine(t, p)
	o := e.Offload
	if o == nil {
		t.Fatal("no offload figures")
	}
	val(t, "load bytes (not doubled by the deprecated total)", o.LoadBytes, 3.3554432e9)
	val(t, "store bytes", o.StoreBytes, 8.388608e9)
	val(t, "load seconds", o.LoadSeconds, 1.25)
	val(t, "store seconds", o.StoreSeconds, 3.5)
	val(t, "computed", o.PromptComputed, 15000)
	val(t, "local hit", o.PromptLocalHit, 61000)
	val(t, "external", o.PromptExternal, 24000)
	if len(o.TierChunks) != 2 {
		t.Fatalf("tier chunks %+v", o.TierChunks)
	}
	primary, fs := tierHits(t, o.TierChunks, "0:primary"), tierHits(t, o.TierChunks, "1:fs")
	val(t, "primary hits", primary.Hits, 500)
	val(t, "primary queries", primary.Queries, 900)
	val(t, "fs hits", fs.Hits, 100)
	absent(t, "host tokens on a vLLM page", o.HostUsedTokens)
	val(t, "external hits", e.ExternalHits, 24000)

	// An older release: the deprecated totals alone, by transfer_type.
	old := `# TYPE vllm:kv_offload_total_bytes_total counter
vllm:kv_offload_total_bytes_total{engine="0",transfer_type="CPU_to_GPU"} 100
vllm:kv_offload_total_bytes_total{engine="0",transfer_type="GPU_to_CPU"} 700
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 0
`
	o = oneEngine(t, parseBody(t, []byte(old), textType, collectors.RoleWorker, "auto")).Offload
	if o == nil {
		t.Fatal("deprecated totals not read")
	}
	val(t, "load (CPU_to_GPU)", o.LoadBytes, 100)
	val(t, "store (GPU_to_CPU)", o.StoreBytes, 700)

	// A negative counter is rejected, named, and unknown.
	bad := `# TYPE vllm:kv_offload_load_bytes_total counter
vllm:kv_offload_load_bytes_total{engine="0"} -5
# TYPE vllm:kv_offload_store_bytes_total counter
vllm:kv_offload_store_bytes_total{engine="0"} 5
`
	p = parseBody(t, []byte(bad), textType, collectors.RoleWorker, "vllm")
	o = oneEngine(t, p).Offload
	if o == nil || o.LoadBytes != nil || o.StoreBytes == nil || len(p.Invalid) != 1 || p.Invalid[0].Field != "offload_load_bytes" {
		t.Fatalf("offload %+v invalid %+v", o, p.Invalid)
	}
}

// TestSGLangHiCache: SGLang's cached tokens split by cache_source, and its
// host pool's used and total tokens.
func TestSGLangHiCache(t *testing.T) {
	p := parseBody(t, load(t, "testdata/sglang-hicache-fragment.txt"), textType, collectors.RoleWorker, "auto")
	e := oneEngine(t, p)
	if p.Profile != ProfileSGLang || e.Offload == nil {
		t.Fatalf("profile %q offload %+v", p.Profile, e.Offload)
	}
	val(t, "prefix hits: every tier", e.PrefixHits, 40000)
	val(t, "device", tierHits(t, e.Offload.TierHits, "device").Hits, 30000)
	val(t, "host", tierHits(t, e.Offload.TierHits, "host").Hits, 8000)
	val(t, "storage", tierHits(t, e.Offload.TierHits, "storage_mooncake").Hits, 2000)
	val(t, "host used", e.Offload.HostUsedTokens, 120000)
	val(t, "host total", e.Offload.HostTotalTokens, 400000)
}

// TestLMCacheOnAVLLMPage: a real Dynamo vLLM worker with LMCache in the
// process: lmcache:num_hit_tokens carries no engine label and belongs to the
// page's one engine, which stays one engine.
func TestLMCacheOnAVLLMPage(t *testing.T) {
	p := parseBody(t, load(t, real+"vllm-dynamo-worker-qwen3-0.6b.txt"), textType, collectors.RoleWorker, "auto")
	e := oneEngine(t, p)
	if e.Offload == nil {
		t.Fatal("LMCache's hit tokens not read")
	}
	val(t, "lmcache hit tokens", tierHits(t, e.Offload.TierHits, "lmcache").Hits, 0)
}
