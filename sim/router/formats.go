package router

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/kvcache"
)

// The decision logs the router can write besides kvtop's audit record
// (PROTOCOLS.md §3.3): what NVIDIA Dynamo's request traces and the SGLang
// model gateway's cache-aware policy write, field for field, so that kvtop
// reads them end to end. Metadata only, never prompt content.

// Decision log formats.
const (
	FormatKvtop       = "kvtop"
	FormatDynamoTrace = "dynamo-trace"
	FormatSMG         = "smg"
)

// ParseFormat checks a decisions format ("" is kvtop).
func ParseFormat(s string) (string, error) {
	switch s {
	case "", FormatKvtop:
		return FormatKvtop, nil
	case FormatDynamoTrace, FormatSMG:
		return s, nil
	}
	return "", fmt.Errorf("decisions format %q is not one of kvtop, dynamo-trace, smg", s)
}

// Dynamo's trace sinks, as the sim writes them to the decisions file.
const (
	SinkJSONL  = "jsonl"  // the plain file sink: {"timestamp","event"} lines
	SinkGzip   = "gzip"   // the gzip sink: segments <path>.NNNNNN.jsonl.gz of whole members
	SinkStderr = "stderr" // the stderr sink: the bare record
)

// ParseSink checks a trace sink ("" is jsonl).
func ParseSink(s string) (string, error) {
	switch s {
	case "", SinkJSONL:
		return SinkJSONL, nil
	case SinkGzip, SinkStderr:
		return s, nil
	}
	return "", fmt.Errorf("trace sink %q is not one of jsonl, gzip, stderr", s)
}

// Trace schemas: the current one, and the agent traces' before it.
const (
	TraceSchemaV1    = "dynamo.request.trace.v1"
	TraceSchemaAgent = "dynamo.agent.trace.v1"
)

// traceWorker is RequestTraceWorkerInfo.
type traceWorker struct {
	PrefillWorkerID uint64 `json:"prefill_worker_id"`
	PrefillDPRank   uint32 `json:"prefill_dp_rank"`
	DecodeWorkerID  uint64 `json:"decode_worker_id"`
	DecodeDPRank    uint32 `json:"decode_dp_rank"`
}

// traceFinish is FinishReasonMetadata (its finish_reason only).
type traceFinish struct {
	FinishReason string `json:"finish_reason"`
}

// traceRequest is RequestTraceMetrics, in its field order; None omitted.
type traceRequest struct {
	RequestID         string       `json:"request_id"`
	XRequestID        string       `json:"x_request_id,omitempty"`
	Model             string       `json:"model,omitempty"`
	InputTokens       *int         `json:"input_tokens,omitempty"`
	OutputTokens      *int         `json:"output_tokens,omitempty"`
	CachedTokens      *int         `json:"cached_tokens,omitempty"`
	BackendActual     *int         `json:"backend_actual_cached_tokens,omitempty"`
	RequestReceivedMS int64        `json:"request_received_ms"`
	PrefillWaitTimeMS *float64     `json:"prefill_wait_time_ms,omitempty"`
	PrefillTimeMS     *float64     `json:"prefill_time_ms,omitempty"`
	TTFTMS            *float64     `json:"ttft_ms,omitempty"`
	TotalTimeMS       *float64     `json:"total_time_ms,omitempty"`
	AvgITLMS          *float64     `json:"avg_itl_ms,omitempty"`
	KVHitRate         *float64     `json:"kv_hit_rate,omitempty"`
	QueueDepth        *int         `json:"queue_depth,omitempty"`
	Worker            *traceWorker `json:"worker,omitempty"`
	Finish            *traceFinish `json:"finish_reason_metadata,omitempty"`
}

type traceAgent struct {
	SessionID string `json:"session_id"`
}

// traceRecord is RequestTraceRecord for a request_end.
type traceRecord struct {
	Schema          string       `json:"schema"`
	EventType       string       `json:"event_type"`
	EventTimeUnixMS int64        `json:"event_time_unix_ms"`
	EventSource     string       `json:"event_source,omitempty"`
	AgentContext    *traceAgent  `json:"agent_context,omitempty"`
	Request         traceRequest `json:"request"`
}

// traceEntry is the file sinks' wrapper: ms since the sink started.
type traceEntry struct {
	Timestamp int64        `json:"timestamp"`
	Event     *traceRecord `json:"event"`
}

