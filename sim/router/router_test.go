package router

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/kvcache"
)

var testHasher = kvcache.NewHasher(1)

func newRouter(t *testing.T, p Policy) (*Router, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	clock := time.Date(2026, 9, 5, 10, 0, 0, 0, time.UTC)
	r, err := New(Config{Name: "r0", Workers: []string{"w0", "w1", "w2"},
		URLs:   []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"},
		Policy: p, Threshold: 4, Model: "m", Seed: 1, Rate: 0, Audit: path,
		Now: func() time.Time { clock = clock.Add(time.Millisecond); return clock }}, testHasher)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, path
}

func prompt(n int, seed uint32) *engine.Request {
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = seed*7919 + uint32(i)
	}
	return &engine.Request{Tokens: toks, Hashes: testHasher.Extend(nil, toks), PromptLen: n, OutputLen: 10, Tag: &session{}}
}

func records(t *testing.T, r *Router, path string) []map[string]any {
	t.Helper()
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad JSONL line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestCacheAwareFollowsPrefixUntilOverloaded: a request goes to the worker
// whose events show it holds the prefix; once that worker's in-flight count
// exceeds the least loaded one's by more than the threshold, load wins and
// the record keeps the owner apart from the chosen worker.
func TestCacheAwareFollowsPrefixUntilOverloaded(t *testing.T) {
	r, path := newRouter(t, CacheAware)
	q := prompt(160, 1) // 10 blocks
	r.Observe(1, []kvcache.Event{{Kind: kvcache.Stored, Hashes: q.Hashes[:6]}}, 0)

	var chosen []int
	for i := 0; i < 8; i++ {
		c := prompt(160, 1)
		chosen = append(chosen, r.route(c))
	}
	for i, w := range chosen[:5] {
		if w != 1 {
			t.Fatalf("request %d went to w%d, want the prefix holder w1", i, w)
		}
	}
	if chosen[5] == 1 {
		t.Fatalf("w1 has 5 in flight, others 0, threshold 4: want load-balance, got w1")
	}
	recs := records(t, r, path)
	first, lb := recs[0], recs[5]
	p := first["prediction"].(map[string]any)
	if first["reason"] != "best-match" || first["chosen"] != "w1" || p["owner"] != "w1" || p["matched"].(float64) != 6 || p["total"].(float64) != 10 {
		t.Errorf("first decision %v", first)
	}
	if first["prefix"] != strings.ToLower(hex16(q.Hashes[5])) {
		t.Errorf("prefix %v, want the deepest matched block %s", first["prefix"], hex16(q.Hashes[5]))
	}
	lp := lb["prediction"].(map[string]any)
	if lb["reason"] != "load-balance" || lp["owner"] != "w1" || lb["chosen"] == "w1" {
		t.Errorf("overridden decision %v", lb)
	}
	load := lb["load"].(map[string]any)
	if load["kind"] != "inflight" || load["scope"] != "router-local" {
		t.Errorf("load %v", load)
	}
	if len(lb["candidates"].([]any)) != 3 {
		t.Errorf("candidates %v", lb["candidates"])
	}

	// Evicting the blocks on w1 makes the next request a fallback.
	r.Observe(1, []kvcache.Event{{Kind: kvcache.Removed, Hashes: q.Hashes[:6]}}, 0)
	if w := r.route(prompt(160, 1)); w == 1 {
		t.Errorf("went to w1 after its blocks were removed and it is the busiest")
	}
	if last := records(t, r, path); last[len(last)-1]["reason"] != "fallback" {
		t.Errorf("reason %v, want fallback", last[len(last)-1]["reason"])
	}
}

func hex16(h uint64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = digits[h&15]
		h >>= 4
	}
	return string(b)
}

func TestRoundRobinIgnoresCache(t *testing.T) {
	r, path := newRouter(t, RoundRobin)
	q := prompt(64, 2)
	r.Observe(2, []kvcache.Event{{Kind: kvcache.Stored, Hashes: q.Hashes}}, 0)
	var got []int
	for i := 0; i < 6; i++ {
		got = append(got, r.route(prompt(64, 2)))
	}
	for i, w := range got {
		if w != i%3 {
			t.Fatalf("round-robin order %v", got)
		}
	}
	// A round-robin router predicts nothing; the record still names the
	// prefix the pool held (w2's deepest block of the prompt), so kvtop
	// can tell from its own index what the choice recomputed.
	rec := records(t, r, path)[0]
	p := rec["prediction"].(map[string]any)
	if p["source"] != "none" || p["input"] != "none" || p["owner"] != nil || p["units"] != nil || rec["candidates"] != nil {
		t.Errorf("round-robin record claims a prediction: %v", rec)
	}
	if rec["chosen"] != "w0" || rec["prefix"] != hex16(q.Hashes[3]) || rec["reason"] != "load-balance" {
		t.Errorf("round-robin record must name the prefix the pool held: %v", rec)
	}
	// Switched to cache-aware, the next request goes to the holder.
	r.SetPolicy(CacheAware)
	if w := r.route(prompt(64, 2)); w != 2 {
		t.Errorf("cache-aware after round-robin chose w%d, want w2", w)
	}
}

