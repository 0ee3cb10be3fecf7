package decisions

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Each adapter on real captured lines (testdata/real/logs) and on the
// constructed lines for what no public capture shows (testdata/decisions).
func TestAdaptersOnLogFiles(t *testing.T) {
	const (
		notDecision = "S " + SkipNotDecision
		noRequestID = "S " + SkipNoRequestID
	)
	tests := []struct {
		dir, file, format string
		want              []string
	}{
		{ourLogs, "dynamo-routing.log", FormatDynamo, []string{
			"D dynamo 8372eac7-5f43-4d76-beca-0a94cfb311d0 worker_7587890043311737930",
			"D dynamo req-2 worker_1718573674787700186/dp2",
			"D dynamo req-3 worker_42",
			noRequestID,
			"D dynamo req-5 worker_42/dp1",
			"D dynamo req-6 worker_43",
		}},
		{realLogs, "dynamo-jsonl-docs-logging.log", FormatDynamo, []string{
			notDecision, notDecision, notDecision, notDecision, notDecision, notDecision, notDecision, notDecision,
		}},
		{realLogs, "dynamo-text-docs-logging.log", FormatDynamo, []string{
			notDecision, notDecision, notDecision, notDecision, notDecision,
		}},
		{realLogs, "dynamo-text-issue-3581.log", FormatDynamo, []string{
			notDecision, notDecision, noRequestID, notDecision, notDecision, noRequestID,
		}},
		{realLogs, "dynamo-text-pr-3498.log", FormatDynamo, []string{
			notDecision, notDecision, noRequestID, notDecision, notDecision,
		}},
		// The doc authors redacted the ids to "...": counted bad, never a crash.
		{realLogs, "dynamo-text-mm-router-readme-redacted.log", FormatDynamo, []string{
			notDecision, notDecision, noRequestID, "B dynamo [ROUTING]: worker_id is not a number (redacted?)",
		}},
		{ourLogs, "llm-d-epp-request-handled.log", FormatLLMD, []string{
			"D llm-d 710a2ee7-fb67-4151-a3b9-56ad753fb55a 10.129.2.41:8000",
			"D llm-d e3df4a6e-8d95-42bf-917b-0ed21ca756b6 10.244.0.12",
			notDecision, // Calculated score
			noRequestID,
			"D llm-d abc-5 default/vllm-0",
		}},
		{realLogs, "gaie-epp-pr2384.log", FormatLLMD, []string{notDecision, notDecision, notDecision}},
		{realLogs, "llm-d-epp-issue867.log", FormatLLMD, []string{notDecision}},
		{realLogs, "llm-d-epp-pr199.log", FormatLLMD, []string{notDecision}},
		{realLogs, "production-stack-pr428.log", FormatProductionStack, []string{
			notDecision,
			"D production-stack 597e3325-c6c9-4d1b-9644-f792ce76b82c https://vllm-node05.code.example.rocks/qwen3-30b-a3b",
			notDecision, // uvicorn access line
		}},
		{realLogs, "production-stack-issue617.log", FormatProductionStack, []string{notDecision}},
		{ourLogs, "dynamo-trace.jsonl", FormatDynamoTrace, []string{
			"D dynamo-trace 8f0c2d7e-1b9a-4c55-9a61-0d2f4e7b3c11 worker_7587888751432",
			"D dynamo-trace req-agg-2 worker_18446744073709551557",
			"O dynamo-trace req-plain-3", // no worker: an outcome alone
			"D dynamo-trace req-agent-4 worker_42/dp2",
			notDecision, notDecision, // tool_start, request_payload
			"S " + SkipUnknownKind, // a newer schema
			noRequestID,
			"B dynamo-trace: request.kv_hit_rate is not between 0 and 1",
			"B dynamo-trace: request.worker.prefill_worker_id: not a number",
			"D dynamo-trace req-rr-11 worker_43",
		}},
		{ourLogs, "smg-decisions.log", FormatSMG, []string{
			"D smg chatcmpl-T1 http://10.0.0.7:8000",
			"D smg cmpl-T2 http://10.0.0.9:8000",
			"D smg chatcmpl-T3 http://10.0.0.8:8000",
			"D smg chatcmpl-T4 http://10.0.0.7:8000",
			"D smg chatcmpl-T5 http://10.0.0.8:8000",
			noRequestID, // logged outside the request's span
			"D smg chatcmpl-J7 http://10.0.0.9:8000",
			"D smg chatcmpl-J8 http://10.0.0.8:8000",
			"D smg chatcmpl-T9 ", // first_healthy_fallback, worker "none"
			notDecision,          // event-driven: names the best overlap before the load gate
			notDecision,          // the response line
			"D smg gnt-T12 http://10.0.0.7:8000",
		}},
		{ourLogs, "production-stack-session.log", FormatProductionStack, []string{
			notDecision,
			"D production-stack 3f1c2a9e-0d4b-4b61-9a57-4c1f0e6d2b10 http://10.0.0.7:8000",
			"D production-stack 77aa01b2-5c3d-4e9f-8a10-2b3c4d5e6f70 http://10.0.0.8:8000",
			notDecision, // "to engine with Id" is not the decision line
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			lines := fixtureLines(t, tc.dir, tc.file)
			if len(lines) != len(tc.want) {
				t.Fatalf("%d lines, %d expectations", len(lines), len(tc.want))
			}
			for i, l := range lines {
				for _, format := range []string{tc.format, FormatAuto} {
					if got := summary(ParseLine(l, format)); got != tc.want[i] {
						t.Errorf("%s line %d: got %q, want %q", format, i+1, got, tc.want[i])
					}
				}
			}
		})
	}
}

