package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeGo is a `go` for the Makefile's build target: `list` prints one
// "stale" line per package FAKE_STALE says is to compile, `build -o F`
// makes F.
const fakeGo = `#!/bin/sh
case "$1" in
list) i=0; while [ "$i" -lt "$FAKE_STALE" ]; do echo stale; i=$((i+1)); done ;;
build) while [ $# -gt 0 ]; do [ "$1" = "-o" ] && : > "$2"; shift; done ;;
esac
`

// TestMakeBuildSaysAFirstBuildIsLong: `make demo` on a fresh machine showed
// one go build line for minutes. The build target now says first what it
// is doing, and on a first build (hundreds of packages to compile) how
// long that takes; a build with little to compile says only what it
// builds.
func TestMakeBuildSaysAFirstBuildIsLong(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	if err := exec.Command("pkg-config", "--exists", "libzmq").Run(); err != nil {
		t.Skip("libzmq is not installed: make's deps target would install it")
	}
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stale string
		first bool
	}{{"892", true}, {"3", false}} {
		bin := filepath.Join(dir, "kvtop-"+c.stale)
		cmd := exec.Command("make", "--no-print-directory", "build", "GO="+goBin, "BIN="+bin)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "FAKE_STALE="+c.stale)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make build (%s stale): %v\n%s", c.stale, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "kvtop: building "+bin) || !strings.Contains(lines[1], " build ") {
			t.Fatalf("make build (%s stale): want a line saying what it builds before the go build line:\n%s", c.stale, out)
		}
		first := "first build, " + c.stale + " packages to compile (kvtop's dependencies and the Go standard library): about 5 CPU-minutes, 3 to 5 minutes on 2 cores"
		if got := strings.Contains(lines[0], first); got != c.first {
			t.Errorf("make build (%s stale): says %q: %v, want %v:\n%s", c.stale, first, got, c.first, out)
		}
		if _, err := os.Stat(bin); err != nil {
			t.Errorf("make build (%s stale) built nothing: %v", c.stale, err)
		}
	}
}
