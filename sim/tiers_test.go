package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/offload"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

// The tiers scenarios from outside: every payload checked by wirecheck,
// and a subscriber's picture of each (medium, group), built from the
// events alone, held against the engines' own count.

// tierView is one publisher's blocks per (medium, group), refcounted: a
// CPU chunk that names a shared hash again holds it once more, a second
// GPU copy is one more copy.
type tierView struct {
	name    string
	next    uint64
	cols    map[string]map[uint64]int
	gpuEver map[uint64]bool // every hash group 0 ever stored
	evs     []wirecheck.Event
}

func col(e wirecheck.Event) string {
	g := int64(0)
	if e.Group != nil {
		g = *e.Group
	}
	return fmt.Sprintf("%s/%d", e.Medium, g)
}

// read takes every batch the publisher sent since the last read.
func (v *tierView) read(t *testing.T, s *sim.Sim, sub *zmqSocket, w, rank int) {
	t.Helper()
	last, ok := s.LastSeq(w, rank)
	if !ok || last+1 < v.next {
		return
	}
	for _, msg := range recv(t, sub, int(last+1-v.next)) {
		_, seq, b, err := wirecheck.Live(msg, wirecheck.Options{Encoding: "map", Hash: "uint64", VLLMKeys: true})
		if err != nil {
			t.Fatalf("%s seq %d: %v", v.name, seq, err)
		}
		if seq != v.next {
			t.Fatalf("%s: seq %d, want %d", v.name, seq, v.next)
		}
		v.next++
		for _, e := range b.Events {
			v.evs = append(v.evs, e)
			c := v.cols[col(e)]
			if c == nil {
				c = map[uint64]int{}
				v.cols[col(e)] = c
			}
			switch e.Kind {
			case "BlockStored":
				for _, k := range e.Keys {
					c[k]++
					if col(e) == "GPU/0" {
						v.gpuEver[k] = true
					}
				}
			case "BlockRemoved":
				for _, k := range e.Keys {
					if c[k] == 0 {
						t.Fatalf("%s: %s removes %016x, not resident", v.name, col(e), k)
					}
					if c[k]--; c[k] == 0 {
						delete(c, k)
					}
				}
			case "AllBlocksCleared":
				v.cols = map[string]map[uint64]int{}
			}
		}
	}
}

func (v *tierView) blocks(c string) int { return len(v.cols[c]) }

// tierPool subscribes to every worker of a sim before its clock moves.
type tierPool struct {
	s     *sim.Sim
	subs  []*zmqSocket
	views []*tierView
}

func startTierPool(t *testing.T, o sim.Options, tiers ...sim.Tiers) *tierPool {
	t.Helper()
	s := startSim(t, o)
	for _, a := range tiers {
		if err := s.Inject(a); err != nil {
			t.Fatal(err)
		}
	}
	zc := zctx(t)
	p := &tierPool{s: s}
	for _, w := range s.Endpoints().Workers {
		p.subs = append(p.subs, subscribe(t, zc, w.Events[0]))
		p.views = append(p.views, &tierView{name: w.Name, cols: map[string]map[uint64]int{}, gpuEver: map[uint64]bool{}})
	}
	return p
}

// run advances the clock by d, a second at a time, reading as it goes.
func (p *tierPool) run(t *testing.T, d time.Duration) {
	t.Helper()
	for end := p.s.Now() + d; p.s.Now() < end; {
		advance(t, p.s, min(time.Second, end-p.s.Now()))
		for w, v := range p.views {
			v.read(t, p.s, p.subs[w], w, 0)
		}
	}
}

// quiesce stops new requests and lets every engine finish.
func (p *tierPool) quiesce(t *testing.T) {
	t.Helper()
	if err := p.s.Inject(sim.SetRate{Factor: 0}); err != nil {
		t.Fatal(err)
	}
	p.run(t, 20*time.Second)
}

