package serve

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views/fixture"
)

// latestOf is a Source holding one snapshot (swappable).
type latestOf struct {
	p atomic.Pointer[snapshot.Snapshot]
}

func (l *latestOf) Latest() *snapshot.Snapshot { return l.p.Load() }

func sourceOf(s *snapshot.Snapshot) *latestOf {
	l := &latestOf{}
	l.p.Store(s)
	return l
}

// scrape serves s through a real server and returns the /metrics body.
func scrape(t *testing.T, s *snapshot.Snapshot, o Options) string {
	t.Helper()
	o.Source = sourceOf(s)
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// families parses a text exposition.
func families(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the /metrics body does not parse: %v\n%s", err, body)
	}
	return fams
}

// sample finds the value of name with exactly these labels (name=value
// pairs), and whether it is there.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if len(m.Label) != len(labels)/2 {
			continue
		}
		ok := true
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// promtool is the path of Prometheus' promtool. CI installs it (.ci/run,
// make deps); only outside CI may a test skip without it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed: CI must install Debian's prometheus package (.ci/run)")
		}
		t.Skip("promtool is not installed (make deps installs Debian's prometheus package)")
	}
	return p
}

// TestMetricsOfTheFixture: every figure the operator alerts on is there
// with the snapshot's value; unknown figures have no sample (an absent
// series, not a 0), measured zeros are 0.
func TestMetricsOfTheFixture(t *testing.T) {
	snap := fixture.Snapshot()
	snap.Decisions.FlaggedTotal = snapshot.FlaggedTotal{OwnerMismatch: 4100, PredictionErrors: 350, Truncated: 27}
	fams := families(t, scrape(t, snap, Options{Version: "v1.2.3"}))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kvtop_build_info", nil, 1},
		{"kvtop_pool_workers", nil, 9},
		{"kvtop_pool_workers_up", nil, 7},
		{"kvtop_pool_prefix_hit_ratio", []string{"weight", "tokens"}, 0.71},
		{"kvtop_pool_prefix_hit_ratio", []string{"weight", "requests"}, 0.48},
		{"kvtop_pool_load_skew_ratio", nil, 3.1},
		{"kvtop_pool_load_gini", nil, 0.41},
		{"kvtop_pool_queue", nil, 43},
		{"kvtop_pool_index_complete", nil, 0},
		{"kvtop_worker_queue", []string{"worker", "w3"}, 19},
		{"kvtop_worker_running", []string{"worker", "w3"}, 16},
		{"kvtop_worker_kv_usage_ratio", []string{"worker", "w3"}, 0.93},
		{"kvtop_worker_prefix_hit_ratio", []string{"worker", "w3"}, 0.91},
		{"kvtop_worker_blocks", []string{"worker", "w3"}, 60200},
		{"kvtop_worker_overheating", []string{"worker", "w3"}, 1},
		{"kvtop_worker_overheating", []string{"worker", "w0"}, 0},
		{"kvtop_worker_up", []string{"worker", "w6"}, 0},
		{"kvtop_worker_up", []string{"worker", "w0"}, 1},
		{"kvtop_worker_index_complete", []string{"worker", "w5"}, 0},
		{"kvtop_worker_index_complete", []string{"worker", "w0"}, 1},
		{"kvtop_worker_restarts_total", []string{"worker", "w6"}, 1},
		// Measured zeros of the idle worker.
		{"kvtop_worker_queue", []string{"worker", "w1"}, 0},
		{"kvtop_worker_blocks", []string{"worker", "w1"}, 0},
		{"kvtop_stream_gaps_total", []string{"worker", "w7", "rank", "0"}, 2},
		{"kvtop_stream_missing_total", []string{"worker", "w5", "rank", "0"}, 1240},
		{"kvtop_stream_lost_total", []string{"worker", "w5", "rank", "0"}, 1240},
		{"kvtop_stream_state", []string{"worker", "w5", "rank", "0", "state", "history_lost"}, 1},
		{"kvtop_stream_state", []string{"worker", "w2", "rank", "1", "state", "live"}, 1},
		{"kvtop_router_restarts_total", []string{"router", "r0"}, 1},
		{"kvtop_router_recovering", []string{"router", "r0"}, 1},
		{"kvtop_router_last_recovery_seconds", []string{"router", "r0"}, 42},
		{"kvtop_hot_prefix_share", []string{"prefix", "9f2c4e1a77b03d55"}, 0.41},
		{"kvtop_source_errors_total", []string{"source", "w6", "kind", "scrape"}, 12},
		{"kvtop_decisions_journal", nil, float64(snap.Decisions.Records)},
		{"kvtop_decisions_flagged", []string{"flag", "owner_mismatch"}, float64(snap.Decisions.OwnerMismatch)},
		{"kvtop_decisions_flagged", []string{"flag", "truncated"}, float64(snap.Decisions.Truncated)},
		{"kvtop_decisions_flagged_total", []string{"flag", "owner_mismatch"}, 4100},
		{"kvtop_decisions_flagged_total", []string{"flag", "prediction_error"}, 350},
		{"kvtop_decisions_flagged_total", []string{"flag", "truncated"}, 27},
		// Latency in seconds: the overheating w3 slow, the pool's from
		// its summed buckets.
		{"kvtop_worker_ttft_seconds", []string{"worker", "w3", "percentile", "95"}, 1.9},
		{"kvtop_worker_ttft_seconds", []string{"worker", "w0", "percentile", "50"}, 0.18},
		{"kvtop_worker_itl_seconds", []string{"worker", "w5", "percentile", "99"}, 0.014},
		{"kvtop_worker_queue_time_seconds", []string{"worker", "w3", "percentile", "95"}, 1.4},
		{"kvtop_worker_e2e_seconds", []string{"worker", "w2", "percentile", "95"}, 2.9},
		{"kvtop_pool_ttft_seconds", []string{"percentile", "95"}, 0.64},
		{"kvtop_pool_queue_time_seconds", []string{"percentile", "99"}, 1.2},
		{"kvtop_worker_tokens_per_second", []string{"worker", "w0", "kind", "prompt"}, 6200},
		{"kvtop_worker_tokens_per_second", []string{"worker", "w0", "kind", "generation"}, 540},
		{"kvtop_worker_tokens_per_second", []string{"worker", "w1", "kind", "prompt"}, 0},
		{"kvtop_worker_requests_per_second", []string{"worker", "w3"}, 6.7},
		{"kvtop_worker_recompute_tokens_per_second", []string{"worker", "w4"}, 2900},
		{"kvtop_worker_recompute_ratio", []string{"worker", "w4"}, 0.57},
		{"kvtop_pool_tokens_per_second", []string{"kind", "prompt"}, 37900},
		{"kvtop_pool_requests_per_second", nil, 20.4},
		{"kvtop_pool_recompute_tokens_per_second", nil, 5910},
		{"kvtop_pool_recompute_ratio", nil, 0.12},
		// The hit-rate ladder (issue 26): the fixture's 2.46 M prompt
		// tokens over 60 s, 12% lost to routing.
		{"kvtop_pool_hit_ladder", []string{"rung", "actual"}, 1_746_600.0 / 2_460_000},
		{"kvtop_pool_hit_ladder", []string{"rung", "perfect_routing"}, (1_746_600.0 + 295_200) / 2_460_000},
		{"kvtop_pool_hit_loss_tokens_per_second", []string{"cause", "routing"}, 295_200.0 / 60},
		{"kvtop_pool_hit_loss_tokens_per_second", []string{"cause", "configuration"}, 0},
	} {
		labels := c.labels
		if c.name == "kvtop_build_info" {
			continue // checked below: its goversion label varies
		}
		got, ok := sample(fams, c.name, labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, labels, got, ok, c.want)
		}
	}
	if b := fams["kvtop_build_info"]; b == nil || len(b.Metric) != 1 || !hasLabel(b.Metric[0], "version", "v1.2.3") {
		t.Errorf("kvtop_build_info does not carry the version: %v", b)
	}
	// Unknowns are absent: w1's hit ratio (no queries), w6's queue (down),
	// w8's blocks (no stream connected).
	for _, c := range [][]string{{"kvtop_worker_prefix_hit_ratio", "w1"}, {"kvtop_worker_queue", "w6"}, {"kvtop_worker_blocks", "w8"}, {"kvtop_worker_requests_per_second", "w6"}} {
		if v, ok := sample(fams, c[0], "worker", c[1]); ok {
			t.Errorf("%s{worker=%s} = %v: the snapshot does not know it, so there must be no sample", c[0], c[1], v)
		}
	}
	// No request timed on the idle w1, none on the down w6: no quantile.
	for _, w := range []string{"w1", "w6"} {
		for _, q := range []string{"50", "95", "99"} {
			if v, ok := sample(fams, "kvtop_worker_ttft_seconds", "worker", w, "percentile", q); ok {
				t.Errorf("kvtop_worker_ttft_seconds{worker=%s,percentile=%s} = %v: unknown in the snapshot, so no sample", w, q, v)
			}
		}
	}
	// Counters are counters, so rate() and increase() work on them.
	for _, name := range []string{"kvtop_stream_gaps_total", "kvtop_stream_lost_total", "kvtop_router_restarts_total", "kvtop_source_errors_total", "kvtop_decisions_total", "kvtop_decisions_flagged_total"} {
		if f := fams[name]; f == nil || f.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is not exported as a counter: %v", name, f.GetType())
		}
	}
	// One state per stream, its current one.
	states := map[string]int{}
	for _, m := range fams["kvtop_stream_state"].Metric {
		states[labelOf(m, "worker")+"/"+labelOf(m, "rank")]++
	}
	if len(states) != 10 {
		t.Errorf("%d streams have a state, want the fixture's 10", len(states))
	}
	for k, n := range states {
		if n != 1 {
			t.Errorf("stream %s has %d states", k, n)
		}
	}
}