// TestOutcomes: one outcome per decision, with what really happened.
func TestOutcomes(t *testing.T) {
	r, path := newRouter(t, CacheAware)
	ok, aborted, rejected := prompt(100, 3), prompt(100, 4), prompt(100, 5)
	for _, q := range []*engine.Request{ok, aborted, rejected} {
		r.route(q)
	}
	r.Done(engine.Result{Req: ok, CachedTokens: 48, Queue: 5 * time.Millisecond, TTFT: 120 * time.Millisecond, E2E: time.Second, FinishReason: "stop"})
	r.Done(engine.Result{Req: aborted, Status: engine.Aborted, E2E: time.Second})
	r.Rejected(rejected, "queue full")
	recs := records(t, r, path)
	if len(recs) != 6 {
		t.Fatalf("%d records, want 3 decisions and 3 outcomes", len(recs))
	}
	o := recs[3]
	if o["kind"] != "outcome" || o["http_status"].(float64) != 200 || o["done"] != true || o["cached_tokens"].(float64) != 48 ||
		o["prompt_tokens"].(float64) != 100 || o["ttft_ms"].(float64) != 120 || o["finish_reason"] != "stop" {
		t.Errorf("ok outcome %v", o)
	}
	if _, has := o["error"]; !has || o["error"] != nil || o["retry_of"] != nil {
		t.Errorf("error and retry_of must be present and null: %v", o)
	}
	if a := recs[4]; a["http_status"].(float64) != 502 || a["done"] != false || a["error"] == nil {
		t.Errorf("aborted outcome %v", a)
	}
	if j := recs[5]; j["http_status"].(float64) != 503 || j["done"] != false || j["error"] != "queue full" {
		t.Errorf("rejected outcome %v", j)
	}
	if in := r.Inflight(); in[0]+in[1]+in[2] != 0 {
		t.Errorf("in flight after all outcomes: %v", in)
	}
}

// With every worker down the router still decides (and the attempt fails).
func TestAllWorkersDown(t *testing.T) {
	r, path := newRouter(t, CacheAware)
	for w := 0; w < 3; w++ {
		r.SetDown(w, true)
	}
	q := prompt(64, 9)
	if w := r.route(q); w < 0 || w > 2 {
		t.Fatalf("routed to %d", w)
	}
	r.Rejected(q, "worker restarting")
	recs := records(t, r, path)
	if len(recs) != 2 || recs[0]["chosen"] == "" || recs[1]["http_status"].(float64) != 503 {
		t.Fatalf("records %v", recs)
	}
}

func TestTruncatedStreams(t *testing.T) {
	r, path := newRouter(t, CacheAware)
	r.SetTruncate(1)
	q := prompt(100, 6)
	r.route(q)
	r.Done(engine.Result{Req: q, TTFT: time.Millisecond, E2E: time.Second, FinishReason: "stop"})
	o := records(t, r, path)[1]
	if o["http_status"].(float64) != 200 || o["done"] != false || o["finish_reason"] != nil {
		t.Errorf("truncated outcome %v, want HTTP 200 without done", o)
	}
}

// TestMetricsAndRestart: the page parses, holds vllm-router's names with
// the worker URL label; a restart resets counters, the index and the start
// time.
func TestMetricsAndRestart(t *testing.T) {
	r, _ := newRouter(t, CacheAware)
	q := prompt(64, 7)
	r.Observe(0, []kvcache.Event{{Kind: kvcache.Stored, Hashes: q.Hashes}}, 0)
	r.route(prompt(64, 7))
	fams := parse(t, r)
	if v := value(fams, "vllm_router_processed_requests_total", "http://127.0.0.1:1"); v != 1 {
		t.Errorf("processed on w0 = %v, want 1", v)
	}
	if v := value(fams, "vllm_router_running_requests", "http://127.0.0.1:1"); v != 1 {
		t.Errorf("running on w0 = %v, want 1", v)
	}
	start := fams["process_start_time_seconds"].GetMetric()[0].GetGauge().GetValue()
	r.Restart()
	fams = parse(t, r)
	if v := value(fams, "vllm_router_processed_requests_total", "http://127.0.0.1:1"); v != 0 {
		t.Errorf("processed after restart = %v, want 0", v)
	}
	if s := fams["process_start_time_seconds"].GetMetric()[0].GetGauge().GetValue(); s <= start {
		t.Errorf("start time %v not after %v", s, start)
	}
	r.route(prompt(64, 7))
	if r.matched[0] != 0 {
		t.Error("index survived the restart")
	}
}

