package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
)

func simExec(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

// TestSimWritesConfig: a short run prints the endpoints, writes a config
// kvtop loads, and stops by itself after --duration.
func TestSimWritesConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.yaml")
	out, _, err := simExec(context.Background(), "sim", "--workers", "2", "--dp", "2", "--duration", "2s", "--speed", "20",
		"--write-config", path, "--engine", "sglang")
	if err != nil {
		t.Fatalf("sim: %v\n%s", err, out)
	}
	for _, want := range []string{"WORKER", "w1", "rank 1", "router r0 metrics", "config written to " + path, "2s of simulated time elapsed", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	c, err := config.Load(nil, path)
	if err != nil {
		t.Fatalf("written config: %v", err)
	}
	if len(c.Workers) != 2 || c.Workers[0].DPRanks != 2 || c.Workers[0].Engine != "sglang" || c.Decisions[0].Format != "kvtop" {
		t.Errorf("config %+v", c)
	}
}

// TestSimBusyPort: a taken --base-port is one line and exit code 1.
func TestSimBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	_, _, err = simExec(context.Background(), "sim", "--base-port", fmt.Sprint(port))
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("error %v, want exit code 1", err)
	}
	if !strings.Contains(exit.msg, fmt.Sprintf("127.0.0.1:%d", port)) || !strings.Contains(exit.msg, "already in use") || strings.Contains(exit.msg, "\n") {
		t.Errorf("message %q: want one line naming the port", exit.msg)
	}
}

func TestSimBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--engine", "tgi"}, {"--scenario", "chaos"}, {"--hash", "int64"}, {"--encoding", "json"}, {"--policy", "random"}, {"--batch", "dict"}, {"--batch", "map", "--engine", "sglang"},
		{"--workers", "0"}, {"--workers", "-3"}, {"--pd", "2"}, {"--pd", "2:0"}, {"--pd", "2:2", "--workers", "3"}, {"--pd", "1:1", "--engine", "sglang"}, {"--models", "3"}, {"--models", "2", "--pd", "1:1"}} {
		_, _, err := simExec(context.Background(), append([]string{"sim"}, args...)...)
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(exit.msg, strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: error %v, want a usage error naming the flag", args, err)
		}
	}
}

// TestSimStopsCleanly: cancelling (what SIGINT/SIGTERM do) stops the sim
// and frees its ports: the same fixed layout binds again at once.
func TestSimStopsCleanly(t *testing.T) {
	port := freeRun(t, 4) // one worker: metrics, events, replay; then the router's metrics
	for run := 0; run < 2; run++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var out string
		go func() {
			var err error
			out, _, err = simExec(ctx, "sim", "--workers", "1", "--base-port", fmt.Sprint(port))
			done <- err
		}()
		time.Sleep(300 * time.Millisecond) // let it start (not an assertion)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("sim did not stop after its context was cancelled")
		}
		if !strings.Contains(out, "stopped") {
			t.Errorf("run %d output:\n%s", run, out)
		}
	}
}

// freeRun returns a port p such that p .. p+n-1 are free now, so a fixed
// --base-port layout does not collide with whatever else runs here.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		free := p+n <= 65535
		for q := p; q < p+n && free; q++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
			if free = err == nil; free {
				l.Close()
			}
		}
		if free {
			return p
		}
	}
	t.Fatal("no run of free ports found")
	return 0
}

// TestWriteConfigKeepsAnExistingFile: --write-config does not replace a
// file without --force (it may be the operator's own config), and says so
// before binding anything; with --force it does.
func TestWriteConfigKeepsAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvtop.yaml")
	mine := []byte("# my pool\nworkers:\n  - name: prod-0\n    metrics: http://10.0.0.5:8000/metrics\n")
	if err := os.WriteFile(path, mine, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := simExec(context.Background(), "sim", "--duration", "1s", "--speed", "20", "--write-config", path)
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != 2 || exit.msg != "sim: --write-config "+path+": the file exists; add --force to replace it" {
		t.Fatalf("error %v, want exit 2 saying the file exists", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, mine) {
		t.Fatalf("the existing file changed:\n%s", got)
	}
	out, _, err := simExec(context.Background(), "sim", "--workers", "2", "--duration", "1s", "--speed", "20", "--write-config", path, "--force")
	if err != nil {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	if c, err := config.Load(nil, path); err != nil || len(c.Workers) != 2 || c.Workers[0].Name != "w0" {
		t.Errorf("--force did not write the sim's config: %v, %+v", err, c.Workers)
	}
	// The hint names the command as it was run, with -c.
	if !strings.Contains(out, "run: "+self()+" -c "+path+")") {
		t.Errorf("output lacks the run hint:\n%s", out)
	}
}