func hasLabel(m *dto.Metric, name, value string) bool { return labelOf(m, name) == value }

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestMetricsPassPromtool: the body passes `promtool check metrics`
// (names, units, suffixes, HELP) as Prometheus' own linter reads it.
func TestMetricsPassPromtool(t *testing.T) {
	bin := promtool(t)
	for name, snap := range map[string]*snapshot.Snapshot{"fixture": fixture.Snapshot(), "large": fixture.Large(64), "none": nil} {
		body := scrape(t, snap, Options{Version: "test"})
		cmd := exec.Command(bin, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("%s: promtool check metrics: %v\n%s", name, err, out)
		}
	}
}

// TestMetricsBoundedHotPrefixes: only the top N prefixes get a series,
// labelled by their first 16 hex digits; two that share those keep the
// hotter one, so the scrape never fails on a duplicate series.
func TestMetricsBoundedHotPrefixes(t *testing.T) {
	snap := fixture.Snapshot()
	snap.Prefixes = nil
	for i := 0; i < 40; i++ {
		id := strings.Repeat("ab", 8) + strings.Repeat(string("0123456789abcdef"[i%16]), 8)
		if i >= 16 {
			id = strings.Repeat(string("0123456789abcdef"[i%16]), 16) + "00ff"
		}
		snap.Prefixes = append(snap.Prefixes, snapshot.Prefix{ID: id, Share: float64(40-i) / 100})
	}
	fams := families(t, scrape(t, snap, Options{HotPrefixes: 5}))
	f := fams["kvtop_hot_prefix_share"]
	if f == nil {
		t.Fatal("no kvtop_hot_prefix_share")
	}
	var got []string
	for _, m := range f.Metric {
		got = append(got, labelOf(m, "prefix"))
	}
	sort.Strings(got)
	// The first 16 share "abababababababab": one series, the hottest.
	if len(got) != 5 || got[0] != "0000000000000000" {
		t.Errorf("hot prefixes exported %v, want 5 distinct 16-digit labels", got)
	}
	if v, _ := sample(fams, "kvtop_hot_prefix_share", "prefix", "abababababababab"); v != 0.40 {
		t.Errorf("shared label keeps share %v, want the hottest's 0.40", v)
	}
}

