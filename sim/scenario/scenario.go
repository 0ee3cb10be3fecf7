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

// ClearCache is an explicit prefix-cache reset of one engine
// (AllBlocksCleared).
type ClearCache struct{ Worker, Rank int }

// SetRate sets the request rate to Factor times the run's base rate (0
// stops new requests, 1 restores the base rate).
type SetRate struct{ Factor float64 }

// Policy switches the router's policy: "round-robin" (cache-blind),
// "cache-aware", or "" for the run's own (--policy).
type Policy struct{ Name string }

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
	"recompute":         "the same load under a round-robin router, then a cache-aware one: the same RPS, a different p95, and the prefill recomputed",
	"hash-mismatch":     "one worker seeds its block hashes its own way, another changes its seed at a restart: identical prefixes, different hashes",
	"thrash":            "a worker comes back with a sixth of its KV cache: its working set no longer fits, and it evicts what it stores again",
	"tour":              "all of the above in about four minutes, for the demo",
}

// Names lists the scenarios in the order the tour plays them, tour last.
func Names() []string {
	return []string{"steady", "hot-prefix", "event-loss", "router-restart", "worker-restart",
		"replay-overflow", "slow-scrape", "truncated-streams", "recompute", "hash-mismatch", "thrash", "tour"}
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
	case "tour":
		s.Loop = 240 * time.Second
		s.Cues = []Cue{
			{At: 0, Phase: "steady: the pool warms up"},
			{At: 20 * time.Second, Phase: "hot-prefix: one document's owner overheats; the requests away from it wait", Actions: hot(n)},
			{At: 50 * time.Second, Phase: "event-loss: a gap in w0's stream, repaired by replay", Actions: append(cool(), EventLoss{Worker: w(0), Batches: 8})},
			{At: 65 * time.Second, Phase: "router-restart: hit rate dips, then recovers", Actions: []Action{RouterRestart{}}},
			{At: 90 * time.Second, Phase: fmt.Sprintf("worker-restart: w%d comes back empty, hashing with a seed of its own (hash mismatch)", w(1)),
				Actions: []Action{WorkerRestart{Worker: w(1), Down: 5 * time.Second, Seed: OwnSeed}}},
			{At: 110 * time.Second, Phase: fmt.Sprintf("replay-overflow: w%d's gap outruns its replay buffer", w(2)), Actions: []Action{ReplayOverflow{Worker: w(2), Extra: 32}}},
			{At: 130 * time.Second, Phase: fmt.Sprintf("slow-scrape: w%d's /metrics takes 3 s", last), Actions: []Action{SlowScrape{Worker: last, Delay: 3 * time.Second}}},
			{At: 145 * time.Second, Phase: "truncated-streams: HTTP 200 without done", Actions: []Action{SlowScrape{Worker: last}, Truncate{Fraction: 0.2}}},
			{At: 160 * time.Second, Phase: "recompute: a round-robin router recomputes prefixes cached on other workers; TTFT p95 up", Actions: []Action{Truncate{}, Policy{Name: "round-robin"}, SetRate{Factor: RecomputeLoad}}},
			{At: 190 * time.Second, Phase: fmt.Sprintf("thrash: cache-aware again; w%d back on the pool's seed, w%d with a sixth of its KV cache", w(1), w(0)),
				Actions: thrashCue(w(0), w(1))},
			{At: 225 * time.Second, Phase: fmt.Sprintf("steady: w%d back with its whole KV cache", w(0)),
				Actions: []Action{WorkerRestart{Worker: w(0), Down: 2 * time.Second}, Policy{}, SetRate{Factor: 1}}},
		}
	default:
		return Scenario{}, fmt.Errorf("unknown scenario %q (one of %v)", name, Names())
	}
	return s, nil
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
