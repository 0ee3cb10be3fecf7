package sim_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

// TestEventLossShowsAsGap: a publisher skips a run of seqs live but keeps
// them for replay.
func TestEventLossShowsAsGap(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 5})
	zc := zctx(t)
	w := s.Endpoints().Workers[1]
	sub := subscribe(t, zc, w.Events[0])
	advance(t, s, 5*time.Second)
	if err := s.Inject(sim.EventLoss{Worker: 1, Batches: 5}); err != nil {
		t.Fatal(err)
	}
	advance(t, s, 10*time.Second)
	total := len(replay(t, zc, w.Replay[0], 0)) - 1
	live := recv(t, sub, total-5)
	var gaps [][2]uint64
	prev := uint64(0)
	for i, msg := range live {
		seq := seqOf(msg[1])
		if i == 0 && seq != 0 {
			t.Fatalf("first seq %d", seq)
		}
		if i > 0 && seq != prev+1 {
			gaps = append(gaps, [2]uint64{prev + 1, seq - 1})
		}
		prev = seq
	}
	if len(gaps) != 1 || gaps[0][1]-gaps[0][0]+1 != 5 {
		t.Fatalf("gaps %v, want one gap of 5 seqs", gaps)
	}
	rep := replay(t, zc, w.Replay[0], gaps[0][0])
	for i := 0; i < 5; i++ {
		r, err := wirecheck.ReplyFrames(rep[i], "v26", wirecheck.Options{})
		if err != nil || r.Seq != gaps[0][0]+uint64(i) {
			t.Fatalf("replay of the gap: reply %d = %+v (%v)", i, r, err)
		}
	}
	if extra := pending(t, sub, 200*time.Millisecond); len(extra) != 0 {
		t.Fatalf("%d more live messages than expected", len(extra))
	}
}

// TestReplayOverflowLosesHistory: a gap longer than the replay buffer: the
// first replayed seq is later than the one asked for.
func TestReplayOverflowLosesHistory(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 5, ReplayBuffer: 16})
	zc := zctx(t)
	w := s.Endpoints().Workers[0]
	sub := subscribe(t, zc, w.Events[0])
	advance(t, s, 3*time.Second)
	if err := s.Inject(sim.ReplayOverflow{Worker: 0, Extra: 8}); err != nil {
		t.Fatal(err)
	}
	var live [][][]byte
	for i := 0; i < 200; i++ {
		advance(t, s, time.Second)
		live = append(live, pending(t, sub, 50*time.Millisecond)...)
		if len(live) > 0 && gapIn(live) != nil {
			break
		}
	}
	g := gapIn(live)
	if g == nil {
		t.Fatal("no gap after the overflow")
	}
	if g[1]-g[0]+1 != 16+8 {
		t.Fatalf("gap %v, want 24 seqs (buffer 16 + 8)", g)
	}
	rep := replay(t, zc, w.Replay[0], g[0])
	first, err := wirecheck.ReplyFrames(rep[0], "v26", wirecheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if first.End || first.Seq <= g[0] {
		t.Fatalf("replay from %d starts at %d: want a later seq (history lost)", g[0], first.Seq)
	}
}

func gapIn(msgs [][][]byte) []uint64 {
	for i := 1; i < len(msgs); i++ {
		a, b := seqOf(msgs[i-1][1]), seqOf(msgs[i][1])
		if b != a+1 {
			return []uint64{a + 1, b - 1}
		}
	}
	return nil
}

func seqOf(b []byte) uint64 {
	var x uint64
	for _, c := range b {
		x = x<<8 | uint64(c)
	}
	return x
}

// TestWorkerRestart: the worker is down for a while (503, no routing), then
// its seq starts again at 0, its counters from zero, with a new start time;
// requests it held end with an error. No AllBlocksCleared is sent.
func TestWorkerRestart(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 6})
	zc := zctx(t)
	w := s.Endpoints().Workers[1]
	sub := subscribe(t, zc, w.Events[0])
	advance(t, s, 15*time.Second)
	before := scrape(t, w.Metrics)
	nBefore := len(replay(t, zc, w.Replay[0], 0)) - 1
	if err := s.Inject(sim.WorkerRestart{Worker: 1, Down: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, w.Metrics); code != 503 {
		t.Fatalf("restarting worker answered /metrics with %d, want 503", code)
	}
	advance(t, s, 10*time.Second)
	after := scrape(t, w.Metrics)
	if after.sum("process_start_time_seconds") <= before.sum("process_start_time_seconds") {
		t.Error("process start time did not move")
	}
	if p, q := after.sum("vllm:prompt_tokens_total"), before.sum("vllm:prompt_tokens_total"); p >= q {
		t.Errorf("prompt tokens %v after restart, %v before: counters must reset", p, q)
	}
	nAfter := len(replay(t, zc, w.Replay[0], 0)) - 1
	live := recv(t, sub, nBefore+nAfter)
	restarts := 0
	for i := 1; i < len(live); i++ {
		a, b := seqOf(live[i-1][1]), seqOf(live[i][1])
		if b == 0 {
			restarts++
			if a != uint64(nBefore-1) {
				t.Errorf("seq went from %d to 0, want from %d", a, nBefore-1)
			}
		} else if b != a+1 {
			t.Errorf("seq %d after %d", b, a)
		}
		_, _, batch, err := wirecheck.Live(live[i], wirecheck.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range batch.Events {
			if e.Kind == "AllBlocksCleared" {
				t.Error("AllBlocksCleared on restart: vLLM sends it only on an explicit reset")
			}
		}
	}
	if restarts != 1 {
		t.Fatalf("seq went back to 0 %d times, want once", restarts)
	}
	aborted := 0
	for _, r := range readRecords(t, s.Endpoints().Decisions) {
		if r["kind"] == "outcome" && r["http_status"].(float64) == 502 {
			aborted++
			if r["worker"] != "w1" || r["done"] != false {
				t.Errorf("aborted outcome %v", r)
			}
		}
	}
	if aborted == 0 {
		t.Error("no request failed when its worker restarted")
	}
}

// TestRouterRestart: counters reset with a new start time, and the router
// starts over without its index.
func TestRouterRestart(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 8})
	advance(t, s, 20*time.Second)
	url := s.Endpoints().RouterMetrics
	before := scrape(t, url)
	if err := s.Inject(sim.RouterRestart{}); err != nil {
		t.Fatal(err)
	}
	advance(t, s, 2*time.Second)
	after := scrape(t, url)
	if a, b := after.sum("vllm_router_processed_requests_total"), before.sum("vllm_router_processed_requests_total"); a >= b {
		t.Errorf("processed %v after restart, %v before: want a reset", a, b)
	}
	if after.sum("process_start_time_seconds") <= before.sum("process_start_time_seconds") {
		t.Error("router start time did not move")
	}
	for _, w := range s.Endpoints().Workers {
		if after.sum("vllm_router_running_requests", "worker", w.BaseURL) < 0 {
			t.Errorf("no running gauge for %s", w.BaseURL)
		}
	}
	recs := readRecords(t, s.Endpoints().Decisions)
	fallbackAfter := 0
	for _, r := range recs[len(recs)/2:] {
		if r["reason"] == "fallback" {
			fallbackAfter++
		}
	}
	if fallbackAfter == 0 {
		t.Error("no fallback decision after the router lost its index")
	}
}

