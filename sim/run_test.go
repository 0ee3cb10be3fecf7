package sim_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/wirecheck"
	"github.com/kvtop/kvtop/sim/worker"
)

// TestSeedRepeatable: the same seed gives the same batches and decisions;
// another seed does not.
func TestSeedRepeatable(t *testing.T) {
	run := func(seed int64) (events []string, decisions []string) {
		s := startSim(t, sim.Options{Seed: seed})
		zc := zctx(t)
		advance(t, s, 15*time.Second)
		for _, w := range s.Endpoints().Workers {
			for _, msg := range replay(t, zc, w.Replay[0], 0) {
				r, err := wirecheck.ReplyFrames(msg, "v26", wirecheck.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if r.End {
					continue
				}
				line := fmt.Sprintf("%s %d:", w.Name, r.Seq)
				for _, e := range r.Batch.Events {
					line += fmt.Sprintf(" %s%x", e.Kind, e.Keys)
				}
				events = append(events, line)
			}
		}
		for _, r := range readRecords(t, s.Endpoints().Decisions) {
			delete(r, "ts")
			decisions = append(decisions, fmt.Sprint(r))
		}
		return events, decisions
	}
	e1, d1 := run(42)
	e2, d2 := run(42)
	e3, _ := run(43)
	if len(e1) < 50 || len(d1) < 50 {
		t.Fatalf("only %d batches, %d records", len(e1), len(d1))
	}
	if strings.Join(e1, "\n") != strings.Join(e2, "\n") {
		t.Error("same seed, different KV events")
	}
	if strings.Join(d1, "\n") != strings.Join(d2, "\n") {
		t.Error("same seed, different decisions")
	}
	if strings.Join(e1, "\n") == strings.Join(e3, "\n") {
		t.Error("different seeds, same KV events")
	}
}

// TestClearCache: an explicit reset is the only AllBlocksCleared.
func TestClearCache(t *testing.T) {
	s := startSim(t, sim.Options{Workers: 1, Seed: 12})
	zc := zctx(t)
	w := s.Endpoints().Workers[0]
	advance(t, s, 5*time.Second)
	if err := s.Inject(sim.ClearCache{Worker: 0}); err != nil {
		t.Fatal(err)
	}
	rep := replay(t, zc, w.Replay[0], 0)
	last, err := wirecheck.ReplyFrames(rep[len(rep)-2], "v26", wirecheck.Options{Encoding: "map"})
	if err != nil {
		t.Fatal(err)
	}
	if len(last.Batch.Events) != 1 || last.Batch.Events[0].Kind != "AllBlocksCleared" {
		t.Fatalf("last batch %+v, want AllBlocksCleared", last.Batch.Events)
	}
}

// TestBusyPort: a taken port is one clear error naming it.
func TestBusyPort(t *testing.T) {
	// A worker's layout is metrics at base, events at base+1, replay at
	// base+2 (one rank); events are bound first. Find a base whose layout is
	// free, then hold the events port: the error must name it, whatever
	// else runs on this machine.
	base := freeLayout(t, 4)
	busy := base + 1
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", busy))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = sim.Start(nil, sim.Options{Workers: 1, BasePort: base, Manual: true})
	var bind *worker.BindError
	if !errorsAs(err, &bind) {
		t.Fatalf("error %v, want a BindError", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("127.0.0.1:%d", busy)) || !strings.Contains(msg, "already in use") || strings.Contains(msg, "\n") {
		t.Fatalf("error %q: want one line naming the busy port", msg)
	}
	// Nothing stays bound: the same layout starts once the port is free.
	ln.Close()
	s, err := sim.Start(nil, sim.Options{Workers: 1, BasePort: base, Manual: true})
	if err != nil {
		t.Fatalf("after freeing the port: %v", err)
	}
	if got := s.Endpoints().Workers[0].Metrics; got != fmt.Sprintf("http://127.0.0.1:%d/metrics", base) {
		t.Errorf("metrics at %s, want the base port", got)
	}
	s.Close()
}

// freeLayout returns a port p such that p .. p+n-1 are all free now.
func freeLayout(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p+n > 65535 {
			continue
		}
		ok := true
		for q := p; q < p+n && ok; q++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no run of free ports found")
	return 0
}

// TestConfigPointsAtSim: the written config loads, validates and points at
// live endpoints.
func TestConfigPointsAtSim(t *testing.T) {
	s := startSim(t, sim.Options{Workers: 2, DPRanks: 2, Seed: 13})
	path := t.TempDir() + "/kvtop.yaml"
	if err := config.Write(path, s.Config(), "test"); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(nil, path)
	if err != nil {
		t.Fatalf("written config does not load: %v", err)
	}
	if len(c.Workers) != 2 || c.Workers[1].DPRanks != 2 || len(c.Routers) != 1 || len(c.Decisions) != 1 || c.Decisions[0].Format != "kvtop" {
		t.Fatalf("config %+v", c)
	}
	for _, w := range c.Workers {
		scrape(t, w.Metrics)
		if w.Events == "" || w.Replay == "" {
			t.Errorf("%s: no events or replay endpoint", w.Name)
		}
	}
	scrape(t, c.Routers[0].Metrics)
	if !strings.Contains(s.Endpoints().Table(), "rank 1") {
		t.Errorf("endpoint table does not list rank 1:\n%s", s.Endpoints().Table())
	}
}
