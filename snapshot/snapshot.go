// Package snapshot holds the pool's immutable picture (Snapshot and the
// figures in it) and the states that name things in it: what views,
// remote consoles, the HTTP API and scripts read, without the pool that
// builds it or the collectors that feed it. It imports only the standard
// library (TestLeaf).
package snapshot

import "time"

// Snapshot is an immutable picture of the pool, published at every refresh.
// Views and scripts may keep it as long as they like, and must not write
// to it: its series ([]Point) share backing arrays with the pool, which
// only ever appends past what a snapshot was given (series.points), and a
// decision row's flags and pointed-to values are shared with the next
// snapshots while its record does not change (the pool builds a row once
// per change and never writes to it after); nothing else in it is shared
// with the pool goroutine. The JSON form is a contract for scripts
// (`kvtop snapshot --format json`): keys are only ever added.
//
// Every number keeps its unit in its name; unknown values are nil (JSON
// null), never 0. Every fraction (kv_usage, hit rates, shares, gini) is
// within 0..1 or null: a figure that cannot be true (hits above queries
// over the window) is null and a reason says why.
//
// The block index limit (Limits.IndexBlocks) is reported as flags, not a
// new state: pool.index_full and workers[].index_full say stores were
// dropped; the worker's state is "stale" and its reason (the one text
// field that explains states) says "index full: N blocks
// (limits.index_blocks)"; streams[].dropped_blocks counts what was not
// indexed.
type Snapshot struct {
	At       time.Time `json:"at"`
	WindowS  float64   `json:"window_s"` // configured rate / hit-rate window
	Seq      uint64    `json:"seq"`      // snapshot number, +1 per publish
	RefreshS float64   `json:"refresh_s"`

	Pool       PoolSummary  `json:"pool"`
	Workers    []Worker     `json:"workers"`  // in configured order
	Prefixes   []Prefix     `json:"prefixes"` // hottest first
	Routers    []Router     `json:"routers"`
	Decisions  Decisions    `json:"decisions"`
	Errors     []ErrorCount `json:"errors"` // by source and kind, most recent first
	Alerts     []Alert      `json:"alerts"` // what the operator must see now, most severe first
	Thresholds Thresholds   `json:"thresholds"`
}

// PoolSummary aggregates all workers.
type PoolSummary struct {
	Name          string      `json:"name"`
	Workers       int         `json:"workers"`
	Up            int         `json:"up"`
	Queue         *float64    `json:"queue"`    // waiting requests, summed over up workers
	Running       *float64    `json:"running"`  // running requests, summed
	KVUsage       *float64    `json:"kv_usage"` // weighted by num_gpu_blocks
	PrefixHitRate PoolHitRate `json:"prefix_hit_rate"`
	// LoadSkew is over the up workers' queues; in a pool of several roles
	// it is the role's whose max/mean is highest (Role names it), as the
	// rule compares workers of one role only.
	LoadSkew Skew `json:"load_skew"`
	// Roles sums the workers per role (prefill, decode, aggregated), the
	// roles present only; more than one: a disaggregated pool, whose mixed
	// figures (Queue, KVUsage, the hit rate) say so where they are shown.
	Roles []RoleFigures `json:"roles"`
	// Models sums the workers per model their pages name, in name order;
	// more than one: a multi-model pool, grouped by model (m).
	Models []ModelFigures `json:"models"`
	// Blocks is the number of distinct resident block hashes, pool-wide;
	// nil while no worker has an event stream that delivered.
	Blocks *int `json:"blocks"`

	IndexComplete bool `json:"index_complete"` // false while any stream has lost history, a gap open, is disconnected or not connected yet, or has delivered nothing yet (an idle publisher's blocks are unknown)
	// IndexFull: the block index reached Limits.IndexBlocks and some
	// worker's stores were dropped; those workers are index_full and
	// stale until their block set is known again.
	IndexFull bool `json:"index_full"`
	// Tiers sums the workers' tiers per medium (store_only: some
	// publisher's tier is).
	Tiers []Tier `json:"tiers"`
	// CacheTiers sums the up workers' (nil when none has offload figures).
	CacheTiers *CacheTiers `json:"cache_tiers"`
	// Series of pool figures over the window, one point per refresh.
	Series PoolSeries `json:"series"`
	// Churn: workers that joined or left the set of targets within the
	// window (Kubernetes discovery; always 0 for a static config).
	// Workers counts those in the set now, not the rows that left.
	Churn Churn `json:"churn"`

	// Latency over the window, in ms, from the summed bucket increases
	// of the up workers (never an average of their quantiles): time to
	// first token, inter-token latency, queue time, end to end.
	TTFTMS  Latency `json:"ttft_ms"`
	ITLMS   Latency `json:"itl_ms"`
	QueueMS Latency `json:"queue_ms"`
	E2EMS   Latency `json:"e2e_ms"`
	// TokensPerS and RequestsPerS (finished requests) are summed over
	// the up workers' windowed counter rates.
	TokensPerS   Tokens   `json:"tokens_per_s"`
	RequestsPerS *float64 `json:"requests_per_s"`
	// Recompute is the prefill recomputed although a longer prefix was
	// cached on another up worker (pool/recompute.go, README).
	Recompute Recompute `json:"recompute"`
	// Ladder says why the pool's token hit rate is what it is (pool/ladder.go).
	Ladder Ladder `json:"ladder"`
	// Cache sums the workers' cache figures (pool/cache.go): capacity and
	// resident tokens, stores, removals, residency and thrash.
	Cache Cache `json:"cache"`
	// HashMismatch is the hash-boundary check (pool/fingerprints.go).
	HashMismatch HashMismatch `json:"hash_mismatch"`
	// Rest is the TTFT and queue time of the requests under no hot
	// prefix; OverheatingWorkers of those on overheating workers and
	// OtherWorkers of those on the others (pool/hotrest.go).
	Rest               RequestLatency `json:"rest"`
	OverheatingWorkers RequestLatency `json:"overheating_workers"`
	OtherWorkers       RequestLatency `json:"other_workers"`
	// Clients is what the clients received over the window (kvtop tap).
	Clients Clients `json:"clients"`
}

