// Package scenario holds the simulator's fault timelines: what happens to
// the simulated pool, and when, on the sim's (virtual) clock.
package scenario

import (
	"fmt"
	"strings"
	"time"
)

// Action is one thing done to the pool. The sim applies it on its clock.
type Action interface{ String() string }

// EventLoss keeps the next Batches batches of one publisher out of the live
// stream while keeping them for replay: a seq gap that replay repairs.
type EventLoss struct{ Worker, Rank, Batches int }

// ReplayOverflow keeps more batches out of the live stream than the replay
// buffer holds (its capacity + Extra): a gap whose start replay cannot give
// back (history lost).
type ReplayOverflow struct{ Worker, Rank, Extra int }

// WorkerRestart restarts a worker: its requests are aborted, it is down for
// Down (metrics 503, no routing), then comes back with an empty cache, seq
// from 0 and counters from zero. The new process hashes its blocks with
// Seed (0: the pool's, as with a pinned PYTHONHASHSEED) and holds Blocks
// KV blocks (0: the default size).
type WorkerRestart struct {
	Worker int
	Down   time.Duration
	Seed   uint64
	Blocks int
}

// HashSeed makes a worker hash its blocks with another seed from now on
// (0: the pool's): a process started without PYTHONHASHSEED pinned, or with
// another prefix-cache hash algorithm. Blocks it already published keep
// their hashes, so give it at start, or with a restart (WorkerRestart.Seed).
type HashSeed struct {
	Worker int
	Seed   uint64
}

// RouterRestart restarts the router: its index, in-flight counts and
// counters start from nothing.
type RouterRestart struct{}

// SlowScrape makes a worker's /metrics take Delay (0 turns it off).
type SlowScrape struct {
	Worker int
	Delay  time.Duration
}

// HotPrefix starts Rate new conversations a second, on top of the
// workload's rate, about one document that nobody asked about before (0
// turns it off), and sets the router's load threshold (0 restores the
// default): a loose threshold lets the document's owner overheat.
type HotPrefix struct {
	Rate      float64
	Threshold int
}

// Truncate makes Fraction of streams end without their last chunk: HTTP 200
// without done.
type Truncate struct{ Fraction float64 }

// SlowFirstToken delays every first token of a worker's HTTP streams
// (its OpenAI-compatible face) by Delay more (0 turns it off).
type SlowFirstToken struct {
	Worker int
	Delay  time.Duration
}

// CutStreams makes every Every-th HTTP stream of a worker end without its
// finish_reason and data: [DONE] (HTTP 200, the connection closed
// cleanly), as seed 000's third request (0 turns it off).
type CutStreams struct{ Worker, Every int }

// ClientLoad sends Rate chat requests a (wall) second, streaming, through
// kvtop tap to the router's HTTP face (0 stops them): clients whose view
// the tap records.
type ClientLoad struct{ Rate float64 }

func (a SlowFirstToken) String() string {
	if a.Delay == 0 {
		return fmt.Sprintf("slow-first-token: w%d answers at its own pace again", a.Worker)
	}
	return fmt.Sprintf("slow-first-token: w%d's first tokens come %s later", a.Worker, a.Delay)
}
func (a CutStreams) String() string {
	if a.Every == 0 {
		return fmt.Sprintf("cut-streams: w%d ends its streams properly again", a.Worker)
	}
	return fmt.Sprintf("cut-streams: every %d. stream of w%d ends HTTP 200 without finish_reason and [DONE]", a.Every, a.Worker)
}
func (a ClientLoad) String() string {
	return fmt.Sprintf("client-load: %g streaming chat requests a second through kvtop tap", a.Rate)
}

// ClearCache is an explicit prefix-cache reset of one engine
// (AllBlocksCleared).
type ClearCache struct{ Worker, Rank int }

// SetRate sets the request rate to Factor times the run's base rate (0
// stops new requests, 1 restores the base rate).
type SetRate struct{ Factor float64 }

// Policy switches the router's policy: "round-robin" (cache-blind),
// "cache-aware", or "" for the run's own (--policy).
type Policy struct{ Name string }

