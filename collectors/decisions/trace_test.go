package decisions

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
)

// TestDynamoTraceDetail: what one request_end line says, field by field,
// as the decisions screen shows it: the prefill worker chosen and the
// decode worker named, the router's hit rate as a prediction in tokens,
// the outcome's timings, and no cached count the record does not observe.
func TestDynamoTraceDetail(t *testing.T) {
	lines := fixtureLines(t, ourLogs, "dynamo-trace.jsonl")
	parse := func(i int) Result {
		t.Helper()
		r, err := ParseLine(lines[i], FormatDynamoTrace)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		return r
	}

	// Disaggregated, agent context: both workers, both named as dynamo.go names them.
	r := parse(0)
	d, o := r.Decision, r.Outcome
	if d == nil || o == nil {
		t.Fatalf("want a decision and an outcome: %+v", r)
	}
	p := d.Prediction
	if d.Chosen != "worker_7587888751432" || d.DecodeWorker != "worker_7587888751501/dp1" || d.Model != "Qwen/Qwen3-8B" ||
		!d.TS.Equal(time.UnixMilli(1767225610001)) || d.Format != FormatDynamoTrace {
		t.Errorf("decision %+v", d)
	}
	// kv_hit_rate 0.875 of 4096 input tokens, owned by the chosen worker.
	if p == nil || p.Source != "kv-events" || p.Units != "tokens" || ptr(p.Matched) != "3584" || ptr(p.Total) != "4096" || p.Owner != d.Chosen {
		t.Errorf("prediction %+v", p)
	}
	if d.Load == nil || d.Load.Kind != "queue" || ptr(d.Load.Value) != "0" {
		t.Errorf("load %+v", d.Load)
	}
	// cached_tokens 3584 is the router's own estimate (it came with a
	// kv_hit_rate): not an observation, so the outcome leaves it unknown.
	if o.CachedTokens != nil || iptr(o.PromptTokens) != "4096" || iptr(o.OutputTokens) != "212" || ptr(o.QueueMS) != "3.2" ||
		ptr(o.TTFTMS) != "171.9" || ptr(o.E2EMS) != "2344" || ptr(o.PrefillMS) != "140.5" || ptr(o.ITLMS) != "10.2" ||
		ptr(o.KVTransferMS) != "12.7" || o.FinishReason != "stop" || o.Worker != d.Chosen || o.HTTPStatus != 0 || o.Done != nil ||
		!o.TS.Equal(time.UnixMilli(1767225612345)) || o.RequestID != d.RequestID {
		t.Errorf("outcome %+v", o)
	}

	// Aggregated: one worker (an id above 2^63, exact), no decode worker;
	// the engine's own count (backend_actual_cached_tokens) is the outcome.
	r = parse(1)
	if d := r.Decision; d.Chosen != "worker_18446744073709551557" || d.DecodeWorker != "" || ptr(d.Prediction.Matched) != "512" {
		t.Errorf("aggregated decision %+v %+v", d, d.Prediction)
	}
	if o := r.Outcome; iptr(o.CachedTokens) != "0" {
		t.Errorf("aggregated outcome cached %s, want the backend's 0", iptr(o.CachedTokens))
	}

	// Without agent context: an outcome with what the record has, nothing
	// invented.
	r = parse(2)
	if r.Decision != nil {
		t.Errorf("a record without a worker made a decision: %+v", r.Decision)
	}
	if o := r.Outcome; o.Worker != "" || o.PromptTokens != nil || o.CachedTokens != nil || o.TTFTMS != nil || o.E2EMS != nil ||
		iptr(o.OutputTokens) != "17" || !o.TS.Equal(time.UnixMilli(1767225614000)) {
		t.Errorf("plain outcome %+v", o)
	}

	// The older agent schema, a decode worker only (the prefill phase was
	// skipped): it did both. No kv_hit_rate: no prediction, and
	// cached_tokens is the engine's.
	r = parse(3)
	if d := r.Decision; d.Chosen != "worker_42/dp2" || d.DecodeWorker != "" || d.Prediction != nil {
		t.Errorf("agent decision %+v", d)
	}
	if o := r.Outcome; iptr(o.CachedTokens) != "1200" || o.Worker != "worker_42/dp2" {
		t.Errorf("agent outcome %+v", o)
	}
	if o := parse(10).Outcome; iptr(o.CachedTokens) != "640" {
		t.Errorf("no router estimate: cached %s, want the record's 640", iptr(o.CachedTokens))
	}
}

