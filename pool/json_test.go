package pool

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// contractState is a pool with a bit of everything, plus an unscraped
// worker and an unscraped router whose figures must all be null.
func contractState() *State {
	s := NewState(Options{Name: "prod", Window: time.Minute,
		Workers: []WorkerSpec{{Name: "w0", Aliases: []string{"http://127.0.0.1:8001"}}, {Name: "w1"}},
		Routers: []RouterSpec{{Name: "r0"}, {Name: "r1"}}})
	for k := 0; k <= 10; k++ {
		x := float64(k)
		s.Apply(scrape("w0", at(x), em{Engine: "0", Waiting: f(3), Running: f(8), KVUsage: f(0.42), NumGPUBlocks: f(4096),
			PrefixQueries: f(100 * x), PrefixHits: f(80 * x)}))
		s.Apply(routerScrape(at(x), 1000, 10*x, map[string]float64{"http://127.0.0.1:8001": 10 * x}))
	}
	s.Apply(batch("w0", 0, 0, at(10), stored(0, false, 0x9f2c, 0x9f2d), stored(0x9f2c, true, 0x9f2e)))
	st := status("w0", 0, snapshot.StreamLive, at(10), collectors.StreamIncident{Kind: "gap", FromSeq: 3, ToSeq: 7, Missing: 5, Replayed: 5, Start: at(5), End: at(6)})
	st.HasSeq, st.LastSeq, st.Batches, st.Gaps, st.Missing, st.Replayed = true, 0, 1, 1, 5, 5
	st.UnknownEvents, st.UnknownFields, st.Malformed = 2, 7, 1
	s.Apply(st)
	s.Apply(status("w1", 0, snapshot.StreamConnecting, at(10)))
	s.Apply(&collectors.Decision{RequestID: "r-1", AttemptID: "1", Chosen: "w1", Prediction: pred("blocks", "w2", 12), At: at(10), TS: at(10)})
	s.Apply(outcome("r-1", "1", "w1", 200, ip(0), bp(true)))
	s.Apply(&collectors.SourceError{Source: "w2 metrics", Kind: "timeout", Message: "context deadline exceeded", At: at(9)})
	return s
}

func keysOf(t *testing.T, v any, path string, want ...string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is %T, want an object", path, v)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no key %q", path, k)
		}
	}
	return m
}

func isNull(t *testing.T, m map[string]any, path string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s.%s = %v, want null", path, k, v)
		}
	}
}

func list(t *testing.T, v any, path string) []any {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is %T (%v), want a list (never null)", path, v, v)
	}
	return l
}