// HitRate is a prefix-cache hit rate. Tokens is Δhits/Δqueries over the
// window (token-weighted, from engine counters); Requests is the share of
// requests with cached_tokens > 0 (from outcomes). CoveredS says how much of
// the window the token rate really covers (less after start or a reset).
type HitRate struct {
	Tokens   *float64 `json:"tokens"`
	Requests *float64 `json:"requests"`
	CoveredS float64  `json:"covered_s"`
	// Reason says why Tokens is null although counters exist: "hits
	// exceed queries over the window (x > y): counters inconsistent",
	// prefixed with the engine or worker at fault. Empty otherwise.
	Reason string `json:"reason,omitempty"`
	// TransferredTokens are the prompt tokens decode workers received by
	// KV transfer over the window (vLLM's prompt_tokens_by_source
	// external_kv_transfer): kept out of Tokens' denominator, as they were
	// neither hits nor misses of their cache. nil for a worker (or pool)
	// without decode workers.
	TransferredTokens *float64 `json:"transferred_tokens,omitempty"`
}

// PoolHitRate is the pool's hit rate: HitRate over the up workers, and
// who left that sum. A worker that goes down takes its window of hits and
// queries out of the pool's Δhits/Δqueries at once, so the figure jumps
// (25 % → 50 %) though no cache changed: Left says how many workers that
// fed the token rate stopped feeding it within the last window (went down,
// or lost their counters), LeftWorkers names them (the most recent first).
// A worker that comes back is in the sum again and leaves the list.
type PoolHitRate struct {
	HitRate
	Left        int      `json:"left"`
	LeftWorkers []string `json:"left_workers"`
}

// Skew is pool load skew over queue depth (waiting requests).
type Skew struct {
	MaxOverMean *float64 `json:"max_over_mean"`
	Gini        *float64 `json:"gini"`
	// High and Severe are the held verdicts on MaxOverMean (pool/verdict.go):
	// at SkewHigh (2×) and SkewSevere (3×), while the pool has load to
	// skew (a median queue of at least one request per up worker and
	// overheat_min_queue); the header's colour follows them.
	High   bool `json:"high"`
	Severe bool `json:"severe"`
	// Role is the role whose workers the figures compare, in a pool of
	// several; "" when the pool has one.
	Role string `json:"role,omitempty"`
}

// Point is one sample of a series.
type Point struct {
	T time.Time `json:"t"`
	V float64   `json:"v"`
}

// PoolSeries are pool figures over the window, one point per refresh while
// known.
type PoolSeries struct {
	HitTokens   []Point `json:"hit_tokens"`
	HitRequests []Point `json:"hit_requests"` // request-weighted hit rate (PrefixHitRate.Requests)
	Queue       []Point `json:"queue"`
	Skew        []Point `json:"skew"` // load skew, max/mean of queue depth (LoadSkew.MaxOverMean)
	// TTFTP95MS is the pool's TTFT p95 (ms), TokensPerS its prompt +
	// generation tokens per second: points only while known.
	TTFTP95MS  []Point `json:"ttft_p95_ms"`
	TokensPerS []Point `json:"tokens_per_s"`
	// The hit-rate ladder's rungs with perfect routing and with enough
	// capacity (the workload's ceiling), points only while known.
	HitPerfectRouting []Point `json:"hit_perfect_routing"`
	HitCeiling        []Point `json:"hit_ceiling"`
}

