package decisions

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// simLines is a 16-candidate decision as `kvtop sim --workers 16` writes it.
const simLines = "testdata/sim-decision-16.jsonl"

// compareDecoders runs the fast path and encoding/json on one line: when the
// fast path accepts, encoding/json must accept too and give the same record;
// when it declines, it must leave the record zero (the caller then decodes
// into it).
func compareDecoders(t testing.TB, line []byte) (accepted bool) {
	t.Helper()
	var fast, slow kvRecord
	ok := decodeKvtop(line, &fast)
	err := json.Unmarshal(line, &slow)
	switch {
	case ok && err != nil:
		t.Fatalf("fast path accepted a line encoding/json refuses (%v): %q", err, line)
	case ok && !reflect.DeepEqual(fast, slow):
		t.Fatalf("fast path disagrees with encoding/json on %q:\nfast %s\njson %s", line, dump(fast), dump(slow))
	case !ok && !reflect.DeepEqual(fast, kvRecord{}):
		t.Fatalf("fast path declined %q but left %s", line, dump(fast))
	}
	if ok {
		// The ids' shortcut (plainString) gives what encoding/json gives.
		for _, raw := range [][]byte{fast.RequestID, fast.AttemptID, fast.RetryOf, fast.Error} {
			if s, plain := plainString(raw); plain {
				var want string
				if json.Unmarshal(raw, &want) != nil || s != want {
					t.Fatalf("plainString(%q) = %q, encoding/json %q", raw, s, want)
				}
			}
		}
	}
	return ok
}

// dump shows a record with its pointers followed (%+v shows addresses).
func dump(rec kvRecord) string {
	b, _ := json.Marshal(rec)
	return string(b)
}