func (p *tierPool) truth(t *testing.T, w int) sim.Truth {
	t.Helper()
	tr, ok := p.s.Truth(w, 0)
	if !ok {
		t.Fatalf("no engine w%d", w)
	}
	return tr
}

// TestHybridOnTheWire: group 1 stores the same hashes as group 0 as a
// sliding window of 1024 tokens, frees what leaves its window (so it
// holds fewer), and with full reports names only its window's blocks of a
// reused prefix while its token ids span the whole prefix.
func TestHybridOnTheWire(t *testing.T) {
	t.Parallel()
	p := startTierPool(t, sim.Options{Workers: 2, Seed: 5, Scenario: "hybrid"})
	p.run(t, 25*time.Second)
	for w, v := range p.views {
		tr := p.truth(t, w)
		if len(tr.Groups) != 2 || v.blocks("GPU/0") != tr.Groups[0] || v.blocks("GPU/1") != tr.Groups[1] {
			t.Fatalf("%s: events say groups 0 and 1 hold %d and %d blocks, the engine %v", v.name, v.blocks("GPU/0"), v.blocks("GPU/1"), tr.Groups)
		}
		t.Logf("%s: groups hold %v blocks; %d copies", v.name, tr.Groups, tr.Copies)
		if tr.Groups[1] >= tr.Groups[0] || tr.Groups[1] == 0 {
			t.Errorf("%s: group 1 holds %d blocks, group 0 %d: the window should keep fewer", v.name, tr.Groups[1], tr.Groups[0])
		}
		removed := 0
		for _, e := range v.evs {
			switch {
			case e.Kind == "BlockStored" && col(e) == "GPU/1":
				if e.SpecKind != "sliding_window" || e.Window != scenario.HybridWindow {
					t.Fatalf("%s: group 1 store %+v", v.name, e)
				}
				for _, k := range e.Keys {
					if !v.gpuEver[k] {
						t.Fatalf("%s: group 1 stored %016x, which group 0 never did: the groups share hashes", v.name, k)
					}
				}
			case e.Kind == "BlockStored" && (col(e) != "GPU/0" || e.SpecKind != "full_attention"):
				t.Fatalf("%s: store %+v", v.name, e)
			case e.Kind == "BlockRemoved" && col(e) == "GPU/1":
				removed++
				if len(e.Keys) != 1 {
					t.Fatalf("%s: a GPU removal of %d hashes (vLLM: one per hash)", v.name, len(e.Keys))
				}
			}
		}
		if removed == 0 {
			t.Errorf("%s: group 1 never evicted a block in 25 s", v.name)
		}
		if tr.Reported != 0 {
			t.Errorf("%s: %d blocks reported before full reports", v.name, tr.Reported)
		}
	}
	// Full reports from 30 s.
	p.run(t, 20*time.Second)
	for w, v := range p.views {
		skipped := 0
		for _, e := range v.evs {
			if e.Kind == "BlockStored" && col(e) == "GPU/1" && e.NumTokens > e.BlockSize*len(e.Keys) {
				skipped++
				if e.Parent != nil {
					t.Fatalf("%s: a report with a parent: %+v", v.name, e)
				}
			}
		}
		if tr := p.truth(t, w); skipped == 0 || tr.Reported == 0 {
			t.Errorf("%s: %d group-1 reports spanning skipped blocks, %d blocks reported", v.name, skipped, tr.Reported)
		}
	}
}

