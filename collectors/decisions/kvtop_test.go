package decisions

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/tap"
)

func TestKvtopAuditEveryField(t *testing.T) {
	lines := fixtureLines(t, ourLogs, "kvtop-audit.jsonl")
	for _, format := range []string{FormatKvtop, FormatAuto} {
		t.Run(format, func(t *testing.T) {
			res := make([]Result, len(lines))
			for i, l := range lines {
				r, err := ParseLine(l, format)
				if err != nil {
					t.Fatalf("line %d: %v", i+1, err)
				}
				res[i] = r
			}

			// Line 1: the full decision of PROTOCOLS.md §4, unknown fields ignored.
			d := res[0].Decision
			if d == nil {
				t.Fatalf("line 1: %+v", res[0])
			}
			if !d.TS.Equal(mustTime(t, "2026-09-05T10:00:00.123Z")) || d.RequestID != "r-1" || d.AttemptID != "1" ||
				d.Router != "r0" || d.RouterVersion != "1d10e71" || d.Model != "qwen3-8b" || d.Pool != "default" ||
				d.Endpoint != "/v1/chat/completions" || d.Chosen != "w1" || d.Reason != "load-balance" ||
				d.Prefix != "9f2c4e1a0b7d3c55" || d.Format != "kvtop" {
				t.Errorf("decision header: %+v", d)
			}
			p := d.Prediction
			if p == nil || p.Source != "kv-events" || p.Input != "tokens" || p.Units != "blocks" || ptr(p.Matched) != "12" ||
				ptr(p.Total) != "20" || p.Owner != "w2" || p.BlockSize != 16 || ptr(p.AgeMS) != "350" {
				t.Errorf("prediction: %+v", p)
			}
			if l := d.Load; l == nil || l.Kind != "queue" || ptr(l.Value) != "7" || l.Scope != "router-local" {
				t.Errorf("load: %+v", d.Load)
			}
			if len(d.Candidates) != 2 || d.Candidates[0].Worker != "w2" || ptr(d.Candidates[0].Score) != "0.8" ||
				ptr(d.Candidates[0].Matched) != "12" || ptr(d.Candidates[0].Load) != "19" || d.Candidates[1].Worker != "w1" ||
				ptr(d.Candidates[1].Matched) != "0" {
				t.Errorf("candidates: %+v", d.Candidates)
			}

			// Line 2: the full outcome; a measured 0 stays 0, null stays empty.
			o := res[1].Outcome
			if o == nil {
				t.Fatalf("line 2: %+v", res[1])
			}
			if o.RequestID != "r-1" || o.AttemptID != "1" || o.Worker != "w1" || o.HTTPStatus != 200 ||
				iptr(o.PromptTokens) != "320" || iptr(o.CachedTokens) != "0" || ptr(o.QueueMS) != "40" ||
				ptr(o.TTFTMS) != "210" || ptr(o.E2EMS) != "2300" || o.FinishReason != "stop" ||
				o.Done == nil || !*o.Done || o.Error != "" || o.RetryOf != "" || o.Format != "kvtop" ||
				!o.TS.Equal(mustTime(t, "2026-09-05T10:00:01.020Z")) {
				t.Errorf("outcome: %+v", o)
			}

			// Line 3: numeric attempt_id, float counts, a character-match prediction.
			d = res[2].Decision
			if d == nil || d.AttemptID != "2" || d.Reason != "retry" || d.Prediction.Units != "chars" ||
				ptr(d.Prediction.Matched) != "812" || ptr(d.Prediction.Total) != "1024.5" || d.Load != nil ||
				!d.TS.Equal(mustTime(t, "2026-09-05T10:00:02Z")) {
				t.Errorf("line 3: %+v", d)
			}

			// Line 4: attempt 2.0 → "2", retry_of 1 → "1", counts as floats,
			// done and cached_tokens missing → unknown (nil), ts with offset.
			o = res[3].Outcome
			if o == nil || o.AttemptID != "2" || o.RetryOf != "1" || o.HTTPStatus != 503 || iptr(o.PromptTokens) != "1024" ||
				o.CachedTokens != nil || o.Done != nil || ptr(o.QueueMS) != "12.5" || o.TTFTMS != nil ||
				o.Error != "upstream overloaded" {
				t.Errorf("line 4: %+v", o)
			}
			if want := time.Date(2026, 9, 5, 8, 0, 2, 5e8, time.UTC); o != nil && !o.TS.Equal(want) {
				t.Errorf("line 4 ts = %v, want %v", o.TS, want)
			}

			// Line 5: done false is known false; cached_tokens null is unknown; no ts.
			o = res[4].Outcome
			if o == nil || o.Done == nil || *o.Done || o.CachedTokens != nil || !o.TS.IsZero() || o.AttemptID != "" {
				t.Errorf("line 5: %+v", o)
			}

			// Line 6: null prediction and load stay nil; nanosecond ts.
			d = res[5].Decision
			if d == nil || d.Prediction != nil || d.Load != nil || d.Candidates != nil || d.TS.Nanosecond() != 1 {
				t.Errorf("line 6: %+v", d)
			}

			// Line 7: a kind this kvtop does not know is skipped, not bad.
			if !res[6].Skip || res[6].Reason != SkipUnknownKind {
				t.Errorf("line 7: %+v", res[6])
			}

			// Line 8: a numeric request_id joins as its text.
			if d = res[7].Decision; d == nil || d.RequestID != "12345" || d.Prediction.Source != "none" {
				t.Errorf("line 8: %+v", res[7])
			}
		})
	}
}