// writeTrace writes one request_end for t, as Dynamo's frontend does for a
// request with nvext.agent_context (every field filled). Aggregated
// serving: the one worker is prefill and decode worker. The sim's router
// dispatches at once (no router queue), so the wait before prefill is 0
// and prefill time is the engine's queue and prefill: TTFT. cached_tokens
// is the router's estimate (overlap blocks × block size), as Dynamo's KV
// router records it; the engine's own count is backend_actual_cached_tokens
// unless the run leaves it out (older Dynamo).
func (r *Router) writeTrace(t *ticket, res *engine.Result, end time.Time) {
	q := t.req
	isl := q.PromptLen
	blocks := (isl + kvcache.BlockSize - 1) / kvcache.BlockSize
	id := r.cfg.DynamoID(t.worker)
	req := traceRequest{
		RequestID: t.id, XRequestID: "x-" + t.id, Model: r.modelOf(t.s), InputTokens: &isl,
		RequestReceivedMS: t.received.UnixMilli(),
		Worker:            &traceWorker{PrefillWorkerID: id, PrefillDPRank: uint32(t.rank), DecodeWorkerID: id, DecodeDPRank: uint32(t.rank)},
	}
	predicted := t.predicted
	req.CachedTokens = &predicted
	if blocks > 0 {
		rate := float64(t.predicted/kvcache.BlockSize) / float64(blocks)
		req.KVHitRate = &rate
	}
	zero := 0
	req.QueueDepth = &zero
	wait := 0.0
	req.PrefillWaitTimeMS = &wait
	total := msf(end.Sub(t.received))
	req.TotalTimeMS = &total
	out := 0
	if res != nil {
		cached := res.CachedTokens
		if !r.cfg.TraceNoBackendActual {
			req.BackendActual = &cached
		}
		total = msf(res.E2E)
		if res.TTFT > 0 {
			ttft := msf(res.TTFT)
			req.TTFTMS, req.PrefillTimeMS = &ttft, &ttft
			out = q.OutputLen
			if res.Status == engine.Aborted {
				out = 0 // the engine restarted under it: what came is unknown to the sim
			}
			if out >= 2 {
				itl := (total - ttft) / float64(out-1)
				req.AvgITLMS = &itl
			}
		}
		if res.Status == engine.Finished && res.FinishReason != "" {
			req.Finish = &traceFinish{FinishReason: res.FinishReason}
		}
	}
	req.OutputTokens = &out
	schema := TraceSchemaV1
	if r.cfg.TraceSchema == "agent" {
		schema = TraceSchemaAgent
	}
	rec := &traceRecord{
		Schema: schema, EventType: "request_end", EventTimeUnixMS: t.received.UnixMilli() + int64(total+0.5),
		EventSource: "dynamo", AgentContext: &traceAgent{SessionID: "sim-session-" + strconv.Itoa(t.s.id)}, Request: req,
	}
	if r.cfg.TraceSink == SinkStderr {
		r.audit.write(rec)
		return
	}
	r.audit.write(traceEntry{Timestamp: end.Sub(r.started).Milliseconds(), Event: rec})
}

// msf is a duration in milliseconds, to the microsecond.
func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// smgThreshold is the --cache-threshold the sim's policy amounts to: it
// follows any match (an f32, widened to f64 in the line, as SMG logs it).
const smgThreshold = float32(0)

// writeSMG writes the gateway's DEBUG "Cache-aware selection" line for one
// tree-routed request inside its http_request span (whose request_id is the
// ticket's): tree_match when the chosen worker holds the longest match,
// spill when load sent it to one that holds less, min_load_fallback when
// nothing matched (the ratio is at the threshold, 0). matched_ratio is in
// tokens (the gRPC path's unit). A cache-blind policy (round robin) logs no
// such line, as SMG's round_robin policy does not.
func (r *Router) writeSMG(t *ticket, owner int, at time.Time) {
	if r.cfg.Policy == RoundRobin {
		return
	}
	q := t.req
	matched := r.matched[owner] * kvcache.BlockSize
	ratio := 0.0
	if q.PromptLen > 0 {
		ratio = float64(float32(min(matched, q.PromptLen)) / float32(q.PromptLen))
	}
	branch := "spill"
	switch {
	case matched == 0:
		branch = "min_load_fallback"
	case r.matched[t.worker] == r.matched[owner]:
		branch = "tree_match"
	}
	t.branch = branch
	url := r.cfg.URLs[t.worker]
	threshold := float64(smgThreshold)
	if r.cfg.SMGLog == "json" {
		span := map[string]any{"method": "POST", "module": "smg", "request_id": t.id, "uri": "/v1/chat/completions", "version": "HTTP/1.1", "name": "http_request"}
		line, _ := json.Marshal(struct {
			Timestamp string           `json:"timestamp"`
			Level     string           `json:"level"`
			Message   string           `json:"message"`
			Index     string           `json:"index"`
			Branch    string           `json:"branch"`
			Worker    string           `json:"worker"`
			ModelID   string           `json:"model_id"`
			Ratio     float64          `json:"matched_ratio"`
			Threshold float64          `json:"threshold"`
			Target    string           `json:"target"`
			Filename  string           `json:"filename"`
			Line      int              `json:"line_number"`
			Span      map[string]any   `json:"span"`
			Spans     []map[string]any `json:"spans"`
		}{at.UTC().Format("2006-01-02 15:04:05"), "DEBUG", "Cache-aware selection", "tree", branch, url, r.modelOf(t.s), ratio, threshold,
			"smg::policies::cache_aware", "model_gateway/src/policies/cache_aware.rs", 1503, span, []map[string]any{span}})
		r.audit.line(line)
		return
	}
	var b strings.Builder
	b.WriteString(at.UTC().Format("2006-01-02 15:04:05"))
	b.WriteString(` DEBUG http_request{method=POST uri=/v1/chat/completions version=HTTP/1.1 module="smg" request_id=`)
	b.WriteString(strconv.Quote(t.id))
	b.WriteString(`}: smg::policies::cache_aware: model_gateway/src/policies/cache_aware.rs:1503: Cache-aware selection index="tree" branch=`)
	b.WriteString(strconv.Quote(branch))
	b.WriteString(" worker=" + strconv.Quote(url) + " model_id=" + strconv.Quote(r.modelOf(t.s)))
	b.WriteString(" matched_ratio=" + debugF64(ratio) + " threshold=" + debugF64(threshold))
	r.audit.line([]byte(b.String()))
}

// debugF64 formats a float as Rust's Debug does: the shortest round trip,
// with ".0" on a whole number.
func debugF64(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}
