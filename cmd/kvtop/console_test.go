package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/config"
)

// helperEnv makes the test binary, run in tmux by a test below, be a
// console instead of a test run.
const helperEnv = "KVTOPTEST_CONSOLE_HELPER"

// failingCollector fails like a collector that cannot go on (kvevents
// without a ZMQ context): after a while, Run returns an error.
type failingCollector struct{ after time.Duration }

func (failingCollector) Name() string { return "failing" }

func (f failingCollector) Run(ctx context.Context, _ chan<- collectors.Observation) error {
	select {
	case <-time.After(f.after):
		return errors.New("kvevents: zmq context: too many open files")
	case <-ctx.Done():
		return nil
	}
}

// TestConsoleHelper is the console the test below drives: the real
// collectors and pool on a config, plus a collector that fails, shown by
// the real console in a real terminal. It exits as kvtop's main does.
func TestConsoleHelper(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestConsoleExitsOnEngineError in a terminal")
	}
	c := config.Defaults()
	c.Workers = []config.Worker{{Name: "w0", Metrics: "http://" + os.Getenv(helperEnv) + "/metrics"}}
	cs, err := buildCollectors(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := runEngine(ctx, c, append(cs, failingCollector{after: 3 * time.Second}))
	if err := consoleOn(ctx, c, e, nil); err != nil {
		printError(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestConsoleExitsOnEngineError: when a collector fails for good, the
// console does not go on showing a pool nobody collects: it leaves the
// alternate screen and kvtop exits 1 with the error, as `snapshot` does.
func TestConsoleExitsOnEngineError(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	s := startTmux(t, 100, 30, []string{"NO_COLOR=1", helperEnv + "=" + closedPort(t)},
		fmt.Sprintf("%s -test.run '^TestConsoleHelper$'; echo exit=$?", os.Args[0]))
	s.waitFor("the console", 30*time.Second, "WORKER", "w0")
	scr := s.waitFor("the exit", 30*time.Second, "exit=1")
	if !strings.Contains(scr, "kvtop: kvevents: zmq context: too many open files") {
		t.Errorf("the error is not on the terminal:\n%s", scr)
	}
	if strings.Contains(scr, "WORKER") {
		t.Errorf("the console's screen is still shown (terminal not restored):\n%s", scr)
	}
}