// WorkerSeries are one worker's figures over the window, one point per
// refresh while known (gaps where the worker was down).
type WorkerSeries struct {
	Queue     []Point `json:"queue"`
	Running   []Point `json:"running"`
	KVUsage   []Point `json:"kv_usage"`
	HitTokens []Point `json:"hit_tokens"`
	// Latency quantiles (ms), prompt + generation tokens per second and
	// recomputed prefill tokens per second: points only while known.
	TTFTP50MS  []Point `json:"ttft_p50_ms"`
	TTFTP95MS  []Point `json:"ttft_p95_ms"`
	TTFTP99MS  []Point `json:"ttft_p99_ms"`
	ITLP95MS   []Point `json:"itl_p95_ms"`
	QueueP95MS []Point `json:"queue_p95_ms"`
	TokensPerS []Point `json:"tokens_per_s"`
	// RecomputeTokensPerS is the prefill this worker recomputed per second.
	RecomputeTokensPerS []Point `json:"recompute_tokens_per_s"`
	// The cache's blocks removed and thrashed per second and its resident
	// tokens (Worker.Cache), points only while known.
	RemovedPerS    []Point `json:"removed_per_s"`
	ThrashPerS     []Point `json:"thrash_per_s"`
	ResidentTokens []Point `json:"resident_tokens"`
}

// Worker is one configured (or discovered) worker.
type Worker struct {
	Name   string `json:"name"`
	Engine string `json:"engine"` // detected profile: vllm | vllm-legacy | sglang | unknown
	// Role is prefill, decode or aggregated (roles.go); RoleSource says
	// who said so: config, kubernetes, router, or default (nothing did).
	Role       string `json:"role"`
	RoleSource string `json:"role_source"`
	// Model is the model its engines' pages name (model_name), "" until
	// a page names one.
	Model string  `json:"model"`
	Up    bool    `json:"up"`
	Error *string `json:"error"` // last scrape error while down
	// State in words: "ok", "overheating", "saturated" (KV use of any
	// engine above threshold), "stale" (index incomplete: history lost, a
	// gap open, a stream disconnected or not connecting), "down" (scrapes
	// fail and no events arrive), "no_metrics" (scrapes fail but its event
	// streams delivered batches since, recently: it is serving),
	// "unknown" (not scraped yet, or no metrics configured).
	State WorkerState `json:"state"`
	// Reason explains missing numbers and states ("not scraped yet", "no
	// metrics configured", "discovered from events", "down: ...", "no
	// metrics: ... — its events are still arriving", "index full: N
	// blocks (limits.index_blocks)", "invalid: <note> (+N more)",
	// "metric missing: ...", "hit rate unknown: ...", "engine 1 KV 96%",
	// "restarted 14:02:11: N indexed blocks dropped ..."), joined by "; ";
	// "" when there is nothing to explain (always in the JSON).
	Reason string `json:"reason"`

	Queue         *float64 `json:"queue"`
	Running       *float64 `json:"running"`
	KVUsage       *float64 `json:"kv_usage"`
	PrefixHitRate HitRate  `json:"prefix_hit_rate"`
	// Blocks is the number of distinct resident block hashes over all
	// ranks and media; nil when the worker has no event stream, or none
	// has delivered yet (connected to an idle publisher, kvtop cannot know
	// what it stored before): unknown, not 0.
	Blocks *int `json:"blocks"`
	// IndexComplete: every block the worker holds is known. False while a
	// stream has lost history, has a gap open, is disconnected or not
	// connected yet, or (for a worker with an event source configured)
	// none or not all of its streams delivered yet: Reason then says "no
	// KV events yet: resident blocks unknown". True for a worker without
	// an event source: there is no index to complete.
	IndexComplete bool `json:"index_complete"`
	// IndexFull: some of this worker's stores were dropped at the index
	// limit since its block set was last known (see Snapshot).
	IndexFull bool `json:"index_full"`
	// Invalid lists values its last good page exposed that cannot be
	// true (a negative queue, a duplicate series, KV use outside 0..1):
	// those figures are null, and Reason starts "invalid: " with the
	// first note. [] when none.
	Invalid []Invalid `json:"invalid"`

	// HotShare is the share of the pool's hottest prefix (Prefixes[0])
	// traffic that went to this worker: the same prefix for every worker,
	// so the column compares like with like. nil when no prefix is hot.
	HotShare    *float64 `json:"hot_share"`
	Overheating bool     `json:"overheating"` // see Thresholds
	// ThrashHigh: its thrash share (Cache.ThrashShare) reached
	// thrash_share with at least thrash_min_stored blocks stored in the
	// window, and has not stayed below the leave mark for leave_after_s
	// since. While the worker is saturated too, it thrashes (the alert).
	ThrashHigh bool `json:"thrash_high"`
	// OverheatPrefix is the prefix this worker overheats on (its id), and
	// OverheatShare its share of that prefix's traffic; nil unless
	// overheating.
	OverheatPrefix *string  `json:"overheat_prefix"`
	OverheatShare  *float64 `json:"overheat_share"`
	// Breaker is the routers' circuit breaker for this worker: "closed",
	// "open" or "half-open" (the worst over the routers that report one);
	// nil when no router reports it.
	Breaker *string `json:"breaker"`

	Restarts int `json:"restarts"` // engine counter resets / process restarts seen
	// LastScrape is the last scrape attempt, good or failed, and ScrapeMS
	// how long it took; LastScrapeOK is the last good one, where the
	// figures (or, while the worker is not up, its last-known engines)
	// come from. nil before the first of each.
	ScrapeMS     *float64   `json:"scrape_ms"`
	LastScrape   *time.Time `json:"last_scrape"`
	LastScrapeOK *time.Time `json:"last_scrape_ok"`
	// MetricsVia names the source of the metrics when kvtop did not scrape
	// the worker itself: "prometheus" (read back through its HTTP API;
	// then LastScrape is Prometheus' scrape time and ScrapeMS its scrape
	// duration). Omitted for kvtop's own scrape.
	MetricsVia string `json:"metrics_via,omitempty"`
	// MetricsIntervalS is the spacing of those scrapes (Prometheus' scrape
	// interval as kvtop saw it): rates are no finer than it. Omitted
	// until known, and for kvtop's own scrape.
	MetricsIntervalS *float64 `json:"metrics_interval_s,omitempty"`

	// Engines has one row per DP rank / engine label. While the worker
	// is not up they are the rows of its last good scrape, LastKnown.
	Engines []Engine     `json:"engines"`
	Streams []Stream     `json:"streams"`
	Series  WorkerSeries `json:"series"`
	// TopPrefixes are the hottest prefixes this worker holds.
	TopPrefixes []WorkerPrefix `json:"top_prefixes"`
	// RoutedShare is this worker's share of requests routed over the window,
	// from router metrics: nil without a router, or when no router label
	// maps to this worker (add the label to its aliases).
	RoutedShare *float64 `json:"routed_share"`
	// Kube is the pod behind the worker (Kubernetes discovery), nil
	// otherwise. A worker down because its pod is Pending or in
	// CrashLoopBackOff says so first in Reason ("down: pod
	// CrashLoopBackOff, restarts 5, last OOMKilled (exit 137)").
	Kube *Kube `json:"kube"`
	// LeftAt is when the worker left the set of targets (state "left"):
	// the row is its last-known picture, kept for one window. nil while
	// it is in the set.
	LeftAt *time.Time `json:"left_at"`

	// Latency over the window, in ms, from the bucket increases of its
	// engines (or its worker-level histograms), as in PoolSummary.
	TTFTMS  Latency `json:"ttft_ms"`
	ITLMS   Latency `json:"itl_ms"`
	QueueMS Latency `json:"queue_ms"`
	E2EMS   Latency `json:"e2e_ms"`
	// TokensPerS and RequestsPerS (finished requests) over the window,
	// from its counters; nil while unknown.
	TokensPerS   Tokens   `json:"tokens_per_s"`
	RequestsPerS *float64 `json:"requests_per_s"`
	// Recompute is the prefill it recomputed as the chosen worker.
	Recompute WorkerRecompute `json:"recompute"`
	// Ladder says why its token hit rate is what it is (pool/ladder.go).
	Ladder Ladder `json:"ladder"`
	// Cache is its KV cache's figures over the window (pool/cache.go).
	Cache Cache `json:"cache"`
	// Tiers are its storage media (GPU first), Groups its KV cache groups
	// on the GPU (pool/tiers.go). [] before its streams published any.
	Tiers  []Tier  `json:"tiers"`
	Groups []Group `json:"groups"`
	// CacheTiers is where its prompt tokens hit, per tier, and its KV
	// connector's traffic, from its page (pool/offload.go); nil when the page
	// has no offload figures, or the worker is not up.
	CacheTiers *CacheTiers `json:"cache_tiers"`
	// Clients is what the clients of its requests received over the
	// window (kvtop tap).
	Clients Clients `json:"clients"`
}