// Tiers sets what a worker's engines run beside their GPU KV cache:
// vLLM main's KV cache groups and connectors (see the Mode constants). It
// is a process setting: a worker that has published restarts into it
// (down 2 s, seq from 0, cache empty); at start, or while it restarts, it
// simply runs it; a worker that already runs it is left alone (so a
// looping timeline can say it again). SGLang workers ignore it.
type Tiers struct {
	Worker int
	Mode   string // "" is the run's own profile: no KV cache groups published
	// GPUBlocks is the GPU KV cache (0: the default); CPUBlocks the CPU
	// tier of an offload or LMCache mode, in GPU blocks (0: four times
	// the GPU's).
	GPUBlocks, CPUBlocks int
}

// Modes of Tiers.
const (
	ModeMain    = "main"   // vLLM main's events: group_idx and kind, one full-attention group
	ModeHybrid  = "hybrid" // + a sliding-window group 1 of HybridWindow tokens
	ModeOffload = "offload-placeholders"
	// ModeChunks offloads to CPU with self-describing events.
	ModeChunks  = "offload-chunks"
	ModeLMCache = "lmcache" // LMCache's connector: CPU stores, never a removal
)

// TierModes lists the modes, for validation.
var TierModes = []string{"", ModeMain, ModeHybrid, ModeOffload, ModeChunks, ModeLMCache}

// HybridWindow is the sliding window of ModeHybrid, in tokens (Gemma 3's).
const HybridWindow = 1024

// OffloadChunk is GPU blocks per offloaded block (vLLM's CPU offloading
// with a block size of 64 tokens): chunks begin inside shared prefixes.
const OffloadChunk = 4

// OffloadGPUBlocks is the GPU KV cache of the offload scenario: a quarter
// of the default, so that it evicts within a minute and the CPU tier
// serves what it evicted.
const OffloadGPUBlocks = 1024

// LMCacheBlocks is the host cache of ModeLMCache workers in the lmcache
// scenario and the tour: 8 GiB of the sim model's 2 MiB blocks. In the
// lmcache scenario it is four times the GPU's (OffloadGPUBlocks), so it
// serves hits; it fills within minutes, and evicts without a word long
// before kvtop's store-only bound.
const LMCacheBlocks = 4096

// ReportFull makes Fraction of requests ask for kv_cache_report_mode
// "full" (vLLM main then stores their reused prefix again; older engines
// ignore it). 0 turns it off.
type ReportFull struct{ Fraction float64 }

// Unique makes Share of new conversations begin with a prompt of tokens
// nobody sent before (no system prompt, no document), and last Turns
// turns (0: one): nothing can serve their first turn from a cache, the
// compulsory misses of the hit-rate ladder. Share 0 turns it off.
type Unique struct {
	Share float64
	Turns int
}

func (a Unique) String() string {
	switch {
	case a.Share == 0:
		return "unique-prompts off: conversations share system prompts and documents again"
	case a.Turns > 1:
		return fmt.Sprintf("unique-prompts: %.0f%% of new conversations begin with a prompt nobody sent before and last %d turns", a.Share*100, a.Turns)
	}
	return fmt.Sprintf("unique-prompts: %.0f%% of new conversations are one prompt nobody sent before", a.Share*100)
}

func (a Tiers) String() string {
	what := map[string]string{
		"":          "the run's own profile (no KV cache groups published)",
		ModeMain:    "vLLM main's events (KV cache group and kind)",
		ModeHybrid:  fmt.Sprintf("a hybrid model: full attention and a %d-token sliding-window group", HybridWindow),
		ModeOffload: "CPU offloading, placeholder events",
		ModeChunks:  "CPU offloading, self-describing events",
		ModeLMCache: "an LMCache CPU tier (stores published, never a removal)",
	}[a.Mode]
	if what == "" {
		what = "unknown mode " + a.Mode
	}
	s := fmt.Sprintf("tiers: w%d runs %s", a.Worker, what)
	if a.GPUBlocks > 0 {
		s += fmt.Sprintf(", %d GPU blocks", a.GPUBlocks)
	}
	if a.CPUBlocks > 0 {
		s += fmt.Sprintf(", %d CPU blocks", a.CPUBlocks)
	}
	return s
}
func (a ReportFull) String() string {
	if a.Fraction == 0 {
		return "report-full off: incremental KV event reports"
	}
	return fmt.Sprintf("report-full: %.0f%% of requests ask for kv_cache_report_mode=full", a.Fraction*100)
}

