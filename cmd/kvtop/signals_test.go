package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// simTempDirs lists the temporary folders kvtop's simulated pool made in
// dir (it names them kvtop-sim-*).
func simTempDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "kvtop-sim-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitGone polls until dir holds no kvtop-sim-* folder.
func waitGone(t *testing.T, dir, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if len(simTempDirs(t, dir)) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s: the simulated pool's temporary folder is left behind: %v", what, simTempDirs(t, dir))
}

// TestDemoRemovesItsFolderWhenTheTerminalCloses: closing the terminal
// (SIGHUP), or a SIGTERM, stops `kvtop demo` as Ctrl-C does, temporary
// folder removed. SIGHUP used to end the process where it stood.
func TestDemoRemovesItsFolderWhenTheTerminalCloses(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (.ci/run installs it)")
	}
	bin := buildKvtop(t)
	for _, c := range []struct {
		name string
		stop func(s *tmuxSession, pid int) error
	}{
		// tmux closing the pane is a terminal closing: the pty goes and
		// its processes get SIGHUP.
		{"terminal closed", func(s *tmuxSession, _ int) error {
			return exec.Command("tmux", "-L", s.socket, "kill-server").Run()
		}},
		{"SIGHUP", func(_ *tmuxSession, pid int) error { return syscall.Kill(pid, syscall.SIGHUP) }},
		{"SIGTERM", func(_ *tmuxSession, pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			// exec: the pane's process is kvtop itself.
			s := &tmuxSession{t: t, socket: fmt.Sprintf("kvtop-sig-%d-%d", os.Getpid(), tmuxSessions.Add(1)), name: "sig"}
			out, err := exec.Command("tmux", "-L", s.socket, "new-session", "-d", "-s", s.name, "-x", "120", "-y", "34",
				"-e", "NO_COLOR=1", "-e", "TMPDIR="+tmp, "exec "+bin+" demo --workers 2 --speed 3").CombinedOutput()
			if err != nil {
				t.Fatalf("tmux new-session: %v\n%s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
			s.waitFor("pool screen", 60*time.Second, "2/2 up", "LIVE")
			if n := len(simTempDirs(t, tmp)); n != 1 {
				t.Fatalf("the demo made %d temporary folders in TMPDIR, want 1", n)
			}
			pidOut, err := exec.Command("tmux", "-L", s.socket, "list-panes", "-t", s.name, "-F", "#{pane_pid}").Output()
			if err != nil {
				t.Fatalf("tmux list-panes: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(pidOut)))
			if err != nil {
				t.Fatalf("pane pid %q: %v", pidOut, err)
			}
			if err := c.stop(s, pid); err != nil {
				t.Fatalf("stop: %v", err)
			}
			waitGone(t, tmp, "demo after "+c.name)
		})
	}
}

// TestSimRemovesItsFolderOnSIGHUP: `kvtop sim`'s help says its decision
// log is removed on exit; a SIGHUP (its terminal closed) is an exit too.
func TestSimRemovesItsFolderOnSIGHUP(t *testing.T) {
	bin := buildKvtop(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "sim", "--workers", "1")
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			var lines []string
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if sc.Text() == "press Ctrl-C to stop" {
					break
				}
			}
			if n := len(simTempDirs(t, tmp)); n != 1 {
				t.Fatalf("the sim made %d temporary folders in TMPDIR, want 1; it said:\n%s", n, strings.Join(lines, "\n"))
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			err = cmd.Wait()
			if len(simTempDirs(t, tmp)) != 0 {
				t.Errorf("after %s (exit: %v) the folder is left behind: %v; the sim said:\n%s", sig, err, simTempDirs(t, tmp), strings.Join(lines, "\n"))
			}
			if err != nil || lines[len(lines)-1] != "kvtop sim: stopped" {
				t.Errorf("after %s: exit %v, last line %q; want exit 0 after \"kvtop sim: stopped\"", sig, err, lines[len(lines)-1])
			}
		})
	}
}

// TestSimUnderNohupKeepsRunning: a SIGHUP ignored at start (nohup) stays
// ignored; SIGTERM still stops it cleanly.
func TestSimUnderNohupKeepsRunning(t *testing.T) {
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup")
	}
	bin := buildKvtop(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nohup, bin, "sim", "--workers", "1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Dir = tmp
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "press Ctrl-C to stop" {
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		t.Fatalf("under nohup a SIGHUP stopped the sim: %v", err)
	case <-time.After(time.Second):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("SIGTERM: exit %v", err)
	}
	if d := simTempDirs(t, tmp); len(d) != 0 {
		t.Errorf("folder left behind: %v", d)
	}
}
