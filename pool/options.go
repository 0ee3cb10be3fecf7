package pool

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Options configure the pool.
type Options struct {
	Name       string
	Window     time.Duration // rate and hit-rate window
	Refresh    time.Duration // snapshot cadence (floor 250ms)
	Thresholds snapshot.Thresholds
	Limits     Limits
	Workers    []WorkerSpec // configured workers, in display order
	Routers    []RouterSpec
	// StoreOnlyAfter is how many blocks an offload tier stores with no
	// removal before it is taken for store-only (0: 65 536, tiers.go). A
	// test-sized knob: tests lower it to reach the rule in seconds of a
	// simulated pool; no config sets it. A journal records it.
	StoreOnlyAfter int `json:",omitempty"`
}

// WorkerSpec names a configured worker and the ids other sources use for it.
type WorkerSpec struct {
	Name string
	// Aliases are other names sources use for this worker: router worker
	// labels (URLs like http://10.0.0.5:8000), topic ids (10.0.0.5:8000),
	// host:port of its metrics URL. Matching is on host:port, then verbatim.
	Aliases []string
	// NoMetrics says the worker has no metrics URL (events only): its
	// figures are unknown for that reason, not because no scrape came yet.
	NoMetrics bool
	// Events says the config gives the worker a KV event source (its
	// events endpoint, the events_bind socket it may dial, or an event
	// plane): until one of its streams delivers, its resident blocks are
	// unknown and its index is not complete. A worker without one has
	// no index to complete.
	Events bool
	// Role is the configured role (prefill, decode, aggregated); "" lets
	// the pod's labels or the router say.
	Role string
}

// RouterSpec names a configured router.
type RouterSpec struct {
	Name string
	// Profile is the profile the config forces ("" or "auto": detected).
	// A router shows it before its first good scrape (down from the
	// start), then the one its scrapes report.
	Profile string
}

// Limits bound memory. Zero means the default.
type Limits struct {
	Decisions int // decision/outcome records kept for joins (default 20000)
	// RecentDecisions is how many rows Snapshot.Decisions.Recent holds.
	// 0 (the default) sizes it by time: the records of the last
	// RecentDecisionsSpan, at least RecentDecisionsMin (an idle pool still
	// shows its last ones), at most RecentDecisionsMax (a busy pool's rows
	// stay within a few MiB a snapshot). A count fixes it.
	RecentDecisions int
	Prefixes        int // hot prefixes in a snapshot (default 20)
	PrefixCounters  int // prefixes tracked for traffic estimation (default 50000)
	Incidents       int // incidents kept per stream (default 50)
	Errors          int // distinct (source, kind) error rows (default 200)
	// IndexBlocks caps the block index: the pool-wide total of resident
	// (publisher, hash) entries, which is what its memory follows (about
	// 60 B each at the cap, see docs/PERFORMANCE.md "Bounds"). Past it a
	// store of a block new to its publisher is dropped and counted, and
	// that worker's index is incomplete ("index full") until its block
	// set is known again. Default 16 777 216 (2^24): 256 workers of 64 k
	// GPU blocks each, the largest pools kvtop is built for.
	IndexBlocks int
	// Fingerprints bounds the root-content fingerprints kept for the
	// hash-boundary check (about 85 B each, see docs/PERFORMANCE.md):
	// when full, the half seen least recently is forgotten and counted
	// (pool.hash_mismatch.fingerprints_dropped). Default 65 536.
	Fingerprints int
	// LadderHashes bounds the hit-rate ladder's memory of hashes seen
	// (slots of 16 bytes, at most half used; beyond it a hash-chosen
	// sample is followed). 0: DefaultLadderHashes.
	LadderHashes int
}

// The time-sized default of Limits.RecentDecisions: two minutes of records
// (4 200 at 35 decisions/s), at least 500, at most 5 000. A row costs
// about 350 B in each snapshot, 840 B of values the pool builds once and
// shares while the record does not change, and 880 B of JSON on a remote
// console's stream (BenchmarkRecentDecisions): at the bound about 4 MiB
// kept by the pool, 1.7 MiB a snapshot and 4.2 MiB a streamed frame,
// whatever the request rate.
const (
	RecentDecisionsSpan = 2 * time.Minute
	RecentDecisionsMin  = 500
)

// DefaultIndexBlocks is Limits.IndexBlocks when the config says nothing.
const DefaultIndexBlocks = 1 << 24

// DefaultFingerprints is Limits.Fingerprints when the config says nothing.
const DefaultFingerprints = 1 << 16

// DefaultLimits are the memory bounds used when the config says nothing.
func DefaultLimits() Limits {
	return Limits{
		Decisions:      20000,
		Prefixes:       20,
		PrefixCounters: 50000,
		Incidents:      50,
		Errors:         200,
		IndexBlocks:    DefaultIndexBlocks,
		Fingerprints:   DefaultFingerprints,
	}
}
