package serve

import (
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/snapshot"
)

// DefaultHotPrefixes is how many of the hottest prefixes /metrics exports:
// prefix ids are label values, so only the top few get a series.
const DefaultHotPrefixes = 10

// hotPrefixLabel is how much of a prefix id (hex block hash) the label
// keeps: enough to find it on the Prefixes screen.
const hotPrefixLabel = 16

// decisionFlags are the journal's flag counts, in the snapshot's words.
var decisionFlags = []string{"owner_mismatch", "prediction_error", "truncated"}

// metric is one exported name: its description for the registry path,
// and its name, help, type and label names for the direct one.
type metric struct {
	pd     *prometheus.Desc
	name   string
	help   string
	typ    dto.MetricType
	labels []string
	order  []int // label indexes by name, the order the registry writes them
}

// newMetric describes a metric; names ending in _total are counters, the
// others gauges (promtool's rule, so the two cannot disagree).
func newMetric(name, help string, labels ...string) *metric {
	typ := dto.MetricType_GAUGE
	if strings.HasSuffix(name, "_total") {
		typ = dto.MetricType_COUNTER
	}
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return labels[order[i]] < labels[order[j]] })
	return &metric{pd: prometheus.NewDesc(name, help, labels, nil), name: name, help: help, typ: typ, labels: labels, order: order}
}

