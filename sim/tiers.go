package sim

import (
	"time"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/offload"
	"github.com/kvtop/kvtop/sim/scenario"
)

// engineTiers is what a Tiers mode runs.
func engineTiers(a scenario.Tiers) (engine.Tiers, bool) {
	cpu := func(m offload.Mode) engine.Tiers {
		chunk := scenario.OffloadChunk
		if m == offload.LMCache {
			chunk = 1
		}
		return engine.Tiers{Main: true, Offload: offload.Config{Mode: m, ChunkBlocks: chunk, Blocks: a.CPUBlocks}}
	}
	switch a.Mode {
	case "":
		return engine.Tiers{}, true
	case scenario.ModeMain:
		return engine.Tiers{Main: true}, true
	case scenario.ModeHybrid:
		return engine.Tiers{Main: true, Window: scenario.HybridWindow}, true
	case scenario.ModeOffload:
		return cpu(offload.Placeholders), true
	case scenario.ModeChunks:
		return cpu(offload.Chunks), true
	case scenario.ModeLMCache:
		return cpu(offload.LMCache), true
	}
	return engine.Tiers{}, false
}

// setTiers makes worker a.Worker run a.Mode: at once if it has published
// nothing yet or is restarting, through a restart otherwise; not at all if
// it already does.
func (s *Sim) setTiers(a scenario.Tiers) {
	if a.Worker < 0 || a.Worker >= len(s.workers) {
		return
	}
	t, ok := engineTiers(a)
	if !ok {
		s.logf("sim: %s: not one of %v", a, scenario.TierModes)
		return
	}
	if s.o.Engine == "sglang" {
		if a.Mode != "" {
			s.logf("sim: w%d is SGLang: KV cache groups and connectors are vLLM's here; %q ignored", a.Worker, a.Mode)
		}
		return
	}
	w := s.workers[a.Worker]
	blocks := a.GPUBlocks
	if blocks <= 0 {
		blocks = engine.DefaultConfig().NumBlocks
	}
	same, fresh := true, true
	for r, e := range w.Engines {
		c := e.Config()
		same = same && c.Tiers == t && c.NumBlocks == blocks
		fresh = fresh && e.Load() == 0 && e.Truth().Events == 0 && w.Pubs[r].NextSeq() == 0
	}
	if same {
		return
	}
	for _, e := range w.Engines {
		e.SetTiers(t)
		e.SetBlocks(a.GPUBlocks)
	}
	switch {
	case w.Down(): // it comes back with them
	case fresh:
		s.ledgerRestart(a.Worker)
		for _, e := range w.Engines {
			e.Reset(s.now)
		}
	default:
		s.restartWorker(scenario.WorkerRestart{Worker: a.Worker, Down: 2 * time.Second, Seed: s.seeds[a.Worker], Blocks: a.GPUBlocks})
	}
}

// Truth is one engine's own count of its KV cache groups and tiers, for
// tests that hold kvtop's figures against it (never published).
type Truth struct {
	// Groups is the distinct hashes each GPU KV cache group holds (group
	// 0's is ResidentBlocks).
	Groups []int
	// CPU is what a subscriber that applied every CPU event holds: offload
	// keys for placeholders, distinct block hashes for self-describing
	// chunks; for LMCache, what its host cache really holds, which its
	// events never say. -1 without a CPU tier. CPUKeys is its offloaded
	// blocks; CPUStored, CPULoaded and CPUEvicted count GPU blocks.
	CPU, CPUKeys                     int
	CPUStored, CPULoaded, CPUEvicted uint64
	engine.Truth
}

// Truth returns engine rank of worker w's own count (ok false: no such
// engine).
func (s *Sim) Truth(w, rank int) (t Truth, ok bool) {
	s.do(func() {
		if w < 0 || w >= len(s.workers) || rank < 0 || rank >= len(s.workers[w].Engines) {
			return
		}
		e := s.workers[w].Engines[rank]
		ok = true
		t.Truth = e.Truth()
		t.Groups = []int{e.Cache().Distinct()}
		if sw, ok := e.Window(); ok {
			t.Groups = append(t.Groups, sw.Distinct())
		}
		t.CPU, t.CPUKeys = -1, -1
		if h := e.Host(); h != nil {
			t.CPU, t.CPUKeys = h.Blocks(), h.Keys()
			t.CPUStored, t.CPULoaded, t.CPUEvicted = h.Stored, h.Loaded, h.Evicted
		}
	})
	return t, ok
}