// Tier is one storage medium of a worker, or of the pool (the sums): the
// blocks of its full-attention-like groups, as published. Only the GPU
// tier counts in blocks, resident tokens and KV figures.
type Tier struct {
	Medium   string `json:"medium"`             // as published: GPU, CPU, STORAGE, CPU_PINNED, DISK, …
	Locality string `json:"locality,omitempty"` // LOCAL or REMOTE, when the tier says
	// Blocks resident (copies counted once per publisher); nil while the
	// tier is store-only. Tokens: blocks × their block size, nil when a
	// block size is unknown (offload placeholders carry none).
	Blocks *int `json:"blocks"`
	Tokens *int `json:"tokens"`
	// StoredPerS and RemovedPerS are blocks in live batches over the
	// window (re-announces are not stores); nil without a live batch.
	StoredPerS  *float64 `json:"stored_per_s"`
	RemovedPerS *float64 `json:"removed_per_s"`
	// StoreOnly: the tier stores and never publishes a removal (LMCache's
	// connector): its stores are not residency ("stored, no removals
	// published") and count in no residency or capacity figure.
	StoreOnly bool `json:"store_only"`
	// Note says why blocks are unknown or partial, in words ("" when
	// they are not; always in the JSON).
	Note string `json:"note"`
}

// Group is one KV cache group of a worker's GPU blocks (hybrid models
// publish a full-attention or MLA group beside sliding-window ones).
type Group struct {
	Group int    `json:"group"`
	Kind  string `json:"kind"` // kv_cache_spec_kind; "full_attention" when the producer names none
	// BlockSize is its tokens per block (nil until an event says);
	// SlidingWindow its window in tokens (nil: none published).
	BlockSize     *int `json:"block_size"`
	SlidingWindow *int `json:"sliding_window"`
	Blocks        int  `json:"blocks"`
	// Prefix: a full-attention-like group, counted in prefix figures
	// (blocks, hot prefixes, ownership, depths, thrash); the others are
	// shown, never mixed in.
	Prefix bool `json:"prefix"`
}