// Metric descriptions. Every value comes from the latest snapshot; a
// figure the snapshot does not know (null in its JSON) has no sample.
var (
	buildInfo = newMetric("kvtop_build_info", "kvtop's version; always 1.", "version", "goversion")
	snapAge   = newMetric("kvtop_snapshot_age_seconds", "Age of the latest pool snapshot when scraped (kvtop's clock): it grows while the pool is stalled.")
	snapRef   = newMetric("kvtop_snapshot_refresh_seconds", "The pool's snapshot cadence.")
	window    = newMetric("kvtop_window_seconds", "The configured rate and hit-rate window.")

	wUp       = newMetric("kvtop_worker_up", "1 when kvtop's last scrape of the worker's /metrics succeeded.", "worker")
	wQueue    = newMetric("kvtop_worker_queue", "Requests waiting on the worker, summed over its engines.", "worker")
	wRunning  = newMetric("kvtop_worker_running", "Requests running on the worker, summed over its engines.", "worker")
	wKV       = newMetric("kvtop_worker_kv_usage_ratio", "KV-cache use of the worker (0..1), weighted by each engine's GPU blocks.", "worker")
	wHit      = newMetric("kvtop_worker_prefix_hit_ratio", "Token-weighted prefix-cache hit ratio of the worker over the window (Δhits/Δqueries).", "worker")
	wBlocks   = newMetric("kvtop_worker_blocks", "Distinct resident KV blocks kvtop's index holds for the worker (from its event streams).", "worker")
	wHot      = newMetric("kvtop_worker_overheating", "1 while the worker takes most of a hot prefix's traffic with its queue well above the pool median.", "worker")
	wComplete = newMetric("kvtop_worker_index_complete", "1 while kvtop's block index of the worker is complete (no lost history, open gap or disconnected stream).", "worker")
	wRestarts = newMetric("kvtop_worker_restarts_total", "Engine restarts kvtop saw on the worker (counter resets, process restarts).", "worker")

	pWorkers  = newMetric("kvtop_pool_workers", "Workers in the pool (configured and discovered).")
	pUp       = newMetric("kvtop_pool_workers_up", "Workers whose last scrape succeeded.")
	pQueue    = newMetric("kvtop_pool_queue", "Requests waiting, summed over the up workers.")
	pHit      = newMetric("kvtop_pool_prefix_hit_ratio", "Pool prefix-cache hit ratio over the window: weight=tokens is Δhits/Δqueries from engine counters, weight=requests the share of requests with cached tokens (from outcomes).", "weight")
	pSkew     = newMetric("kvtop_pool_load_skew_ratio", "Pool load skew: max over mean of the workers' queue depth.")
	pGini     = newMetric("kvtop_pool_load_gini", "Gini coefficient (0..1) of the workers' queue depth.")
	pComplete = newMetric("kvtop_pool_index_complete", "1 while every worker's block index is complete.")

	sGaps     = newMetric("kvtop_stream_gaps_total", "Seq gaps seen on the KV event stream.", "worker", "rank")
	sMissing  = newMetric("kvtop_stream_missing_total", "Batches missing in the stream's gaps.", "worker", "rank")
	sLost     = newMetric("kvtop_stream_lost_total", "Missing batches replay could not give back (history lost).", "worker", "rank")
	sRestarts = newMetric("kvtop_stream_restarts_total", "Publisher restarts (seq went backwards) on the stream.", "worker", "rank")
	sState    = newMetric("kvtop_stream_state", "1, labelled with the stream's current state (connecting, live, replaying, history_lost, joined_late, disconnected); the other states have no series.", "worker", "rank", "state")

	rUp         = newMetric("kvtop_router_up", "1 when kvtop's last scrape of the router's /metrics succeeded.", "router")
	rRestarts   = newMetric("kvtop_router_restarts_total", "Router restarts kvtop saw (counter resets, changed process start time).", "router")
	rRecovering = newMetric("kvtop_router_recovering", "1 while the pool token hit ratio has not come back to its level before the router's last restart.", "router")
	rRecovery   = newMetric("kvtop_router_last_recovery_seconds", "Time the pool hit ratio took to recover after the router's last restart, or the time so far while recovering.", "router")

	dTotal    = newMetric("kvtop_decisions_total", "Routing decisions read from the decision log.", "source")
	dOutcomes = newMetric("kvtop_decisions_outcomes_total", "Request outcomes read from the decision log.", "source")
	dJournal  = newMetric("kvtop_decisions_journal", "Decisions in kvtop's journal (its most recent attempts, bounded).")
	dFlagged  = newMetric("kvtop_decisions_flagged", "Decisions in the journal with this flag; the journal is bounded, so this is a gauge over its records (compare with kvtop_decisions_journal).", "flag")
	dFlaggedT = newMetric("kvtop_decisions_flagged_total", "Decisions that became flagged so, since kvtop started (a counter: rate() of it is flagged decisions per second).", "flag")

	hotShare = newMetric("kvtop_hot_prefix_share", "Share of pool traffic over the window that went to the prefix (top prefixes only; the label is the first 16 hex digits of its id).", "prefix")

	// Latency, throughput and recomputed prefill over the window (issue
	// 10's figures), in seconds and per second as Prometheus names them.
	// A quantile whose rank fell in the +Inf bucket is exported as the
	// highest finite bound, a floor (the snapshot's "capped").
	wTTFT      = newMetric("kvtop_worker_ttft_seconds", "Time to first token of the worker's requests over the window, at the percentile (from the engines' histogram buckets; a quantile past the last finite bucket is that bound, a floor).", "worker", "percentile")
	wITL       = newMetric("kvtop_worker_itl_seconds", "Inter-token latency of the worker over the window, at the percentile (histogram buckets).", "worker", "percentile")
	wQueueTime = newMetric("kvtop_worker_queue_time_seconds", "Time the worker's requests waited in its queue over the window, at the percentile (histogram buckets).", "worker", "percentile")
	wE2E       = newMetric("kvtop_worker_e2e_seconds", "End-to-end request latency of the worker over the window, at the percentile (histogram buckets).", "worker", "percentile")
	wTokens    = newMetric("kvtop_worker_tokens_per_second", "Tokens the worker processed per second over the window: kind=prompt (prefill) or generation.", "worker", "kind")
	wRequests  = newMetric("kvtop_worker_requests_per_second", "Requests the worker finished per second over the window.", "worker")
	wRecompute = newMetric("kvtop_worker_recompute_tokens_per_second", "Prompt tokens the worker recomputed per second although a longer prefix was cached on another up worker (joined decisions).", "worker")
	wRecompR   = newMetric("kvtop_worker_recompute_ratio", "Recomputed prompt tokens over the prompt tokens of the worker's measured requests (0..1).", "worker")

	pTTFT      = newMetric("kvtop_pool_ttft_seconds", "Time to first token over the window for the pool's up workers, at the percentile (their summed bucket increases, never an average of quantiles).", "percentile")
	pITL       = newMetric("kvtop_pool_itl_seconds", "Inter-token latency over the window for the pool's up workers, at the percentile.", "percentile")
	pQueueTime = newMetric("kvtop_pool_queue_time_seconds", "Queue time over the window for the pool's up workers, at the percentile.", "percentile")
	pE2E       = newMetric("kvtop_pool_e2e_seconds", "End-to-end request latency over the window for the pool's up workers, at the percentile.", "percentile")
	pTokens    = newMetric("kvtop_pool_tokens_per_second", "Tokens the up workers processed per second over the window: kind=prompt or generation.", "kind")
	pRequests  = newMetric("kvtop_pool_requests_per_second", "Requests the up workers finished per second over the window.")
	pRecompute = newMetric("kvtop_pool_recompute_tokens_per_second", "Prompt tokens recomputed per second although a longer prefix was cached on another up worker.")
	pRecompR   = newMetric("kvtop_pool_recompute_ratio", "Recomputed prompt tokens over the prompt tokens of the measured requests (0..1).")

	// The hit-rate ladder (issue 26): the pool's token hit rate with each
	// class of avoidable loss removed, and each loss per second.
	pLadder = newMetric("kvtop_pool_hit_ladder", "The pool's token hit rate over the window with causes removed, cumulatively: rung=actual (the hit rate), perfect_routing, consistent_hashing, enough_capacity (the workload's ceiling).", "rung")
	pLoss   = newMetric("kvtop_pool_hit_loss_tokens_per_second", "Prompt tokens computed per second over the window by cause: routing (cached on another up worker), capacity (evicted by the same worker), pool_capacity (evicted everywhere), configuration (the same content under another hash), compulsory (first sight).", "cause")

	// Roles (issue 27): each worker's, and the pool's figures per role.
	wRole      = newMetric("kvtop_worker_role", "1 for the worker's role in a disaggregated pool: role=prefill, decode or aggregated; source says who said so (config, kubernetes, router, default).", "worker", "role", "source")
	wTransfer  = newMetric("kvtop_worker_transferred_tokens", "Prompt tokens a decode worker received by KV transfer over the window, kept out of its token hit rate.", "worker")
	pRoleUp    = newMetric("kvtop_pool_role_workers_up", "Up workers of each role.", "role")
	pRoleQueue = newMetric("kvtop_pool_role_queue", "Waiting requests summed over the up workers of each role.", "role")
	pRoleKV    = newMetric("kvtop_pool_role_kv_usage", "KV cache use of each role's up workers, weighted by num_gpu_blocks (0..1).", "role")
	pModelUp   = newMetric("kvtop_pool_model_workers_up", "Up workers serving each model (model_name on their pages).", "model")
	pModelQ    = newMetric("kvtop_pool_model_queue", "Waiting requests summed over the up workers of each model.", "model")
	pModelHit  = newMetric("kvtop_pool_model_prefix_hit_ratio", "Token-weighted prefix cache hit ratio of each model's up workers over the window.", "model")
	// What clients received (kvtop tap, issue 28), over the window:
	// exported while a tap feeds the pool.
	wClientReq    = newMetric("kvtop_worker_client_requests", "Requests of the worker that kvtop tap recorded over the window, by what the client got: class=finished (finish_reason and [DONE]), truncated (HTTP 2xx but cut short), failed, left (the client went away), unknown.", "worker", "class")
	wClientTTFT   = newMetric("kvtop_worker_client_ttft_seconds", "Time to the first content token as the client received it (kvtop tap) over the window, at the percentile (exact, from 20 requests on).", "worker", "percentile")
	wClientBreaks = newMetric("kvtop_worker_client_stream_breaks", "Streaming breaks (gaps after the first token of at least the tap's break_after) in the worker's tapped requests over the window.", "worker")
	wClientRtrOK  = newMetric("kvtop_worker_client_router_ok", "Of the worker's tapped requests over the window, those the router's own outcome record counted a success (HTTP 2xx): compare with class=finished.", "worker")
	pClientReq    = newMetric("kvtop_pool_client_requests", "Requests kvtop tap recorded over the window, by what the client got (class as for the worker).", "class")
	pClientTTFT   = newMetric("kvtop_pool_client_ttft_seconds", "Client time to first token over the window (kvtop tap), at the percentile.", "percentile")
	pClientBreaks = newMetric("kvtop_pool_client_stream_breaks", "Streaming breaks in the tapped requests over the window.")
	pClientRtrOK  = newMetric("kvtop_pool_client_router_ok", "Tapped requests over the window that the router's own outcome counted a success (HTTP 2xx).")

	srcErrors = newMetric("kvtop_source_errors_total", "Errors of kvtop's collectors by source and kind (a row the pool forgot to stay bounded starts again as a new series).", "source", "kind")
)

