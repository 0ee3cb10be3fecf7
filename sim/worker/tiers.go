package worker

import (
	"strconv"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/offload"
)

// writeTiers writes what vLLM main and its connectors add to the page
// (docs/PROTOCOLS.md §2): prompt tokens by source, the connector's
// external prefix cache, the OffloadingConnector's transfers (CPUOffloadingSpec:
// its flat counters and the deprecated transfer_type ones it still
// writes) and LMCache's in-process counters. Counters are _total with a
// _created sample, as prometheus_client writes them.
func (w *Worker) writeTiers(p *promtext.Writer, stats []engine.Stats, labels func(int, ...string) []string, created float64) {
	var main, conn, vllmOff, lmc []int
	for r := range stats {
		t := stats[r].Tiers
		if !t.On() {
			continue
		}
		main = append(main, r)
		switch t.Offload.Mode {
		case 0:
			continue
		case offload.LMCache:
			lmc = append(lmc, r)
		default:
			vllmOff = append(vllmOff, r)
		}
		conn = append(conn, r)
	}
	// counter writes one counter family: a series per rank and per
	// value of label by (none when by is "").
	type series struct {
		label string
		v     func(s *engine.Stats) float64
	}
	counter := func(name, help string, ranks []int, by string, vs ...series) {
		l := func(r int, x series) []string {
			if by == "" {
				return labels(r)
			}
			return labels(r, by, x.label)
		}
		p.Family(name+"_total", help, "counter")
		for _, r := range ranks {
			for _, x := range vs {
				p.Sample(name+"_total", l(r, x), x.v(&stats[r]))
			}
		}
		p.Family(name+"_created", help, "gauge")
		for _, r := range ranks {
			for _, x := range vs {
				p.Sample(name+"_created", l(r, x), created)
			}
		}
	}
	if len(main) > 0 {
		var src []series
		for i, name := range engine.Sources {
			src = append(src, series{name, func(s *engine.Stats) float64 { return s.PromptBySource[i] }})
		}
		counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", main, "source", src...)
	}
	if len(conn) > 0 {
		counter("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
			conn, "", series{v: func(s *engine.Stats) float64 { return s.ExtQueries }})
		counter("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
			conn, "", series{v: func(s *engine.Stats) float64 { return s.ExtHits }})
	}
	if len(vllmOff) > 0 {
		bytes := func(blocks float64) float64 { return blocks * offload.BlockBytes }
		secs := func(blocks float64) float64 { return blocks * offload.BlockTransfer / 1e9 }
		load := func(s *engine.Stats) float64 { return s.OffloadLoadBlocks }
		store := func(s *engine.Stats) float64 { return s.OffloadStoreBlocks }
		loadBytes := series{"CPU_to_GPU", func(s *engine.Stats) float64 { return bytes(load(s)) }}
		storeBytes := series{"GPU_to_CPU", func(s *engine.Stats) float64 { return bytes(store(s)) }}
		loadTime := series{"CPU_to_GPU", func(s *engine.Stats) float64 { return secs(load(s)) }}
		storeTime := series{"GPU_to_CPU", func(s *engine.Stats) float64 { return secs(store(s)) }}
		counter("vllm:kv_offload_load_bytes", "Number of bytes loaded from the offload tier to the GPU.", vllmOff, "", loadBytes)
		counter("vllm:kv_offload_load_time", "Time spent loading from the offload tier to the GPU (seconds).", vllmOff, "", loadTime)
		counter("vllm:kv_offload_store_bytes", "Number of bytes stored from the GPU to the offload tier.", vllmOff, "", storeBytes)
		counter("vllm:kv_offload_store_time", "Time spent storing from the GPU to the offload tier (seconds).", vllmOff, "", storeTime)
		counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector (deprecated).", vllmOff, "transfer_type", loadBytes, storeBytes)
		counter("vllm:kv_offload_total_time", "Total time measured by all KV offloading operations (deprecated).", vllmOff, "transfer_type", loadTime, storeTime)
		const usage = "vllm:kv_offload_cpu_cache_usage_perc"
		p.Family(usage, "CPU offload cache usage: the fraction of CPU blocks pinned by in-flight transfers.", "gauge")
		for _, r := range vllmOff {
			p.Sample(usage, labels(r), stats[r].Pinned)
		}
	}
	if len(lmc) > 0 {
		// LMCache's own registry: model_name and worker_id (one LMCache
		// engine per vLLM engine here: its rank).
		l := func(r int) []string { return []string{"model_name", w.cfg.Model, "worker_id", strconv.Itoa(r)} }
		for _, c := range []struct {
			name, help string
			v          func(s *engine.Stats) float64
		}{
			{"lmcache:num_hit_tokens", "Total number of tokens hit in LMCache and retrieved", func(s *engine.Stats) float64 { return s.LMCacheHit }},
			{"lmcache:num_requested_tokens", "Total number of tokens requested from LMCache", func(s *engine.Stats) float64 { return s.LMCacheRequested }},
		} {
			p.Family(c.name+"_total", c.help, "counter")
			for _, r := range lmc {
				p.Sample(c.name+"_total", l(r), c.v(&stats[r]))
			}
			p.Family(c.name+"_created", c.help, "gauge")
			for _, r := range lmc {
				p.Sample(c.name+"_created", l(r), created)
			}
		}
	}
}