// Engine is one engine (DP rank) inside a worker.
type Engine struct {
	Engine       string   `json:"engine"`
	Queue        *float64 `json:"queue"`
	Running      *float64 `json:"running"`
	KVUsage      *float64 `json:"kv_usage"`
	NumGPUBlocks *float64 `json:"num_gpu_blocks"`
	HitTokens    *float64 `json:"hit_tokens"` // token-weighted hit rate over the window
	// HitReason says why HitTokens is null although the counters exist
	// (hits exceed queries over the window). Empty otherwise.
	HitReason string `json:"hit_reason,omitempty"`
	// LastKnown: the worker is not up, and this row is what its last good
	// scrape (Worker.LastScrapeOK) said, kept so the operator sees which
	// engine was where; it counts in no pool or worker figure.
	LastKnown bool `json:"last_known"`
	// Saturated: its KV use reached kv_usage_high and has not stayed below
	// the leave mark for leave_after_s since (Thresholds). Any saturated
	// engine makes its worker saturated.
	Saturated bool `json:"saturated"`

	// Latency and throughput of this engine alone; a figure the worker
	// counts as a whole (SGLang's TTFT) is null with that reason.
	TTFTMS       Latency  `json:"ttft_ms"`
	ITLMS        Latency  `json:"itl_ms"`
	QueueMS      Latency  `json:"queue_ms"`
	E2EMS        Latency  `json:"e2e_ms"`
	TokensPerS   Tokens   `json:"tokens_per_s"`
	RequestsPerS *float64 `json:"requests_per_s"`
	// Cache is this engine's: its capacity, and its event stream's (the
	// publisher of the same rank) figures.
	Cache Cache `json:"cache"`
}

// Invalid is one value a page exposed that cannot be true.
type Invalid struct {
	Engine string `json:"engine"` // "" for a page without engine labels, or worker-level series
	Field  string `json:"field"`  // in snapshot words: queue, running, kv_usage, prefix_queries, ...
	Note   string `json:"note"`   // names the series and says why
}

// Stream is one KV event publisher (worker, rank).
type Stream struct {
	Endpoint      string      `json:"endpoint"`
	Rank          int         `json:"rank"`
	Topic         string      `json:"topic"`
	State         StreamState `json:"state"` // connecting | live | replaying | history_lost | joined_late | disconnected
	LastSeq       *uint64     `json:"last_seq"`
	Batches       uint64      `json:"batches"`
	Events        uint64      `json:"events"`
	Gaps          uint64      `json:"gaps"`
	Missing       uint64      `json:"missing"`
	Replayed      uint64      `json:"replayed"`
	Lost          uint64      `json:"lost"`
	Restarts      uint64      `json:"restarts"`
	Duplicates    uint64      `json:"duplicates"`
	DecodeErrors  uint64      `json:"decode_errors"`
	UnknownEvents uint64      `json:"unknown_events"` // events of unknown type, skipped (harmless)
	UnknownFields uint64      `json:"unknown_fields"` // unknown fields in known events, skipped (harmless)
	Malformed     uint64      `json:"malformed"`      // known events that could not be read: blocks lost
	// Oversized counts messages over limits.event_message_bytes (libzmq
	// closed the link; never decoded); Dropped counts batches kvtop's own
	// receive queue had no room for (over limits.event_queue_bytes). Both
	// show up as gaps that replay repairs.
	Oversized       uint64   `json:"oversized"`
	Dropped         uint64   `json:"dropped"`
	BatchesPerS     *float64 `json:"batches_per_s"`
	EventsPerS      *float64 `json:"events_per_s"`
	LastMessageAgeS *float64 `json:"last_message_age_s"` // kvtop clock
	LastTS          *float64 `json:"last_ts"`            // producer clock (unix s), shown as "producer ts", never subtracted
	Blocks          int      `json:"blocks"`             // resident blocks this publisher holds
	// UnknownRemovals counts BlockRemoved for hashes the index did not
	// hold (normal after a late join or lost history; never an error).
	UnknownRemovals uint64 `json:"unknown_removals"`
	// DroppedBlocks counts stored blocks not indexed because the index
	// was at its limit (Limits.IndexBlocks), since kvtop started.
	DroppedBlocks uint64 `json:"dropped_blocks"`
	// Reannounced counts stores of blocks already resident on the same
	// engine, medium and group (vLLM's kv_cache_report_mode="full"):
	// touches, not stores. Inconsistent counts full-attention stores whose
	// token ids do not fill their blocks (tokens ≠ block size × hashes):
	// not indexed, never guessed at.
	Reannounced  uint64 `json:"reannounced"`
	Inconsistent uint64 `json:"inconsistent"`
	// UnknownEventsByType counts the skipped events of unknown type by
	// their tag (BlockInactive, …); {} when none.
	UnknownEventsByType map[string]uint64 `json:"unknown_events_by_type"`
	// History is the collector's incidents merged in time order with the
	// pool's own (origin "metrics"), the most recent Limits.Incidents.
	History []Incident `json:"history"`
}

