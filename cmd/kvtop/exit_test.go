package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// runKvtop runs the built binary as a script would and returns its stdout,
// stderr and exit code. env replaces every KVTOP_* variable of the test's
// own environment.
func runKvtop(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildKvtop(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kvtop %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kvtop.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func stderrLines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// TestSnapshotExitsWhenNoWorkerIsReached: the only worker's metrics and
// events point at a closed port. The script gets exit 1, one line saying
// why, and the snapshot it may still want on stdout.
func TestSnapshotExitsWhenNoWorkerIsReached(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, fmt.Sprintf(`refresh: 250ms
scrape_interval: 250ms
workers:
  - name: w0
    metrics: http://%s/metrics
    events: tcp://%s
`, closedPort(t), closedPort(t)))
	out, stderr, code := runKvtop(t, nil, "snapshot", "--config", cfg, "--for", "2s")
	if code != exitUnreachable {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUnreachable, stderr)
	}
	lines := stderrLines(stderr)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "kvtop: no worker could be reached during 2s: w0: down: ") ||
		!strings.Contains(lines[0], "refused") || !strings.HasSuffix(lines[0], "; events never connected") {
		t.Errorf("stderr %q: want one line naming w0, the refused scrape and the stream that never connected", stderr)
	}
	var snap snapshot.Snapshot
	if err := json.Unmarshal([]byte(out), &snap); err != nil || len(snap.Workers) != 1 || snap.Workers[0].Up {
		t.Errorf("stdout is not the snapshot of a pool with w0 down (%v):\n%.300s", err, out)
	}
}

// TestSnapshotExitsWhenEventsBindCannotBind: the test holds the port
// events_bind names. kvtop says so and exits 1.
func TestSnapshotExitsWhenEventsBindCannotBind(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	bind := "tcp://" + held.Addr().String()
	cfg := writeConfig(t, "refresh: 250ms\nevents_bind: "+bind+"\n")
	out, stderr, code := runKvtop(t, nil, "snapshot", "--config", cfg, "--for", "2s")
	if code != exitUnreachable {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUnreachable, stderr)
	}
	lines := stderrLines(stderr)
	want := "kvtop: events_bind " + bind + " is not bound: bind " + bind + ": "
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.Contains(strings.ToLower(lines[0]), "in use") || strings.Contains(lines[0], "retrying") {
		t.Errorf("stderr:\n%s\nwant first %q… address in use", stderr, want)
	}
	if len(lines) == 2 && lines[1] != "kvtop: no worker could be reached during 2s: no publisher sent to events_bind "+bind {
		t.Errorf("second line %q", lines[1])
	}
	if !json.Valid([]byte(out)) {
		t.Errorf("no snapshot on stdout:\n%.300s", out)
	}
}

