package metrics

import "strings"

// Profile names, as reported in collectors.MetricsScrape.Profile and as
// accepted from the config (`engine:` for workers, `profile:` for routers).
const (
	ProfileVLLM            = "vllm"
	ProfileVLLMLegacy      = "vllm-legacy"
	ProfileSGLang          = "sglang"
	ProfileVLLMRouter      = "vllm-router"
	ProfileSGLangRouter    = "sglang-router"
	ProfileDynamo          = "dynamo"
	ProfileLLMDEPP         = "llm-d-epp"
	ProfileProductionStack = "production-stack"
	ProfileUnknown         = "unknown"
)

// group is a dialect: one table of metric names. vllm and vllm-legacy share
// a group (a page may carry both generations of names).
type group uint8

const (
	gNone group = iota
	gVLLM
	gSGLang
	gVLLMRouter
	gSGLRouter
	gDynamo
	gLLMD
	gProdStack
	nGroups
)

func (g group) isRouter() bool { return g >= gVLLMRouter }

// groupOf maps a configured profile to its group; ok is false for an
// unknown name. "" and "auto" mean detect.
func groupOf(profile string) (g group, ok bool) {
	switch profile {
	case "", "auto":
		return gNone, true
	case ProfileVLLM, ProfileVLLMLegacy:
		return gVLLM, true
	case ProfileSGLang:
		return gSGLang, true
	case ProfileVLLMRouter:
		return gVLLMRouter, true
	case ProfileSGLangRouter:
		return gSGLRouter, true
	case ProfileDynamo:
		return gDynamo, true
	case ProfileLLMDEPP:
		return gLLMD, true
	case ProfileProductionStack:
		return gProdStack, true
	}
	return gNone, false
}

// field says where a family's samples go.
type field uint8

const (
	fNone field = iota
	// engines
	fWaiting
	fRunning
	fKVUsage
	fPrefixQueries
	fPrefixHits
	fExtQueries
	fExtHits
	fCacheHitRate
	fPromptTokens
	fGenTokens
	fPreemptions
	fFinished
	fCacheConfig // vllm:cache_config_info: geometry in labels
	fBlockSize
	fNumBlocks
	fMaxTokens // sglang:max_total_num_tokens, turned into blocks with page_size
	fRealtime  // sglang:realtime_tokens_total{mode}: prefill_cache / prefill_compute tokens
	fTTFT
	fQueueTime
	fE2E
	fITL
	// offload and tiers (collectors.Offload)
	fOffLoadBytes  // also the deprecated kv_offload_total_bytes{transfer_type}
	fOffStoreBytes //
	fOffLoadTime   // also the deprecated kv_offload_total_time{transfer_type}
	fOffStoreTime
	fPromptBySource // vllm:prompt_tokens_by_source{source}
	fTierChunkQ     // vllm:kv_offload_tiering_chunk_queries{tier}
	fTierChunkH     // vllm:kv_offload_tiering_chunk_hits{tier}
	fLMCacheHits    // lmcache:num_hit_tokens
	fHostUsed       // sglang:hicache_host_used_tokens
	fHostTotal      // sglang:hicache_host_total_tokens
	// routers
	rProcessed        // counter per worker
	rProcessedSuccess // llm-d scheduler attempts, status="success" only, per endpoint
	rProcessedHist    // production-stack latency histogram count per server
	rRunning
	rCBState
	rRequests
	rRequestsStatus // Dynamo requests_total: all count, status != success are errors
	rErrors
	rRetries
	rCacheHits
	rCacheMisses
	rPredictedHit // histogram mean over its lifetime
	rTTFT
	rRole           // Dynamo worker_registered{worker_type}: value 1
	rActivePrefill  // Dynamo frontend gauge per worker
	rActiveDecode   // Dynamo frontend gauge per worker
	rTransferEst    // Dynamo histogram, seconds
	rSharedCacheHit // Dynamo histogram mean, like rPredictedHit
	// any page
	fProcessStart
	nFields
)

// entry is where a family goes. old marks a deprecated name, read only
// when the page lacks the current name for the same field (pages in
// transition expose both, and summing them would double every number).
type entry struct {
	f   field
	old bool
}

func cur(f field) entry { return entry{f: f} }
func dep(f field) entry { return entry{f: f, old: true} }