func TestSlowScrape(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 9})
	if err := s.Inject(sim.SlowScrape{Worker: 2, Delay: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ws := s.Endpoints().Workers
	start := time.Now()
	scrape(t, ws[0].Metrics)
	fast := time.Since(start)
	start = time.Now()
	scrape(t, ws[2].Metrics)
	if slow := time.Since(start); slow < 3*time.Second {
		t.Errorf("slow worker answered in %v, want >= 3s", slow)
	}
	if fast > 2*time.Second {
		t.Errorf("a normal worker took %v", fast)
	}
}

func TestTruncatedStreams(t *testing.T) {
	s := startSim(t, sim.Options{Seed: 10, Scenario: "truncated-streams"})
	advance(t, s, 20*time.Second)
	var truncated, done int
	for _, r := range readRecords(t, s.Endpoints().Decisions) {
		if r["kind"] != "outcome" {
			continue
		}
		if r["http_status"].(float64) == 200 && r["done"] == false {
			truncated++
			if r["finish_reason"] != nil {
				t.Errorf("truncated stream with a finish_reason: %v", r)
			}
		} else if r["done"] == true {
			done++
		}
	}
	if truncated == 0 || done == 0 || truncated > done {
		t.Errorf("%d truncated, %d done: want some (15%%) HTTP 200 outcomes without done", truncated, done)
	}
}

// TestHotPrefixOverheats: when a surge of conversations asks about one
// document, one worker owns it: it takes most of the document's requests
// and its queue stands far above every other, whatever the pool's size.
func TestHotPrefixOverheats(t *testing.T) {
	for _, c := range []struct {
		workers int
		seed    int64
	}{{4, 11}, {6, 0}, {6, 1}, {16, 2}} {
		t.Run(fmt.Sprintf("%d workers seed %d", c.workers, c.seed), func(t *testing.T) {
			s := startSim(t, sim.Options{Workers: c.workers, Seed: c.seed, Scenario: "hot-prefix"})
			advance(t, s, 20*time.Second) // the surge starts at 20 s
			before := len(readRecords(t, s.Endpoints().Decisions))
			advance(t, s, 15*time.Second)
			if !strings.HasPrefix(s.Phase(), "hot-prefix") {
				t.Errorf("phase %q", s.Phase())
			}
			var waiting []float64
			for _, w := range s.Endpoints().Workers {
				waiting = append(waiting, scrape(t, w.Metrics).sum("vllm:num_requests_waiting"))
			}
			owner, hot, second := -1, 0.0, 0.0
			for i, q := range waiting {
				if q > hot {
					owner, hot, second = i, q, hot
				} else if q > second {
					second = q
				}
			}
			if hot < 10 || hot < 3*second+1 {
				t.Fatalf("queues %v during hot-prefix: want one worker well above the others", waiting)
			}
			// The document's requests (the prefix most decisions name)
			// went mostly to that worker.
			by := map[string]map[string]int{}
			for _, r := range readRecords(t, s.Endpoints().Decisions)[before:] {
				p, _ := r["prefix"].(string)
				if r["kind"] != "decision" || p == "" {
					continue
				}
				if by[p] == nil {
					by[p] = map[string]int{}
				}
				by[p][r["chosen"].(string)]++
			}
			top, n := "", 0
			for p, ws := range by {
				if k := total(ws); k > n {
					top, n = p, k
				}
			}
			name := fmt.Sprint("w", owner)
			if share := float64(by[top][name]) / float64(n); share < 0.6 {
				t.Errorf("%s (queue %g) took %.0f%% of the hot prefix's %d requests %v, want most", name, hot, 100*share, n, by[top])
			}
		})
	}
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}