// Incident is one gap, loss, late join, restart or disconnect of a stream.
type Incident struct {
	Kind      string     `json:"kind"`
	FromSeq   uint64     `json:"from_seq"`
	ToSeq     uint64     `json:"to_seq"`
	Missing   uint64     `json:"missing"`
	Replayed  uint64     `json:"replayed"`
	Lost      uint64     `json:"lost"`
	Start     time.Time  `json:"start"`
	End       *time.Time `json:"end"` // nil while open
	DurationS *float64   `json:"duration_s"`
	Note      string     `json:"note,omitempty"`
	// Origin is "metrics" for an incident the pool concluded from the
	// worker's metrics (an engine restart); empty for the stream
	// collector's.
	Origin string `json:"origin,omitempty"`
}

// WorkerPrefix is a prefix held by one worker.
type WorkerPrefix struct {
	ID     string  `json:"id"`
	Tokens *int    `json:"tokens"` // depth in tokens, nil when unknown
	Share  float64 `json:"share"`  // share of this prefix's traffic that went to the worker
}

// Prefix is one hot prefix, named by the hash of its deepest block.
type Prefix struct {
	ID string `json:"id"` // hex block hash
	// Tokens is the depth in tokens: resolved blocks × the block size of
	// the publisher holding it. nil when the chain is unresolved or no
	// holder's block size is known.
	Tokens      *int               `json:"tokens"`
	Share       float64            `json:"share"`       // share of pool traffic over the window
	Replicas    int                `json:"replicas"`    // workers that hold it now
	Workers     map[string]float64 `json:"workers"`     // share of this prefix's traffic per worker
	Overheating *string            `json:"overheating"` // worker overheating on it (the heaviest, if several), or null
	// OverheatingWorkers lists every worker overheating on it, heaviest
	// share first ([] when none): a prefix split between two or three
	// workers can overheat them all (see Thresholds).
	OverheatingWorkers []string `json:"overheating_workers"`
	// Source of the traffic figures: "decisions" (the router named the
	// prefix) or "events" (estimated from BlockStored events under it).
	Source   string  `json:"source"`
	Requests float64 `json:"requests"` // traffic count over the window
	Orphan   bool    `json:"orphan"`   // depth unresolved: some parent unknown
	// TTFTMS and QueueMS are the joined requests under this prefix over
	// the window (pool/hotrest.go): exact quantiles with n.
	TTFTMS  RequestQuantiles `json:"ttft_ms"`
	QueueMS RequestQuantiles `json:"queue_ms"`
}

// Router is one router target.
type Router struct {
	Name     string   `json:"name"`
	Profile  string   `json:"profile"`
	Up       bool     `json:"up"`
	Error    *string  `json:"error"`
	Restarts int      `json:"restarts"`
	Recovery Recovery `json:"recovery"`
	// RoutedShare per worker over the window (router's processed counters).
	RoutedShare  map[string]float64 `json:"routed_share"`
	RequestsPerS *float64           `json:"requests_per_s"`
	LastRestart  *time.Time         `json:"last_restart"`
	// Breakers is the circuit breaker state per worker (name, or the
	// router's label when it maps to no worker): closed, open, half-open.
	Breakers map[string]string `json:"breakers"`
	// Unmapped lists worker labels this router routes to that map to no
	// configured worker (add them to that worker's aliases).
	Unmapped []string `json:"unmapped"`
	// What the router believes, in its own units (pool/router_predictions.go):
	// its mean predicted KV hit rate and shared-cache hit rate (over the
	// histograms' lives), its estimate of a disaggregated request's KV
	// transfer over the window, each worker's role as the router
	// registered it and its frontend's load per worker (last scrape).
	// nil / {} where the router exposes none.
	PredictedHitRate      *float64           `json:"predicted_hit_rate"`
	SharedCacheHitRate    *float64           `json:"shared_cache_hit_rate"`
	KVTransferEstimatedMS Latency            `json:"kv_transfer_estimated_ms"`
	Roles                 map[string]string  `json:"roles"`
	ActivePrefillTokens   map[string]float64 `json:"active_prefill_tokens"`
	ActiveDecodeBlocks    map[string]float64 `json:"active_decode_blocks"`
}