func (a EventLoss) String() string {
	return fmt.Sprintf("event-loss: w%d rank %d skips %d batches live (kept for replay)", a.Worker, a.Rank, a.Batches)
}
func (a ReplayOverflow) String() string {
	return fmt.Sprintf("replay-overflow: w%d rank %d skips more batches than its replay buffer holds", a.Worker, a.Rank)
}
func (a WorkerRestart) String() string {
	var with []string
	if a.Seed != 0 {
		with = append(with, "hashing with another seed")
	}
	if a.Blocks > 0 {
		with = append(with, fmt.Sprintf("%d KV blocks", a.Blocks))
	}
	s := fmt.Sprintf("worker-restart: w%d restarts (down %s; seq back to 0, cache empty, counters reset)", a.Worker, a.Down)
	if len(with) > 0 {
		s += ", back " + strings.Join(with, " and ")
	}
	return s
}
func (a HashSeed) String() string {
	if a.Seed == 0 {
		return fmt.Sprintf("hash-seed: w%d hashes its blocks with the pool's seed", a.Worker)
	}
	return fmt.Sprintf("hash-seed: w%d hashes its blocks with a seed of its own (PYTHONHASHSEED not pinned)", a.Worker)
}
func (RouterRestart) String() string {
	return "router-restart: router state and counters reset"
}
func (a SlowScrape) String() string {
	if a.Delay == 0 {
		return fmt.Sprintf("slow-scrape off: w%d /metrics answers promptly", a.Worker)
	}
	return fmt.Sprintf("slow-scrape: w%d /metrics takes %s", a.Worker, a.Delay)
}
func (a HotPrefix) String() string {
	if a.Rate == 0 {
		return "hot-prefix off: traffic spreads out again"
	}
	return fmt.Sprintf("hot-prefix: %g more conversations a second about one document (load threshold %d)", a.Rate, a.Threshold)
}
func (a Truncate) String() string {
	if a.Fraction == 0 {
		return "truncated-streams off"
	}
	return fmt.Sprintf("truncated-streams: %.0f%% of streams end without their last chunk (HTTP 200, not done)", a.Fraction*100)
}
func (a ClearCache) String() string {
	return fmt.Sprintf("clear-cache: w%d rank %d prefix cache reset", a.Worker, a.Rank)
}
func (a SetRate) String() string {
	return fmt.Sprintf("rate: %g x the base rate", a.Factor)
}
func (a Policy) String() string {
	if a.Name == "" {
		return "policy: back to the run's own"
	}
	return "policy: the router turns " + a.Name
}

// Cue is a moment on the timeline.
type Cue struct {
	At      time.Duration
	Phase   string // what the operator should be seeing from now on
	Actions []Action
}

// Scenario is a timeline, repeated every Loop (0: played once).
type Scenario struct {
	Name    string
	Summary string
	Cues    []Cue
	Loop    time.Duration
}

// HotThreshold is the loose load threshold of hot-prefix phases.
const HotThreshold = 64

// HotRate is the surge of new conversations a second on the hot document.
// It is more than one simulated worker serves (eight conversations are
// about twelve requests), so the document's owner falls behind, and it
// keeps most of the surge because the router sends requests elsewhere
// only past the load threshold.
const HotRate = 8.0

// RecomputeLoad is the request rate of the recompute scenario, as a
// factor of the base rate: a busy pool, where the prefill a cache-blind
// router recomputes is what tips its engines into queueing (at 1.8× a
// 4-to-8-worker pool's TTFT p95 is about 0.7–4 s under round-robin and
// 0.2 s cache-aware, at the same request rate; at the base rate the two
// differ by a third).
const RecomputeLoad = 1.8