// TestMetricsHostileNames: worker and source names are from the network:
// quotes, newlines and invalid UTF-8 still give a valid exposition with
// one series per worker.
func TestMetricsHostileNames(t *testing.T) {
	snap := fixture.Snapshot()
	snap.Workers[0].Name = "w\"0\n} 1\nkvtop_pool_workers 99"
	snap.Workers[1].Name = "w\xff\xfe1"
	snap.Errors[0].Source = "bad\xc3\x28source"
	body := scrape(t, snap, Options{})
	fams := families(t, body)
	if v, _ := sample(fams, "kvtop_pool_workers"); v != 9 {
		t.Errorf("kvtop_pool_workers = %v: a worker name forged a sample", v)
	}
	if got := len(fams["kvtop_worker_up"].Metric); got != len(snap.Workers) {
		t.Errorf("%d kvtop_worker_up series, want one per worker (%d)", got, len(snap.Workers))
	}
	if _, ok := sample(fams, "kvtop_worker_up", "worker", "w\uFFFD1"); !ok {
		t.Errorf("the worker with invalid UTF-8 in its name lost its series:\n%s", body)
	}
}

// TestMetricsBeforeTheFirstSnapshot: before the pool publishes, /metrics
// answers with kvtop_build_info alone, no made-up zeros.
func TestMetricsBeforeTheFirstSnapshot(t *testing.T) {
	fams := families(t, scrape(t, nil, Options{}))
	for name := range fams {
		if strings.HasPrefix(name, "kvtop_") && name != "kvtop_build_info" && !strings.HasPrefix(name, "kvtop_serve_") {
			t.Errorf("%s exported before any snapshot", name)
		}
	}
	if fams["kvtop_build_info"] == nil {
		t.Error("no kvtop_build_info")
	}
}

