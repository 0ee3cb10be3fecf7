// Package collectors holds the typed observations every collector sends to
// the pool, and the fan-in that runs collectors side by side.
//
// Collectors never touch shared state: each source runs in its own goroutine
// and sends Observations on one channel. The pool goroutine is the only
// reader. Per source, observations are sent in the order they must be
// applied (a StreamReset before the batches that follow a restart, replayed
// batches before the live batches held back behind them).
package collectors

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Observation is anything a collector reports.
//
// A new kind of observation is a pointer type implementing it, listed in
// Types, with a journal coding (journal/obs_*.go) and a case in the
// pool's State.Apply; the tests of collectors, journal and pool fail
// until all three are there (docs/ADD-A-SOURCE.md).
type Observation interface {
	// ObservedAt is kvtop's local clock when the observation was made.
	ObservedAt() time.Time
	// WallClock returns the observation with every time in it on the
	// wall clock alone (Round(0)): a shallow copy, with copies of the
	// parts that hold times, since the collector may still share slices
	// with it. A journal's decoded times have no monotonic reading, and
	// Go compares two times on the monotonic clock only when both have
	// one: the live pool applying the copy computes exactly what a
	// replay of the journal does. A nil pointer returns itself.
	WallClock() Observation
}

// wallCopy is the body of most WallClock methods: nil for nil, else a
// copy of *v that round puts on the wall clock (copying, in turn, the
// parts it changes that the copy shares with v).
func wallCopy[T any](v *T, round func(*T)) *T {
	if v == nil {
		return nil
	}
	c := *v
	round(&c)
	return &c
}

// Types returns one zero value of every observation type. The journal's
// and the pool's tests walk it, so that no type lacks a journal coding or
// a place in the pool; collectors' own test fails when a type with an
// ObservedAt method is missing from it.
func Types() []Observation {
	return []Observation{
		&MetricsScrape{}, &EventBatch{}, &StreamReset{}, &StreamStatus{},
		&Decision{}, &Outcome{}, &DecisionSource{}, &SourceError{}, &TargetChange{},
	}
}

// F returns a pointer to v: unknown values are nil pointers, never 0.
func F(v float64) *float64 { return &v }

// Role says whether a metrics target is an engine (worker) or a router.
type Role uint8

const (
	RoleWorker Role = iota
	RoleRouter
)

func (r Role) String() string {
	if r == RoleRouter {
		return "router"
	}
	return "worker"
}

// ---------------------------------------------------------------------------
// Metrics

// MetricsScrape is the outcome of one scrape of one target. Err is set when
// the scrape failed (then the samples are empty): the target is down.
type MetricsScrape struct {
	Target   string // configured worker or router name
	Role     Role
	URL      string
	At       time.Time
	Duration time.Duration
	Err      *SourceError // nil when the scrape and parse succeeded

	// Profile names the dialect detected from the metric names present:
	// "vllm", "vllm-legacy", "sglang" for engines; "vllm-router",
	// "sglang-router", "dynamo", "llm-d-epp", "production-stack" for routers;
	// "unknown" when nothing matched.
	Profile string
	// ProcessStart is process_start_time_seconds (unix seconds), if exposed.
	ProcessStart *float64
	// Engines holds one entry per engine (vLLM label `engine`, SGLang
	// `dp_rank`) for worker targets, sorted by Engine. Never only "the first
	// series": a saturated engine behind an idle sibling must stay visible.
	Engines []EngineMetrics
	// WorkerTotals holds worker-level series of a data-parallel page: those
	// without an engine label next to labelled ones (SGLang labels its
	// scheduler gauges with dp_rank but not its token counters). They are
	// figures of the whole worker, never an engine of their own. nil when
	// the page has no such series.
	WorkerTotals *EngineMetrics
	// Router is set for router targets.
	Router *RouterMetrics
	// Skipped counts samples dropped as unusable (e.g. NaN, _created).
	Skipped int
	// Invalid lists values the page exposed that cannot be true: a
	// negative queue or running gauge, a fraction outside 0..1, a series
	// repeated for one engine (never summed). Each such field is nil in
	// Engines (or WorkerTotals), and its note says why, so the pool can
	// show "invalid" rather than "metric missing".
	Invalid []InvalidValue

	// Via names the source when kvtop did not scrape the target itself:
	// "prometheus" for series read back through the Prometheus HTTP API.
	// At is then the time of Prometheus' scrape (on kvtop's clock), so
	// the pool's windows follow Prometheus' own samples. "" for kvtop's
	// own scrape.
	Via string
	// Interval is the spacing of the scrapes behind the figures when Via
	// is set (Prometheus' scrape interval as seen), 0 until known: no rate
	// can be finer than it.
	Interval time.Duration
}