// Seeds of the hash-mismatch scenario: a worker's own (as without a pinned
// PYTHONHASHSEED), and another one after a restart.
const (
	OwnSeed     = 0x5eed0001
	RestartSeed = 0x5eed0002
)

// ThrashBlocks is the KV cache a thrashing worker comes back with: a
// sixth of the default 4096 blocks, 10k tokens, a few conversations'
// worth. Its share of the pool's system prompts, documents and chats no
// longer fits: it evicts them and recomputes them minutes, then seconds,
// later.
const ThrashBlocks = 640

// ThrashLoad is the request rate of the thrash phase, as a factor of the
// base rate: busy enough that the small cache's blocks are mostly held by
// running requests (KV use high), so what sits idle in it is evicted soon.
const ThrashLoad = 1.5

// hotRate is the surge in a pool of n workers: HotRate, or a fifth of the
// pool's default rate (3 a second per worker) in a big pool, so that the
// document becomes a hot prefix there too (≥ 10% of the traffic).
func hotRate(n int) float64 { return max(HotRate, 0.6*float64(n)) }

// hot is a surge of traffic on one document, with a router threshold loose
// enough to let the document's owner overheat; cool ends it.
func hot(n int) []Action { return []Action{HotPrefix{Rate: hotRate(n), Threshold: HotThreshold}} }
func cool() []Action     { return []Action{HotPrefix{}} }

var summaries = map[string]string{
	"steady":            "a healthy pool: chats, RAG questions, shared system prompts",
	"hot-prefix":        "a surge of traffic on one document: the one worker that owns it overheats, and the other requests sent there wait",
	"router-restart":    "the router restarts: its state and counters reset, hit rate dips then recovers",
	"worker-restart":    "a worker restarts: seq back to 0, cache empty, counters reset",
	"event-loss":        "a publisher skips a run of seqs live; replay gives them back",
	"replay-overflow":   "a gap longer than the replay buffer: history lost",
	"slow-scrape":       "one worker's /metrics takes 3 s",
	"truncated-streams": "some requests end HTTP 200 without done",
	"tap":               "clients stream through kvtop tap to the router's HTTP face: one worker's first tokens come late, another cuts every fourth stream before finish_reason and [DONE]",
	"recompute":         "the same load under a round-robin router, then a cache-aware one: the same RPS, a different p95, and the prefill recomputed",
	"hash-mismatch":     "one worker seeds its block hashes its own way, another changes its seed at a restart: identical prefixes, different hashes",
	"thrash":            "a worker comes back with a sixth of its KV cache: its working set no longer fits, and it evicts what it stores again",
	"hybrid":            "a hybrid model: a full-attention and a sliding-window KV cache group under the same block hashes; then full reports",
	"offload":           "small GPUs offload to CPU, half as placeholders, half as self-describing chunks; CPU hits are loaded back",
	"report-full":       "clients ask for kv_cache_report_mode=full: reused prefixes are stored again, as new ones look",
	"lmcache":           "LMCache CPU tiers publish their stores and never a removal",
	"ladder":            "the hit-rate ladder's losses one at a time: unique prompts (compulsory), workers hashing with seeds of their own (configuration), a round-robin router (routing), caches too small (capacity)",
	"tour":              "all of the above in about four minutes, for the demo",
}

// Names lists the scenarios in the order the tour plays them, tour last.
func Names() []string {
	return []string{"steady", "hot-prefix", "event-loss", "router-restart", "worker-restart",
		"replay-overflow", "slow-scrape", "truncated-streams", "tap", "recompute", "hash-mismatch", "thrash",
		"hybrid", "offload", "report-full", "lmcache", "ladder", "tour"}
}

// Summary describes a scenario in one line.
func Summary(name string) string { return summaries[name] }