func TestDynamoDecisionDetail(t *testing.T) {
	lines := fixtureLines(t, ourLogs, "dynamo-routing.log")
	r, err := ParseLine(lines[0], FormatDynamo)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Decision
	p := d.Prediction
	// A worker id above 2^53 must survive exactly (float64 would round it).
	if d.Chosen != "worker_7587890043311737930" || p.Owner != d.Chosen || p.Source != "kv-events" ||
		p.Input != "tokens" || p.Units != "blocks" || ptr(p.Matched) != "8" || ptr(p.Total) != "16" ||
		!d.TS.Equal(mustTime(t, "2026-08-20T00:00:02.02Z")) || d.Load != nil || d.Reason != "" {
		t.Errorf("JSONL decision: %+v prediction %+v", d, p)
	}
	// Message-only record: the numbers come from the message text.
	r, _ = ParseLine(lines[2], FormatDynamo)
	if p := r.Decision.Prediction; ptr(p.Matched) != "0" || ptr(p.Total) != "4" {
		t.Errorf("message fallback: %+v", p)
	}
	// Text line: ts from the line start, numbers from key=value.
	r, _ = ParseLine(lines[4], FormatDynamo)
	if d := r.Decision; !d.TS.Equal(mustTime(t, "2026-08-20T04:00:30.000001Z")) || ptr(d.Prediction.Matched) != "8" ||
		ptr(d.Prediction.Total) != "12" {
		t.Errorf("text decision: %+v %+v", d, d.Prediction)
	}
	// ANSI-coloured text line.
	r, _ = ParseLine(lines[5], FormatDynamo)
	if d := r.Decision; !d.TS.Equal(mustTime(t, "2026-08-20T04:00:31Z")) || ptr(d.Prediction.Matched) != "2" {
		t.Errorf("coloured decision: %+v %+v", d, d.Prediction)
	}
}

func TestLLMDDecisionDetail(t *testing.T) {
	lines := fixtureLines(t, ourLogs, "llm-d-epp-request-handled.log")
	r, _ := ParseLine(lines[0], FormatLLMD)
	if d := r.Decision; d.Model != "openai/gpt-oss-120b" || d.Prediction != nil ||
		!d.TS.Equal(mustTime(t, "2026-04-23T02:14:43Z")) {
		t.Errorf("current EPP: %+v", d)
	}
	r, _ = ParseLine(lines[1], FormatLLMD)
	if d := r.Decision; d.Model != "food-review-1" || d.TS.UnixMicro() != 1750716212123457 {
		t.Errorf("older EPP (epoch ts): %+v, ts %v", d, d.TS.UnixMicro())
	}
	r, _ = ParseLine(lines[4], FormatLLMD)
	if d := r.Decision; !d.TS.Equal(mustTime(t, "2025-03-01T10:00:00.123Z")) {
		t.Errorf("zap ISO8601 ts: %v", d.TS)
	}
}