// tables hold, per group, the family base names kvtop reads (counter names
// without `_total`) and where they go. Everything else on a page is
// skipped before parsing, which is what keeps a 200 KB page cheap.
var tables = [nGroups]map[string]entry{
	gVLLM: {
		"vllm:num_requests_waiting":          cur(fWaiting),
		"vllm:num_requests_running":          cur(fRunning),
		"vllm:kv_cache_usage_perc":           cur(fKVUsage),
		"vllm:gpu_cache_usage_perc":          dep(fKVUsage),
		"vllm:prefix_cache_queries":          cur(fPrefixQueries),
		"vllm:prefix_cache_hits":             cur(fPrefixHits),
		"vllm:gpu_prefix_cache_queries":      dep(fPrefixQueries), // tokens; full blocks in V1 0.7–0.8 (see blockUnits)
		"vllm:gpu_prefix_cache_hits":         dep(fPrefixHits),
		"vllm:external_prefix_cache_queries": cur(fExtQueries),
		"vllm:external_prefix_cache_hits":    cur(fExtHits),
		"vllm:num_preemptions":               cur(fPreemptions),
		"vllm:prompt_tokens":                 cur(fPromptTokens),
		"vllm:generation_tokens":             cur(fGenTokens),
		"vllm:request_success":               cur(fFinished),
		"vllm:cache_config_info":             cur(fCacheConfig),
		"vllm:time_to_first_token_seconds":   cur(fTTFT),
		"vllm:request_queue_time_seconds":    cur(fQueueTime),
		"vllm:e2e_request_latency_seconds":   cur(fE2E),
		"vllm:inter_token_latency_seconds":   cur(fITL),
		"vllm:time_per_output_token_seconds": dep(fITL), // the same observations, renamed in 0.11
		// The offloading connector's traffic (kv_connector/v1/offloading/metrics.py):
		// flat names, and the CPU spec's deprecated ones split by transfer_type.
		"vllm:kv_offload_load_bytes":            cur(fOffLoadBytes),
		"vllm:kv_offload_store_bytes":           cur(fOffStoreBytes),
		"vllm:kv_offload_load_time":             cur(fOffLoadTime),
		"vllm:kv_offload_store_time":            cur(fOffStoreTime),
		"vllm:kv_offload_total_bytes":           dep(fOffLoadBytes),
		"vllm:kv_offload_total_time":            dep(fOffLoadTime),
		"vllm:prompt_tokens_by_source":          cur(fPromptBySource),
		"vllm:kv_offload_tiering_chunk_queries": cur(fTierChunkQ),
		"vllm:kv_offload_tiering_chunk_hits":    cur(fTierChunkH),
		"lmcache:num_hit_tokens":                cur(fLMCacheHits),
		"process_start_time_seconds":            cur(fProcessStart),
	},
	gSGLang: {
		"sglang:num_queue_reqs":              cur(fWaiting),
		"sglang:num_running_reqs":            cur(fRunning),
		"sglang:token_usage":                 cur(fKVUsage),
		"sglang:cached_tokens":               cur(fPrefixHits),   // hits only when realtime_tokens is absent (sglangTokenHits)
		"sglang:prompt_tokens":               cur(fPromptTokens), // also PrefixQueries where cached_tokens decides the hits
		"sglang:realtime_tokens":             cur(fRealtime),
		"sglang:cache_hit_rate":              cur(fCacheHitRate),
		"sglang:num_retracted_requests":      cur(fPreemptions),
		"sglang:generation_tokens":           cur(fGenTokens),
		"sglang:time_to_first_token_seconds": cur(fTTFT),
		"sglang:queue_time_seconds":          cur(fQueueTime),
		"sglang:e2e_request_latency_seconds": cur(fE2E),
		"sglang:inter_token_latency_seconds": cur(fITL),
		"sglang:num_requests":                cur(fFinished), // finished requests, counted by the tokenizer manager
		"sglang:page_size":                   cur(fBlockSize),
		"sglang:num_pages":                   cur(fNumBlocks),
		"sglang:max_total_num_tokens":        cur(fMaxTokens),
		"sglang:hicache_host_used_tokens":    cur(fHostUsed),
		"sglang:hicache_host_total_tokens":   cur(fHostTotal),
		"process_start_time_seconds":         cur(fProcessStart),
	},
	gVLLMRouter: {
		"vllm_router_processed_requests": cur(rProcessed),
		"vllm_router_running_requests":   cur(rRunning),
		"vllm_router_cb_state":           cur(rCBState),
		"vllm_router_requests":           cur(rRequests),
		"vllm_router_request_errors":     cur(rErrors),
		"vllm_router_retries":            cur(rRetries),
		"vllm_router_cache_hits":         cur(rCacheHits),
		"vllm_router_cache_misses":       cur(rCacheMisses),
		"process_start_time_seconds":     cur(fProcessStart),
	},
	gSGLRouter: {
		// SGLang model gateway (smg_*) and the older sgl-router names.
		"smg_worker_requests":           cur(rProcessed),
		"smg_worker_requests_active":    cur(rRunning),
		"smg_worker_cb_state":           cur(rCBState),
		"smg_router_requests":           cur(rRequests),
		"smg_router_request_errors":     cur(rErrors),
		"smg_worker_retries":            cur(rRetries),
		"smg_router_ttft_seconds":       cur(rTTFT),
		"sgl_router_processed_requests": dep(rProcessed),
		"sgl_router_running_requests":   dep(rRunning),
		"sgl_router_cb_state":           dep(rCBState),
		"sgl_router_requests":           dep(rRequests),
		"sgl_router_request_errors":     dep(rErrors),
		"sgl_router_retries":            dep(rRetries),
		"sgl_router_cache_hits":         cur(rCacheHits),
		"sgl_router_cache_misses":       cur(rCacheMisses),
		"sgl_router_ttft_seconds":       dep(rTTFT),
		"process_start_time_seconds":    cur(fProcessStart),
	},
	gDynamo: {
		"dynamo_frontend_requests":                    cur(rRequestsStatus),
		"dynamo_frontend_time_to_first_token_seconds": cur(rTTFT),
		"dynamo_component_router_kv_hit_rate":         cur(rPredictedHit),
		// lib/llm/src/kv_router/metrics.rs, metrics/worker_registered.rs;
		// the frontend's worker load gauges (docs/PROTOCOLS.md §3.1).
		"dynamo_component_router_worker_registered":                     cur(rRole),
		"dynamo_component_router_kv_transfer_estimated_latency_seconds": cur(rTransferEst),
		"dynamo_component_router_shared_cache_hit_rate":                 cur(rSharedCacheHit),
		"dynamo_frontend_worker_active_prefill_tokens":                  cur(rActivePrefill),
		"dynamo_frontend_worker_active_decode_blocks":                   cur(rActiveDecode),
		"process_start_time_seconds":                                    cur(fProcessStart),
	},
	gLLMD: {
		"llm_d_epp_scheduler_attempts":                 cur(rProcessedSuccess),
		"llm_d_epp_request":                            cur(rRequests),
		"llm_d_epp_request_error":                      cur(rErrors),
		"llm_d_epp_prefix_indexer_hit_ratio":           cur(rPredictedHit),
		"llm_d_epp_request_ttft_seconds":               cur(rTTFT),
		"inference_extension_scheduler_attempts":       dep(rProcessedSuccess),
		"inference_objective_request":                  dep(rRequests),
		"inference_objective_request_error":            dep(rErrors),
		"inference_extension_prefix_indexer_hit_ratio": dep(rPredictedHit),
		"inference_objective_request_ttft_seconds":     dep(rTTFT),
		"process_start_time_seconds":                   cur(fProcessStart),
	},
	gProdStack: {
		"vllm:num_requests_running":    cur(rRunning),
		"vllm:num_incoming_requests":   cur(rRequests),
		"vllm:request_errors":          cur(rErrors),
		"vllm:request_latency_seconds": cur(rProcessedHist),
		"process_start_time_seconds":   cur(fProcessStart),
	},
}