// Get returns the timeline of a scenario for a pool of n workers.
func Get(name string, n int) (Scenario, error) {
	if n < 1 {
		n = 1
	}
	w := func(i int) int { return i % n }
	last := n - 1
	s := Scenario{Name: name, Summary: summaries[name]}
	steady := Cue{At: 0, Phase: "steady"}
	switch name {
	case "steady":
		s.Cues = []Cue{steady}
	case "hot-prefix":
		s.Loop = 120 * time.Second
		s.Cues = []Cue{steady,
			{At: 20 * time.Second, Phase: "hot-prefix", Actions: hot(n)},
			{At: 80 * time.Second, Phase: "steady (cooling down)", Actions: cool()}}
	case "router-restart":
		s.Loop = 60 * time.Second
		s.Cues = []Cue{steady, {At: 30 * time.Second, Phase: "router-restart", Actions: []Action{RouterRestart{}}}}
	case "worker-restart":
		s.Loop = 60 * time.Second
		s.Cues = []Cue{steady, {At: 30 * time.Second, Phase: "worker-restart", Actions: []Action{WorkerRestart{Worker: w(1), Down: 5 * time.Second}}}}
	case "event-loss":
		s.Loop = 30 * time.Second
		s.Cues = []Cue{steady, {At: 15 * time.Second, Phase: "event-loss", Actions: []Action{EventLoss{Worker: w(0), Batches: 8}}}}
	case "replay-overflow":
		s.Loop = 60 * time.Second
		s.Cues = []Cue{steady, {At: 20 * time.Second, Phase: "replay-overflow", Actions: []Action{ReplayOverflow{Worker: last, Extra: 32}}}}
	case "slow-scrape":
		s.Cues = []Cue{steady, {At: 10 * time.Second, Phase: "slow-scrape", Actions: []Action{SlowScrape{Worker: last, Delay: 3 * time.Second}}}}
	case "truncated-streams":
		s.Cues = []Cue{{At: 0, Phase: "truncated-streams", Actions: []Action{Truncate{Fraction: 0.15}}}}
	case "tap":
		slow, cut := w(1), w(2)
		s.Cues = []Cue{{At: 0, Phase: fmt.Sprintf("clients through kvtop tap: w%d's first tokens come 1.5 s late, w%d cuts every fourth stream (HTTP 200, no finish_reason, no [DONE])", slow, cut),
			Actions: []Action{ClientLoad{Rate: TapClientRate}, SlowFirstToken{Worker: slow, Delay: 1500 * time.Millisecond}, CutStreams{Worker: cut, Every: 4}}}}
	case "recompute":
		// A window (60 s) of each: the charts over it show one policy
		// giving way to the other, at the same busy load.
		s.Loop = 120 * time.Second
		s.Cues = []Cue{
			{At: 0, Phase: "round-robin: each turn lands on a worker that lacks its conversation, and recomputes it", Actions: []Action{Policy{Name: "round-robin"}, SetRate{Factor: RecomputeLoad}}},
			{At: 60 * time.Second, Phase: "cache-aware: the same RPS, prefixes reused, TTFT p95 down", Actions: []Action{Policy{Name: "cache-aware"}}},
		}
	case "hash-mismatch":
		s.Cues = []Cue{
			{At: 0, Phase: fmt.Sprintf("w%d hashes its blocks with a seed of its own", w(1)), Actions: []Action{HashSeed{Worker: w(1), Seed: OwnSeed}}},
			{At: 30 * time.Second, Phase: fmt.Sprintf("w%d restarts and comes back with another seed", w(2)),
				Actions: []Action{WorkerRestart{Worker: w(2), Down: 3 * time.Second, Seed: RestartSeed}}},
		}
	case "thrash":
		s.Cues = []Cue{steady,
			{At: 15 * time.Second, Phase: fmt.Sprintf("w%d comes back with a sixth of its KV cache and evicts what it needs again", last),
				Actions: []Action{WorkerRestart{Worker: last, Down: 2 * time.Second, Blocks: ThrashBlocks}, SetRate{Factor: ThrashLoad}}}}
	case "hybrid":
		s.Loop = 60 * time.Second
		s.Cues = []Cue{
			{At: 0, Phase: fmt.Sprintf("hybrid: group 0 full attention, group 1 a %d-token sliding window under the same hashes; group 1 frees what leaves its window", HybridWindow),
				Actions: append(every(n, Tiers{Mode: ModeHybrid}), ReportFull{})},
			{At: 30 * time.Second, Phase: "hybrid, full reports: a reused prefix is stored again in both groups; group 1 names only its window's blocks",
				Actions: []Action{ReportFull{Fraction: 1}}},
		}
	case "offload":
		var a []Action
		for i := 0; i < n; i++ {
			mode := ModeOffload
			if i%2 == 1 {
				mode = ModeChunks
			}
			a = append(a, Tiers{Worker: i, Mode: mode, GPUBlocks: OffloadGPUBlocks})
		}
		s.Cues = []Cue{{At: 0, Phase: fmt.Sprintf("offload: GPUs of %d blocks spill to CPU; even workers publish placeholders (no block size), odd ones self-describing chunks; CPU hits are loaded back", OffloadGPUBlocks),
			Actions: a}}
	case "report-full":
		s.Loop = 60 * time.Second
		s.Cues = []Cue{
			{At: 0, Phase: "vLLM main, incremental reports: a reused prefix is not published again",
				Actions: append(every(n, Tiers{Mode: ModeMain}), ReportFull{})},
			{At: 30 * time.Second, Phase: "report-full: every request asks for kv_cache_report_mode=full: its reused prefix is stored again from block 0; kvtop counts it re-announced, stores/s unchanged",
				Actions: []Action{ReportFull{Fraction: 1}}},
		}
	case "lmcache":
		s.Cues = []Cue{{At: 0, Phase: fmt.Sprintf("lmcache: GPUs of %d blocks keep LMCache CPU tiers of %d; they publish their stores and never a removal, while they evict; kvtop takes them for store-only after 65 536 blocks",
			OffloadGPUBlocks, LMCacheBlocks),
			Actions: every(n, Tiers{Mode: ModeLMCache, GPUBlocks: OffloadGPUBlocks, CPUBlocks: LMCacheBlocks})}}
	case "ladder":
		s.Loop = 4*LadderPhase + 20*time.Second
		s.Cues = ladderCues(n)
	case "tour":
		s.Loop = 240 * time.Second
		s.Cues = []Cue{
			{At: 0, Phase: tourTiersPhase(n), Actions: tourTiers(n)},
			{At: 20 * time.Second, Phase: "hot-prefix: one document's owner overheats; the requests away from it wait", Actions: hot(n)},
			{At: 50 * time.Second, Phase: "event-loss: a gap in w0's stream, repaired by replay", Actions: append(cool(), EventLoss{Worker: w(0), Batches: 8})},
			{At: 65 * time.Second, Phase: "router-restart: hit rate dips, then recovers", Actions: []Action{RouterRestart{}}},
			{At: 78 * time.Second, Phase: "report-full: clients ask for kv_cache_report_mode=full: reused prefixes stored again, counted as re-announces, not stores",
				Actions: []Action{ReportFull{Fraction: 1}}},
			{At: 90 * time.Second, Phase: fmt.Sprintf("worker-restart: w%d comes back empty as a hybrid-model canary (a sliding-window group), hashing with a seed of its own (hash mismatch)", w(1)),
				Actions: []Action{WorkerRestart{Worker: w(1), Down: 5 * time.Second, Seed: OwnSeed}, Tiers{Worker: w(1), Mode: ModeHybrid}}},
			{At: 110 * time.Second, Phase: fmt.Sprintf("replay-overflow: w%d's gap outruns its replay buffer", w(2)),
				Actions: []Action{ReportFull{}, ReplayOverflow{Worker: w(2), Extra: 32}}},
			{At: 130 * time.Second, Phase: fmt.Sprintf("slow-scrape: w%d's /metrics takes 3 s", last), Actions: []Action{SlowScrape{Worker: last, Delay: 3 * time.Second}}},
			{At: 145 * time.Second, Phase: "truncated-streams: HTTP 200 without done", Actions: []Action{SlowScrape{Worker: last}, Truncate{Fraction: 0.2}}},
			{At: 160 * time.Second, Phase: "recompute: a round-robin router recomputes prefixes cached on other workers; TTFT p95 up", Actions: []Action{Truncate{}, Policy{Name: "round-robin"}, SetRate{Factor: RecomputeLoad}}},
			{At: 190 * time.Second, Phase: fmt.Sprintf("thrash: cache-aware again; w%d back on the pool's seed and model, w%d with a sixth of its KV cache", w(1), w(0)),
				Actions: append(thrashCue(w(0), w(1)), Tiers{Worker: w(1), Mode: tourMode(n, w(1))})},
			{At: 225 * time.Second, Phase: fmt.Sprintf("steady: w%d back with its whole KV cache", w(0)),
				Actions: []Action{WorkerRestart{Worker: w(0), Down: 2 * time.Second}, Policy{}, SetRate{Factor: 1}}},
		}
	default:
		return Scenario{}, fmt.Errorf("unknown scenario %q (one of %v)", name, Names())
	}
	return s, nil
}