// Collector is a prometheus.Collector that reads the latest snapshot at
// every scrape. It keeps no state of its own: two scrapes of the same
// snapshot export the same values, and a counter is exported as one only
// where the snapshot holds a cumulative count. A worker, stream or error row
// the snapshot stops listing and lists again later starts a new series
// from its new count, which Prometheus reads as a counter reset.
//
// It is also a prometheus.Gatherer: Gather builds the metric families
// straight from the snapshot, the same samples as Collect without a const
// metric per sample and the registry's re-checks, which is what keeps a
// 256-worker scrape within its budget. The samples are unique by
// construction (one per worker, stream, router, prefix label, error row).
type Collector struct {
	sinks   sync.Pool // *dtoSink, reused by GatherTransactional
	latest  func() *snapshot.Snapshot
	hotN    int
	version string
	now     func() time.Time
}

// NewCollector returns a collector of latest's snapshots (nil before the
// first: only kvtop_build_info is exported then). hotN bounds the hot
// prefixes exported (DefaultHotPrefixes when 0, none when negative).
func NewCollector(latest func() *snapshot.Snapshot, version string, hotN int) *Collector {
	if hotN == 0 {
		hotN = DefaultHotPrefixes
	}
	return &Collector{latest: latest, hotN: max(hotN, 0), version: version, now: time.Now}
}