// TestOffloadOnTheWire: small GPUs offload every block they compute to
// CPU, w0 as placeholders (one key each, no block size), w1 as chunks of
// four blocks that name shared hashes again; both evict in one removal
// per step and load hits back; the subscriber's CPU tier is the engine's,
// and the metrics count what moved.
func TestOffloadOnTheWire(t *testing.T) {
	t.Parallel()
	p := startTierPool(t, sim.Options{Workers: 2, Seed: 5, Scenario: "offload"})
	p.run(t, 60*time.Second)
	p.quiesce(t)
	for w, v := range p.views {
		tr := p.truth(t, w)
		if v.blocks("GPU/0") != tr.Groups[0] || v.blocks("CPU/0") != tr.CPU {
			t.Fatalf("%s: events say GPU %d, CPU %d blocks; the engine %d and %d", v.name, v.blocks("GPU/0"), v.blocks("CPU/0"), tr.Groups[0], tr.CPU)
		}
		t.Logf("%s: GPU %d, CPU %d blocks (%d keys); %d stored, %d loaded, %d evicted there", v.name, tr.Groups[0], tr.CPU, tr.CPUKeys, tr.CPUStored, tr.CPULoaded, tr.CPUEvicted)
		if tr.CPULoaded == 0 || tr.CPUEvicted == 0 {
			t.Errorf("%s: %d blocks loaded from CPU, %d evicted there: want both", v.name, tr.CPULoaded, tr.CPUEvicted)
		}
		shared, multi := 0, 0
		for _, e := range v.evs {
			if e.Medium != "CPU" {
				continue
			}
			if e.Group == nil || *e.Group != 0 {
				t.Fatalf("%s: CPU event without group 0: %+v", v.name, e)
			}
			for _, k := range e.Keys {
				if !v.gpuEver[k] {
					t.Fatalf("%s: CPU hash %016x the GPU never stored", v.name, k)
				}
			}
			if e.Kind == "BlockRemoved" && len(e.Keys) > 1 {
				multi++
			}
			if e.Kind != "BlockStored" {
				continue
			}
			if w == 0 && (!e.Placeholder || e.SpecKind != "" || e.Parent != nil) {
				t.Fatalf("%s: not a placeholder: %+v", v.name, e)
			}
			if w == 1 && (e.Placeholder || len(e.Keys) != scenario.OffloadChunk || e.NumTokens != 16*scenario.OffloadChunk || e.SpecKind != "full_attention") {
				t.Fatalf("%s: not a chunk: %+v", v.name, e)
			}
		}
		for _, n := range v.cols["CPU/0"] {
			if n > 1 {
				shared++
			}
		}
		if multi == 0 {
			t.Errorf("%s: no CPU removal named more than one key", v.name)
		}
		if w == 1 && shared == 0 {
			t.Errorf("%s: no CPU hash held by two chunks: chunks never began inside a shared prefix", v.name)
		}
		pg := scrape(t, p.s.Endpoints().Workers[w].Metrics)
		for _, c := range []struct {
			name  string
			label []string
			want  float64
		}{
			{"vllm:kv_offload_store_bytes_total", nil, float64(tr.CPUStored) * offload.BlockBytes},
			{"vllm:kv_offload_load_bytes_total", nil, float64(tr.CPULoaded) * offload.BlockBytes},
			{"vllm:kv_offload_total_bytes_total", []string{"transfer_type", "GPU_to_CPU"}, float64(tr.CPUStored) * offload.BlockBytes},
			{"vllm:kv_offload_total_bytes_total", []string{"transfer_type", "CPU_to_GPU"}, float64(tr.CPULoaded) * offload.BlockBytes},
			{"vllm:kv_offload_load_time_total", nil, float64(tr.CPULoaded) * offload.BlockTransfer / 1e9},
			{"vllm:external_prefix_cache_hits_total", nil, float64(tr.CPULoaded) * 16},
			{"vllm:kv_offload_cpu_cache_usage_perc", nil, 0}, // idle: no transfer pins a block
			{"vllm:prompt_tokens_by_source_total", nil, pg.sum("vllm:prompt_tokens_total")},
		} {
			if got := pg.sum(c.name, c.label...); !near(got, c.want) {
				t.Errorf("%s: %s%v = %g, want %g", v.name, c.name, c.label, got, c.want)
			}
		}
		if q, ext := pg.sum("vllm:external_prefix_cache_queries_total"), pg.sum("vllm:prompt_tokens_by_source_total", "source", "external_kv_transfer"); q <= 0 || ext <= 0 {
			t.Errorf("%s: external queries %g, prompt tokens loaded %g", v.name, q, ext)
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-6*max(1, b) && b-a < 1e-6*max(1, b) }

// TestReportFullOnTheWire: with every request asking for full reports, a
// reused prefix is stored again from block 0, parent none, in the shape of
// a new store; the engine counts what it reported apart from what it
// stored, and the wire carries exactly both.
func TestReportFullOnTheWire(t *testing.T) {
	t.Parallel()
	p := startTierPool(t, sim.Options{Workers: 2, Seed: 5, Scenario: "report-full"})
	p.run(t, 25*time.Second)
	if tr := p.truth(t, 0); tr.Reported != 0 {
		t.Fatalf("%d blocks reported in the incremental phase", tr.Reported)
	}
	p.run(t, 20*time.Second)
	for w, v := range p.views {
		tr := p.truth(t, w)
		stored := uint64(0)
		for _, e := range v.evs {
			if e.Kind == "BlockStored" {
				if col(e) != "GPU/0" || e.SpecKind != "full_attention" || e.Fields != 10 {
					t.Fatalf("%s: store %+v", v.name, e)
				}
				stored += uint64(len(e.Keys))
			}
		}
		t.Logf("%s: %d blocks stored, %d reported, %d copies", v.name, tr.Stored, tr.Reported, tr.Copies)
		if tr.Reported == 0 || stored != tr.Stored+tr.Reported {
			t.Errorf("%s: %d hashes stored on the wire; the engine stored %d and reported %d", v.name, stored, tr.Stored, tr.Reported)
		}
	}
}

// TestLMCacheOnTheWire: an LMCache CPU tier publishes its stores (medium
// CPU, no group) and never a removal, while it evicts; its hits are
// loaded back and counted by lmcache:num_hit_tokens.
func TestLMCacheOnTheWire(t *testing.T) {
	t.Parallel()
	p := startTierPool(t, sim.Options{Workers: 2, Seed: 5},
		sim.Tiers{Worker: 0, Mode: scenario.ModeLMCache, GPUBlocks: 512, CPUBlocks: 2048},
		sim.Tiers{Worker: 1, Mode: scenario.ModeLMCache, GPUBlocks: 512, CPUBlocks: 2048})
	p.run(t, 60*time.Second)
	for w, v := range p.views {
		tr := p.truth(t, w)
		cpu := 0
		for _, e := range v.evs {
			if e.Medium != "CPU" {
				continue
			}
			if e.Kind != "BlockStored" || e.Group != nil || e.SpecKind != "" || e.NumTokens != 16*len(e.Keys) {
				t.Fatalf("%s: LMCache event %+v", v.name, e)
			}
			cpu += len(e.Keys)
		}
		t.Logf("%s: LMCache stored %d blocks, holds %d, loaded %d", v.name, tr.CPUStored, tr.CPU, tr.CPULoaded)
		if uint64(cpu) != tr.CPUStored || tr.CPU > 2048 || tr.CPUEvicted == 0 || cpu <= tr.CPU {
			t.Errorf("%s: %d CPU stores published, %d stored, %d evicted, %d held: want stores beyond what it holds",
				v.name, cpu, tr.CPUStored, tr.CPUEvicted, tr.CPU)
		}
		pg := scrape(t, p.s.Endpoints().Workers[w].Metrics)
		if hit := pg.sum("lmcache:num_hit_tokens_total"); tr.CPULoaded == 0 || hit != float64(tr.CPULoaded)*16 ||
			pg.sum("vllm:external_prefix_cache_hits_total") != hit {
			t.Errorf("%s: lmcache:num_hit_tokens %g, external hits %g; %d blocks loaded", v.name, hit,
				pg.sum("vllm:external_prefix_cache_hits_total"), tr.CPULoaded)
		}
		if pg.sum("vllm:kv_offload_store_bytes_total") != -1 {
			t.Errorf("%s: LMCache workers have no OffloadingConnector metrics", v.name)
		}
	}
}
