package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binDir    string
	bin       string
	buildErr  error
)

// TestMain removes the binary buildKvtop made.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildKvtop builds the real binary once per test run.
func buildKvtop(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "kvtop-test-bin-"); buildErr != nil {
			return
		}
		bin = filepath.Join(binDir, "kvtop")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// tmuxSession drives a program in a detached tmux session on a private
// server socket, as an operator's terminal would.
type tmuxSession struct {
	t      *testing.T
	socket string
	name   string
}

// tmuxSessions numbers the tmux servers this test process starts.
var tmuxSessions atomic.Int64

func startTmux(t *testing.T, w, h int, env []string, cmd string) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (.ci/run installs it)")
	}
	// A socket (so a server) per session: a session's cleanup kills its
	// server, which must not take the next test's session with it.
	s := &tmuxSession{t: t, socket: fmt.Sprintf("kvtop-e2e-%d-%d", os.Getpid(), tmuxSessions.Add(1)), name: "e2e"}
	args := []string{"-L", s.socket, "new-session", "-d", "-s", s.name, "-x", fmt.Sprint(w), "-y", fmt.Sprint(h)}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, cmd+"; sleep 60")
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	return s
}

func (s *tmuxSession) keys(keys ...string) {
	s.t.Helper()
	args := append([]string{"-L", s.socket, "send-keys", "-t", s.name}, keys...)
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		s.t.Fatalf("tmux send-keys %v: %v\n%s", keys, err, out)
	}
}