// jsonFixtureLines is every JSON object line of the decision-log fixtures
// (ours, the real captures, the simulator's).
func jsonFixtureLines(t testing.TB) [][]byte {
	t.Helper()
	var files []string
	for _, dir := range []string{ourLogs, realLogs} {
		m, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	files = append(files, simLines)
	var lines [][]byte
	for _, f := range files {
		if strings.HasSuffix(f, ".md") {
			continue
		}
		for _, l := range fixtureLines(t, filepath.Dir(f), filepath.Base(f)) {
			if l = bytes.TrimSpace(l); len(l) > 0 && l[0] == '{' {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) < 40 {
		t.Fatalf("only %d JSON fixture lines", len(lines))
	}
	return lines
}

// Hand-written lines the fast path must decode exactly (accept) or hand to
// encoding/json (decline).
var (
	hostileAccept = []string{
		// Escapes, surrogate pairs, a lone surrogate, invalid UTF-8 (U+FFFD), non-ASCII.
		`{"kind":"decision","request_id":"r\u00e9-\ud83d\ude00","chosen":"w\"1\\\/\b\f\n\r\t","candidates":[{"worker":"\u00e9\ud83d"}]}`,
		"{\"kind\":\"decision\",\"request_id\":\"r\xff\",\"chosen\":\"w\xff\xfe1\",\"reason\":\"\xed\xa0\x80\",\"model\":\"wörker-日本\",\"prefix\":\"\\ud800x\"}",
		// Unknown keys with any value, nested, with escapes and odd keys.
		"{\"kind\":\"decision\",\"request_id\":\"r\",\"x\":{\"a\":[1,{\"b\":\"\\u0041\\\"]}\"},[],{}],\"c\":-0.5e+10,\"d\":true,\"e\":false,\"f\":null,\"ключ\":\"ü\xff\",\"\\u006bind\":1},\"kinds\":\"x\",\"request-id\":2,\"\":[]}",
		`{"kind":"decision","request_id":"r","prediction":{"source":"s","future":{"kind":"x","matched":[1]}},"load":{"x":[{"value":1}],"kind":"q"},"candidates":[{"worker":"w","extra":{"score":"x"}}]}`,
		// Nulls everywhere (RawMessage gets the bytes null).
		`{"kind":"outcome","ts":null,"request_id":"r","attempt_id":null,"router":null,"worker":null,"http_status":null,"prompt_tokens":null,"cached_tokens":null,"queue_ms":null,"ttft_ms":null,"e2e_ms":null,"finish_reason":null,"done":null,"error":null,"retry_of":null,"prediction":null,"load":null,"candidates":null,"msg":null,"message":null}`,
		`{"kind":"decision","request_id":"r","prediction":{"source":null,"matched":null,"total":null,"block_size":null,"age_ms":null},"load":{"kind":null,"value":null,"scope":null},"candidates":[null,{"worker":null,"score":null,"matched":null,"load":null},{}]}`,
		// Empty candidates (empty, not nil), empty objects, whitespace everywhere.
		`{"kind":"decision","request_id":"r","candidates":[],"prediction":{},"load":{}}`,
		" \t\r\n{ \"kind\" : \"decision\" ,\n\t\"request_id\" : \"r\" , \"candidates\" : [ { } , null ,{ \"worker\" :\"w\" , \"score\" : 1 } ] , \"x\" : [ 1 , [ ] , { } ] ,\"attempt_id\" : { \"a\" : [ 1 , 2 ] } } \r\n",
		// Numbers: the whole grammar, big, tiny, exact.
		`{"kind":"outcome","request_id":"r","http_status":0,"prompt_tokens":-0,"cached_tokens":1E+5,"queue_ms":1.5e-3,"ttft_ms":123456789012345678901234567890,"e2e_ms":1.7976931348623157e308}`,
		`{"kind":"outcome","request_id":"r","queue_ms":4.9e-324,"ttft_ms":0.1000000000000000055511151231257827,"e2e_ms":-12.50e0}`,
		// RawMessages keep their bytes as written.
		`{"kind":"outcome","request_id":{"a" : [1, "\u0041"]},"attempt_id":true,"error":{"message":"x"},"retry_of":12.50,"msg":"m","message":[]}`,
		`{"kind":"outcome","request_id":"r\u0031","attempt_id":-1e3,"error":"upstream \"overloaded\"","retry_of":false,"done":true}`,
		`{"kind":"outcome","request_id":"r","done":false}`,
		`{}`,
	}
	hostileDecline = []string{
		// Keys that fold to a field name (encoding/json fills the field).
		`{"Kind":"decision","request_id":"r"}`,
		`{"kind":"decision","KIND":"outcome","request_id":"r"}`,
		`{"kind":"decision","request_id":"r","prediction":{"Matched":3}}`,
		`{"kind":"decision","request_id":"r","load":{"Value":3}}`,
		`{"kind":"decision","request_id":"r","candidates":[{"WORKER":"w"}]}`,
		`{"kind":"decision","Request_ID":"r"}`,
		`{"\u006bind":"decision","request_id":"r"}`,
		"{\"kind\":\"decision\",\"request_id\":\"r\",\"\u212aind\":\"x\"}",
		"{\"kind\":\"decision\",\"request_id\":\"r\",\"ключ\":1}",
		// Duplicate keys (last wins, objects merge).
		`{"kind":"decision","kind":"outcome","request_id":"r"}`,
		`{"kind":"decision","request_id":"r","prediction":{"matched":1},"prediction":{"total":2}}`,
		`{"kind":"decision","request_id":"r","candidates":[{"worker":"a","score":1}],"candidates":[{"worker":"b"}]}`,
		`{"kind":"decision","request_id":"r","candidates":[{"score":1,"score":2}]}`,
		`{"kind":"outcome","request_id":"r","request_id":"s"}`,
		// Numbers strconv refuses, and ones JSON does not allow.
		`{"kind":"outcome","request_id":"r","http_status":1e999}`,
		`{"kind":"outcome","request_id":"r","queue_ms":-1e400}`,
		`{"kind":"outcome","request_id":"r","queue_ms":01}`,
		`{"kind":"outcome","request_id":"r","queue_ms":1.}`,
		`{"kind":"outcome","request_id":"r","queue_ms":+1}`,
		`{"kind":"outcome","request_id":"r","queue_ms":.5}`,
		`{"kind":"outcome","request_id":"r","queue_ms":1e}`,
		`{"kind":"outcome","request_id":"r","queue_ms":-}`,
		`{"kind":"outcome","request_id":"r","queue_ms":0x10}`,
		`{"kind":"outcome","request_id":"r","queue_ms":NaN}`,
		`{"kind":"outcome","request_id":"r","x":01}`,
		// Bad strings and structure, anywhere.
		`{"kind":"decision","request_id":"r","chosen":"bad \x escape"}`,
		`{"kind":"decision","request_id":"r","x":"bad \u12 escape"}`,
		"{\"kind\":\"decision\",\"request_id\":\"r\",\"x\":\"ctl \x01\"}",
		`{"kind":"decision","request_id":"r","chosen":"w1`,
		`{"kind":"decision","request_id":"r",}`,
		`{"kind":"decision","request_id":"r","x":[1,]}`,
		`{"kind":"decision","request_id":"r","x":{"a"}}`,
		`{"kind":"decision","request_id":"r","done":tru}`,
		`{"kind":"decision","request_id":"r","prediction":nul}`,
		`{"kind":"decision" "request_id":"r"}`,
		`{"kind":"decision","request_id":"r"`,
		// Data after the object.
		`{"kind":"decision","request_id":"r"} x`,
		`{"kind":"decision","request_id":"r"}{}`,
		`{"kind":"decision","request_id":"r"},`,
		// Values of the wrong type.
		`{"kind":7,"request_id":"r"}`,
		`{"kind":"decision","request_id":"r","chosen":true}`,
		`{"kind":"decision","request_id":"r","prediction":"x"}`,
		`{"kind":"decision","request_id":"r","prediction":[]}`,
		`{"kind":"decision","request_id":"r","load":[1]}`,
		`{"kind":"decision","request_id":"r","candidates":{}}`,
		`{"kind":"decision","request_id":"r","candidates":[1]}`,
		`{"kind":"decision","request_id":"r","candidates":"w1"}`,
		`{"kind":"decision","request_id":"r","prediction":{"matched":"12"}}`,
		`{"kind":"outcome","request_id":"r","done":"yes"}`,
		`{"kind":"outcome","request_id":"r","done":1}`,
		// Not an object; nested past maxSkipDepth.
		`[1,2]`, `null`, `"decision"`, ``, ` `,
		`{"kind":"decision","request_id":"r","x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	}
)

func TestDecodeKvtopMatchesEncodingJSON(t *testing.T) {
	lines := jsonFixtureLines(t)
	for _, l := range lines {
		compareDecoders(t, l)
	}
	// The fast path takes every normal kvtop line (otherwise it is none).
	for _, f := range []string{filepath.Join(ourLogs, "kvtop-audit.jsonl"), simLines} {
		for i, l := range fixtureLines(t, filepath.Dir(f), filepath.Base(f)) {
			if !compareDecoders(t, l) {
				t.Errorf("%s line %d: declined", f, i+1)
			}
		}
	}
	for _, l := range hostileAccept {
		if !compareDecoders(t, []byte(l)) {
			t.Errorf("declined %q", l)
		}
	}
	for _, l := range hostileDecline {
		if compareDecoders(t, []byte(l)) {
			t.Errorf("accepted %q", l)
		}
	}
}

// What the hostile lines decode to, spelled out: encoding/json's own
// answers, which the differential test holds the fast path to.
func TestDecodeKvtopHostileValues(t *testing.T) {
	var rec kvRecord
	if !decodeKvtop([]byte(hostileAccept[1]), &rec) {
		t.Fatal("declined")
	}
	if rec.Chosen != "w\uFFFD\uFFFD1" || rec.Reason != "\uFFFD\uFFFD\uFFFD" || rec.Model != "wörker-日本" || rec.Prefix != "\uFFFDx" {
		t.Errorf("invalid UTF-8 and surrogates: %q %q %q %q", rec.Chosen, rec.Reason, rec.Model, rec.Prefix)
	}
	rec = kvRecord{}
	if !decodeKvtop([]byte(hostileAccept[4]), &rec) {
		t.Fatal("declined")
	}
	if string(rec.Msg) != "null" || string(rec.Error) != "null" || rec.Done != nil || rec.Candidates != nil || rec.QueueMS != nil {
		t.Errorf("nulls: %s", dump(rec))
	}
	rec = kvRecord{}
	if !decodeKvtop([]byte(hostileAccept[6]), &rec) {
		t.Fatal("declined")
	}
	if rec.Candidates == nil || len(rec.Candidates) != 0 || rec.Prediction == nil || rec.Load == nil {
		t.Errorf("empty candidates and objects: %s", dump(rec))
	}
	rec = kvRecord{}
	if !decodeKvtop([]byte(hostileAccept[7]), &rec) {
		t.Fatal("declined")
	}
	if string(rec.AttemptID) != `{ "a" : [ 1 , 2 ] }` || len(rec.Candidates) != 3 || ptr(rec.Candidates[2].Score) != "1" {
		t.Errorf("whitespace: %s", dump(rec))
	}
	// RawMessages share one slice: appending to one must not touch the next.
	rec = kvRecord{}
	if !decodeKvtop([]byte(hostileAccept[11]), &rec) {
		t.Fatal("declined")
	}
	_ = append(rec.RequestID, "xxxxxxxx"...)
	if string(rec.AttemptID) != "-1e3" || string(rec.Error) != `"upstream \"overloaded\""` {
		t.Errorf("raw values: %s %s", rec.AttemptID, rec.Error)
	}
}

// FuzzDecodeKvtop holds the fast path to encoding/json on arbitrary lines.
// Seeds: every JSON fixture line and the hostile lines (also committed in
// testdata/fuzz/FuzzDecodeKvtop).
func FuzzDecodeKvtop(f *testing.F) {
	for _, l := range jsonFixtureLines(f) {
		f.Add(l)
	}
	for _, l := range append(append([]string{}, hostileAccept...), hostileDecline...) {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		compareDecoders(t, line)
	})
}

// ParseLine takes the fast path for a normal line in both formats that read
// kvtop records. The measure is allocations against encoding/json's on the
// same line (a count, not a time: the same on any machine). The fast path
// makes ~13, json over 100; the bound is loose because under -race
// sync.Pool drops a quarter of its Puts, so the decoder's buffers are
// sometimes made again (CI saw 22).
func TestParseLineUsesFastPath(t *testing.T) {
	line := fixtureLines(t, "testdata", "sim-decision-16.jsonl")[0]
	slow := testing.AllocsPerRun(20, func() {
		var rec kvRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
	})
	for _, format := range []string{FormatKvtop, FormatAuto} {
		var r Result
		var err error
		n := testing.AllocsPerRun(20, func() { r, err = ParseLine(line, format) })
		if err != nil || r.Decision == nil || len(r.Decision.Candidates) != 16 {
			t.Fatalf("%s: %+v, %v", format, r, err)
		}
		if n > slow/3 {
			t.Errorf("%s: %.0f allocations a line against encoding/json's %.0f: not the fast path", format, n, slow)
		}
	}
}

func TestSimDecisionFixture(t *testing.T) {
	// The benchmark's line must stay what the simulator writes: 16
	// candidates, no prompt text.
	data, err := os.ReadFile(simLines)
	if err != nil {
		t.Fatal(err)
	}
	var rec kvRecord
	if err := json.Unmarshal(bytes.TrimSpace(data), &rec); err != nil || rec.Kind != "decision" || len(rec.Candidates) != 16 {
		t.Fatalf("%s: %v, kind %q, %d candidates", simLines, err, rec.Kind, len(rec.Candidates))
	}
}