// LadderPhase is how long each phase of the ladder scenario lasts: long
// enough for its loss to fill most of a 30 s window (kvtop's default 60 s
// window shows each phase beside the one before it).
const LadderPhase = 30 * time.Second

// LadderBlocks is the KV cache of the ladder scenario's capacity phase: a
// quarter of the default. Its working set no longer fits, so each worker
// evicts what it computes again; yet requests still fit in it, and do not
// queue until the router sends them to a worker that never held them (a
// sixth, ThrashBlocks, made routing a third of the loss).
const LadderBlocks = 1024

// ladderCues walks through the hit-rate ladder's losses, one phase each,
// then gives the workers their whole caches back.
//
// The configuration phase follows the one-turn prompts of the compulsory
// phase, opens each chat with a prompt of its own and gives it two turns:
// kvtop recognises another hashing of the same content by a chain's first
// block (issue 15's root fingerprints), so a chat whose second turn lands
// on another worker is recomputed there from its first block, in full
// view. Behind a shared system prompt every worker holds the prompt under
// its own hash, and a conversation that goes on on another worker cannot
// be matched from the events (chats of the routing phase still going on
// would be).
func ladderCues(n int) []Cue {
	var reseed, pooled, small, whole []Action
	for i := 0; i < n; i++ {
		reseed = append(reseed, WorkerRestart{Worker: i, Down: 2 * time.Second, Seed: OwnSeed + uint64(i)})
		pooled = append(pooled, WorkerRestart{Worker: i, Down: 2 * time.Second})
		small = append(small, WorkerRestart{Worker: i, Down: 2 * time.Second, Blocks: LadderBlocks})
		whole = append(whole, WorkerRestart{Worker: i, Down: 2 * time.Second})
	}
	return []Cue{
		{At: 0, Phase: "compulsory: every conversation is one prompt nobody sent before; no cache anywhere can serve it",
			Actions: []Action{Unique{Share: 1}}},
		{At: LadderPhase, Phase: "configuration: every worker restarts hashing with a seed of its own (PYTHONHASHSEED not pinned); the router matches none of their hashes and spreads chats by load, and a chat's second turn recomputes on one worker what another holds under its own hash",
			Actions: append([]Action{Unique{Share: 1, Turns: 2}, SetRate{Factor: 0.5}}, reseed...)},
		{At: 2 * LadderPhase, Phase: "routing: every worker restarts on the pool's seed; chats, shared system prompts and documents under a round-robin router: each turn lands away from the worker that holds its conversation",
			Actions: append([]Action{Unique{}, SetRate{Factor: 1}, Policy{Name: "round-robin"}}, pooled...)},
		{At: 3 * LadderPhase, Phase: fmt.Sprintf("capacity: a cache-aware router again, and every worker restarts with a quarter of its KV cache (%d blocks): it evicts what it computes again", LadderBlocks),
			Actions: append([]Action{Policy{}}, small...)},
		{At: 4 * LadderPhase, Phase: "steady: every worker back with its whole KV cache; the losses shrink to the workload's own",
			Actions: whole},
	}
}

