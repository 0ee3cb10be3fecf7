package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/internal/testproc"
	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// promQuery runs an instant query through Prometheus' HTTP API.
func promQuery(base, q string) ([]struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	return r.Data.Result, nil
}

// TestServeScrapedByPrometheus: a real Prometheus scrapes `kvtop serve`
// on 127.0.0.1 with the shipped rules loaded; the pool's token hit ratio
// read back through Prometheus' API is the one kvtop's own
// /api/v1/snapshot shows, the target is healthy, every rule evaluates, and
// the page passes `promtool check metrics`.
func TestServeScrapedByPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	prom := testproc.Binary(t, "prometheus", "prometheus")
	promtool := testproc.Binary(t, "promtool", "prometheus")
	r := startScenario(t, sim.Options{Scenario: "steady"}, nil)
	r.run(2)
	sv := startServing(t, r, serve.Options{Version: "e2e"})
	r.waitFor("a token hit ratio", func(s *snapshot.Snapshot) bool { return s.Pool.PrefixHitRate.Tokens != nil })

	_, body, err := scrapeMetrics("http://" + sv.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on a live kvtop serve: %v\n%s", err, out)
	}

	dir := t.TempDir()
	rules, _ := filepath.Abs(rulesFile)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: kvtop
    static_configs:
      - targets: [%q]
`, rules, sv.addr)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	web := testproc.FreeAddr(t)
	logs := testproc.Output{Tail: 4000}
	cmd := exec.Command(prom, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	base := "http://" + web

	// Wait until Prometheus has scraped kvtop a few times.
	deadline := time.Now().Add(90 * time.Second)
	for {
		res, err := promQuery(base, `count_over_time(kvtop_pool_prefix_hit_ratio{weight="tokens"}[1m])`)
		if err == nil && len(res) == 1 {
			if n, _ := strconv.ParseFloat(res[0].Value[1].(string), 64); n >= 3 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has no kvtop_pool_prefix_hit_ratio after 90 s (last: %v)\nprometheus log:\n%s", err, logs.String())
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Stop the simulated traffic so the ratio settles, then compare the
	// latest scraped value with kvtop's own snapshot.
	r.run(0)
	time.Sleep(2 * time.Second)
	res, err := promQuery(base, `kvtop_pool_prefix_hit_ratio{weight="tokens"}`)
	if err != nil || len(res) != 1 {
		t.Fatalf("query: %v %v", res, err)
	}
	got, _ := strconv.ParseFloat(res[0].Value[1].(string), 64)
	if res[0].Metric["job"] != "kvtop" || res[0].Metric["instance"] != sv.addr {
		t.Errorf("series labels %v", res[0].Metric)
	}
	resp, err := http.Get("http://" + sv.addr + "/api/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	var snap snapshot.Snapshot
	err = json.NewDecoder(resp.Body).Decode(&snap)
	resp.Body.Close()
	if err != nil || snap.Pool.PrefixHitRate.Tokens == nil {
		t.Fatalf("kvtop's snapshot: %v, hit ratio %v", err, snap.Pool.PrefixHitRate.Tokens)
	}
	// One scrape (1 s) apart at most: the ratio over a 15 s window of a
	// pool that stopped moves little in that time.
	if want := *snap.Pool.PrefixHitRate.Tokens; math.Abs(got-want) > 0.02 || got <= 0 || got > 1 {
		t.Errorf("Prometheus reads a pool token hit ratio of %.4f, kvtop's snapshot says %.4f", got, want)
	}
	t.Logf("pool token hit ratio: Prometheus %.4f, kvtop %.4f", got, *snap.Pool.PrefixHitRate.Tokens)

	if res, err := promQuery(base, `up{job="kvtop"}`); err != nil || len(res) != 1 || res[0].Value[1] != "1" {
		t.Errorf("up{job=kvtop}: %v %v", res, err)
	}
	// Every shipped rule loaded and evaluates without error on real data.
	rresp, err := http.Get(base + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer rresp.Body.Close()
	var rr struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(rresp.Body).Decode(&rr); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rr.Data.Groups {
		for _, rl := range g.Rules {
			n++
			if rl.Health != "ok" {
				t.Errorf("rule %s: health %q %s", rl.Name, rl.Health, rl.LastError)
			}
		}
	}
	if n != len(loadRules(t)) {
		t.Errorf("Prometheus loaded %d rules, the file has %d\n%s", n, len(loadRules(t)), logs.String())
	}
}