// Recovery tracks the pool token hit rate after the router's last restart
// against the baseline before it.
type Recovery struct {
	State    RecoveryState `json:"state"`   // steady | recovering | recovered | unknown
	Seconds  *float64      `json:"seconds"` // time to recover, or time so far while recovering
	Baseline *float64      `json:"baseline"`
	// Current is the pool token hit rate over the last CurrentS seconds
	// (10 s; since the restart when that is sooner), in every state.
	Current  *float64 `json:"current"`
	CurrentS float64  `json:"current_s"`
}

// FlaggedTotal are cumulative flag counts (Decisions.FlaggedTotal).
type FlaggedTotal struct {
	OwnerMismatch    int64 `json:"owner_mismatch"`
	PredictionErrors int64 `json:"prediction_errors"`
	Truncated        int64 `json:"truncated"`
}

// Decisions summarizes the decision journal over its bounded memory.
type Decisions struct {
	Records          int `json:"records"`      // decisions seen
	WithOutcome      int `json:"with_outcome"` // decisions joined to an outcome
	OrphanOutcomes   int `json:"orphan_outcomes"`
	OwnerMismatch    int `json:"owner_mismatch"`
	PredictionErrors int `json:"prediction_errors"` // predicted reuse on the chosen worker, got none
	Truncated        int `json:"truncated"`         // HTTP 200 without done
	// FlaggedTotal counts, since kvtop started, the records that became
	// flagged owner_mismatch, prediction_error or truncated: the counts
	// above are the journal's (its most recent records, bounded), these
	// only grow, so Prometheus can take a rate of them.
	FlaggedTotal FlaggedTotal  `json:"flagged_total"`
	BadLines     int           `json:"bad_lines"`
	Recent       []DecisionRow `json:"recent"` // newest last
	// Backfill counts records read from what the logs held when kvtop
	// started: in the journal, never in windowed figures.
	Backfill int `json:"backfill"`
	// Sources says what each decision log is doing, so an empty list has
	// a reason (lines skipped, file missing).
	Sources []DecisionSource `json:"sources"`
	// Unmapped lists worker names decisions chose that are no configured
	// worker (add them to aliases).
	Unmapped []string `json:"unmapped"`
}

// DecisionSource is the reading state of one decision log.
type DecisionSource struct {
	Source    string            `json:"source"`   // path or "-"
	Format    string            `json:"format"`   // configured format
	Detected  string            `json:"detected"` // format of the last decision line, "" before one
	Lines     uint64            `json:"lines"`
	Decisions uint64            `json:"decisions"`
	Outcomes  uint64            `json:"outcomes"`
	Bad       uint64            `json:"bad"`
	Skipped   uint64            `json:"skipped"`
	SkippedBy map[string]uint64 `json:"skipped_by"` // reason -> lines
	Waiting   bool              `json:"waiting"`    // the file does not exist (yet)
	At        time.Time         `json:"at"`         // kvtop clock of this status
}