// InvalidValue is one rejected value of a page.
type InvalidValue struct {
	Engine string // as in EngineMetrics.Engine; "" also for worker totals
	// Field names the EngineMetrics field in snapshot words: "queue",
	// "running", "kv_usage", "prefix_queries", "prefix_hits",
	// "cache_hit_rate", "prompt_tokens", "generation_tokens",
	// "requests_finished", "preemptions", "num_gpu_blocks", "block_size",
	// "ttft", "queue_time", "e2e", "itl".
	Field string
	// Note is one line for the operator, naming the series, e.g.
	// `vllm:num_requests_waiting{engine="0"} = -3: a queue cannot be negative`.
	Note string
}

func (m *MetricsScrape) ObservedAt() time.Time { return m.At }

// WallClock implements Observation.
func (m *MetricsScrape) WallClock() Observation {
	return wallCopy(m, func(c *MetricsScrape) {
		c.At = c.At.Round(0)
		c.Err = c.Err.wallClock()
	})
}

// EngineMetrics are one engine's samples from one scrape. Counters are
// cumulative as exposed (the pool turns them into windowed rates and handles
// resets). nil means the metric was absent.
type EngineMetrics struct {
	Engine string // "" when the page has no engine/dp_rank label
	Model  string

	Waiting *float64 // requests in queue
	Running *float64 // requests running
	KVUsage *float64 // 0..1 fraction of KV cache blocks in use

	PrefixQueries   *float64 // counter, tokens looked up in the prefix cache
	PrefixHits      *float64 // counter, tokens served from the prefix cache
	ExternalQueries *float64 // counter, connector (offload) cache queries, tokens
	ExternalHits    *float64 // counter, connector cache hits, tokens
	CacheHitRate    *float64 // gauge some engines expose (SGLang); never used as token-weighted rate

	PromptTokens     *float64 // counter
	GenerationTokens *float64 // counter
	Preemptions      *float64 // counter
	RequestsFinished *float64 // counter, sum over finish reasons

	NumGPUBlocks *float64 // cache geometry (vllm:cache_config_info, sglang num_pages)
	BlockSize    *float64 // tokens per block (page size)

	TTFT      *Histogram // seconds
	QueueTime *Histogram // seconds
	E2E       *Histogram // seconds
	// ITL is the inter-token latency: one observation per output token
	// after the first (vllm:inter_token_latency_seconds, formerly
	// vllm:time_per_output_token_seconds; SGLang's of the same names).
	ITL *Histogram // seconds

	// Offload is what the page says beyond the GPU cache (a KV connector's
	// traffic, prompt tokens by source, the tiers' own hit counters); nil
	// when the page has none of it.
	Offload *Offload
}

// Offload is an engine's KV cache beyond its GPU, from its page. Counters
// are cumulative as exposed; nil means absent.
type Offload struct {
	// LoadBytes and StoreBytes: bytes loaded back into the GPU from the
	// connector's tiers and stored to them (vllm:kv_offload_{load,store}_bytes,
	// formerly vllm:kv_offload_total_bytes{transfer_type}); LoadSeconds
	// and StoreSeconds the time they took.
	LoadBytes, StoreBytes     *float64
	LoadSeconds, StoreSeconds *float64
	// Prompt tokens by source (vllm:prompt_tokens_by_source): computed,
	// hit in the engine's own cache, brought in by the KV connector (an
	// offload tier; on a P/D decode worker, a transfer).
	PromptComputed, PromptLocalHit, PromptExternal *float64
	// TierHits are hit tokens per tier where the engine splits them:
	// SGLang's cached_tokens by cache_source (device, host, storage_…),
	// LMCache's lmcache:num_hit_tokens as tier "lmcache". Sorted by tier.
	TierHits []TierCount
	// TierChunks are vLLM's tiering chunk lookups per tier label
	// ("0:primary", "1:fs"): Hits of Queries, in chunks. Sorted by tier.
	TierChunks []TierCount
	// HostUsedTokens and HostTotalTokens: SGLang's hierarchical cache host
	// tier (sglang:hicache_host_{used,total}_tokens, gauges).
	HostUsedTokens, HostTotalTokens *float64
}