// vllmPage serves a one-engine vLLM metrics page with this queue.
func vllmPage(t *testing.T, waiting float64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %g
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3
`, waiting)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// TestSnapshotFailOnOverheating: a hand-made pool where every decision
// sends one prefix to w0, whose queue is 20 against 1 and 1. With
// --fail-on overheating the script gets exit 5 and the worker named; with
// rules that do not match, exit 0 on the same pool.
func TestSnapshotFailOnOverheating(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`refresh: 250ms
scrape_interval: 250ms
window: 10s
workers:
  - {name: w0, metrics: %q}
  - {name: w1, metrics: %q}
  - {name: w2, metrics: %q}
decisions:
  - {path: %q, format: kvtop}
`, vllmPage(t, 20), vllmPage(t, 1), vllmPage(t, 1), log))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the router: a decision every 20 ms, each to w0
		f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		for i := 0; ctx.Err() == nil; i++ {
			fmt.Fprintf(f, `{"kind":"decision","ts":%q,"request_id":"r-%d","attempt_id":"1","chosen":"w0","prefix":"9f2c4e1a0b7d3c55"}`+"\n",
				time.Now().UTC().Format(time.RFC3339Nano), i)
			time.Sleep(20 * time.Millisecond)
		}
	}()

	type result struct {
		stderr string
		code   int
	}
	var wg sync.WaitGroup
	res := make([]result, 2)
	for i, rules := range []string{"overheating", "down,history_lost"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, stderr, code := runKvtop(t, nil, "snapshot", "--config", cfg, "--for", "4s", "--fail-on", rules)
			res[i] = result{stderr, code}
		}()
	}
	wg.Wait()
	if r := res[0]; r.code != exitOverheating || r.stderr != "kvtop: --fail-on overheating: w0 (100% of prefix 9f2c4e1a0b7d3c55)\n" {
		t.Errorf("--fail-on overheating: exit %d, stderr %q; want %d and w0 named", r.code, r.stderr, exitOverheating)
	}
	if r := res[1]; r.code != 0 || r.stderr != "" {
		t.Errorf("--fail-on down,history_lost on a pool that is up with no streams: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestSnapshotDecisionsFlag: on the demo's simulated pool, --decisions 5
// keeps the 5 most recent decisions, and the JSON shrinks with them.
func TestSnapshotDecisionsFlag(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 6, Scenario: "tour", Speed: 4, Listen: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Config()
	c.Refresh, c.ScrapeInterval = 250*time.Millisecond, 250*time.Millisecond
	path := filepath.Join(t.TempDir(), "kvtop.yaml")
	if err := config.Write(path, c, "test"); err != nil {
		t.Fatal(err)
	}
	type run struct {
		out    string
		stderr string
		code   int
	}
	var wg sync.WaitGroup
	runs := make([]run, 2)
	for i, n := range []string{"5", "-1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, stderr, code := runKvtop(t, nil, "snapshot", "--config", path, "--for", "5s", "--decisions", n)
			runs[i] = run{out, stderr, code}
		}()
	}
	wg.Wait()
	var recent [2][]snapshot.DecisionRow
	for i, r := range runs {
		var snap struct {
			Decisions struct{ Recent []snapshot.DecisionRow }
		}
		if r.code != 0 || json.Unmarshal([]byte(r.out), &snap) != nil {
			t.Fatalf("run %d: exit %d, stderr %s\n%.300s", i, r.code, r.stderr, r.out)
		}
		recent[i] = snap.Decisions.Recent
	}
	if len(recent[0]) != 5 || len(recent[1]) < 50 {
		t.Fatalf("recent decisions: %d with --decisions 5, %d with -1 (want 5, and at least 50)", len(recent[0]), len(recent[1]))
	}
	trimmed, full := len(runs[0].out), len(runs[1].out)
	t.Logf("snapshot JSON: %d bytes with --decisions 5, %d with all %d recent decisions", trimmed, full, len(recent[1]))
	// Each record dropped is at least a few hundred bytes of JSON (how many
	// arrive in 5 s depends on the machine's load: a ratio would not).
	if dropped := len(recent[1]) - 5; full-trimmed < dropped*200 {
		t.Errorf("--decisions 5 gives %d bytes, all %d decisions %d: want %d records' worth (200 bytes each) less", trimmed, len(recent[1]), full, dropped)
	}
}

// TestConfigProblemsNameTheirSource runs the console as an operator would
// with a bad flag and a bad variable: each problem names its flag or
// variable, the mistyped variable is a warning, and it exits 2.
func TestConfigProblemsNameTheirSource(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n")
	_, stderr, code := runKvtop(t, []string{"KVTOP_WINDOW=abc", "KVTOP_WINDOWS=2m"}, "--config", cfg, "--refresh", "100ms")
	want := `kvtop: warning: KVTOP_WINDOWS is not a kvtop setting (did you mean KVTOP_WINDOW?)
kvtop: --refresh: 100ms is below the floor of 250ms
kvtop: KVTOP_WINDOW: "abc" is not a duration (write it like 1s, 500ms, 2m)
`
	if code != exitUsage || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d and:\n%s", code, stderr, exitUsage, want)
	}
}

// TestConfigTextCannotDriveTheTerminal: a key, a value and a variable name
// holding ESC sequences and a CR reach stderr with every control character
// replaced, each problem on its own line.
func TestConfigTextCannotDriveTheTerminal(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `"\e[2J\e]0;pwned\a\rrefresh": 1s
theme_file: "\e[31mtheme\r.yaml"
workers:
  - name: w0
    metrics: http://127.0.0.1:1/metrics
`)
	_, stderr, code := runKvtop(t, []string{"KVTOP_\x1b[1mX=1"}, "snapshot", "--config", cfg)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitUsage, stderr)
	}
	if strings.ContainsAny(stderr, "\x1b\r\a") {
		t.Fatalf("stderr carries control characters: %q", stderr)
	}
	lines := stderrLines(stderr)
	for i, want := range []string{
		"kvtop: warning: KVTOP_?[1mX is not a kvtop setting",
		"kvtop: " + cfg + `: ?[2J?]0;pwned??refresh (line 1): unknown key`,
		"kvtop: " + cfg + ": theme_file (line 2): cannot read: open " + filepath.Dir(cfg) + "/?[31mtheme?.yaml: no such file or directory",
	} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d of stderr does not start %q:\n%s", i+1, want, stderr)
		}
	}
	if len(lines) != 3 {
		t.Errorf("%d lines, want 3:\n%s", len(lines), stderr)
	}
}

// TestUsageErrorsExit2: a mistyped flag, a stray argument and an unknown
// --fail-on rule are usage errors (2), not pool problems (1).
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "--fail-on", "down,hot"}, `kvtop: --fail-on "hot": want a comma-separated list of down, history_lost, overheating`},
		{[]string{"snapshot", "--decsions", "5"}, "kvtop: unknown flag: --decsions"},
		{[]string{"snapshot", "now"}, `kvtop: unknown command "now" for "kvtop snapshot"`},
	} {
		_, stderr, code := runKvtop(t, nil, c.args...)
		if code != exitUsage || strings.TrimSuffix(stderr, "\n") != c.want {
			t.Errorf("kvtop %v: exit %d, stderr %q; want %d, %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

// TestJudge holds the exit rules to hand-made snapshots: a bind error the
// collector stopped repeating is a bind that succeeded; a worker whose
// stream delivered was reached even if its metrics never answered; a
// discovered worker is not a configured one that is down.
func TestJudge(t *testing.T) {
	at := time.Date(2026, 9, 5, 10, 0, 0, 0, time.UTC)
	bind := "tcp://127.0.0.1:5557"
	c := config.Config{EventsBind: bind, Workers: []config.Worker{{Name: "w0"}}}
	live := snapshot.Worker{Name: "w0", State: "no_metrics", Engine: "unknown", Streams: []snapshot.Stream{{State: "live", Batches: 3}}}
	ghost := snapshot.Worker{Name: "10.0.0.9:8000", State: "down", Engine: "unknown", Reason: "discovered from events"}
	for _, tc := range []struct {
		name     string
		s        snapshot.Snapshot
		rules    map[string]bool
		code     int
		contains string
	}{
		{"bind failing now", snapshot.Snapshot{At: at, Workers: []snapshot.Worker{live},
			Errors: []snapshot.ErrorCount{{Source: "events bind " + bind, Kind: "bind", Last: "bind " + bind + ": Address already in use (retrying)", At: at.Add(-time.Second)}}},
			nil, exitUnreachable, "events_bind " + bind + " is not bound: bind " + bind + ": Address already in use"},
		{"bound after a retry", snapshot.Snapshot{At: at, Workers: []snapshot.Worker{live},
			Errors: []snapshot.ErrorCount{{Source: "events bind " + bind, Kind: "bind", At: at.Add(-10 * time.Second)}}},
			nil, 0, ""},
		{"events reached, metrics never", snapshot.Snapshot{At: at, Workers: []snapshot.Worker{live}}, map[string]bool{"down": true}, 0, ""},
		{"a discovered worker is not configured", snapshot.Snapshot{At: at, Workers: []snapshot.Worker{live, ghost}}, map[string]bool{"down": true}, 0, ""},
		{"history lost", snapshot.Snapshot{At: at, Workers: []snapshot.Worker{{Name: "w0", Up: true, Engine: "vllm",
			Streams: []snapshot.Stream{{Rank: 1, State: "history_lost", Batches: 9, Lost: 12}}}}},
			map[string]bool{"history_lost": true, "overheating": true}, exitHistoryLost, "--fail-on history_lost: w0 rank 1 (12 batches lost)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := judge(&tc.s, c, 5*time.Second, tc.rules)
			switch {
			case tc.code == 0 && ex != nil:
				t.Errorf("exit %d: %s", ex.code, ex.msg)
			case tc.code != 0 && (ex == nil || ex.code != tc.code || !strings.Contains(ex.msg, tc.contains)):
				t.Errorf("got %+v, want exit %d with %q", ex, tc.code, tc.contains)
			}
		})
	}
}

// TestTokenFileReadableByOthersWarnsAtStart: a bearer token file that group
// or others may read is named on stderr before collection starts (like
// ssh does for keys); one readable by its owner only gives no warning.
func TestTokenFileReadableByOthersWarnsAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	loose, tight := filepath.Join(dir, "loose"), filepath.Join(dir, "tight")
	for path, mode := range map[string]os.FileMode{loose: 0o644, tight: 0o600} {
		if err := os.WriteFile(path, []byte("s3cret\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // the umask may have narrowed it
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, "workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n    bearer_token_file: "+loose+
		"\n  - name: w1\n    metrics: http://127.0.0.1:1/metrics\n    bearer_token_file: "+tight+"\n")
	_, stderr, _ := runKvtop(t, nil, "snapshot", "--for", "300ms", "--config", cfg)
	want := "kvtop: warning: bearer_token_file " + loose + " is readable by group or others (mode 0644): chmod 600 it"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	if strings.Contains(stderr, tight) || strings.Contains(stderr, "s3cret") {
		t.Errorf("stderr names the owner-only token file or the token:\n%s", stderr)
	}
}