func TestProductionStackDetail(t *testing.T) {
	r, _ := ParseLine(fixtureLines(t, realLogs, "production-stack-pr428.log")[1], FormatProductionStack)
	d := r.Decision
	if d.TS.UnixMicro() != 1747833743320924 || d.Prediction.Source != "none" || d.Prediction.Input != "none" || d.Reason != "" {
		t.Errorf("pr428: %+v %+v", d, d.Prediction)
	}
	lines := fixtureLines(t, ourLogs, "production-stack-session.log")
	r, _ = ParseLine(lines[1], FormatProductionStack)
	if p := r.Decision.Prediction; p.Source != "session" || p.Input != "session_id" {
		t.Errorf("session: %+v", p)
	}
	r, _ = ParseLine(lines[2], FormatProductionStack)
	if p := r.Decision.Prediction; p.Source != "none" {
		t.Errorf("session id None: %+v", p)
	}
	if d := r.Decision; d.TS != time.Unix(1754038801, 5e8).UTC() {
		t.Errorf("ts %v", d.TS)
	}
}

// Format auto over one file that mixes every format, real router noise and
// garbage: each line goes to the right adapter or is counted bad.
func TestAutoDetectMixedFile(t *testing.T) {
	const (
		nd = "S " + SkipNotDecision
		nr = "S " + SkipNoRequestID
	)
	want := []string{
		// kvtop audit
		"D kvtop r-1 w1", "O kvtop r-1", "D kvtop r-2 w0", "O kvtop r-2", "O kvtop r-3", "D kvtop r-3 w1",
		"S " + SkipUnknownKind, "D kvtop 12345 w2",
		// Dynamo JSONL (real), then [ROUTING] records
		nd, nd, nd, nd, nd, nd, nd, nd,
		"D dynamo 8372eac7-5f43-4d76-beca-0a94cfb311d0 worker_7587890043311737930",
		"D dynamo req-2 worker_1718573674787700186/dp2", "D dynamo req-3 worker_42", nr,
		"D dynamo req-5 worker_42/dp1", "D dynamo req-6 worker_43",
		// Dynamo text (real)
		nd, nd, nr, nd, nd, nr,
		nd, nd, nr, "B dynamo [ROUTING]: worker_id is not a number (redacted?)",
		// production-stack (real)
		nd, "D production-stack 597e3325-c6c9-4d1b-9644-f792ce76b82c https://vllm-node05.code.example.rocks/qwen3-30b-a3b", nd,
		// EPP (real, then constructed)
		nd, nd, nd, nd,
		"D llm-d 710a2ee7-fb67-4151-a3b9-56ad753fb55a 10.129.2.41:8000",
		"D llm-d e3df4a6e-8d95-42bf-917b-0ed21ca756b6 10.244.0.12", nd, nr, "D llm-d abc-5 default/vllm-0",
		// garbage
		"B not text (control characters)",
		"B unrecognized line (not a log line of a supported router)",
		"B JSON object of no known format (no kind, schema, msg or message)",
		// sgl-router (real): recognizable router lines, not decisions
		nd, nd, nd, nd, nd, nd, nd,
		// Dynamo traces, SMG text and JSON (constructed)
		"D dynamo-trace 8f0c2d7e-1b9a-4c55-9a61-0d2f4e7b3c11 worker_7587888751432", "O dynamo-trace req-plain-3",
		"D smg chatcmpl-T1 http://10.0.0.7:8000", "D smg chatcmpl-J7 http://10.0.0.9:8000",
		"S " + SkipBlank,
	}
	lines := fixtureLines(t, ourLogs, "mixed.log")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, %d expectations", len(lines), len(want))
	}
	for i, l := range lines {
		if got := summary(ParseLine(l, FormatAuto)); got != want[i] {
			t.Errorf("line %d: got %q, want %q", i+1, got, want[i])
		}
	}
}

