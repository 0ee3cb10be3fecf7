package engine

import (
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/offload"
)

// Tiers is what a vLLM main engine runs beside its GPU cache
// (docs/PROTOCOLS.md §1.1). Any non-zero Tiers publishes vLLM main's
// events: group_idx and kv_cache_spec_kind on the GPU's.
type Tiers struct {
	Main bool // vLLM main's events, one full-attention group
	// Window is a hybrid model's sliding-window group 1, in tokens (0:
	// none). It shares the GPU's blocks with group 0 and holds the same
	// block hashes, but a request keeps only the blocks of its last Window
	// tokens: the others are freed as the window slides past them (cached
	// until evicted, and evicted first), and a prefix hit needs the
	// window's blocks before it in group 1.
	Window int
	// Offload is a CPU tier (Mode 0: none). vLLM's OffloadingConnector
	// stores every block the engine computes, in chunks, and loads the
	// chunks it holds past a GPU hit; LMCache stores prompt blocks and
	// loads its longest prefix past the GPU hit. Not with Window (vLLM's
	// connector on hybrid models publishes other shapes the sim does not
	// model).
	Offload offload.Config
}

// On reports whether the engine publishes vLLM main's events.
func (t Tiers) On() bool { return t.Main || t.Window > 0 || t.Offload.Mode != 0 }

// Prompt token sources (vllm:prompt_tokens_by_source).
const (
	SourceCompute  = iota // local_compute
	SourceCacheHit        // local_cache_hit
	SourceExternal        // external_kv_transfer
	numSources
)

// Sources names the prompt token sources by index.
var Sources = [numSources]string{"local_compute", "local_cache_hit", "external_kv_transfer"}

// Truth is what the engine published, by its own count since its start:
// what tests hold a subscriber's figures against (never on /metrics).
type Truth struct {
	Events   uint64 // KV events published
	Stored   uint64 // GPU group-0 blocks stored (reports not included)
	Reported uint64 // block hashes stored again by kv_cache_report_mode "full", all groups
	// Copies counts GPU stores of a hash its group already held (a second
	// physical copy). RootCopies are those in a store without a parent,
	// which a subscriber cannot tell from a reuse report.
	Copies, RootCopies uint64
}

// Truth returns the engine's own counts, with its caches' copies.
func (e *Engine) Truth() Truth {
	t := e.truth
	t.Copies, t.RootCopies = e.cache.Copies, e.cache.RootCopies // every group's
	return t
}

// Window is the engine's sliding-window group (ok false: none).
func (e *Engine) Window() (g kvcache.Group, ok bool) { return e.sw, e.hybrid }

// Host is the engine's CPU tier (nil: none).
func (e *Engine) Host() *offload.Tier { return e.host }

// SetTiers sets what the next Reset builds beside the GPU cache.
func (e *Engine) SetTiers(t Tiers) {
	e.mu.Lock()
	e.cfg.Tiers = t
	e.mu.Unlock()
}

// buildTiers makes the tiers of e.cfg new (from build).
func (e *Engine) buildTiers() {
	t := e.cfg.Tiers
	e.host, e.hybrid = nil, t.Window > 0
	if t.On() {
		e.cache.SetTag(kvcache.Tag{Grouped: true, Spec: "full_attention"})
	}
	if e.hybrid {
		e.sw = e.cache.AddGroup(kvcache.Tag{Grouped: true, Group: 1, Spec: "sliding_window", Window: t.Window})
	}
	if t.Offload.Mode != 0 {
		c := t.Offload
		if c.Blocks <= 0 {
			c.Blocks = 4 * e.cfg.NumBlocks
		}
		e.host = offload.New(c)
	}
}

// takeEvents gathers the step's events: the GPU's (every group, in the
// order they happened), then the CPU tier's (vLLM appends the
// connector's last).
func (e *Engine) takeEvents() []kvcache.Event {
	ev := e.cache.TakeEvents()
	if e.host == nil {
		return ev
	}
	e.events = e.host.TakeEvents(append(e.events[:0], ev...))
	return e.events
}

// windowBlocks is the sliding window in blocks.
func (e *Engine) windowBlocks() int {
	return (e.cfg.Tiers.Window + kvcache.BlockSize - 1) / kvcache.BlockSize
}

// hit is the prefix s finds cached, in blocks, and its report when s
// asks for kv_cache_report_mode "full". A hybrid hit is the longest that
// group 0 holds and whose last window of blocks group 1 holds (vLLM's
// hybrid coordinator): group 1 needs nothing before the window.
func (e *Engine) hit(s *seq, maxHit int) int {
	m := e.cache.Match(s.Hashes[:maxHit])
	lo := 0
	if e.hybrid {
		m, lo = e.windowHit(s.Hashes, m)
	}
	if m > 0 && s.ReportFull && e.cfg.Tiers.On() {
		// One store per group covering the whole reused prefix, parent
		// none; group 1 names only the blocks it holds (its window), its
		// token ids span the prefix all the same.
		toks := s.Tokens[:m*kvcache.BlockSize]
		e.cache.Report(s.Hashes[:m], toks)
		e.truth.Reported += uint64(m)
		if e.hybrid {
			e.sw.Report(s.Hashes[lo:m], toks)
			e.truth.Reported += uint64(m - lo)
		}
	}
	return m
}