// Both file sinks' wrapper and the stderr sink's bare record read alike.
func TestDynamoTraceWrapperAndBare(t *testing.T) {
	rec := `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1767225612345,"request":{"request_id":"r1","input_tokens":100,"kv_hit_rate":0.25,"worker":{"prefill_worker_id":9,"prefill_dp_rank":3}}}`
	for _, line := range []string{rec, `{"timestamp":77,"event":` + rec + `}`} {
		for _, f := range []string{FormatDynamoTrace, FormatAuto} {
			r, err := ParseLine([]byte(line), f)
			if err != nil || r.Decision == nil || r.Decision.Chosen != "worker_9/dp3" || ptr(r.Decision.Prediction.Matched) != "25" ||
				r.Outcome == nil || !r.Outcome.TS.Equal(time.UnixMilli(1767225612345)) {
				t.Errorf("%s %.20s…: %+v %v", f, line, r, err)
			}
		}
	}
	// Not JSON, or JSON of another kind, is bad in format dynamo-trace.
	for _, line := range []string{"2026-01-01 INFO hello", `{"kind":"decision","request_id":"r"}`, `{"timestamp":1,"event":{"event_type":"request_end"}}`} {
		if _, err := ParseLine([]byte(line), FormatDynamoTrace); err == nil {
			t.Errorf("%s: want a bad line", line)
		}
	}
}

// TestSMGDetail: each branch of the gateway's lines as a decision: its
// reason, and a prediction only where the line says what matched, owned by
// the chosen worker only where the line says the chosen worker holds it.
func TestSMGDetail(t *testing.T) {
	lines := fixtureLines(t, ourLogs, "smg-decisions.log")
	type want struct {
		line                    int
		reason, source, units   string
		matched, total, owner   string
		chosen, model, endpoint string
		ts                      string
	}
	const u7, u8, u9 = "http://10.0.0.7:8000", "http://10.0.0.8:8000", "http://10.0.0.9:8000"
	for _, w := range []want{
		{1, "best-match", "tree", "ratio", "0.8125", "1", u7, u7, "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:01Z"},
		{2, "load-balance", "tree", "ratio", "0.64", "1", "", u9, "qwen3-8b", "/v1/completions", "2026-08-22T13:07:02Z"}, // ANSI colours
		{3, "fallback", "tree", "ratio", "0.1", "1", "", u8, "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:03Z"},
		{4, "best-match", "hash", "tokens", "1024", "nil", u7, u7, "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:04Z"},
		{5, "", "session", "", "nil", "nil", "", u8, "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:05Z"},
		{7, "best-match", "tree", "ratio", "0.75", "1", u9, u9, "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:07Z"}, // JSON
		{8, "load-balance", "hash", "tokens", "2048", "nil", "", u8, "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:08Z"},
		{9, "fallback", "tree", "ratio", "0", "1", "", "", "qwen3-8b", "/v1/chat/completions", "2026-08-22T13:07:09Z"},
		{12, "best-match", "tree", "ratio", "0.5", "1", u7, u7, "qwen3-8b", "/generate", "2026-08-20T09:00:12Z"},
	} {
		r, err := ParseLine(lines[w.line-1], FormatSMG)
		if err != nil || r.Decision == nil {
			t.Errorf("line %d: %+v %v", w.line, r, err)
			continue
		}
		d, p := r.Decision, r.Decision.Prediction
		if p == nil {
			p = &collectors.Prediction{}
		}
		got := fmt.Sprintf("%s %s %s %s %s %s %s %s %s %s", d.Reason, p.Source, p.Units, ptr(p.Matched), ptr(p.Total), p.Owner,
			d.Chosen, d.Model, d.Endpoint, d.TS.Format(time.RFC3339))
		exp := fmt.Sprintf("%s %s %s %s %s %s %s %s %s %s", w.reason, w.source, w.units, w.matched, w.total, w.owner,
			w.chosen, w.model, w.endpoint, w.ts)
		if got != exp {
			t.Errorf("line %d:\n got %s\nwant %s", w.line, got, exp)
		}
	}
	// The branches without a match figure predict nothing.
	for _, l := range []string{
		`2026-08-22 13:07:01 DEBUG http_request{request_id="r"}: smg::policies::cache_aware: x.rs:1: Cache-aware selection branch="no_tree_random" worker="http://h:1" model_id="m"`,
		`2026-08-22 13:07:01 DEBUG http_request{request_id="r"}: smg::policies::cache_aware: x.rs:1: Cache-aware selection index="hash" branch="short_request" level=0 worker="http://h:1" model_id="m"`,
	} {
		if r, err := ParseLine([]byte(l), FormatSMG); err != nil || r.Decision.Prediction != nil || r.Decision.Reason == "" {
			t.Errorf("%s: %+v %v", l, r.Decision, err)
		}
	}
	// A line without a branch is not one of the gateway's.
	if _, err := ParseLine([]byte(`2026-08-22 13:07:01 DEBUG http_request{request_id="r"}: x: Cache-aware selection worker="http://h:1"`), FormatSMG); err == nil {
		t.Error("no branch: want a bad line")
	}
}