// every is a Tiers for each of n workers.
func every(n int, t Tiers) []Action {
	out := make([]Action, n)
	for i := range out {
		t.Worker = i
		out[i] = t
	}
	return out
}

// tourMode is what worker i runs in the tour of n workers: w0 an LMCache
// tier, w2 CPU offloading with placeholders, w3 with self-describing
// chunks (in a pool too small for all, the first of them that wraps onto
// a worker), w1 the run's own profile (it becomes the hybrid canary).
func tourMode(n, i int) string {
	for _, x := range []struct {
		w    int
		mode string
	}{{0, ModeLMCache}, {2, ModeOffload}, {3, ModeChunks}} {
		if x.w%n == i && i != 1%n {
			return x.mode
		}
	}
	return ""
}

func tourTiers(n int) []Action {
	var out []Action
	for i := 0; i < min(n, 4); i++ {
		t := Tiers{Worker: i, Mode: tourMode(n, i)}
		if t.Mode == ModeLMCache {
			t.CPUBlocks = LMCacheBlocks
		}
		out = append(out, t)
	}
	return out
}

// tourTiersPhase names the tiers the tour's pool warms up with.
func tourTiersPhase(n int) string {
	var parts []string
	for i := 0; i < min(n, 4); i++ {
		switch tourMode(n, i) {
		case ModeLMCache:
			parts = append(parts, fmt.Sprintf("w%d keeps an LMCache CPU tier", i))
		case ModeOffload:
			parts = append(parts, fmt.Sprintf("w%d offloads to CPU (placeholders)", i))
		case ModeChunks:
			parts = append(parts, fmt.Sprintf("w%d offloads to CPU (self-describing)", i))
		}
	}
	if len(parts) == 0 {
		return "steady: the pool warms up"
	}
	return "steady: the pool warms up; " + strings.Join(parts, ", ")
}