var allMetrics = []*metric{buildInfo, snapAge, snapRef, window,
	wUp, wQueue, wRunning, wKV, wHit, wBlocks, wHot, wComplete, wRestarts,
	pWorkers, pUp, pQueue, pHit, pSkew, pGini, pComplete,
	sGaps, sMissing, sLost, sRestarts, sState,
	rUp, rRestarts, rRecovering, rRecovery,
	dTotal, dOutcomes, dJournal, dFlagged, dFlaggedT, hotShare, srcErrors,
	wTTFT, wITL, wQueueTime, wE2E, wTokens, wRequests, wRecompute, wRecompR,
	pTTFT, pITL, pQueueTime, pE2E, pTokens, pRequests, pRecompute, pRecompR, pLadder, pLoss,
	wRole, wTransfer, pRoleUp, pRoleQueue, pRoleKV, pModelUp, pModelQ, pModelHit,
	wClientReq, wClientTTFT, wClientBreaks, wClientRtrOK, pClientReq, pClientTTFT, pClientBreaks, pClientRtrOK}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range allMetrics {
		ch <- m.pd
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.emit(constSink{ch})
}

// Gather implements prometheus.Gatherer: the families sorted by name,
// samples in snapshot order (workers as configured).
func (c *Collector) Gather() ([]*dto.MetricFamily, error) {
	return newDtoSink().gather(c), nil
}