// gzipMember is one member of Dynamo's gzip sink: lines compressed and
// finished, as one flush writes them.
func gzipMember(t *testing.T, lines ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	for _, l := range lines {
		if _, err := zw.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func traceLine(id string, worker int) string {
	return fmt.Sprintf(`{"timestamp":1,"event":{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1767225612345,"request":{"request_id":%q,"input_tokens":64,"kv_hit_rate":0.5,"ttft_ms":12.5,"worker":{"prefill_worker_id":%d,"decode_worker_id":%d}}}}`, id, worker, worker)
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTailGzipMembers: a .jsonl.gz that grows by whole members (Dynamo's
// gzip sink) is followed: the members on disk at start are history, a
// member half written is not read until its end arrives, and each trace
// line gives its decision and its outcome.
func TestTailGzipMembers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl.gz")
	appendBytes(t, path, gzipMember(t, traceLine("g1", 1), traceLine("g2", 2)))
	appendBytes(t, path, gzipMember(t, traceLine("g3", 1)))
	h := start(t, Options{Sources: []Source{{Path: path, Format: FormatDynamoTrace}}})
	h.until("the members at start", hasN(6))
	next := gzipMember(t, traceLine("g4", 2), traceLine("g5", 1))
	appendBytes(t, path, next[:len(next)/2])
	time.Sleep(200 * time.Millisecond) // several polls with half a member on disk
	if n := len(ids(h.got)); n != 6 {
		t.Fatalf("half a member gave %d observations: %v", n, ids(h.got))
	}
	appendBytes(t, path, next[len(next)/2:])
	h.until("the completed member", hasN(10))
	want := []string{"D:g1", "O:g1", "D:g2", "O:g2", "D:g3", "O:g3", "D:g4", "O:g4", "D:g5", "O:g5"}
	if got := ids(h.got); !equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, o := range h.got {
		if d, ok := o.(*collectors.Decision); ok {
			if old := d.RequestID <= "g3"; d.Backfill != old {
				t.Errorf("%s: backfill %v, want %v", d.RequestID, d.Backfill, old)
			}
		}
	}
	st := h.untilCounts("5 lines counted", path, func(r *collectors.DecisionSource) bool { return r.Lines >= 5 })
	if st.Lines != 5 || st.Decisions != 5 || st.Outcomes != 5 || st.Bad != 0 || st.Detected != FormatDynamoTrace {
		t.Errorf("counts %+v", st)
	}
}

// A corrupt member is said once (where, not what) and skipped; the
// members the writer appends after it are read.
func TestTailGzipCorruptMember(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl.gz")
	appendBytes(t, path, gzipMember(t, traceLine("c1", 1)))
	h := start(t, Options{Sources: []Source{{Path: path}}})
	h.until("the first member", hasN(2))
	bad := gzipMember(t, traceLine("c2", 1))
	bad[len(bad)-6] ^= 0xff // the CRC
	appendBytes(t, path, bad)
	h.until("the corruption reported", func(obs []collectors.Observation) bool {
		for _, o := range obs {
			if e, ok := o.(*collectors.SourceError); ok && e.Kind == "decode" {
				if !strings.Contains(e.Message, "gzip member at byte") || strings.Contains(e.Message, "c2") {
					t.Errorf("message %q", e.Message)
				}
				return true
			}
		}
		return false
	})
	appendBytes(t, path, gzipMember(t, traceLine("c3", 1)))
	h.until("the member after it", hasN(4))
	if got := ids(h.got); !equal(got, []string{"D:c1", "O:c1", "D:c3", "O:c3"}) {
		t.Errorf("got %v", got)
	}
}

// TestTailDynamoSegments: given the sink's path (DYN_REQUEST_TRACE_FILE_PATH),
// kvtop waits for a segment, follows the newest, and moves to the next
// when Dynamo rolls, after reading what the old one got last.
func TestTailDynamoSegments(t *testing.T) {
	dir := t.TempDir()
	sink := filepath.Join(dir, "dynamo-request-trace")
	seg := func(i int) string { return fmt.Sprintf("%s.%06d.jsonl.gz", sink, i) }
	appendBytes(t, filepath.Join(dir, "other.000009.jsonl.gz"), gzipMember(t, traceLine("x", 1))) // another prefix
	h := start(t, Options{Sources: []Source{{Path: sink, Format: FormatDynamoTrace}}})
	h.untilCounts("waiting for a segment", sink, func(r *collectors.DecisionSource) bool { return r.Waiting })
	appendBytes(t, seg(0), gzipMember(t, traceLine("s1", 1)))
	h.until("the first segment", hasN(2))
	appendBytes(t, seg(0), gzipMember(t, traceLine("s2", 1)))
	appendBytes(t, seg(1), gzipMember(t, traceLine("s3", 2)))
	h.until("both segments", hasN(6))
	appendBytes(t, seg(1), gzipMember(t, traceLine("s4", 2)))
	h.until("the new segment growing", hasN(8))
	if got := ids(h.got); !equal(got, []string{"D:s1", "O:s1", "D:s2", "O:s2", "D:s3", "O:s3", "D:s4", "O:s4"}) {
		t.Errorf("got %v", got)
	}
	for _, o := range h.got {
		if d, ok := o.(*collectors.Decision); ok && (d.Backfill || d.Source != sink) {
			t.Errorf("%s: backfill %v source %q", d.RequestID, d.Backfill, d.Source)
		}
	}
}

func TestSeriesPrefix(t *testing.T) {
	for _, tc := range []struct{ path, format, want string }{
		{"/tmp/dynamo-request-trace", FormatDynamoTrace, "/tmp/dynamo-request-trace"},
		{"/tmp/t.jsonl", FormatDynamoTrace, "/tmp/t"},
		{"/tmp/t.jsonl.gz", FormatAuto, "/tmp/t"},
		{"/tmp/t.000012.jsonl.gz", FormatAuto, "/tmp/t"},
		{"/tmp/t.jsonl", FormatAuto, ""},
		{"/var/log/decisions.jsonl", FormatKvtop, ""},
	} {
		if got := seriesPrefix(tc.path, tc.format); got != tc.want {
			t.Errorf("seriesPrefix(%q, %q) = %q, want %q", tc.path, tc.format, got, tc.want)
		}
	}
}

// TestDisaggregatedTraceToPool: the constructed traces, tailed from a file
// into the pool with the two Dynamo workers configured under their ids:
// the disaggregated request's record names its prefill worker as chosen
// and owner and its decode worker beside it, joined to its outcome; the
// aggregated one with the engine's 0 cached tokens is a prediction error;
// the record without a worker is an outcome with no decision; the bad
// lines are counted.
func TestDisaggregatedTraceToPool(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	appendTo(t, path, strings.Join(fixtureStrings(t, "dynamo-trace.jsonl"), "\n")+"\n")
	h := start(t, Options{Sources: []Source{{Path: path}}})
	h.untilCounts("every line", path, func(r *collectors.DecisionSource) bool { return r.Lines == 11 })
	s := pool.NewState(pool.Options{Workers: []pool.WorkerSpec{
		{Name: "prefill-0", Aliases: []string{"worker_7587888751432"}},
		{Name: "decode-0", Aliases: []string{"worker_7587888751501"}},
		{Name: "agg", Aliases: []string{"worker_18446744073709551557"}},
	}})
	for _, o := range h.got {
		s.Apply(o)
	}
	for _, r := range h.reports {
		s.Apply(r)
	}
	snap := s.Snapshot(time.Now())
	rows := map[string]snapshot.DecisionRow{}
	for _, r := range snap.Decisions.Recent {
		rows[r.RequestID] = r
	}
	r := rows["8f0c2d7e-1b9a-4c55-9a61-0d2f4e7b3c11"]
	if r.Chosen != "prefill-0" || r.Owner != "prefill-0" || r.DecodeWorker != "decode-0" || r.Outcome == nil ||
		r.Outcome.Worker != "prefill-0" || r.CachedTokens != nil || len(r.Flags) != 0 || ptr(r.Matched) != "3584" {
		t.Errorf("disaggregated record %+v", r)
	}
	if r := rows["req-agg-2"]; r.Chosen != "agg" || r.DecodeWorker != "" || strings.Join(r.Flags, ",") != "prediction_error" {
		t.Errorf("aggregated record %+v", r)
	}
	if r := rows["req-plain-3"]; r.Chosen != "" || strings.Join(r.Flags, ",") != "no_decision" || r.Outcome == nil {
		t.Errorf("record without a worker %+v", r)
	}
	d := snap.Decisions
	if d.BadLines != 2 || d.Records != 4 || d.WithOutcome != 4 || d.OrphanOutcomes != 1 || d.PredictionErrors != 1 {
		t.Errorf("decisions: %d bad lines, %d records, %d with an outcome, %d orphans, %d prediction errors",
			d.BadLines, d.Records, d.WithOutcome, d.OrphanOutcomes, d.PredictionErrors)
	}
	// worker_42 and worker_43 map to no configured worker: said, not made up.
	if strings.Join(d.Unmapped, ",") != "worker_42,worker_43" {
		t.Errorf("unmapped %v", d.Unmapped)
	}
}

func fixtureStrings(t *testing.T, name string) []string {
	var out []string
	for _, l := range fixtureLines(t, ourLogs, name) {
		out = append(out, string(l))
	}
	return out
}
