package decisions

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// NVIDIA Dynamo's request traces (DYN_REQUEST_TRACE, schema
// "dynamo.request.trace.v1"; the older agent traces "dynamo.agent.trace.v1")
// write one `request_end` record per finished request. The file sinks
// (jsonl, and gzip segments of one gzip member per flush) wrap each line as
// {"timestamp": <ms since the sink started>, "event": <record>}; the stderr
// sink writes the bare record. A request_end's "request" object carries:
//
//	request_id, x_request_id, model, input_tokens, output_tokens,
//	cached_tokens, request_received_ms, prefill_wait_time_ms,
//	prefill_time_ms, ttft_ms, total_time_ms, avg_itl_ms, kv_hit_rate,
//	kv_transfer_estimated_latency_ms, queue_depth,
//	worker{prefill_worker_id, prefill_dp_rank, decode_worker_id, decode_dp_rank}
//
// every field after request_id optional (without nvext.agent_context Dynamo
// fills only request_id, output_tokens, request_received_ms and replay).
//
// One line is a decision and its outcome:
//
//   - The decision (only when the record names a worker): Chosen is the
//     prefill worker, the one that computed the prompt's KV and whose cache
//     the router's kv_hit_rate is about (the first routing phase records
//     it; in aggregated serving Dynamo records the one worker as both);
//     DecodeWorker the decode worker when it is another one. A record with
//     a decode worker only (prefill skipped) chose it for both. Names are
//     worker_<id>, "/dp<r>" for rank r > 0, as dynamo.go names them.
//   - The prediction, in tokens, owner the chosen worker: the router's
//     overlap on it. kv_hit_rate (overlap blocks ÷ input blocks) says there
//     was one; cached_tokens gives it in tokens (below), else kv_hit_rate ×
//     input_tokens does, within a block.
//   - cached_tokens is not what the engine reused: Dynamo's KV router
//     records its own estimate (overlap blocks × block size) first, and the
//     tracker keeps the first value. So with a kv_hit_rate it is the
//     prediction, not an outcome; the outcome's cached tokens are
//     backend_actual_cached_tokens when the record has it (newer Dynamo),
//     cached_tokens only without a router estimate (no kv_hit_rate), else
//     unknown.
//   - The outcome: queue = prefill_wait_time_ms (received to prefill
//     start), TTFT, end to end = total_time_ms, prefill_time_ms,
//     avg_itl_ms, kv_transfer_estimated_latency_ms, input and output
//     tokens, finish_reason. No HTTP status or completion flag: unknown.
//
// Other event types (tool_*, request_payload, which holds the request and
// response text) are skipped unread.

// Trace schemas kvtop reads.
const (
	traceSchemaV1    = "dynamo.request.trace.v1"
	traceSchemaAgent = "dynamo.agent.trace.v1"
)

// isDynamoTrace reports whether a JSON object is a trace record, bare or in
// a file sink's wrapper (auto detection).
func isDynamoTrace(obj map[string]any) bool {
	if ev, ok := obj["event"].(map[string]any); ok && has(obj, "timestamp") {
		obj = ev
	}
	s, ok := obj["schema"].(string)
	return ok && strings.HasPrefix(s, "dynamo.") && has(obj, "event_type")
}

func parseDynamoTrace(obj map[string]any) (Result, error) {
	rec := obj
	if ev, ok := obj["event"].(map[string]any); ok && has(obj, "timestamp") {
		rec = ev
	}
	schema, ok := rec["schema"].(string)
	switch {
	case !ok:
		return Result{}, errors.New("dynamo-trace: not a trace record (no schema)")
	case schema != traceSchemaV1 && schema != traceSchemaAgent:
		if strings.HasPrefix(schema, "dynamo.") {
			return skip(SkipUnknownKind), nil // a newer schema: not an error
		}
		return Result{}, errors.New("dynamo-trace: schema is not a Dynamo trace schema")
	}
	et, ok := rec["event_type"].(string)
	if !ok {
		return Result{}, errors.New("dynamo-trace: event_type missing or not a string")
	}
	if et != "request_end" {
		return skip(SkipNotDecision), nil
	}
	req, ok := rec["request"].(map[string]any)
	if !ok {
		return Result{}, errors.New("dynamo-trace: request_end without a request object")
	}
	reqID, ok := req["request_id"].(string)
	if !ok && req["request_id"] != nil {
		return Result{}, errors.New("dynamo-trace: request.request_id is not a string")
	}
	if reqID == "" {
		return skip(SkipNoRequestID), nil
	}
	t := traceFields{m: req, path: "request."}
	input := t.count("input_tokens")
	output := t.count("output_tokens")
	cached := t.count("cached_tokens")
	actual := t.count("backend_actual_cached_tokens")
	received := t.unixMS("request_received_ms")
	wait := t.ms("prefill_wait_time_ms")
	prefill := t.ms("prefill_time_ms")
	ttft := t.ms("ttft_ms")
	total := t.ms("total_time_ms")
	itl := t.ms("avg_itl_ms")
	transfer := t.ms("kv_transfer_estimated_latency_ms")
	rate := t.float("kv_hit_rate")
	queue := t.count("queue_depth")
	model := t.text("model")
	var pw, pr, dw, dr string
	if w, ok := req["worker"].(map[string]any); ok {
		wf := traceFields{m: w, path: "request.worker."}
		pw, pr = wf.id("prefill_worker_id"), wf.rank("prefill_dp_rank")
		dw, dr = wf.id("decode_worker_id"), wf.rank("decode_dp_rank")
		t.err = cmp.Or(t.err, wf.err)
	} else if req["worker"] != nil {
		t.fail("request.worker", "not an object")
	}
	finish := ""
	if fm, ok := req["finish_reason_metadata"].(map[string]any); ok {
		finish = token(str(fm["finish_reason"]))
	}
	top := traceFields{m: rec}
	ended := top.unixMS("event_time_unix_ms")
	if t.err = cmp.Or(t.err, top.err); t.err != nil {
		return Result{}, t.err
	}
	if rate != nil && (*rate < 0 || *rate > 1) {
		return Result{}, errors.New("dynamo-trace: request.kv_hit_rate is not between 0 and 1")
	}

	o := &collectors.Outcome{
		TS: ended, RequestID: reqID, PromptTokens: input, QueueMS: wait, TTFTMS: ttft, E2EMS: total,
		FinishReason: finish, OutputTokens: output, PrefillMS: prefill, ITLMS: itl, KVTransferMS: transfer,
		Format: FormatDynamoTrace,
	}
	switch {
	case actual != nil:
		o.CachedTokens = actual
	case rate == nil:
		o.CachedTokens = cached // no router estimate came first: the engine's count
	}
	r := Result{Outcome: o}

	chosen, decode := dynamoTraceWorker(pw, pr), dynamoTraceWorker(dw, dr)
	if chosen == "" {
		chosen, decode = decode, ""
	}
	if chosen == "" {
		return r, nil // no worker named: an outcome only
	}
	if decode == chosen {
		decode = ""
	}
	o.Worker = chosen
	d := &collectors.Decision{
		TS: received, RequestID: reqID, Model: model, Chosen: chosen, DecodeWorker: decode,
		Format: FormatDynamoTrace,
	}
	if rate != nil {
		p := &collectors.Prediction{Source: "kv-events", Input: "tokens", Units: "tokens", Owner: chosen}
		if input != nil {
			n := float64(*input)
			p.Total = &n
		}
		switch {
		case cached != nil && (input == nil || *cached <= *input):
			// The router's own count (overlap blocks × block size).
			m := float64(*cached)
			p.Matched = &m
		case input != nil:
			// Its ratio (overlap ÷ input blocks) of the input: the same
			// within a block.
			m := math.Round(*rate * float64(*input))
			p.Matched = &m
		}
		d.Prediction = p
	}
	if queue != nil {
		q := float64(*queue)
		d.Load = &collectors.Load{Kind: "queue", Value: &q, Scope: "router-local"}
	}
	r.Decision = d
	return r, nil
}