// TierCount is one tier's counters.
type TierCount struct {
	Tier    string
	Hits    *float64
	Queries *float64 // nil where the engine counts hits only
}

// Histogram is a cumulative Prometheus histogram.
type Histogram struct {
	Count   float64
	Sum     float64
	Buckets []Bucket // cumulative, sorted by UpperBound, +Inf last
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// RouterMetrics are a router's samples from one scrape. Maps are keyed by
// the worker label exactly as the router exposes it (usually a URL); the
// pool maps them to configured worker names.
type RouterMetrics struct {
	Processed map[string]float64 // counter per worker: requests routed there
	Running   map[string]float64 // gauge per worker: router-local in-flight count
	CBState   map[string]float64 // circuit breaker per worker: 0 closed, 1 open, 2 half-open
	Requests  *float64           // counter, all requests the router handled
	Retries   *float64           // counter
	Errors    *float64           // counter
	// Router-side cache signals, in the router's own units (never token hits).
	CacheHits    *float64 // counter (sgl-router cache_hits_total: requests)
	CacheMisses  *float64 // counter
	PredictedHit *float64 // predicted hit ratio at routing time (Dynamo, llm-d): a prediction, not a measurement
	TTFT         *Histogram

	// Dynamo's router and frontend, keyed by worker as Dynamo names it
	// ("worker_<id>", "worker_<id>/dp<r>" for rank r > 0):
	// Roles is each registered worker's worker_type (prefill, decode,
	// …) from dynamo_component_router_worker_registered; ActivePrefillTokens
	// and ActiveDecodeBlocks the frontend's load gauges
	// (dynamo_frontend_worker_active_{prefill_tokens,decode_blocks}).
	Roles               map[string]string
	ActivePrefillTokens map[string]float64
	ActiveDecodeBlocks  map[string]float64
	// KVTransferEstimate is the router's estimate of a disaggregated
	// request's KV transfer, prefill done to first token (seconds,
	// dynamo_component_router_kv_transfer_estimated_latency_seconds);
	// SharedCacheHit the mean of its shared-cache hit rate histogram
	// (dynamo_component_router_shared_cache_hit_rate): predictions.
	KVTransferEstimate *Histogram
	SharedCacheHit     *float64
}

// ---------------------------------------------------------------------------
// KV events

// EventKind is the tag of a KV cache event.
type EventKind uint8

const (
	BlockStored EventKind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// KVEvent is one decoded KV cache event. Token ids are not kept (only their
// count, and a root block's fingerprint): kvtop never needs or shows prompt
// content.
type KVEvent struct {
	Kind      EventKind
	HasParent bool     // false for the first block of a prompt (nil, or 0 from llm-d-inference-sim)
	Locality  Locality // vLLM's locality of an offload tier's block
	Origin    Origin   // NEW or REUSED where the producer says (vLLM proposal)
	// Group is the KV cache group (vLLM group_idx), 0 when absent.
	Group     int32
	Hashes    []uint64 // block hashes; bytes hashes are keyed by their last 8 bytes big-endian
	Parent    uint64   // valid when HasParent
	NumTokens int      // len(token_ids)
	BlockSize int      // tokens per block, 0 if absent
	Medium    string   // "GPU" when absent
	LoRA      string   // lora_name, "" for the base model
	// RootContent is a local 64-bit fingerprint of the content of the
	// event's first block when it is a root (no parent): its token ids,
	// the block size, the LoRA and the extra keys (cache_salt included).
	// The same content under two block hashes is a hash mismatch. 0 when
	// not a root store, or its content is unknown (no token ids).
	RootContent uint64
	// GroupKind is the KV cache group's attention kind as published
	// (vLLM kv_cache_spec_kind: "full_attention", "sliding_window",
	// "mla_attention", …); "" when absent (an older vLLM's single
	// full-attention group).
	GroupKind string
	// Window is the group's sliding window in tokens
	// (kv_cache_spec_sliding_window), 0 when absent.
	Window int32
}

// Locality is where an offload tier keeps a block (vLLM's FS/OBJ and
// STORAGE tiers publish LOCAL or REMOTE).
type Locality uint8

const (
	LocalityNone Locality = iota
	LocalityLocal
	LocalityRemote
	LocalityOther // a value kvtop does not know
)

func (l Locality) String() string {
	switch l {
	case LocalityLocal:
		return "LOCAL"
	case LocalityRemote:
		return "REMOTE"
	case LocalityOther:
		return "other"
	}
	return ""
}

// Origin says why a block was stored: computed (NEW) or a reused block
// re-announced (REUSED, vLLM's kv_cache_report_mode="full").
type Origin uint8

const (
	OriginNone Origin = iota
	OriginNew
	OriginReused
	OriginOther // a value kvtop does not know: read as absent
)

// EventBatch is one decoded batch from one publisher, applied in order.
type EventBatch struct {
	Worker   string // configured worker name (or the id from the topic in the centralized layout)
	Rank     int    // data-parallel rank of the publisher
	Endpoint string // where kvtop receives it
	Topic    string
	Seq      uint64
	TS       float64 // publisher wall clock, unix seconds; shown, never subtracted from local time
	Events   []KVEvent
	Replayed bool // recovered through the replay socket
	At       time.Time

	// pending, when the collector counts the batch's bytes until the
	// pool applies it (Pending.Hold), and the bytes counted. Never
	// journaled: a replay's batches are nobody's.
	pending *Pending
	cost    int64
}

func (b *EventBatch) ObservedAt() time.Time { return b.At }

// WallClock implements Observation.
func (b *EventBatch) WallClock() Observation {
	return wallCopy(b, func(c *EventBatch) { c.At = c.At.Round(0) })
}

// StreamReset tells the pool to drop every block it holds for one publisher
// (worker, rank): the publisher restarted (seq went backwards) and its cache
// is empty. It is sent before the first batch of the new run.
type StreamReset struct {
	Worker string
	Rank   int
	Reason string // "restart"
	At     time.Time
}

func (r *StreamReset) ObservedAt() time.Time { return r.At }

// WallClock implements Observation.
func (r *StreamReset) WallClock() Observation {
	return wallCopy(r, func(c *StreamReset) { c.At = c.At.Round(0) })
}

// StreamStatus is the full, current health of one publisher. Collectors send
// it whenever it changes (rate-limited); the pool keeps the latest.
type StreamStatus struct {
	Worker   string
	Rank     int
	Endpoint string
	Replay   string // replay endpoint, "" if none
	Topic    string
	State    snapshot.StreamState
	HasSeq   bool   // false until the first batch
	LastSeq  uint64 // highest seq applied
	FirstSeq uint64 // first seq seen from this run of the publisher

	Batches       uint64 // batches applied (live + replayed)
	Events        uint64 // events applied
	Gaps          uint64 // gaps detected
	Missing       uint64 // seqs found absent
	Replayed      uint64 // of those, recovered by replay
	Lost          uint64 // of those, never recovered
	Restarts      uint64 // seq went backwards
	Duplicates    uint64 // duplicate or stale seqs ignored
	DecodeErrors  uint64 // batches that could not be decoded
	UnknownEvents uint64 // events of unknown type, skipped (a newer producer: harmless)
	// UnknownByType counts those events by their tag (at most
	// MaxUnknownTypes names; the rest under OtherUnknownType). nil when
	// none. Owned by the receiver: collectors send a copy.
	UnknownByType map[string]uint64
	UnknownFields uint64 // unknown fields inside known events, skipped (harmless)
	Malformed     uint64 // known events that could not be read: their blocks are lost
	Oversized     uint64 // messages (live or replayed) over MaxMsgSize: libzmq dropped the connection, never decoded
	Dropped       uint64 // live batches kvtop dropped, its queue over QueueBytes: a gap, which replay repairs
	LastMessage   time.Time
	LastTS        float64 // producer ts of the last batch

	// History holds the most recent incidents, oldest first (bounded).
	History []StreamIncident
	At      time.Time
}

func (s *StreamStatus) ObservedAt() time.Time { return s.At }

// WallClock implements Observation.
func (s *StreamStatus) WallClock() Observation {
	return wallCopy(s, func(c *StreamStatus) {
		c.At, c.LastMessage = c.At.Round(0), c.LastMessage.Round(0)
		if c.History != nil {
			h := make([]StreamIncident, len(c.History))
			for i, in := range c.History {
				in.Start, in.End = in.Start.Round(0), in.End.Round(0)
				h[i] = in
			}
			c.History = h
		}
	})
}

// MaxUnknownTypes bounds the names StreamStatus.UnknownByType keeps: a
// hostile producer's random tags must not grow it.
const MaxUnknownTypes = 16

// OtherUnknownType collects the unknown events past MaxUnknownTypes names.
const OtherUnknownType = "(other)"

// CountUnknown adds n events of unknown type tag to *m, bounded.
func CountUnknown(m *map[string]uint64, tag string, n uint64) {
	if n == 0 {
		return
	}
	if *m == nil {
		*m = map[string]uint64{}
	}
	if _, ok := (*m)[tag]; !ok && len(*m) >= MaxUnknownTypes {
		tag = OtherUnknownType
	}
	(*m)[tag] += n
}

// StreamIncident is one gap, history loss, late join or restart, with times
// on kvtop's clock.
type StreamIncident struct {
	Kind     string // "gap", "history_lost", "joined_late", "restart", "disconnected"
	FromSeq  uint64 // first missing seq (gap) or new first seq (restart)
	ToSeq    uint64 // last missing seq
	Missing  uint64
	Replayed uint64
	Lost     uint64
	Start    time.Time
	End      time.Time // zero while open
	Note     string    // short words for the operator
}

// ---------------------------------------------------------------------------
// Decisions

// Decision is one routing decision, normalized from any supported log format.
// Fields a format does not carry stay empty / nil.
type Decision struct {
	TS            time.Time // record time (router clock)
	RequestID     string
	AttemptID     string // "" when the format has no attempts: treated as "1"
	Router        string
	RouterVersion string
	Model         string
	Pool          string
	Endpoint      string
	Prediction    *Prediction
	Chosen        string // worker the request went to (disaggregated: the prefill worker)
	// DecodeWorker is the worker that decoded the request when another one
	// computed its prompt (disaggregated serving: Dynamo's request traces
	// name both); "" when Chosen did both, or the log does not say.
	DecodeWorker string
	Reason       string // load-balance | best-match | fallback | retry
	Load         *Load
	Prefix       string // hex hash of the deepest matched block
	Candidates   []Candidate
	Format       string // kvtop | dynamo | dynamo-trace | smg | llm-d | production-stack
	Source       string // file path or "-"
	// Backfill marks lines read from what the file already held when kvtop
	// started: history for the journal, not traffic of the current window.
	Backfill bool
	At       time.Time
}

func (d *Decision) ObservedAt() time.Time { return d.At }

// WallClock implements Observation.
func (d *Decision) WallClock() Observation {
	return wallCopy(d, func(c *Decision) { c.At, c.TS = c.At.Round(0), c.TS.Round(0) })
}

// Prediction is what the router believed about cache reuse, in its own units.
type Prediction struct {
	Source    string   // kv-events | approx | text-tree | tree | hash | session | none
	Input     string   // tokens | chars | session_id | routing_key | none ("" unknown)
	Units     string   // blocks | tokens | chars | ratio (Matched of Total 1)
	Matched   *float64 // in Units
	Total     *float64 // in Units
	Owner     string   // worker the match belongs to
	BlockSize int
	AgeMS     *float64
}

// Load is the load figure the router used, and its scope.
type Load struct {
	Kind  string // queue | inflight | router-local-counter | active-blocks
	Value *float64
	Scope string // router-local | pool
}

// Candidate is one worker the router scored.
type Candidate struct {
	Worker  string
	Score   *float64
	Matched *float64
	Load    *float64
}

// Outcome is what actually happened to one attempt.
type Outcome struct {
	TS           time.Time
	RequestID    string
	AttemptID    string
	Worker       string
	HTTPStatus   int // 0 unknown
	PromptTokens *int
	CachedTokens *int
	QueueMS      *float64
	TTFTMS       *float64
	E2EMS        *float64
	FinishReason string
	Done         *bool // true only when the client saw the end of the stream
	// Figures only some logs give (Dynamo's request traces); nil unknown.
	OutputTokens *int
	PrefillMS    *float64 // prefill start to first token
	ITLMS        *float64 // mean inter-token latency
	KVTransferMS *float64 // the router's estimate of the prefill-to-decode KV transfer
	Error        string
	RetryOf      string
	Format       string
	Source       string
	Backfill     bool // read from what the file held at start (see Decision.Backfill)
	At           time.Time

	// What a client-side observer (kvtop tap) adds. Observer is "client"
	// for its records, "" for a router's or a log's: the pool keeps a
	// client's outcome beside the router's, joined by request id.
	Observer    string
	End         string   // why reading ended: done, upstream_closed, reset, client_gone, timeout, http_error, no_response, unchecked
	TTFBMS      *float64 // to the response headers
	MaxGapMS    *float64 // the largest gap in the stream after its first token
	Breaks      *int     // gaps of at least the tap's break threshold
	PromptChars *int     // characters of the prompt's text
	ClientSlow  bool     // the client fell a whole stream buffer behind
}

// ObserverClient marks an outcome seen from the client's side (kvtop tap).
const ObserverClient = "client"

func (o *Outcome) ObservedAt() time.Time { return o.At }

// WallClock implements Observation.
func (o *Outcome) WallClock() Observation {
	return wallCopy(o, func(c *Outcome) { c.At, c.TS = c.At.Round(0), c.TS.Round(0) })
}

// DecisionSource is the reading state of one decision log, sent when it
// changes (rate-limited), so the operator sees why a log yields no
// decisions (skipped lines, file missing) rather than an empty screen.
type DecisionSource struct {
	Source    string // path or "-"
	Format    string // configured format (auto, kvtop, …)
	Detected  string // format of the last decision (or outcome) line, "" before one
	Lines     uint64
	Decisions uint64
	Outcomes  uint64
	Bad       uint64
	Skipped   uint64
	SkippedBy map[string]uint64 // reason -> lines (e.g. "no request id", "not a decision")
	Waiting   bool              // the file does not exist (yet)
	At        time.Time
}

func (d *DecisionSource) ObservedAt() time.Time { return d.At }

// WallClock implements Observation.
func (d *DecisionSource) WallClock() Observation {
	return wallCopy(d, func(c *DecisionSource) { c.At = c.At.Round(0) })
}

// ---------------------------------------------------------------------------
// Errors

// SourceError is a problem with one source: counted and shown where the
// operator looks, never fatal. Message never contains secrets or prompt text.
type SourceError struct {
	Source string // e.g. "w2 metrics", "w0 events rank 1", "decisions /var/log/x.jsonl"
	// Kind is one of: timeout | refused | http_status | redirect | parse |
	// invalid | decode | bad_line | too_large | tls | replay | bind | config |
	// absent (a worker missing from a source that lists workers, e.g.
	// Prometheus) | partial (an answer the source says is incomplete).
	Kind    string
	Message string
	// Backfill marks a problem found in what a decision log held when
	// kvtop started: counted, but not as an error of now.
	Backfill bool
	At       time.Time
}

func (e *SourceError) ObservedAt() time.Time { return e.At }
func (e *SourceError) Error() string         { return e.Source + ": " + e.Kind + ": " + e.Message }

// WallClock implements Observation.
func (e *SourceError) WallClock() Observation { return e.wallClock() }

func (e *SourceError) wallClock() *SourceError {
	return wallCopy(e, func(c *SourceError) { c.At = c.At.Round(0) })
}
