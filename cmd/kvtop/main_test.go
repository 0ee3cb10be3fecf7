package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestPprofOnlyOnLoopback: the profiling endpoint exposes internals, so it
// refuses any address an outsider could reach.
func TestPprofOnlyOnLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "10.0.0.5:6060", "localhost"} {
		_, _, err := simExec(context.Background(), "version", "--pprof", addr)
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(exit.msg, "loopback") {
			t.Errorf("--pprof %s: %v", addr, err)
		}
	}
	out, _, err := simExec(context.Background(), "version", "--pprof", "127.0.0.1:0")
	if err != nil || !strings.HasPrefix(out, "kvtop ") {
		t.Errorf("--pprof 127.0.0.1:0: %v %q", err, out)
	}
}
