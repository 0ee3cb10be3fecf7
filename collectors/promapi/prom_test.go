package promapi_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/internal/testproc"
)

// needPrometheus finds Debian's prometheus binary: CI installs it (.ci/run,
// make test-deps), a developer machine without it skips.
func needPrometheus(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real Prometheus skipped in -short mode")
	}
	return testproc.Binary(t, "prometheus", "prometheus")
}

// promServer is a real Prometheus on 127.0.0.1 with a config the test
// can rewrite and reload (SIGHUP).
type promServer struct {
	t    *testing.T
	base string
	cfg  string
	cmd  *exec.Cmd
	logs *testproc.Output
}

// startPrometheus runs Prometheus scraping the given targets, each with
// its labels, every interval.
func startPrometheus(t *testing.T, interval time.Duration, targets []promTarget) *promServer {
	bin := needPrometheus(t)
	dir := t.TempDir()
	p := &promServer{t: t, cfg: filepath.Join(dir, "prometheus.yml"), logs: &testproc.Output{Tail: 3000}}
	p.write(interval, targets)
	web := testproc.FreeAddr(t)
	p.base = "http://" + web
	p.cmd = exec.Command(bin, "--config.file="+p.cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30 s: %v\n%s", err, p.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type promTarget struct {
	addr   string // host:port of a /metrics page
	labels map[string]string
}

func (p *promServer) write(interval time.Duration, targets []promTarget) {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n  - job_name: engines\n    static_configs:\n",
		interval, interval)
	for _, tg := range targets {
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels:\n", tg.addr)
		for k, v := range tg.labels {
			fmt.Fprintf(&b, "          %s: %q\n", k, v)
		}
	}
	if err := os.WriteFile(p.cfg, []byte(b.String()), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// reload rewrites the config and makes Prometheus read it again.
func (p *promServer) reload(interval time.Duration, targets []promTarget) {
	p.write(interval, targets)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		p.t.Fatal(err)
	}
}

// collect runs a collector into a channel drained by the test.
func collect(t *testing.T, ctx context.Context, c collectors.Collector) <-chan collectors.Observation {
	t.Helper()
	out := make(chan collectors.Observation, 4096)
	go func() {
		if err := c.Run(ctx, out); err != nil {
			t.Errorf("%s: %v", c.Name(), err)
		}
	}()
	return out
}