func TestKvtopBadLines(t *testing.T) {
	lines := fixtureLines(t, ourLogs, "kvtop-bad.jsonl")
	// Per line: what format kvtop says, and what auto says when it differs.
	want := []struct{ kvtop, auto string }{
		{"D kvtop r-10 w1", ""},
		{"B not JSON (kvtop audit lines are JSON objects)", "B unrecognized line (not a log line of a supported router)"},
		{"B decision without request_id", ""},
		{"B ts: not an RFC3339 time", ""},
		{"B field prediction.matched: want number, got string", ""},
		{"B prompt_tokens: not a whole non-negative number", ""},
		{"B missing kind", "B JSON object of no known format (no kind, schema, msg or message)"},
		{"B not JSON: truncated", ""},
		{"B attempt_id: want string or number", ""},
		{"B field done: want boolean, got string", ""},
		{"O kvtop r-10", ""},
		{"B field kind: want string, got number", ""},
		{"B not JSON (kvtop audit lines are JSON objects)", "B unrecognized line (not a log line of a supported router)"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, %d expectations", len(lines), len(want))
	}
	for i, l := range lines {
		got := summary(ParseLine(l, FormatKvtop))
		if got != want[i].kvtop {
			t.Errorf("kvtop line %d: got %q, want %q", i+1, got, want[i].kvtop)
		}
		w := want[i].auto
		if w == "" {
			w = want[i].kvtop
		}
		if got := summary(ParseLine(l, FormatAuto)); got != w {
			t.Errorf("auto line %d: got %q, want %q", i+1, got, w)
		}
	}
}

func TestIDNormalization(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`"a-1"`, "a-1"}, {`1`, "1"}, {`1.0`, "1"}, {`-3`, "-3"}, {`1e3`, "1000"},
		{`18446744073709551615`, "18446744073709551615"}, {`null`, ""}, {``, ""},
	} {
		got, err := idField("attempt_id", []byte(tc.raw))
		if err != nil || got != tc.want {
			t.Errorf("idField(%s) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
	for _, raw := range []string{`true`, `{}`, `[1]`} {
		if _, err := idField("attempt_id", []byte(raw)); err == nil || !strings.Contains(err.Error(), "attempt_id") {
			t.Errorf("idField(%s): err %v, want one naming attempt_id", raw, err)
		}
	}
}

// A line kvtop tap writes (the real writer, tap.Record.AppendJSON) reads
// back as a client outcome with every figure, by the fast decoder and by
// encoding/json alike.
func TestKvtopClientOutcome(t *testing.T) {
	ttfb, ttft, gap := 12*time.Millisecond, 210*time.Millisecond, 1500*time.Millisecond
	arrived := time.Date(2026, 9, 5, 10, 0, 0, 0, time.UTC)
	r := &tap.Record{Tap: "t0", RequestID: "r-9", Arrived: arrived, Ended: arrived.Add(2 * time.Second),
		Endpoint: "/v1/chat/completions", Model: "m", Stream: true, PromptChars: ip(1234), PrefixFP: []string{"00ff"},
		PromptTokens: ip(320), CachedTokens: ip(0), OutputTokens: ip(57), Worker: "w1", HTTPStatus: 200,
		TTFB: &ttfb, TTFT: &ttft, Events: 58, MaxGap: &gap, Breaks: 1, End: tap.EndUpstreamClosed, ClientSlow: true}
	line := bytes.TrimSpace(r.AppendJSON(nil))
	var viaJSON kvRecord
	if err := json.Unmarshal(line, &viaJSON); err != nil {
		t.Fatal(err)
	}
	var fast kvRecord
	if !decodeKvtop(line, &fast) || !reflect.DeepEqual(fast, viaJSON) {
		t.Fatalf("fast decoder: %+v\nencoding/json: %+v", fast, viaJSON)
	}
	for _, format := range []string{FormatKvtop, FormatAuto} {
		res, err := ParseLine(line, format)
		o := res.Outcome
		if err != nil || o == nil {
			t.Fatalf("%s: %v %+v", format, err, res)
		}
		if o.Observer != "client" || o.End != "upstream_closed" || o.RequestID != "r-9" || o.AttemptID != "" || o.Worker != "w1" ||
			o.HTTPStatus != 200 || iptr(o.PromptTokens) != "320" || iptr(o.CachedTokens) != "0" || iptr(o.OutputTokens) != "57" ||
			ptr(o.TTFBMS) != "12" || ptr(o.TTFTMS) != "210" || ptr(o.E2EMS) != "2000" || ptr(o.MaxGapMS) != "1500" ||
			iptr(o.Breaks) != "1" || iptr(o.PromptChars) != "1234" || !o.ClientSlow || o.Done == nil || *o.Done ||
			!o.TS.Equal(arrived.Add(2*time.Second)) {
			t.Fatalf("%s: %+v", format, o)
		}
	}
}

func ip(v int) *int { return &v }
