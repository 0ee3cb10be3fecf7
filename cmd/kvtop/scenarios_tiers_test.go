package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/snapshot"
)

// The tiers scenarios end to end (issue 23): hybrid KV cache groups, CPU
// offload in both event forms, full reports and LMCache, each checked on
// the snapshot against the sim's own count (sim.Truth), once kvtop has
// applied every batch.

func truthOf(t *testing.T, r *scnRun, w int) sim.Truth {
	t.Helper()
	tr, ok := r.s.Truth(w, 0)
	if !ok {
		t.Fatalf("no engine w%d", w)
	}
	return tr
}

func groupOf(w *snapshot.Worker, g int) *snapshot.Group {
	for i := range w.Groups {
		if w.Groups[i].Group == g {
			return &w.Groups[i]
		}
	}
	return nil
}

func tierOf(tiers []snapshot.Tier, medium string) *snapshot.Tier {
	for i := range tiers {
		if tiers[i].Medium == medium {
			return &tiers[i]
		}
	}
	return nil
}

func iv(p *int) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// checkGroups holds each worker's blocks and groups against the engine's:
// group 0 is the worker's blocks, group 1 the sliding window, shown apart.
func checkGroups(t *testing.T, r *scnRun, s *snapshot.Snapshot) {
	t.Helper()
	for wi, wc := range r.c.Workers {
		w, tr := workerOf(s, wc.Name), truthOf(t, r, wi)
		g0, g1 := groupOf(w, 0), groupOf(w, 1)
		if len(tr.Groups) != 2 || g0 == nil || g1 == nil {
			t.Fatalf("%s: groups %+v; the engine holds %v", w.Name, w.Groups, tr.Groups)
		}
		if blocksOf(w) != tr.Groups[0] || g0.Blocks != tr.Groups[0] || g0.Kind != "full_attention" || !g0.Prefix {
			t.Errorf("%s: blocks %d, group 0 %+v; the engine's group 0 holds %d", w.Name, blocksOf(w), *g0, tr.Groups[0])
		}
		if g1.Kind != "sliding_window" || g1.Prefix || g1.Blocks != tr.Groups[1] || iv(g1.SlidingWindow) != fmt.Sprint(scenario.HybridWindow) {
			t.Errorf("%s: group 1 %+v (window %s); want sliding_window, not prefix, the engine's %d blocks", w.Name, *g1, iv(g1.SlidingWindow), tr.Groups[1])
		}
		if g := tierOf(w.Tiers, "GPU"); g == nil || iv(g.Blocks) != fmt.Sprint(tr.Groups[0]) {
			t.Errorf("%s: GPU tier blocks %s; its prefix blocks are group 0's %d", w.Name, iv(g.Blocks), tr.Groups[0])
		}
		t.Logf("%s: groups %v, %d copies (%d without a parent), %d reported; kvtop re-announced %d",
			w.Name, tr.Groups, tr.Copies, tr.RootCopies, tr.Reported, w.Streams[0].Reannounced)
	}
}

// TestScenarioHybrid: a hybrid model's sliding-window group is its own
// group on the snapshot, with the engine's count of blocks (fewer than
// group 0's: it frees what leaves its window, and that goes first), and
// never in the worker's blocks. Under pressure a hit its window no longer
// covers is recomputed, and group 0 stores second copies of blocks it
// holds (under a parent): they still add up, as do full reports, where
// group 1 names only its window's blocks of a reused prefix.
func TestScenarioHybrid(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "hybrid"}, nil)
	r.jumpTo(25 * time.Second)
	s := r.quiesce()
	checkGroups(t, r, s)
	fewer := 0
	for wi := range r.c.Workers {
		if tr := truthOf(t, r, wi); tr.Groups[1] < tr.Groups[0] {
			fewer++
		}
	}
	copies := uint64(0)
	for wi := range r.c.Workers {
		copies += truthOf(t, r, wi).Copies
	}
	if fewer == 0 || copies == 0 {
		t.Errorf("%d workers' sliding-window groups hold fewer blocks than group 0, %d second copies: want eviction and recomputed hits\n%s",
			fewer, copies, dump(s))
	}
	// Full reports from 30 s on (quiesce left the clock past 45 s).
	r.inject(sim.SetRate{Factor: 1})
	r.jumpTo(r.s.Now() + 15*time.Second)
	s = r.quiesce()
	checkGroups(t, r, s)
	for wi, wc := range r.c.Workers {
		if tr, st := truthOf(t, r, wi), streamOf(s, wc.Name, 0); tr.Reported == 0 || st.Reannounced != tr.Reported+tr.RootCopies {
			t.Errorf("%s: kvtop counts %d re-announced; the engine reported %d blocks and stored %d copies without a parent",
				wc.Name, st.Reannounced, tr.Reported, tr.RootCopies)
		}
	}
}