// DecisionRow is one decision joined to its outcome (if any).
type DecisionRow struct {
	At        time.Time `json:"at"` // decision ts (router clock), or outcome ts if no decision
	RequestID string    `json:"request_id"`
	AttemptID string    `json:"attempt_id"`
	Chosen    string    `json:"chosen"`
	// DecodeWorker is the worker that decoded a disaggregated request
	// whose prompt Chosen computed ("" when Chosen did both, or the log
	// does not say).
	DecodeWorker string   `json:"decode_worker,omitempty"`
	Owner        string   `json:"owner"`
	Matched      *float64 `json:"matched"`
	Total        *float64 `json:"total"`
	Units        string   `json:"units"`
	CachedTokens *int     `json:"cached_tokens"`
	PromptTokens *int     `json:"prompt_tokens"`
	QueueMS      *float64 `json:"queue_ms"`
	TTFTMS       *float64 `json:"ttft_ms"`
	Done         *bool    `json:"done"`
	Flags        []string `json:"flags"` // owner_mismatch, prediction_error, truncated, char_match, no_outcome, no_decision, retry, error, http_error, recompute, stream_break
	// Pending: a decision whose outcome has not arrived yet, younger than
	// the no_outcome timeout, from a log known to record outcomes. Its
	// outcome figures are nil because the request is still running, not
	// because they are unknown.
	Pending bool `json:"pending"`

	Router        string          `json:"router,omitempty"`
	RouterVersion string          `json:"router_version,omitempty"`
	Model         string          `json:"model,omitempty"`
	Endpoint      string          `json:"endpoint,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Format        string          `json:"format,omitempty"`
	Prefix        string          `json:"prefix,omitempty"`
	Prediction    *PredictionInfo `json:"prediction,omitempty"`
	Load          *LoadInfo       `json:"load,omitempty"`
	Outcome       *OutcomeInfo    `json:"outcome,omitempty"`
	// Recompute is the record's recomputed prefill: the other worker
	// holding a longer prefix, and the tokens (flag recompute when > 0).
	Recompute *RecomputeInfo `json:"recompute,omitempty"`
	// Client is what the client received (a kvtop tap's record), beside
	// the router's Outcome; Done and the truncated flag follow it.
	Client *ClientInfo `json:"client,omitempty"`
}

// PredictionInfo is the router's prediction as recorded.
type PredictionInfo struct {
	Source  string   `json:"source"`
	Input   string   `json:"input"`
	Units   string   `json:"units"`
	Matched *float64 `json:"matched"`
	Total   *float64 `json:"total"`
	Owner   string   `json:"owner"`
	AgeMS   *float64 `json:"age_ms"`
}

// LoadInfo is the load figure behind the decision.
type LoadInfo struct {
	Kind  string   `json:"kind"`
	Value *float64 `json:"value"`
	Scope string   `json:"scope"`
}

// OutcomeInfo is what happened to the attempt.
type OutcomeInfo struct {
	At           time.Time `json:"at"`
	Worker       string    `json:"worker"`
	HTTPStatus   int       `json:"http_status"`
	E2EMS        *float64  `json:"e2e_ms"`
	FinishReason string    `json:"finish_reason"`
	Error        string    `json:"error"`
	RetryOf      string    `json:"retry_of"`
	// Given by some logs only (Dynamo's request traces); absent unknown.
	OutputTokens *int     `json:"output_tokens,omitempty"`
	PrefillMS    *float64 `json:"prefill_ms,omitempty"`     // prefill start to first token
	ITLMS        *float64 `json:"itl_ms,omitempty"`         // mean inter-token latency
	KVTransferMS *float64 `json:"kv_transfer_ms,omitempty"` // the router's estimate of the KV transfer to the decode worker
}

// ErrorCount aggregates source errors by (source, kind).
type ErrorCount struct {
	Source string    `json:"source"`
	Kind   string    `json:"kind"`
	Count  int       `json:"count"`
	Last   string    `json:"last"`
	At     time.Time `json:"at"`
}

// Alert is a one-line warning for the top of the screen, in words.
type Alert struct {
	Severity Severity  `json:"severity"` // critical | warning | info
	Kind     AlertKind `json:"kind"`     // overheating | history_lost | gap | down | index_full | router_recovering | decode_errors | worker_restart | ...
	Subject  string    `json:"subject"`  // worker, router or source name
	Text     string    `json:"text"`
	Since    time.Time `json:"since"`
}

// Thresholds are the rules in force (shown on the help screen).
type Thresholds struct {
	// A prefix is hot when it takes at least HotPrefixShare of pool traffic.
	HotPrefixShare float64 `json:"hot_prefix_share"`
	// A hot prefix's owners are the fewest workers that together take at
	// least OverheatShare of its traffic (ties included). When there are
	// at most max(1, ⌊up workers / 3⌋) of them, each owner whose queue is
	// at least OverheatQueueRatio × the pool median and at least
	// OverheatMinQueue overheats. One owner is the classic case; a prefix
	// split between two or three workers that queue overheats them all.
	OverheatShare      float64 `json:"overheat_share"`
	OverheatQueueRatio float64 `json:"overheat_queue_ratio"`
	OverheatMinQueue   float64 `json:"overheat_min_queue"`
	// KV usage at or above KVUsageHigh marks an engine, and its worker,
	// saturated.
	KVUsageHigh float64 `json:"kv_usage_high"`
	// A router has recovered when the pool token hit rate is back within
	// RecoveryTolerance (absolute) of its pre-restart baseline, held for RecoveryHoldS.
	RecoveryTolerance float64 `json:"recovery_tolerance"`
	RecoveryHoldS     float64 `json:"recovery_hold_s"`
	// A worker thrashes when at least ThrashShare of the blocks it stored
	// over the window were evicted there within the window before, while
	// it is saturated; judged once the window holds ThrashMinStored stored
	// blocks (no need to wait for a full window).
	ThrashShare     float64 `json:"thrash_share"`
	ThrashMinStored int     `json:"thrash_min_stored"`
	// The verdicts above hold (pool/verdict.go): saturated, thrash and
	// overheating begin when their figures reach the thresholds, and end
	// only once the figures have stayed below their leave marks,
	// LeaveRatio × each threshold, for LeaveAfterS seconds (at once when
	// a figure becomes unknown).
	LeaveRatio  float64 `json:"leave_ratio"`
	LeaveAfterS float64 `json:"leave_after_s"`
	// The header names the hit-rate ladder's largest avoidable loss once
	// it is at least LadderLossShare of the prompt tokens.
	LadderLossShare float64 `json:"ladder_loss_share"`
}