// wanted is the union of all tables: the prefilter keeps a line when its
// family is in here, whatever profile the page turns out to be.
var wanted = func() map[string]entry {
	m := map[string]entry{}
	for _, t := range tables { // gVLLM first: its entries set the vllm generation flags
		for name, e := range t {
			if _, ok := m[name]; !ok {
				m[name] = e
			}
		}
	}
	return m
}()

// lookupWanted finds the table entry for a sample or family name: the
// name without its sample suffix if it has one, else the name itself. (No
// table key ends in a suffix, see suffixedKey; one map lookup per line is
// much of the prefilter's cost.) created is true for `_created` samples
// (never read, only counted).
func lookupWanted(name []byte) (e entry, created, ok bool) {
	base, suffix := splitSuffix(name)
	if suffix == "" || suffixedKey {
		if e, ok := wanted[string(name)]; ok {
			return e, false, true
		}
		if suffix == "" {
			return entry{}, false, false
		}
	}
	e, ok = wanted[string(base)]
	return e, suffix == "_created", ok
}

// suffixedKey: some table key ends in a sample suffix, so a suffixed name
// must be looked up whole first.
var suffixedKey = func() bool {
	for k := range wanted {
		if _, suffix := splitSuffix([]byte(k)); suffix != "" {
			return true
		}
	}
	return false
}()