// TestScenarioOffload: the CPU tier of every worker holds the engine's
// count, placeholders (even workers) with tokens unknown and said so,
// chunks (odd workers) with their tokens; the workers' blocks are the
// GPU's alone; the pool sums each tier.
func TestScenarioOffload(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "offload"}, nil)
	r.jumpTo(60 * time.Second)
	s := r.quiesce()
	cpuSum := 0
	for wi, wc := range r.c.Workers {
		w, tr := workerOf(s, wc.Name), truthOf(t, r, wi)
		gpu, cpu := tierOf(w.Tiers, "GPU"), tierOf(w.Tiers, "CPU")
		if gpu == nil || cpu == nil || len(w.Tiers) != 2 || w.Tiers[0].Medium != "GPU" {
			t.Fatalf("%s: tiers %+v", w.Name, w.Tiers)
		}
		t.Logf("%s: GPU %d, CPU %d blocks (%d keys); %d loaded from CPU, %d evicted there", w.Name, tr.Groups[0], tr.CPU, tr.CPUKeys, tr.CPULoaded, tr.CPUEvicted)
		if tr.CPULoaded == 0 || tr.CPUEvicted == 0 {
			t.Errorf("%s: the CPU tier loaded %d blocks and evicted %d: the scenario should do both", w.Name, tr.CPULoaded, tr.CPUEvicted)
		}
		if blocksOf(w) != tr.Groups[0] || iv(gpu.Blocks) != fmt.Sprint(tr.Groups[0]) {
			t.Errorf("%s: blocks %d, GPU tier %s; the GPU holds %d", w.Name, blocksOf(w), iv(gpu.Blocks), tr.Groups[0])
		}
		if iv(cpu.Blocks) != fmt.Sprint(tr.CPU) || cpu.StoreOnly {
			t.Errorf("%s: CPU tier %+v (blocks %s); the engine's holds %d", w.Name, *cpu, iv(cpu.Blocks), tr.CPU)
		}
		if wi%2 == 0 && (cpu.Tokens != nil || !strings.Contains(cpu.Note, "block size not published")) {
			t.Errorf("%s: placeholders, yet CPU tokens %s, note %q", w.Name, iv(cpu.Tokens), cpu.Note)
		}
		if wi%2 == 1 && iv(cpu.Tokens) != fmt.Sprint(16*tr.CPU) {
			t.Errorf("%s: self-describing chunks, CPU tokens %s, want %d", w.Name, iv(cpu.Tokens), 16*tr.CPU)
		}
		if cpu.RemovedPerS == nil || *cpu.RemovedPerS <= 0 {
			t.Errorf("%s: CPU tier removed/s %v", w.Name, cpu.RemovedPerS)
		}
		cpuSum += tr.CPU
	}
	if p := tierOf(s.Pool.Tiers, "CPU"); p == nil || iv(p.Blocks) != fmt.Sprint(cpuSum) || p.Tokens != nil {
		t.Errorf("pool CPU tier %+v: want the workers' %d blocks, tokens unknown (the placeholders')", p, cpuSum)
	}
}

// TestScenarioReportFull: every request asks for full reports; kvtop
// counts each block reported again as re-announced (exactly what the
// engines sent, and the second copies stored without a parent, which a
// subscriber cannot tell from them), and its stores are the engines'
// stores alone. Stores per
// second and events per second share one window here, so their ratio
// times the events sent is the stores kvtop counted.
func TestScenarioReportFull(t *testing.T) {
	t.Parallel()
	const window = time.Minute // the whole run stays in it
	r := startScenario(t, sim.Options{Scenario: "report-full"}, func(c *config.Config) { c.Window = window })
	start := time.Now()
	r.jumpTo(45 * time.Second) // reports from 30 s
	s := r.quiesce()
	if time.Since(start) > window/2 {
		t.Fatalf("the run took %s: it no longer fits kvtop's window", time.Since(start))
	}
	checkIndexMatchesSim(t, r)
	for wi, wc := range r.c.Workers {
		w, st, tr := workerOf(s, wc.Name), streamOf(s, wc.Name, 0), truthOf(t, r, wi)
		gpu := tierOf(w.Tiers, "GPU")
		if tr.Reported == 0 || st.Reannounced != tr.Reported+tr.RootCopies {
			t.Errorf("%s: kvtop counts %d re-announced; the engine reported %d blocks and stored %d copies without a parent",
				wc.Name, st.Reannounced, tr.Reported, tr.RootCopies)
		}
		if gpu == nil || gpu.StoredPerS == nil || st.EventsPerS == nil || st.Events != tr.Events {
			t.Fatalf("%s: GPU tier %+v, stream %d events (%v/s); the engine sent %d", wc.Name, gpu, st.Events, st.EventsPerS, tr.Events)
		}
		stored := *gpu.StoredPerS / *st.EventsPerS * float64(tr.Events)
		fresh := float64(tr.Stored - tr.RootCopies)
		t.Logf("%s: %d blocks stored, %d reported, %d copies (%d without a parent); kvtop: %.1f stored, %d re-announced",
			wc.Name, tr.Stored, tr.Reported, tr.Copies, tr.RootCopies, stored, st.Reannounced)
		if stored < fresh-0.5 || stored > fresh+0.5 {
			t.Errorf("%s: kvtop counts %.1f blocks stored; the engine stored %.0f new ones (and reported %d)", wc.Name, stored, fresh, tr.Reported)
		}
	}
}