// dynamoTraceWorker names a worker as dynamo.go does ("" when the id is).
// A missing rank is rank 0, as Dynamo names a worker without data
// parallelism.
func dynamoTraceWorker(id, rank string) string {
	if id == "" {
		return ""
	}
	r, _ := strconv.Atoi(rank)
	return dynamoWorker(id, r)
}

// traceFields reads typed fields of one trace object; the first problem
// sticks (named by field, never quoting a value).
type traceFields struct {
	m    map[string]any
	path string // the object's place in the record, for messages: "request."
	err  error
}

func (t *traceFields) fail(key, why string) {
	if t.err == nil {
		t.err = fmt.Errorf("dynamo-trace: %s: %s", key, why)
	}
}

func (t *traceFields) name(key string) string { return t.path + key }

// number returns the field as a JSON number's text ("" when absent or null).
func (t *traceFields) number(key string) string {
	switch v := t.m[key].(type) {
	case nil:
		return ""
	case json.Number:
		return v.String()
	}
	t.fail(t.name(key), "not a number")
	return ""
}

// count reads a whole non-negative number (a token count).
func (t *traceFields) count(key string) *int {
	s := t.number(key)
	if s == "" {
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > math.MaxInt32 {
		t.fail(t.name(key), "not a whole number of at most 2^31-1")
		return nil
	}
	v := int(n)
	return &v
}

// float reads a finite number.
func (t *traceFields) float(key string) *float64 {
	s := t.number(key)
	if s == "" {
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !finite(f) {
		t.fail(t.name(key), "not a finite number")
		return nil
	}
	return &f
}

// ms reads a duration in milliseconds (finite, not negative).
func (t *traceFields) ms(key string) *float64 {
	f := t.float(key)
	if f != nil && *f < 0 {
		t.fail(t.name(key), "negative")
		return nil
	}
	return f
}

// unixMS reads epoch milliseconds (zero time when absent).
func (t *traceFields) unixMS(key string) time.Time {
	s := t.number(key)
	if s == "" {
		return time.Time{}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > 1<<53 {
		t.fail(t.name(key), "not epoch milliseconds")
		return time.Time{}
	}
	return time.UnixMilli(int64(n)).UTC()
}

// id reads a worker id: a u64, kept as its digits (ids exceed 2^53).
func (t *traceFields) id(key string) string {
	s := t.number(key)
	if s == "" {
		return ""
	}
	if _, err := strconv.ParseUint(s, 10, 64); err != nil {
		t.fail(t.name(key), "not an unsigned 64-bit id")
		return ""
	}
	if s == "0" {
		return "" // Dynamo's "no worker" sentinel
	}
	return s
}

// rank reads a dp rank (u32).
func (t *traceFields) rank(key string) string {
	s := t.number(key)
	if s == "" {
		return ""
	}
	if _, err := strconv.ParseUint(s, 10, 32); err != nil {
		t.fail(t.name(key), "not a rank (0 to 2^32-1)")
		return ""
	}
	return s
}

// text reads a short string field ("" when absent; another type is an
// error).
func (t *traceFields) text(key string) string {
	switch v := t.m[key].(type) {
	case nil:
		return ""
	case string:
		return v
	}
	t.fail(t.name(key), "not a string")
	return ""
}

// token keeps a short printable word (a finish reason) and drops anything
// else: a field of a log is not a place for text.
func token(s string) string {
	if len(s) == 0 || len(s) > 40 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return ""
		}
	}
	return s
}