func parse(t *testing.T, r *Router) map[string]*dto.MetricFamily {
	t.Helper()
	var w promtext.Writer
	r.WriteMetrics(&w)
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(w.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func value(fams map[string]*dto.MetricFamily, name, worker string) float64 {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "worker" && l.GetValue() == worker {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestIndexCountsCopies: a block stored twice on a worker (two physical
// copies, or two ranks) stays held until both are removed.
func TestIndexCountsCopies(t *testing.T) {
	ix := newIndex()
	h := []uint64{42}
	ix.apply(3, []kvcache.Event{{Kind: kvcache.Stored, Hashes: h}, {Kind: kvcache.Stored, Hashes: h}}, 0)
	ix.apply(5, []kvcache.Event{{Kind: kvcache.Stored, Hashes: h}}, 0)
	ix.apply(3, []kvcache.Event{{Kind: kvcache.Removed, Hashes: h}}, 0)
	if ix.blocks[42].mask != 1<<3|1<<5 {
		t.Fatalf("after one of two removals: mask %b", ix.blocks[42].mask)
	}
	ix.apply(3, []kvcache.Event{{Kind: kvcache.Removed, Hashes: h}}, 0)
	if ix.blocks[42].mask != 1<<5 {
		t.Fatalf("after both removals: mask %b", ix.blocks[42].mask)
	}
	ix.apply(5, []kvcache.Event{{Kind: kvcache.Cleared}}, 0)
	if len(ix.blocks) != 0 || len(ix.extra) != 0 {
		t.Fatalf("after clear: %v %v", ix.blocks, ix.extra)
	}
}

// TestAuditRotates: past its size limit the decisions file is renamed to
// .1 and a new one started, without losing a record.
func TestAuditRotates(t *testing.T) {
	r, path := newRouter(t, CacheAware)
	r.audit.limit = 16 << 10
	n, after := 0, -1
	for after < 3 {
		q := prompt(64, uint32(n))
		r.route(q)
		r.Done(engine.Result{Req: q, FinishReason: "stop"})
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
		n++
		if _, err := os.Stat(path + ".1"); err == nil {
			after++
		}
		if n > 1000 {
			t.Fatal("never rotated")
		}
	}
	old, cur := records(t, r, path+".1"), records(t, r, path)
	if len(cur) == 0 || len(old)+len(cur) != 2*n {
		t.Fatalf("%d records rotated + %d current, want all %d", len(old), len(cur), 2*n)
	}
}

// TestPredictionAgeIsIndexLag: a kv-events prediction is as old as the
// owner's latest event the index applied, however long ago the matched
// block was stored (a block still held is current news, not a stale
// prediction); after a restart the router predicts nothing until events
// come again.
func TestPredictionAgeIsIndexLag(t *testing.T) {
	r, path := newRouter(t, CacheAware)
	q := prompt(160, 1)
	r.Observe(1, []kvcache.Event{{Kind: kvcache.Stored, Hashes: q.Hashes[:6]}}, 0)
	r.Observe(1, []kvcache.Event{{Kind: kvcache.Stored, Hashes: prompt(32, 9).Hashes}}, 5*time.Second)
	c := prompt(160, 1)
	c.Arrival = 5*time.Second + 20*time.Millisecond
	if w := r.route(c); w != 1 {
		t.Fatalf("went to w%d, want the holder w1", w)
	}
	p := records(t, r, path)[0]["prediction"].(map[string]any)
	if age, ok := p["age_ms"].(float64); !ok || age != 20 {
		t.Errorf("age_ms %v, want 20 (since w1's last event), not the 5 s since the block was stored", p["age_ms"])
	}
	r.Restart()
	c = prompt(160, 1)
	c.Arrival = 6 * time.Second
	r.route(c)
	recs := records(t, r, path)
	if p := recs[len(recs)-1]["prediction"].(map[string]any); p["matched"].(float64) != 0 || p["age_ms"] != nil {
		t.Errorf("after a restart the router knows nothing: prediction %v", p)
	}
}