// TestGatherIsCollect: the direct path /metrics uses (Gather) exports the
// very samples the prometheus.Collector path does through a registry,
// which checks each one (types, labels, duplicates).
func TestGatherIsCollect(t *testing.T) {
	for name, snap := range map[string]*snapshot.Snapshot{"fixture": fixture.Snapshot(), "large": fixture.Large(300), "none": nil} {
		c := NewCollector(sourceOf(snap).Latest, "v", 0)
		at := time.Now()
		c.now = func() time.Time { return at }
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		viaRegistry, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: the registry refuses the collector's samples: %v", name, err)
		}
		direct, _ := c.Gather()
		if a, b := text(t, viaRegistry), text(t, sortedCopy(direct)); a != b {
			t.Errorf("%s: Gather and Collect differ:\n%s\n---\n%s", name, a, b)
		}
	}
}

func text(t *testing.T, fams []*dto.MetricFamily) string {
	t.Helper()
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// sortedCopy orders each family's samples as the registry does (by label
// values), for comparison.
func sortedCopy(fams []*dto.MetricFamily) []*dto.MetricFamily {
	for _, f := range fams {
		sort.SliceStable(f.Metric, func(i, j int) bool {
			a, b := f.Metric[i].Label, f.Metric[j].Label
			for k := range a {
				if a[k].GetValue() != b[k].GetValue() {
					return a[k].GetValue() < b[k].GetValue()
				}
			}
			return false
		})
	}
	return fams
}

// TestMetricsGzip: Prometheus asks for gzip and gets it (level 1); a
// client that does not gets plain text; both carry the same samples.
func TestMetricsGzip(t *testing.T) {
	srv, err := New(Options{Source: sourceOf(fixture.Snapshot())})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	body := func(enc string) (string, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/metrics", nil)
		req.Header.Set("Accept-Encoding", enc)
		resp, err := http.DefaultTransport.RoundTrip(req) // no transparent decompression
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get("Content-Encoding"), grep(string(b), "kvtop_worker_")
	}
	gzEnc, gz := body("gzip, deflate")
	plainEnc, plain := body("identity")
	_, refused := body("gzip;q=0")
	if gzEnc != "gzip" || plainEnc != "" {
		t.Errorf("Content-Encoding %q for gzip, %q for identity", gzEnc, plainEnc)
	}
	if gz != plain || refused != plain || !strings.Contains(plain, `kvtop_worker_queue{worker="w3"} 19`) {
		t.Errorf("the gzip and plain pages differ:\n%s\n---\n%s", gz, plain)
	}
}

// TestMetricsReusedAcrossScrapes: the memory a scrape hands back is
// reused by the next, so a scrape after a larger snapshot must show the
// new snapshot alone: what a fresh server shows of it, no row of before.
func TestMetricsReusedAcrossScrapes(t *testing.T) {
	src := sourceOf(fixture.Large(64))
	srv, err := New(Options{Source: src, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	get := func() string {
		resp, err := http.Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// kvtop's own families, without the one that moves with the clock.
	ours := func(body string) string {
		var keep []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "kvtop_") && !strings.HasPrefix(l, "kvtop_snapshot_age_seconds") && !strings.HasPrefix(l, "kvtop_serve_") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	large := get()
	if !strings.Contains(large, `worker="w063"`) {
		t.Fatalf("the 64-worker scrape lacks w063")
	}
	get() // the same snapshot again, on reused memory
	src.p.Store(fixture.Snapshot())
	got := ours(get())
	want := ours(scrape(t, fixture.Snapshot(), Options{Version: "test"}))
	if got != want {
		t.Errorf("after a 64-worker scrape, the 9-worker snapshot exports other samples than a fresh server:\n%s", lineDiff(got, want))
	}
}

// lineDiff names the first lines that differ.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return "got  " + al[i] + "\nwant " + bl[i]
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

// A prefill/decode pool exports each worker's role and who said so, the
// figures per role, and a decode worker's transferred tokens; the plain
// fixture (no roles set) exports no role series.
func TestMetricsOfRoles(t *testing.T) {
	snap := fixture.Disaggregated()
	fams := families(t, scrape(t, snap, Options{}))
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kvtop_worker_role", []string{"worker", "w0", "role", "prefill", "source", "config"}, 1},
		{"kvtop_worker_role", []string{"worker", "w3", "role", "decode", "source", "kubernetes"}, 1},
		{"kvtop_worker_role", []string{"worker", "w8", "role", "aggregated", "source", "default"}, 1},
		{"kvtop_worker_transferred_tokens", []string{"worker", "w3"}, 18400},
		{"kvtop_pool_role_workers_up", []string{"role", "prefill"}, 2},
		{"kvtop_pool_role_queue", []string{"role", "decode"}, *snap.Pool.Roles[1].Queue},
		{"kvtop_pool_role_kv_usage", []string{"role", "decode"}, *snap.Pool.Roles[1].KVUsage},
	} {
		if got, ok := sample(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := sample(fams, "kvtop_worker_transferred_tokens", "worker", "w0"); ok {
		t.Error("a prefill worker has no transferred tokens")
	}
	mm := families(t, scrape(t, fixture.MultiModel(), Options{}))
	if v, ok := sample(mm, "kvtop_pool_model_workers_up", "model", "Qwen/Qwen3-8B"); !ok || v != 5 {
		t.Errorf("kvtop_pool_model_workers_up{model=Qwen/Qwen3-8B} = %v (present %v), want 5", v, ok)
	}
	if v, ok := sample(mm, "kvtop_pool_model_queue", "model", "meta-llama/Llama-3.1-70B-Instruct"); !ok || v != 7 {
		t.Errorf("kvtop_pool_model_queue{model=Llama} = %v (present %v), want 7", v, ok)
	}
	if f := families(t, scrape(t, fixture.Snapshot(), Options{})); f["kvtop_worker_role"] != nil {
		t.Error("a snapshot without roles exports kvtop_worker_role")
	}
}

// TestMetricsOfClients: with a tap feeding the pool, what the clients got
// is exported per worker and for the pool — the router's successes beside
// the client's finished streams; without a tap, none of it.
func TestMetricsOfClients(t *testing.T) {
	snap := fixture.Snapshot()
	if fams := families(t, scrape(t, snap, Options{})); fams["kvtop_pool_client_requests"] != nil {
		t.Fatal("client metrics without a tap")
	}
	p50, p95, p99 := 120.0, 300.0, 900.0
	c := snapshot.Clients{Requests: 3, Finished: 2, Truncated: 1, Breaks: 4, RouterKnown: 3, RouterOK: 3,
		TTFTMS: snapshot.RequestQuantiles{P50: &p50, P95: &p95, P99: &p99, N: 20}}
	snap.Pool.Clients = c
	snap.Workers[0].Clients = c
	fams := families(t, scrape(t, snap, Options{}))
	w := snap.Workers[0].Name
	for _, x := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kvtop_pool_client_requests", []string{"class", "finished"}, 2},
		{"kvtop_pool_client_requests", []string{"class", "truncated"}, 1},
		{"kvtop_pool_client_requests", []string{"class", "failed"}, 0},
		{"kvtop_pool_client_router_ok", nil, 3},
		{"kvtop_pool_client_stream_breaks", nil, 4},
		{"kvtop_pool_client_ttft_seconds", []string{"percentile", "95"}, 0.3},
		{"kvtop_worker_client_requests", []string{"worker", w, "class", "finished"}, 2},
		{"kvtop_worker_client_router_ok", []string{"worker", w}, 3},
		{"kvtop_worker_client_ttft_seconds", []string{"worker", w, "percentile", "99"}, 0.9},
		{"kvtop_worker_client_requests", []string{"worker", snap.Workers[1].Name, "class", "finished"}, 0},
	} {
		if v, ok := sample(fams, x.name, x.labels...); !ok || v != x.want {
			t.Errorf("%s%v = %v (present %v), want %v", x.name, x.labels, v, ok, x.want)
		}
	}
	if _, ok := sample(fams, "kvtop_worker_client_router_ok", "worker", snap.Workers[1].Name); ok {
		t.Error("a worker with no router outcome has a router_ok sample: unknown is not 0")
	}
}