// tableKey is the table key of a sample name ("" when kvtop reads none).
func tableKey(name []byte) string {
	if _, ok := wanted[string(name)]; ok {
		return string(name)
	}
	if base, suffix := splitSuffix(name); suffix != "" {
		if _, ok := wanted[string(base)]; ok {
			return string(base)
		}
	}
	return ""
}

// splitSuffix cuts one of the suffixes Prometheus appends to a family name.
func splitSuffix(name []byte) (base []byte, suffix string) {
	for _, s := range [...]string{"_total", "_bucket", "_count", "_sum", "_created"} {
		if len(name) > len(s) && string(name[len(name)-len(s):]) == s {
			return name[:len(name)-len(s)], s
		}
	}
	return name, ""
}

// familyKey is the table key of a parsed family: counters lose `_total`
// (text pages name the family `x_total`, OpenMetrics `x`).
func familyKey(name string) string {
	if _, ok := wanted[name]; ok {
		return name
	}
	return strings.TrimSuffix(name, "_total")
}

// prefixGroup tells which dialect a metric name belongs to, from its prefix
// alone. Dynamo workers also expose dynamo_component_* (not a router), so
// only the frontend and router families count for Dynamo.
func prefixGroup(name []byte) group {
	if len(name) < 4 {
		return gNone
	}
	switch name[0] {
	case 'v':
		switch {
		case hasPrefix(name, "vllm:"):
			return gVLLM
		case hasPrefix(name, "vllm_router_"):
			return gVLLMRouter
		}
	case 's':
		switch {
		case hasPrefix(name, "sglang:"):
			return gSGLang
		case hasPrefix(name, "sgl_router_"), hasPrefix(name, "smg_"):
			return gSGLRouter
		}
	case 'd':
		if hasPrefix(name, "dynamo_frontend_") || hasPrefix(name, "dynamo_component_router_") {
			return gDynamo
		}
	case 'i':
		if hasPrefix(name, "inference_extension_") || hasPrefix(name, "inference_pool_") ||
			hasPrefix(name, "inference_objective_") {
			return gLLMD
		}
	case 'l':
		if hasPrefix(name, "llm_d_epp_") {
			return gLLMD
		}
	}
	return gNone
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

// detection counts, per group, the sample lines a page holds.
type detection struct {
	lines            [nGroups]int
	server           bool // some vllm:* series carries a `server` label: production-stack router
	newVLLM, oldVLLM bool
}

// choose picks the group for a page. A forced group wins. Otherwise the
// role's own kind is preferred (a worker page is read as an engine if it
// has engine names), then the other kind, each by most lines.
func (d *detection) choose(forced group, routerRole bool) group {
	if forced != gNone {
		return forced
	}
	lines := d.lines
	if d.server {
		// production-stack reuses vllm:* names; none of them is an engine.
		lines[gProdStack] += lines[gVLLM]
		lines[gVLLM] = 0
	}
	best := func(from, to group) group {
		g := gNone
		for i := from; i <= to; i++ {
			if lines[i] > 0 && (g == gNone || lines[i] > lines[g]) {
				g = i
			}
		}
		return g
	}
	own, other := best(gVLLM, gSGLang), best(gVLLMRouter, gProdStack)
	if routerRole {
		own, other = other, own
	}
	if own != gNone {
		return own
	}
	return other
}

// profileName is the reported profile for the chosen group.
func (d *detection) profileName(g group) string {
	switch g {
	case gVLLM:
		if d.oldVLLM && !d.newVLLM {
			return ProfileVLLMLegacy
		}
		return ProfileVLLM
	case gSGLang:
		return ProfileSGLang
	case gVLLMRouter:
		return ProfileVLLMRouter
	case gSGLRouter:
		return ProfileSGLangRouter
	case gDynamo:
		return ProfileDynamo
	case gLLMD:
		return ProfileLLMDEPP
	case gProdStack:
		return ProfileProductionStack
	}
	return ProfileUnknown
}
