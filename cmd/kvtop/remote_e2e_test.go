package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/sim"
)

// TestRemoteConsoleEndToEnd runs `kvtop --remote` in a real terminal
// (tmux) on a `kvtop serve` of the simulated pool: the same screens, the
// status line saying remote <host>, live and the data's age; when the
// collector goes the console says so and keeps the last picture; when it
// is back the console reconnects by itself. +/- cannot change the
// collector's refresh: they say so and the header keeps it.
func TestRemoteConsoleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildKvtop(t)
	r := startScenario(t, sim.Options{Scenario: "steady"}, nil)
	r.run(1)
	const token = "e2e-remote-token"
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	sv := startServing(t, r, serve.Options{Token: token})
	addr := sv.addr

	s := startTmux(t, 160, 34, []string{"NO_COLOR=1"}, bin+" --remote http://"+addr+" --auth-token-file "+tok)
	s.waitFor("the remote console", 60*time.Second, "remote "+addr+" · live · data", "4/4 up", "w0", "w3", "REMOTE "+addr+" · ")

	s.keys("3")
	s.waitFor("streams screen", 15*time.Second, "STREAMS", "live")
	// + says the refresh is the collector's, and the header keeps it.
	s.keys("+")
	scr := s.waitFor("refresh message", 15*time.Second, "refresh is set by the collector (250 ms)")
	if !strings.Contains(scr, "─ refresh 250ms") || strings.Contains(scr, "refresh 500ms") {
		t.Errorf("+ changed the header's refresh:\n%s", scr)
	}

	sv.stop()
	scr = s.waitFor("the collector lost", 30*time.Second, "remote "+addr+" · collector lost", "reconnecting (", "REMOTE "+addr+" LOST · ")
	if !strings.Contains(scr, "STREAMS") || !strings.Contains(scr, "w3") {
		t.Errorf("the last picture is not kept while the collector is lost:\n%s", scr)
	}
	startServingOn(t, r, addr, serve.Options{Token: token})
	scr = s.waitFor("reconnected", 60*time.Second, "remote "+addr+" · live · data")
	if strings.Contains(scr, "REMOTE "+addr+" LOST") {
		t.Errorf("reconnected, the header still says LOST:\n%s", scr)
	}
	if strings.Contains(s.screen(), token) {
		t.Errorf("the screen shows the token:\n%s", s.screen())
	}

	s.keys("q")
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && strings.Contains(s.screen(), "remote "+addr) {
		time.Sleep(200 * time.Millisecond)
	}
	if scr := s.screen(); strings.Contains(scr, "remote "+addr+" ·") {
		t.Errorf("q did not quit the remote console:\n%s", scr)
	}
}