// thrashCue is the tour's thrash phase: the cache-aware router and the base
// rate again, the mismatched worker back on the pool's seed and another
// with a sixth of its KV cache (one restart when they are the same).
func thrashCue(small, reseeded int) []Action {
	out := []Action{Policy{}, SetRate{Factor: 1}, WorkerRestart{Worker: small, Down: 2 * time.Second, Blocks: ThrashBlocks}}
	if reseeded != small {
		out = append(out, WorkerRestart{Worker: reseeded, Down: 2 * time.Second})
	}
	return out
}

// TapClientRate is the tap scenario's client requests a second.
const TapClientRate = 4

// HasClients: the scenario sends client requests through kvtop tap.
func (s Scenario) HasClients() bool {
	for _, c := range s.Cues {
		for _, a := range c.Actions {
			if _, ok := a.(ClientLoad); ok {
				return true
			}
		}
	}
	return false
}

// OverflowWorkers lists the workers a scenario overflows: their replay
// buffer must be short enough for the gap to outrun it in seconds.
func (s Scenario) OverflowWorkers() []int {
	var out []int
	for _, c := range s.Cues {
		for _, a := range c.Actions {
			if o, ok := a.(ReplayOverflow); ok {
				out = append(out, o.Worker)
			}
		}
	}
	return out
}

// Player walks a scenario's timeline.
type Player struct {
	s    Scenario
	next int           // next cue
	base time.Duration // start of the current loop
}

// NewPlayer starts s at time 0.
func NewPlayer(s Scenario) *Player { return &Player{s: s} }

// Due returns the cues whose time has come by now, in order.
func (p *Player) Due(now time.Duration) []Cue {
	var out []Cue
	for {
		if p.next >= len(p.s.Cues) {
			if p.s.Loop <= 0 || now < p.base+p.s.Loop {
				return out
			}
			p.base += p.s.Loop
			p.next = 0
		}
		c := p.s.Cues[p.next]
		if p.base+c.At > now {
			return out
		}
		out = append(out, c)
		p.next++
	}
}