func (s *tmuxSession) screen() string {
	out, err := exec.Command("tmux", "-L", s.socket, "capture-pane", "-p", "-t", s.name).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// waitFor polls the screen until every want appears, or fails with the
// last screen shown.
func (s *tmuxSession) waitFor(what string, timeout time.Duration, want ...string) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	var scr string
	for time.Now().Before(deadline) {
		scr = s.screen()
		ok := true
		for _, w := range want {
			if !strings.Contains(scr, w) {
				ok = false
				break
			}
		}
		if ok {
			return scr
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.t.Fatalf("%s: screen never showed %q within %s; last screen:\n%s", what, want, timeout, scr)
	return ""
}

// TestDemoEndToEnd runs `kvtop demo` in a real terminal (tmux), waits for the
// simulated pool, walks the screens with the keys an operator would press,
// and checks that the event-loss gap is detected and repaired on screen.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildKvtop(t)
	s := startTmux(t, 120, 34, []string{"NO_COLOR=1"}, bin+" demo --scenario event-loss --workers 3 --speed 3 --refresh 500ms")

	s.waitFor("pool screen", 60*time.Second, "3/3 up", "w0", "w1", "w2", "LIVE", "refresh 500ms")

	s.keys("3")
	// The event-loss cue drops 8 of w0's batches from the live stream; the
	// replay gives them back: the timeline says so.
	scr := s.waitFor("streams screen", 60*time.Second, "STREAMS", "TIMELINE", "gap")
	if !strings.Contains(scr, "replay") {
		t.Errorf("the gap on the streams screen does not mention its replay:\n%s", scr)
	}

	for _, step := range []struct{ key, want string }{
		{"4", "PREFIX"},
		{"5", "DECISIONS"},
		{"6", "ROUTERS"},
		{"1", "WORKER"},
		{"?", "KEYS"},
	} {
		s.keys(step.key)
		s.waitFor("screen "+step.key, 15*time.Second, step.want)
	}
	s.keys("Escape")
	s.waitFor("back to pool", 15*time.Second, "WORKER", "STATE")

	s.keys("f")
	s.waitFor("freeze", 15*time.Second, "FROZEN")
	s.keys("q")
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && strings.Contains(s.screen(), "kvtop") {
		time.Sleep(200 * time.Millisecond)
	}
	if scr := s.screen(); strings.Contains(scr, "FROZEN") {
		t.Errorf("q did not quit the console:\n%s", scr)
	}
}

// TestConsoleResizeThenQuit: pasted text is not taken for keys; the
// console follows the terminal through a shrink and a grow (every row of the new size repainted, the footer on
// the last one), and quitting afterwards gives the shell its screen back
// clean (with the cursor left mid-screen by a paint, tmux kept lines of
// the console there after a grow: TestCursorRestsOnLastLine in package
// paint holds the fix).
func TestConsoleResizeThenQuit(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildKvtop(t)
	s := startTmux(t, 120, 34, []string{"NO_COLOR=1"}, bin+" demo --workers 3 --speed 3 --refresh 500ms; echo exit=$?")
	s.waitFor("pool screen", 60*time.Second, "3/3 up", "w0", "LIVE")
	// A paste is text, not keys: the q in it does not quit.
	for _, args := range [][]string{{"set-buffer", "-b", "kv", "w1 q"}, {"paste-buffer", "-p", "-b", "kv", "-t", s.name}} {
		if out, err := exec.Command("tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("tmux %s: %v\n%s", args[0], err, out)
		}
	}
	time.Sleep(time.Second)
	if scr := s.screen(); strings.Contains(scr, "exit=") || !strings.Contains(scr, "LIVE") {
		t.Fatalf("a pasted q quit the console:\n%s", scr)
	}
	for _, size := range [][2]int{{80, 24}, {200, 50}} {
		w, h := size[0], size[1]
		if out, err := exec.Command("tmux", "-L", s.socket, "resize-window", "-t", s.name, "-x", fmt.Sprint(w), "-y", fmt.Sprint(h)).CombinedOutput(); err != nil {
			t.Fatalf("tmux resize-window: %v\n%s", err, out)
		}
		deadline := time.Now().Add(15 * time.Second)
		var rows []string
		for time.Now().Before(deadline) {
			rows = strings.Split(strings.TrimSuffix(s.screen(), "\n"), "\n")
			if len(rows) == h && strings.Contains(rows[h-1], "q quit") && strings.Contains(rows[0], "kvtop") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if len(rows) != h || !strings.Contains(rows[h-1], "q quit") || !strings.Contains(rows[0], "kvtop") {
			t.Fatalf("at %dx%d the header is not on the first row and the footer on the last:\n%s", w, h, strings.Join(rows, "\n"))
		}
		for i, r := range rows {
			if strings.Contains(r, "q quit") && i != h-1 {
				t.Errorf("at %dx%d a footer is left on row %d of %d:\n%s", w, h, i+1, h, strings.Join(rows, "\n"))
			}
		}
	}
	s.keys("q")
	scr := s.waitFor("the exit", 15*time.Second, "exit=0")
	for _, gone := range []string{"WORKER", "kvtop", "w0", "q quit"} {
		if strings.Contains(scr, gone) {
			t.Errorf("%q is still on the shell's screen after q:\n%s", gone, scr)
		}
	}
}

// TestConsoleNeedsTTY: without a terminal the console says what to run
// instead: the snapshot command on the same config (the operator's -c
// kept, quoted for the shell), and for the demo the simulated pool
// headless.
func TestConsoleNeedsTTY(t *testing.T) {
	bin := buildKvtop(t)
	cfg := filepath.Join(t.TempDir(), "my pool.yaml")
	if err := os.WriteFile(cfg, []byte("workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfg}, "kvtop: not a terminal: the console needs a TTY; for a headless view run `" + bin + " snapshot -c '" + cfg + "' --for 5s --format text` (or --format json)"},
		{[]string{"demo"}, "kvtop: not a terminal: the console needs a TTY; for a headless view run `" + bin + " sim --write-config sim.yaml`, then `" + bin + " snapshot -c sim.yaml --for 5s --format text`"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("%v: exit: %v, output %s", c.args, err, out)
		}
		if got := strings.TrimSuffix(string(out), "\n"); got != c.want {
			t.Errorf("%v:\n got %s\nwant %s", c.args, got, c.want)
		}
	}
}

// TestFirstRunWithoutConfig: a new user's first `kvtop` finds no config:
// it says where it looked and what to do, not "no workers configured".
func TestFirstRunWithoutConfig(t *testing.T) {
	bin := buildKvtop(t)
	dir, xdg := t.TempDir(), t.TempDir()
	for _, args := range [][]string{nil, {"snapshot"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+xdg)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("%v: exit %v, output %s", args, err, out)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if want := "kvtop: no config: none given (-c FILE) and none at ./kvtop.yaml or " + filepath.Join(xdg, "kvtop", "config.yaml"); lines[0] != want {
			t.Errorf("%v: first line\n %s\nwant %s", args, lines[0], want)
		}
		for _, want := range []string{bin + " demo", bin + " sim --write-config sim.yaml, then (in another terminal) " + bin + " -c sim.yaml",
			"kvtop:   workers:", "metrics: http://10.0.0.5:8000/metrics"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
		if strings.Contains(string(out), "no workers configured") {
			t.Errorf("%v: still says no workers configured:\n%s", args, out)
		}
	}
}

// TestVersionAndFlagsThatMeanSomething: --version says what `kvtop version`
// says; -c is offered where a config is read, not on sim or demo; demo
// takes --refresh.
func TestVersionAndFlagsThatMeanSomething(t *testing.T) {
	bin := buildKvtop(t)
	run := func(args ...string) (string, int) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	v, code := run("--version")
	if cmd, _ := run("version"); code != 0 || v != cmd || !strings.HasPrefix(v, "kvtop ") {
		t.Errorf("--version %q (exit %d), version %q", v, code, cmd)
	}
	for _, c := range []struct {
		cmd    string
		config bool
	}{{"", true}, {"snapshot", true}, {"sim", false}, {"demo", false}} {
		help, _ := run(strings.Fields(c.cmd + " --help")...)
		if got := strings.Contains(help, "--config"); got != c.config {
			t.Errorf("kvtop %s --help offers --config: %v, want %v", c.cmd, got, c.config)
		}
	}
	if out, code := run("sim", "-c", "x.yaml"); code != 2 || !strings.Contains(out, "unknown shorthand flag: 'c'") {
		t.Errorf("sim -c: exit %d, %s", code, out)
	}
	if out, code := run("demo", "--refresh", "100ms"); code != 2 || strings.TrimSpace(out) != "kvtop: --refresh: 100ms is below the floor of 250ms" {
		t.Errorf("demo --refresh 100ms: exit %d, %s", code, out)
	}
	if out, code := run("demo", "--workers", "0"); code != 2 || strings.TrimSpace(out) != "kvtop: demo: workers: 0 is not between 1 and 64" {
		t.Errorf("demo --workers 0: exit %d, %s", code, out)
	}
}

// TestBadConfigExits: a config with a typo is one clear message and exit 2.
func TestBadConfigExits(t *testing.T) {
	bin := buildKvtop(t)
	cfg := filepath.Join(t.TempDir(), "kvtop.yaml")
	if err := os.WriteFile(cfg, []byte("workers:\n  - name: w0\n    metrcs: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "snapshot", "--config", cfg).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, output %s", err, out)
	}
	want := cfg + `: workers[0].metrcs (line 3): unknown key (did you mean "metrics"?)`
	if !strings.Contains(string(out), want) {
		t.Errorf("output %q does not contain %q", out, want)
	}
}