// windowHit cuts group 0's hit m0 to the longest m whose window
// [lo, m) group 1 holds, scanning back from m0.
func (e *Engine) windowHit(hs []uint64, m0 int) (m, lo int) {
	wb := e.windowBlocks()
	run := 0
	for i := m0 - 1; i >= 0; i-- {
		if !e.sw.Holds(hs[i]) {
			run = 0
			continue
		}
		if run++; run == wb {
			return i + wb, i
		}
	}
	return run, 0 // blocks [0, run) held, fewer than a window
}

// external is how many blocks past the GPU hit m s can load from the CPU
// tier.
func (e *Engine) external(s *seq, m, maxHit int) int {
	if e.host == nil {
		return 0
	}
	if e.cfg.Tiers.Offload.Mode == offload.LMCache {
		// LMCache looks its prefix up from block 0.
		return max(0, e.host.Lookup(s.Hashes, 0, maxHit)-m)
	}
	f := e.host.Chunk()
	c0 := m / f
	n := e.host.Lookup(s.Hashes, c0, maxHit/f)
	return max(0, min((c0+n)*f, maxHit)-m)
}

// load reads blocks [m, m+ext) of s from the CPU tier as s is admitted:
// the step waits for the transfer, and the blocks are the GPU's from now
// on (stored there as the step caches them). The connector's lookup is
// counted here, once per admission, as the GPU's prefix cache queries are.
func (e *Engine) load(s *seq, m, ext int) {
	if e.host == nil {
		return
	}
	e.st.ExtQueries += float64(s.known())
	e.st.ExtHits += float64(ext * kvcache.BlockSize)
	if e.cfg.Tiers.Offload.Mode == offload.LMCache {
		maxHit := min((s.known()-1)/kvcache.BlockSize, len(s.Hashes))
		e.st.LMCacheRequested += float64(max(0, maxHit-m) * kvcache.BlockSize)
	}
	if ext == 0 {
		return
	}
	e.host.Load(s.Hashes, m, m+ext)
	e.loads += ext
	e.st.OffloadLoadBlocks += float64(ext)
	if e.cfg.Tiers.Offload.Mode == offload.LMCache {
		e.st.LMCacheHit += float64(ext * kvcache.BlockSize)
	}
}

// offer gives the CPU tier what s has computed up to block full: every
// full chunk (vLLM's connector), or the prompt's blocks (LMCache).
func (e *Engine) offer(s *seq, full int) {
	if e.host == nil {
		return
	}
	to := full / e.host.Chunk()
	if e.cfg.Tiers.Offload.Mode == offload.LMCache {
		to = min(full, s.PromptLen/kvcache.BlockSize)
	}
	if to <= s.off {
		return
	}
	before := e.host.Stored
	e.host.Store(s.Hashes, s.Tokens, s.off, to)
	s.off = to
	n := e.host.Stored - before
	e.st.OffloadStoreBlocks += float64(n)
	e.stores += int(n)
}

// noteTransfers sets the CPU blocks the step in flight pins for its
// transfers (vllm:kv_offload_cpu_cache_usage_perc: 0 when idle).
func (e *Engine) noteTransfers() {
	e.st.Pinned = 0
	if e.host != nil && e.inStep {
		e.st.Pinned = float64(e.loads+e.stores) / float64(e.host.Config().Blocks)
	}
	e.stores = 0
}

// windowNeed is the free blocks group 1 takes to admit s with hit m and
// need new blocks: as many new ones as group 0, and its window's hits
// that sit idle in the free queue.
func (e *Engine) windowNeed(s *seq, m, need int) int {
	if !e.hybrid {
		return 0
	}
	lo := max(0, m-e.windowBlocks())
	return need + e.sw.Idle(s.Hashes[lo:], m-lo)
}

// acquireWindow gives s its group-1 hit at admission: the window's blocks,
// the positions before it skipped.
func (e *Engine) acquireWindow(s *seq, m int) {
	if !e.hybrid {
		return
	}
	lo := max(0, m-e.windowBlocks())
	s.sw = s.sw[:0]
	for i := 0; i < lo; i++ {
		s.sw = append(s.sw, -1)
	}
	s.sw = e.sw.Acquire(s.Hashes[lo:], m-lo, s.sw)
}

// growWindow gives s need more group-1 blocks (after group 0 got them;
// the caller checked that both fit).
func (e *Engine) growWindow(s *seq, need int) {
	if e.hybrid {
		s.sw, _ = e.cache.Allocate(need, s.sw)
	}
}

// slideWindow frees the group-1 blocks of s that its window has left
// (vLLM's remove_skipped_blocks before a step's allocation): those before
// computed - Window + 1 tokens, the last skipped one first in line for
// eviction.
func (e *Engine) slideWindow(s *seq) {
	if !e.hybrid {
		return
	}
	skip := min(max(0, s.computed-e.cfg.Tiers.Window+1)/kvcache.BlockSize, len(s.sw))
	var free []int32
	for i := skip - 1; i >= 0 && s.sw[i] >= 0; i-- {
		free = append(free, s.sw[i])
		s.sw[i] = -1
	}
	// Release frees its list last first: reversed, the block nearest the
	// window is freed first and evicted first, as vLLM orders it.
	for i, j := 0, len(free)-1; i < j; i, j = i+1, j-1 {
		free[i], free[j] = free[j], free[i]
	}
	e.cache.Release(free)
}

// releaseWindow frees every group-1 block of s (finished or preempted).
func (e *Engine) releaseWindow(s *seq) {
	if !e.hybrid {
		return
	}
	held := s.sw[:0]
	for _, id := range s.sw {
		if id >= 0 {
			held = append(held, id)
		}
	}
	e.cache.Release(held)
	s.sw = s.sw[:0]
}