// TestScenarioLMCache: LMCache tiers publish stores and never a removal
// while their host caches evict: until kvtop's bound its CPU tier holds
// what was stored (more than the host cache holds: nothing says otherwise),
// past it the tier is store-only, its blocks unknown and said so, the pool
// the same, the GPU untouched. The bound is lowered to 6 000 blocks
// (pool.Options.StoreOnlyAfter; 65 536 would take 15 simulated minutes).
func TestScenarioLMCache(t *testing.T) {
	t.Parallel()
	const bound = 6000
	r := startScenarioPool(t, sim.Options{Scenario: "lmcache"}, nil, 0, nil, func(o *pool.Options) { o.StoreOnlyAfter = bound })
	// Until w0's host cache has evicted a few hundred blocks, short of
	// the bound.
	for r.s.Now() < 5*time.Minute {
		r.jumpTo(r.s.Now() + time.Second)
		tr := truthOf(t, r, 0)
		if tr.CPUEvicted >= 300 || tr.CPUStored > bound-1000 {
			break
		}
	}
	tr := truthOf(t, r, 0)
	if tr.CPUStored >= bound || tr.CPUEvicted == 0 {
		t.Fatalf("w0 stored %d blocks and evicted %d: the test wants a tier that evicts before the bound", tr.CPUStored, tr.CPUEvicted)
	}
	seq, _ := r.s.LastSeq(0, 0)
	s := r.waitFor("w0's stores applied", func(s *snapshot.Snapshot) bool {
		st := streamOf(s, "w0", 0)
		return st.LastSeq != nil && *st.LastSeq == seq
	})
	// kvtop holds every hash stored (a store of one the host cache had
	// dropped silently counts once): more than the cache holds.
	if cpu := tierOf(workerOf(s, "w0").Tiers, "CPU"); cpu == nil || cpu.StoreOnly || cpu.Blocks == nil ||
		*cpu.Blocks <= tr.CPU || *cpu.Blocks > int(tr.CPUStored) {
		t.Errorf("w0 before the bound: CPU tier %+v (blocks %s); it stored %d blocks and holds %d", cpu, iv(cpu.Blocks), tr.CPUStored, tr.CPU)
	}
	t.Logf("w0 before the bound: %d stored, %d held, %d evicted without a word; kvtop shows %s",
		tr.CPUStored, tr.CPU, tr.CPUEvicted, iv(tierOf(workerOf(s, "w0").Tiers, "CPU").Blocks))
	for r.s.Now() < 5*time.Minute {
		r.jumpTo(r.s.Now() + 5*time.Second)
		done := true
		for wi := range r.c.Workers {
			done = done && truthOf(t, r, wi).CPUStored >= bound
		}
		if done {
			break
		}
	}
	s = r.quiesce()
	for wi, wc := range r.c.Workers {
		w, tr := workerOf(s, wc.Name), truthOf(t, r, wi)
		cpu, gpu := tierOf(w.Tiers, "CPU"), tierOf(w.Tiers, "GPU")
		t.Logf("%s: LMCache stored %d, holds %d, evicted %d, loaded %d", wc.Name, tr.CPUStored, tr.CPU, tr.CPUEvicted, tr.CPULoaded)
		if tr.CPUStored < bound || tr.CPU >= int(tr.CPUStored) || tr.CPULoaded == 0 {
			t.Fatalf("%s: stored %d, holds %d, loaded %d: the run should pass the bound with a cache that evicts and serves hits",
				wc.Name, tr.CPUStored, tr.CPU, tr.CPULoaded)
		}
		if cpu == nil || !cpu.StoreOnly || cpu.Blocks != nil || cpu.Tokens != nil || cpu.Note != "stored, no removals published" ||
			cpu.StoredPerS == nil || *cpu.StoredPerS <= 0 || cpu.RemovedPerS == nil || *cpu.RemovedPerS != 0 {
			t.Errorf("%s: CPU tier %+v: want store-only, blocks unknown, stores still counted", wc.Name, cpu)
		}
		if gpu == nil || iv(gpu.Blocks) != fmt.Sprint(tr.Groups[0]) || blocksOf(w) != tr.Groups[0] {
			t.Errorf("%s: GPU tier %+v, blocks %d; the GPU holds %d", wc.Name, gpu, blocksOf(w), tr.Groups[0])
		}
	}
	if p := tierOf(s.Pool.Tiers, "CPU"); p == nil || !p.StoreOnly || p.Blocks != nil {
		t.Errorf("pool CPU tier %+v: want store-only", p)
	}
}
