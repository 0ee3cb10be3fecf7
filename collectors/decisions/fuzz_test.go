package decisions

import (
	"strings"
	"testing"
)

// New formats go at the end: a seed's format byte indexes this list.
var fuzzFormats = []string{FormatAuto, FormatKvtop, FormatDynamo, FormatLLMD, FormatProductionStack, FormatDynamoTrace, FormatSMG}

// FuzzParseLine runs every adapter (auto exercises them all) on arbitrary
// lines. Seeds: every real and hand-written fixture line, in its own format
// and in auto.
func FuzzParseLine(f *testing.F) {
	seeds := []struct{ dir, file, format string }{
		{ourLogs, "kvtop-audit.jsonl", FormatKvtop},
		{ourLogs, "kvtop-bad.jsonl", FormatKvtop},
		{ourLogs, "dynamo-routing.log", FormatDynamo},
		{ourLogs, "llm-d-epp-request-handled.log", FormatLLMD},
		{ourLogs, "production-stack-session.log", FormatProductionStack},
		{ourLogs, "mixed.log", FormatAuto},
		{realLogs, "dynamo-jsonl-docs-logging.log", FormatDynamo},
		{realLogs, "dynamo-text-issue-3581.log", FormatDynamo},
		{realLogs, "dynamo-text-mm-router-readme-redacted.log", FormatDynamo},
		{realLogs, "gaie-epp-pr2384.log", FormatLLMD},
		{realLogs, "llm-d-epp-pr199.log", FormatLLMD},
		{realLogs, "production-stack-pr428.log", FormatProductionStack},
		{realLogs, "vllm-router-pr47.log", FormatAuto},
		{ourLogs, "dynamo-trace.jsonl", FormatDynamoTrace},
		{ourLogs, "smg-decisions.log", FormatSMG},
	}
	for _, s := range seeds {
		for _, l := range fixtureLines(f, s.dir, s.file) {
			f.Add(l, formatIndex(s.format))
			f.Add(l, uint8(0))
		}
	}
	f.Add([]byte(`{"kind":"outcome","request_id":1e400,"attempt_id":-0.5,"http_status":99999999999}`), uint8(1))
	f.Add([]byte(`{"message":"[ROUTING] Best: worker_1 dp_rank=99999999999999999999 with 1/2 blocks overlap","request_id":"r"}`), uint8(2))
	f.Add([]byte("INFO: Routing request a with session id  to b at 1e308, process time = 1"), uint8(4))

	f.Add([]byte(`{"timestamp":1,"event":{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":18446744073709551615,"request":{"request_id":"r","kv_hit_rate":1e-400,"worker":{"prefill_worker_id":18446744073709551616,"decode_dp_rank":-1}}}}`), uint8(5))
	f.Add([]byte(`2026-08-22 13:07:01 DEBUG http_request{request_id="r"}: Cache-aware selection index="hash" branch="hash_hit" level=99999999999 worker=none`), uint8(6))

	f.Fuzz(func(t *testing.T, line []byte, fi uint8) {
		format := fuzzFormats[int(fi)%len(fuzzFormats)]
		r, err := ParseLine(line, format)
		n := 0
		for _, b := range []bool{err != nil, r.Decision != nil || r.Outcome != nil, r.Skip} {
			if b {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("want exactly one of error/decision or outcome/skip: %+v, %v", r, err)
		}
		if r.Decision != nil && r.Outcome != nil {
			// Only a Dynamo trace line is both, for one request.
			if r.Decision.Format != FormatDynamoTrace || r.Outcome.Format != FormatDynamoTrace || r.Decision.RequestID != r.Outcome.RequestID ||
				r.Decision.Chosen == "" || r.Outcome.Worker != r.Decision.Chosen {
				t.Fatalf("decision %+v with outcome %+v", r.Decision, r.Outcome)
			}
		}
		if err != nil {
			msg := err.Error()
			if len(line) >= 48 && strings.Contains(msg, string(line)) {
				t.Fatalf("error message quotes the line: %s", msg)
			}
			return
		}
		if d := r.Decision; d != nil {
			if d.RequestID == "" {
				t.Fatalf("decision without request id: %+v", d)
			}
			if !ValidFormat(d.Format) || d.Format == FormatAuto || (format != FormatAuto && d.Format != format) {
				t.Fatalf("decision format %q from format %q", d.Format, format)
			}
		}
		if o := r.Outcome; o != nil && (o.RequestID == "" || (o.Format != FormatKvtop && o.Format != FormatDynamoTrace) ||
			(format != FormatAuto && o.Format != format)) {
			t.Fatalf("outcome %+v", o)
		}
		if o := r.Outcome; o != nil && o.Format == FormatDynamoTrace {
			for _, v := range []*float64{o.QueueMS, o.TTFTMS, o.E2EMS, o.PrefillMS, o.ITLMS, o.KVTransferMS} {
				if v != nil && (*v < 0 || !finite(*v)) {
					t.Fatalf("a trace's duration is negative or not finite: %+v", o)
				}
			}
		}
		if d := r.Decision; d != nil && d.Prediction != nil {
			for _, v := range []*float64{d.Prediction.Matched, d.Prediction.Total} {
				if v != nil && (*v < 0 || !finite(*v)) {
					t.Fatalf("prediction %+v", d.Prediction)
				}
			}
		}
		if r.Skip && r.Reason == "" {
			t.Fatal("skip without a reason")
		}
		// Deterministic: the same line gives the same answer.
		if a, b := summary(r, err), summary(ParseLine(line, format)); a != b {
			t.Fatalf("not deterministic: %q vs %q", a, b)
		}
	})
}

func formatIndex(f string) uint8 {
	for i, x := range fuzzFormats {
		if x == f {
			return uint8(i)
		}
	}
	return 0
}