// Lines may carry prompt text (request bodies in debug logs): it must never
// reach an observation or an error message.
func TestNoPromptTextLeaks(t *testing.T) {
	const secret = "SECRET-PROMPT-TEXT"
	lines := []struct{ line, format string }{
		{`{"kind":"decision","request_id":"r-1","chosen":"w1","prompt":"SECRET-PROMPT-TEXT","messages":[{"content":"SECRET-PROMPT-TEXT"}]}`, FormatKvtop},
		{`{"kind":"outcome","request_id":"r-1","prompt_tokens":"SECRET-PROMPT-TEXT"}`, FormatKvtop},
		{`{"kind":"decision","ts":"SECRET-PROMPT-TEXT","request_id":"r-1"}`, FormatKvtop},
		{`{"kind":"decision","request_id":"r-1","prediction":{"matched":1e999}}`, FormatKvtop},
		{`{"level":"info","ts":"2026-04-23T02:14:43Z","msg":"Request handled","x-request-id":"r-2","endpoint":"10.0.0.1:8000","body":"SECRET-PROMPT-TEXT"}`, FormatLLMD},
		{`{"time":"2026-08-20T00:00:02Z","message":"[ROUTING] Best: worker_1 dp_rank=0 with 1/2 blocks overlap","request_id":"r-3","prompt":"SECRET-PROMPT-TEXT"}`, FormatDynamo},
		{`2026-08-20T04:00:30Z DEBUG x: [ROUTING] Best: worker_SECRET-PROMPT-TEXT dp_rank=0 with 1/2 blocks overlap request_id=r`, FormatDynamo},
		{`SECRET-PROMPT-TEXT SECRET-PROMPT-TEXT`, FormatAuto},
		{`{"SECRET-PROMPT-TEXT":1}`, FormatAuto},
		{`{"kind":"decision","request_id":"r-1","chosen":"SECRET-PROMPT-TEXT` + "\x00", FormatAuto},
		// Dynamo's payload records hold the request and the response.
		{`{"timestamp":1,"event":{"schema":"dynamo.request.trace.v1","event_type":"request_payload","event_time_unix_ms":1,"payload":{"request_id":"r","request":{"messages":[{"content":"SECRET-PROMPT-TEXT"}]}}}}`, FormatAuto},
		{`{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{"request_id":"r","x_request_id":"SECRET-PROMPT-TEXT","ttft_ms":"SECRET-PROMPT-TEXT"}}`, FormatDynamoTrace},
		{`{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{"request_id":"r","x_request_id":"SECRET-PROMPT-TEXT","finish_reason_metadata":{"finish_reason":"SECRET-PROMPT-TEXT and more words"},"worker":{"prefill_worker_id":1}}}`, FormatDynamoTrace},
		// SMG: the sticky key (a conversation id) is not kept.
		{`2026-08-22 13:07:05 DEBUG http_request{request_id="r"}: smg::policies::registry: x.rs:1: Sticky routing decision source="header" key="SECRET-PROMPT-TEXT" branch="vacant" worker="http://h:1" model_id="m"`, FormatSMG},
		{`{"timestamp":"2026-08-22 13:07:05","level":"DEBUG","message":"Cache-aware selection","index":"tree","branch":"tree_match","worker":"http://h:1","matched_ratio":"SECRET-PROMPT-TEXT","span":{"request_id":"r","uri":"/v1/x?q=SECRET-PROMPT-TEXT"}}`, FormatSMG},
	}
	for i, tc := range lines {
		r, err := ParseLine([]byte(tc.line), tc.format)
		var text string
		if err != nil {
			text = err.Error()
		}
		if r.Decision != nil {
			text += fmt.Sprintf("%+v %+v", *r.Decision, r.Decision.Prediction)
		}
		if r.Outcome != nil {
			text += fmt.Sprintf("%+v", *r.Outcome)
		}
		if strings.Contains(text, secret) || strings.Contains(text, "1e999") {
			t.Errorf("line %d leaks line content: %s", i+1, text)
		}
		if err == nil && r.Decision == nil && r.Outcome == nil && !r.Skip {
			t.Errorf("line %d: empty result", i+1)
		}
	}
}

func TestParseLineFormats(t *testing.T) {
	if _, err := ParseLine([]byte(`{"kind":"decision","request_id":"r"}`), "jsonl"); err == nil || !strings.Contains(err.Error(), `"jsonl"`) {
		t.Errorf("unknown format: %v", err)
	}
	for _, f := range []string{"", "auto", "kvtop", "dynamo", "dynamo-trace", "smg", "llm-d", "production-stack"} {
		if !ValidFormat(f) {
			t.Errorf("ValidFormat(%q) = false", f)
		}
		if r, err := ParseLine([]byte(" \t\r"), f); err != nil || r.Reason != SkipBlank {
			t.Errorf("%s: blank line: %+v %v", f, r, err)
		}
	}
}

func TestDynamoWorkerNames(t *testing.T) {
	if got := dynamoWorker("7", 2); got != "worker_7/dp2" {
		t.Errorf("dynamoWorker = %q", got)
	}
	if got := dynamoWorker("7", 0); got != "worker_7" {
		t.Errorf("dynamoWorker rank 0 = %q", got)
	}
}