// GatherTransactional is Gather for promhttp.HandlerForTransactional:
// done hands the families' memory back for the next scrape, so a scrape
// of ~16k samples allocates next to nothing once warm (their allocation
// and collection were a third of its CPU).
func (c *Collector) GatherTransactional() ([]*dto.MetricFamily, func(), error) {
	d, _ := c.sinks.Get().(*dtoSink)
	if d == nil {
		d = newDtoSink()
	}
	return d.gather(c), func() { d.reset(); c.sinks.Put(d) }, nil
}

// emit sends every sample of the latest snapshot to out.
func (c *Collector) emit(out sink) {
	out.add(buildInfo, 1, lv(label(c.version), runtime.Version()))
	s := c.latest()
	if s == nil {
		return
	}
	out.add(snapAge, max(0, c.now().Sub(s.At).Seconds()), labels{})
	out.add(snapRef, s.RefreshS, labels{})
	out.add(window, s.WindowS, labels{})

	p := &s.Pool
	out.add(pWorkers, float64(p.Workers), labels{})
	out.add(pUp, float64(p.Up), labels{})
	opt(out, pQueue, p.Queue, labels{})
	opt(out, pHit, p.PrefixHitRate.Tokens, lv("tokens"))
	opt(out, pHit, p.PrefixHitRate.Requests, lv("requests"))
	opt(out, pSkew, p.LoadSkew.MaxOverMean, labels{})
	opt(out, pGini, p.LoadSkew.Gini, labels{})
	out.add(pComplete, bit(p.IndexComplete), labels{})
	latencies(out, [4]*metric{pTTFT, pITL, pQueueTime, pE2E}, [4]*snapshot.Latency{&p.TTFTMS, &p.ITLMS, &p.QueueMS, &p.E2EMS}, labels{})
	opt(out, pTokens, p.TokensPerS.Prompt, lv("prompt"))
	opt(out, pTokens, p.TokensPerS.Generation, lv("generation"))
	opt(out, pRequests, p.RequestsPerS, labels{})
	opt(out, pRecompute, p.Recompute.TokensPerS, labels{})
	opt(out, pRecompR, p.Recompute.Share, labels{})
	r := p.Ladder.Rungs
	opt(out, pLadder, r.Actual, lv("actual"))
	opt(out, pLadder, r.PerfectRouting, lv("perfect_routing"))
	opt(out, pLadder, r.ConsistentHashing, lv("consistent_hashing"))
	opt(out, pLadder, r.EnoughCapacity, lv("enough_capacity"))
	l := p.Ladder.PerS
	opt(out, pLoss, l.Routing, lv("routing"))
	opt(out, pLoss, l.Capacity, lv("capacity"))
	opt(out, pLoss, l.PoolCapacity, lv("pool_capacity"))
	opt(out, pLoss, l.Configuration, lv("configuration"))
	opt(out, pLoss, l.Compulsory, lv("compulsory"))
	for _, m := range p.Models {
		out.add(pModelUp, float64(m.Up), lv(label(m.Model)))
		opt(out, pModelQ, m.Queue, lv(label(m.Model)))
		opt(out, pModelHit, m.HitTokens, lv(label(m.Model)))
	}
	for _, f := range p.Roles {
		out.add(pRoleUp, float64(f.Up), lv(f.Role))
		opt(out, pRoleQueue, f.Queue, lv(f.Role))
		opt(out, pRoleKV, f.KVUsage, lv(f.Role))
	}
	tapped := hasTap(s)
	if tapped {
		clientFigures(out, [4]*metric{pClientReq, pClientTTFT, pClientBreaks, pClientRtrOK}, &p.Clients, labels{})
	}

	// The pool keys workers by name and streams by (worker, rank); the
	// sets below only make sure a scrape never carries a duplicate
	// series, whatever a snapshot holds.
	workers := make(map[string]bool, len(s.Workers))
	for i := range s.Workers {
		w := &s.Workers[i]
		name := label(w.Name)
		if workers[name] {
			continue
		}
		workers[name] = true
		out.add(wUp, bit(w.Up), lv(name))
		if w.Role != "" {
			out.add(wRole, 1, lv(name, w.Role, w.RoleSource))
		}
		opt(out, wTransfer, w.PrefixHitRate.TransferredTokens, lv(name))
		opt(out, wQueue, w.Queue, lv(name))
		opt(out, wRunning, w.Running, lv(name))
		opt(out, wKV, w.KVUsage, lv(name))
		opt(out, wHit, w.PrefixHitRate.Tokens, lv(name))
		if w.Blocks != nil {
			out.add(wBlocks, float64(*w.Blocks), lv(name))
		}
		out.add(wHot, bit(w.Overheating), lv(name))
		out.add(wComplete, bit(w.IndexComplete), lv(name))
		out.add(wRestarts, float64(w.Restarts), lv(name))
		latencies(out, [4]*metric{wTTFT, wITL, wQueueTime, wE2E}, [4]*snapshot.Latency{&w.TTFTMS, &w.ITLMS, &w.QueueMS, &w.E2EMS}, lv(name))
		opt(out, wTokens, w.TokensPerS.Prompt, lv(name, "prompt"))
		opt(out, wTokens, w.TokensPerS.Generation, lv(name, "generation"))
		opt(out, wRequests, w.RequestsPerS, lv(name))
		opt(out, wRecompute, w.Recompute.TokensPerS, lv(name))
		opt(out, wRecompR, w.Recompute.Share, lv(name))
		if tapped {
			clientFigures(out, [4]*metric{wClientReq, wClientTTFT, wClientBreaks, wClientRtrOK}, &w.Clients, lv(name))
		}
		ranks := 0 // bit set of the ranks seen, and a map past 64
		var more map[int]bool
		for j := range w.Streams {
			st := &w.Streams[j]
			if st.Rank >= 0 && st.Rank < 64 {
				if ranks&(1<<st.Rank) != 0 {
					continue
				}
				ranks |= 1 << st.Rank
			} else {
				if more == nil {
					more = map[int]bool{}
				}
				if more[st.Rank] {
					continue
				}
				more[st.Rank] = true
			}
			rank := strconv.Itoa(st.Rank)
			out.add(sGaps, float64(st.Gaps), lv(name, rank))
			out.add(sMissing, float64(st.Missing), lv(name, rank))
			out.add(sLost, float64(st.Lost), lv(name, rank))
			out.add(sRestarts, float64(st.Restarts), lv(name, rank))
			if st.State != "" {
				out.add(sState, 1, lv(name, rank, label(string(st.State))))
			}
		}
	}

	routers := make(map[string]bool, len(s.Routers))
	for i := range s.Routers {
		r := &s.Routers[i]
		name := label(r.Name)
		if routers[name] {
			continue
		}
		routers[name] = true
		out.add(rUp, bit(r.Up), lv(name))
		out.add(rRestarts, float64(r.Restarts), lv(name))
		out.add(rRecovering, bit(r.Recovery.State == snapshot.RecoveryRecovering), lv(name))
		opt(out, rRecovery, r.Recovery.Seconds, lv(name))
	}

	d := &s.Decisions
	sources := make(map[string]bool, len(d.Sources))
	for i := range d.Sources {
		src := &d.Sources[i]
		name := label(src.Source)
		if sources[name] {
			continue
		}
		sources[name] = true
		out.add(dTotal, float64(src.Decisions), lv(name))
		out.add(dOutcomes, float64(src.Outcomes), lv(name))
	}
	out.add(dJournal, float64(d.Records), labels{})
	for i, n := range []int{d.OwnerMismatch, d.PredictionErrors, d.Truncated} {
		out.add(dFlagged, float64(n), lv(decisionFlags[i]))
	}
	for i, n := range []int64{d.FlaggedTotal.OwnerMismatch, d.FlaggedTotal.PredictionErrors, d.FlaggedTotal.Truncated} {
		out.add(dFlaggedT, float64(n), lv(decisionFlags[i]))
	}

	// Two ids can share their first 16 hex digits: the hotter one (first)
	// keeps the label.
	seen := make(map[string]bool, c.hotN)
	for i := 0; i < len(s.Prefixes) && len(seen) < c.hotN; i++ {
		id := label(s.Prefixes[i].ID)
		if len(id) > hotPrefixLabel {
			id = strings.ToValidUTF8(id[:hotPrefixLabel], "")
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		out.add(hotShare, s.Prefixes[i].Share, lv(id))
	}

	type errKey struct{ source, kind string }
	errs := make(map[errKey]bool, len(s.Errors))
	for i := range s.Errors {
		er := &s.Errors[i]
		k := errKey{label(er.Source), label(er.Kind)}
		if errs[k] {
			continue
		}
		errs[k] = true
		out.add(srcErrors, float64(er.Count), lv(k.source, k.kind))
	}
}

// hasTap: a kvtop tap feeds the pool (its reading state is listed with
// the decision logs') or its records are in the window.
func hasTap(s *snapshot.Snapshot) bool {
	if s.Pool.Clients.Requests > 0 {
		return true
	}
	for i := range s.Decisions.Sources {
		if s.Decisions.Sources[i].Format == "tap" {
			return true
		}
	}
	return false
}

// clientFigures exports one set of client figures (requests by class,
// TTFT quantiles in seconds, breaks, router successes); l's labels come
// first.
func clientFigures(out sink, ms [4]*metric, c *snapshot.Clients, l labels) {
	at := l.n
	l.n++
	for _, k := range [...]struct {
		n     int
		class snapshot.ClientClass
	}{{c.Finished, snapshot.ClientFinished}, {c.Truncated, snapshot.ClientTruncated}, {c.Failed, snapshot.ClientFailed},
		{c.Left, snapshot.ClientLeft}, {c.Unknown, snapshot.ClientUnknown}} {
		l.v[at] = string(k.class)
		out.add(ms[0], float64(k.n), l)
	}
	for _, q := range [...]struct {
		v     *float64
		label string
	}{{c.TTFTMS.P50, "50"}, {c.TTFTMS.P95, "95"}, {c.TTFTMS.P99, "99"}} {
		if q.v != nil {
			l.v[at] = q.label
			out.add(ms[1], *q.v/1000, l)
		}
	}
	l.n--
	out.add(ms[2], float64(c.Breaks), l)
	if c.RouterKnown > 0 {
		out.add(ms[3], float64(c.RouterOK), l)
	}
}

// sink takes samples: label values in the metric's label order.
type sink interface {
	add(m *metric, v float64, l labels)
}

// labels are a sample's label values, by value: a variadic slice passed
// through the sink interface escapes, an allocation per sample.
type labels struct {
	n int
	v [4]string
}

// lv makes labels of up to four values.
func lv(vals ...string) (l labels) {
	l.n = copy(l.v[:], vals)
	return l
}

func (l *labels) values() []string { return l.v[:l.n] }

// opt exports a figure the snapshot may not know: nil has no sample.
func opt(out sink, m *metric, v *float64, l labels) {
	if v != nil {
		out.add(m, *v, l)
	}
}

// latencies exports the known quantiles of four latency figures, in
// seconds, labelled percentile="50"|"95"|"99" (promtool keeps the
// quantile label for summaries); labels come before it.
func latencies(out sink, ms [4]*metric, figs [4]*snapshot.Latency, l labels) {
	at := l.n
	l.n++
	for i, fig := range figs {
		for _, q := range [...]struct {
			v     *float64
			label string
		}{{fig.P50, "50"}, {fig.P95, "95"}, {fig.P99, "99"}} {
			if q.v != nil {
				l.v[at] = q.label
				out.add(ms[i], *q.v/1000, l)
			}
		}
	}
}

// constSink is the registry path: one const metric per sample. A label
// set Prometheus refuses (it cannot happen once label() cleaned the
// values) is skipped, not fatal.
type constSink struct{ ch chan<- prometheus.Metric }

func (c constSink) add(m *metric, v float64, l labels) {
	t := prometheus.GaugeValue
	if m.typ == dto.MetricType_COUNTER {
		t = prometheus.CounterValue
	}
	if cm, err := prometheus.NewConstMetric(m.pd, t, v, l.values()...); err == nil {
		c.ch <- cm
	}
}

// dtoSink is the direct path: the families themselves, their samples
// from slabs (one allocation for many samples and their labels).
type dtoSink struct {
	fams  map[*metric]*dto.MetricFamily
	out   []*dto.MetricFamily
	slabs [][]dtoSample
	slab  int // the slab being filled
	next  int // its next free sample
}

// dtoSample is one sample with room for four labels.
type dtoSample struct {
	m      dto.Metric
	g      dto.Gauge
	c      dto.Counter
	v      float64
	values [4]string
	pairs  [4]dto.LabelPair
	ptrs   [4]*dto.LabelPair
}

const slabSamples = 1024

func newDtoSink() *dtoSink {
	return &dtoSink{fams: make(map[*metric]*dto.MetricFamily, len(allMetrics))}
}

// gather emits c's samples and returns the families sorted by name.
func (d *dtoSink) gather(c *Collector) []*dto.MetricFamily {
	c.emit(d)
	d.out = d.out[:0]
	for _, m := range allMetrics {
		if f := d.fams[m]; f != nil && len(f.Metric) > 0 {
			d.out = append(d.out, f)
		}
	}
	sort.Slice(d.out, func(i, j int) bool { return d.out[i].GetName() < d.out[j].GetName() })
	return d.out
}

// reset empties the families, keeping their memory.
func (d *dtoSink) reset() {
	for _, f := range d.fams {
		clear(f.Metric)
		f.Metric = f.Metric[:0]
	}
	d.slab, d.next = 0, 0
}

func (d *dtoSink) sample() *dtoSample {
	if d.slab == len(d.slabs) {
		d.slabs = append(d.slabs, make([]dtoSample, slabSamples))
	}
	x := &d.slabs[d.slab][d.next]
	*x = dtoSample{}
	if d.next++; d.next == slabSamples {
		d.slab, d.next = d.slab+1, 0
	}
	return x
}

func (d *dtoSink) add(m *metric, v float64, l labels) {
	f := d.fams[m]
	if f == nil {
		typ := m.typ
		f = &dto.MetricFamily{Name: &m.name, Help: &m.help, Type: &typ}
		d.fams[m] = f
	}
	x := d.sample()
	x.v = v
	x.m.Label = x.ptrs[:0]
	for i, li := range m.order { // a metric has at most four labels
		x.values[i] = l.v[li]
		x.pairs[i] = dto.LabelPair{Name: &m.labels[li], Value: &x.values[i]}
		x.m.Label = append(x.m.Label, &x.pairs[i])
	}
	if m.typ == dto.MetricType_COUNTER {
		x.c.Value = &x.v
		x.m.Counter = &x.c
	} else {
		x.g.Value = &x.v
		x.m.Gauge = &x.g
	}
	f.Metric = append(f.Metric, &x.m)
}

func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// label makes a value from the network a valid label value: Prometheus
// refuses invalid UTF-8 (and would then drop the whole sample).
func label(v string) string {
	if utf8.ValidString(v) {
		return v
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}