func TestSnapshotJSONContract(t *testing.T) {
	snap := contractState().Snapshot(at(10))
	raw, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	top := keysOf(t, doc, "$", "at", "window_s", "seq", "refresh_s", "pool", "workers", "prefixes", "routers", "decisions", "errors", "alerts", "thresholds")
	if _, err := time.Parse(time.RFC3339, top["at"].(string)); err != nil || top["window_s"].(json.Number) != "60" {
		t.Fatalf("at %v window_s %v", top["at"], top["window_s"])
	}

	pool := keysOf(t, top["pool"], "pool", "name", "workers", "up", "queue", "running", "kv_usage", "prefix_hit_rate", "load_skew", "blocks", "index_complete", "index_full", "series")
	if pool["workers"].(json.Number) != "2" || pool["up"].(json.Number) != "1" || pool["queue"].(json.Number) != "3" || pool["blocks"].(json.Number) != "3" {
		t.Fatalf("pool = %v", pool)
	}
	phr := keysOf(t, pool["prefix_hit_rate"], "pool.prefix_hit_rate", "tokens", "requests", "covered_s", "left", "left_workers")
	if phr["left"].(json.Number) != "0" || len(list(t, phr["left_workers"], "pool.prefix_hit_rate.left_workers")) != 0 {
		t.Errorf("pool.prefix_hit_rate = %v, want nobody left", phr)
	}
	skew := keysOf(t, pool["load_skew"], "pool.load_skew", "max_over_mean", "gini")
	isNull(t, skew, "pool.load_skew", "max_over_mean", "gini") // one up worker
	// The cache's own health (issue 15): lists never null, unknowns null.
	pc := keysOf(t, pool["cache"], "pool.cache", "capacity_tokens", "resident_tokens", "stored_per_s", "removed_per_s", "residency_s",
		"thrash_per_s", "thrash_share", "sample_rate")
	keysOf(t, pc["residency_s"], "pool.cache.residency_s", "p50", "mean", "samples", "capped")
	if pc["capacity_tokens"].(json.Number) != "65536" || pc["resident_tokens"].(json.Number) != "48" {
		t.Errorf("pool.cache = %v", pc)
	}
	hm := keysOf(t, pool["hash_mismatch"], "pool.hash_mismatch", "pairs", "across_restart", "across_ranks", "block_sizes", "agreeing",
		"fingerprints", "fingerprints_limit", "fingerprints_dropped")
	for _, k := range []string{"pairs", "across_restart", "across_ranks", "block_sizes"} {
		list(t, hm[k], "pool.hash_mismatch."+k)
	}
	for _, k := range []string{"rest", "overheating_workers", "other_workers"} {
		c := keysOf(t, pool[k], "pool."+k, "ttft_ms", "queue_ms")
		q := keysOf(t, c["ttft_ms"], "pool."+k+".ttft_ms", "p50", "p95", "p99", "n", "reason")
		isNull(t, q, "pool."+k+".ttft_ms", "p50", "p95", "p99")
	}
	series := keysOf(t, pool["series"], "pool.series", "hit_tokens", "hit_requests", "queue", "skew")
	for _, k := range []string{"hit_tokens", "hit_requests", "queue", "skew"} {
		list(t, series[k], "pool.series."+k)
	}

	workers := list(t, top["workers"], "workers")
	w0 := keysOf(t, workers[0], "workers[0]", "name", "engine", "up", "error", "state", "reason", "queue", "running", "kv_usage", "prefix_hit_rate",
		"blocks", "index_complete", "hot_share", "overheating", "thrash_high", "overheat_prefix", "overheat_share", "breaker", "restarts", "scrape_ms", "last_scrape",
		"last_scrape_ok", "engines", "streams", "series", "top_prefixes", "routed_share", "index_full", "invalid")
	if w0["name"] != "w0" || w0["engine"] != "vllm" || w0["up"] != true || w0["kv_usage"].(json.Number) != "0.42" || w0["blocks"].(json.Number) != "3" {
		t.Fatalf("w0 = %v", w0)
	}
	isNull(t, w0, "workers[0]", "error")
	// The README's stable keys are there when they do not apply: w0's
	// latency has no histogram (reason), one layout (merged "").
	for _, k := range []string{"ttft_ms", "itl_ms", "queue_ms", "e2e_ms"} {
		l := keysOf(t, w0[k], "workers[0]."+k, "p50", "p95", "p99", "capped", "observations", "covered_s", "merged", "reason")
		if l["merged"] != "" {
			t.Errorf("workers[0].%s.merged = %v, want \"\" (one layout)", k, l["merged"])
		}
	}
	wc := keysOf(t, w0["cache"], "workers[0].cache", "capacity_tokens", "resident_tokens", "stored_per_s", "removed_per_s", "residency_s",
		"thrash_per_s", "thrash_share", "sample_rate")
	if wc["sample_rate"].(json.Number) != "1" || wc["capacity_tokens"].(json.Number) != "65536" {
		t.Errorf("workers[0].cache = %v", wc)
	}
	tier := keysOf(t, list(t, w0["tiers"], "workers[0].tiers")[0], "workers[0].tiers[0]", "medium", "blocks", "tokens", "store_only", "note")
	if tier["note"] != "" {
		t.Errorf("workers[0].tiers[0].note = %v, want \"\"", tier["note"])
	}
	keysOf(t, pool["ladder"], "pool.ladder", "rungs", "per_s", "share", "sample_rate", "reason")
	ws := keysOf(t, w0["series"], "workers[0].series", "removed_per_s", "thrash_per_s", "resident_tokens")
	list(t, ws["thrash_per_s"], "workers[0].series.thrash_per_s")
	hr := keysOf(t, w0["prefix_hit_rate"], "workers[0].prefix_hit_rate", "tokens", "requests", "covered_s")
	if hr["tokens"].(json.Number) != "0.8" {
		t.Fatalf("w0 hit = %v", hr)
	}
	eng := list(t, w0["engines"], "workers[0].engines")
	if e0 := keysOf(t, eng[0], "engines[0]", "engine", "queue", "running", "kv_usage", "num_gpu_blocks", "hit_tokens", "last_known", "saturated"); e0["last_known"] != false || e0["saturated"] != false {
		t.Errorf("an up worker's engine at KV 0.42 is last known or saturated: %v", e0)
	}
	stream := keysOf(t, list(t, w0["streams"], "workers[0].streams")[0], "streams[0]", "endpoint", "rank", "topic", "state", "last_seq", "batches", "events",
		"gaps", "missing", "replayed", "lost", "restarts", "duplicates", "decode_errors", "unknown_events", "unknown_fields", "malformed", "oversized", "dropped", "batches_per_s", "events_per_s",
		"last_message_age_s", "last_ts", "blocks", "unknown_removals", "dropped_blocks", "history")
	if stream["state"] != "live" || stream["last_seq"].(json.Number) != "0" || stream["missing"].(json.Number) != "5" ||
		stream["unknown_events"].(json.Number) != "2" || stream["unknown_fields"].(json.Number) != "7" || stream["malformed"].(json.Number) != "1" {
		t.Fatalf("stream = %v", stream)
	}
	inc := keysOf(t, list(t, stream["history"], "history")[0], "history[0]", "kind", "from_seq", "to_seq", "missing", "replayed", "lost", "start", "end", "duration_s")
	if inc["duration_s"].(json.Number) != "1" {
		t.Fatalf("incident = %v", inc)
	}

	// The unscraped worker: every figure null, lists empty, a reason.
	w1 := keysOf(t, workers[1], "workers[1]", "reason")
	// Its stream is still connecting: its block count is unknown, not 0.
	isNull(t, w1, "workers[1]", "error", "queue", "running", "kv_usage", "scrape_ms", "last_scrape", "blocks", "routed_share", "breaker", "overheat_prefix")
	isNull(t, w1["prefix_hit_rate"].(map[string]any), "workers[1].prefix_hit_rate", "tokens")
	if w1["state"] != "unknown" || w1["reason"] != "not scraped yet" || len(list(t, w1["engines"], "workers[1].engines")) != 0 ||
		len(list(t, w1["invalid"], "workers[1].invalid")) != 0 || w1["index_full"] != false {
		t.Fatalf("w1 = %v", w1)
	}
	s1 := list(t, w1["streams"], "workers[1].streams")[0].(map[string]any)
	isNull(t, s1, "workers[1].streams[0]", "last_seq", "batches_per_s", "events_per_s", "last_message_age_s", "last_ts")
	list(t, s1["history"], "workers[1].streams[0].history")

	p := keysOf(t, list(t, top["prefixes"], "prefixes")[0], "prefixes[0]", "id", "tokens", "share", "replicas", "workers", "overheating",
		"overheating_workers", "source", "requests", "orphan", "ttft_ms", "queue_ms")
	keysOf(t, p["ttft_ms"], "prefixes[0].ttft_ms", "p50", "p95", "p99", "n", "reason")
	isNull(t, p, "prefixes[0]", "overheating")
	if ow := list(t, p["overheating_workers"], "prefixes[0].overheating_workers"); len(ow) != 0 {
		t.Fatalf("overheating_workers = %v, want [] when nobody overheats", ow)
	}
	if p["id"] != "0000000000009f2c" || p["tokens"].(json.Number) != "16" || p["replicas"].(json.Number) != "1" {
		t.Fatalf("prefix = %v", p)
	}
	keysOf(t, p["workers"], "prefixes[0].workers", "w0")

	routers := list(t, top["routers"], "routers")
	r0 := keysOf(t, routers[0], "routers[0]", "name", "profile", "up", "error", "restarts", "recovery", "routed_share", "requests_per_s", "last_restart", "breakers", "unmapped")
	rc := keysOf(t, r0["recovery"], "routers[0].recovery", "state", "seconds", "baseline", "current", "current_s")
	if rc["current_s"].(json.Number) != "10" {
		t.Fatalf("recovery = %v, want current over the last 10 s", rc)
	}
	list(t, r0["unmapped"], "routers[0].unmapped")
	keysOf(t, r0["routed_share"], "routers[0].routed_share", "w0")
	r1 := routers[1].(map[string]any)
	isNull(t, r1, "routers[1]", "error", "requests_per_s", "last_restart")
	isNull(t, r1["recovery"].(map[string]any), "routers[1].recovery", "seconds", "baseline")

	d := keysOf(t, top["decisions"], "decisions", "records", "with_outcome", "orphan_outcomes", "owner_mismatch", "prediction_errors", "truncated", "bad_lines", "recent",
		"backfill", "sources", "unmapped")
	list(t, d["sources"], "decisions.sources")
	list(t, d["unmapped"], "decisions.unmapped")
	rec := keysOf(t, list(t, d["recent"], "decisions.recent")[0], "recent[0]", "at", "request_id", "attempt_id", "chosen", "owner", "matched", "total",
		"units", "cached_tokens", "prompt_tokens", "queue_ms", "ttft_ms", "done", "flags", "pending")
	if rec["owner"] != "w2" || rec["cached_tokens"].(json.Number) != "0" || rec["done"] != true || list(t, rec["flags"], "flags")[0] != "owner_mismatch" {
		t.Fatalf("recent[0] = %v", rec)
	}
	e := keysOf(t, list(t, top["errors"], "errors")[0], "errors[0]", "source", "kind", "count", "last", "at")
	if e["source"] != "w2 metrics" || e["kind"] != "timeout" || e["count"].(json.Number) != "1" {
		t.Fatalf("errors[0] = %v", e)
	}
	list(t, top["alerts"], "alerts")
	keysOf(t, top["thresholds"], "thresholds", "hot_prefix_share", "overheat_share", "overheat_queue_ratio", "overheat_min_queue", "kv_usage_high",
		"recovery_tolerance", "recovery_hold_s", "thrash_share", "thrash_min_stored", "leave_ratio", "leave_after_s")
}

// An empty pool still prints lists, never nulls, and no made-up zeros.
func TestEmptySnapshotJSON(t *testing.T) {
	raw, err := json.Marshal(NewState(Options{}).Snapshot(at(0)))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"workers", "prefixes", "routers", "errors", "alerts"} {
		list(t, doc[k], k)
	}
	list(t, doc["decisions"].(map[string]any)["recent"], "decisions.recent")
	list(t, doc["decisions"].(map[string]any)["sources"], "decisions.sources")
	pool := doc["pool"].(map[string]any)
	isNull(t, pool, "pool", "queue", "running", "kv_usage", "blocks")
	isNull(t, pool["prefix_hit_rate"].(map[string]any), "pool.prefix_hit_rate", "tokens", "requests")
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
