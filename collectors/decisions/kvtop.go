package decisions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/kvtop/kvtop/collectors"
)

// kvRecord is one kvtop audit record (PROTOCOLS.md §4), decision or outcome.
// Unknown fields are ignored. Numbers are read as float64 so that 320 and
// 320.0 both work; ids accept strings or numbers.
type kvRecord struct {
	Kind          string          `json:"kind"`
	TS            string          `json:"ts"`
	RequestID     json.RawMessage `json:"request_id"`
	AttemptID     json.RawMessage `json:"attempt_id"`
	Router        string          `json:"router"`
	RouterVersion string          `json:"router_version"`
	Model         string          `json:"model"`
	Pool          string          `json:"pool"`
	Endpoint      string          `json:"endpoint"`
	Prediction    *kvPrediction   `json:"prediction"`
	Chosen        string          `json:"chosen"`
	Reason        string          `json:"reason"`
	Load          *kvLoad         `json:"load"`
	Prefix        string          `json:"prefix"`
	Candidates    []kvCandidate   `json:"candidates"`

	Worker       string          `json:"worker"`
	HTTPStatus   *float64        `json:"http_status"`
	PromptTokens *float64        `json:"prompt_tokens"`
	CachedTokens *float64        `json:"cached_tokens"`
	QueueMS      *float64        `json:"queue_ms"`
	TTFTMS       *float64        `json:"ttft_ms"`
	E2EMS        *float64        `json:"e2e_ms"`
	FinishReason string          `json:"finish_reason"`
	Done         *bool           `json:"done"`
	Error        json.RawMessage `json:"error"`
	RetryOf      json.RawMessage `json:"retry_of"`

	// A client-side observer's (kvtop tap, PROTOCOLS.md §4).
	Observer     string   `json:"observer"`
	End          string   `json:"end"`
	TTFBMS       *float64 `json:"ttfb_ms"`
	MaxGapMS     *float64 `json:"max_gap_ms"`
	Breaks       *float64 `json:"breaks"`
	PromptChars  *float64 `json:"prompt_chars"`
	OutputTokens *float64 `json:"output_tokens"`
	ClientSlow   *bool    `json:"client_slow"`

	// Present only in other loggers' records: tells auto detection that a
	// "kind" key belongs to a zap/tracing line, not to a kvtop record.
	Msg     json.RawMessage `json:"msg"`
	Message json.RawMessage `json:"message"`
}

type kvPrediction struct {
	Source    string   `json:"source"`
	Input     string   `json:"input"`
	Units     string   `json:"units"`
	Matched   *float64 `json:"matched"`
	Total     *float64 `json:"total"`
	Owner     string   `json:"owner"`
	BlockSize *float64 `json:"block_size"`
	AgeMS     *float64 `json:"age_ms"`
}

type kvLoad struct {
	Kind  string   `json:"kind"`
	Value *float64 `json:"value"`
	Scope string   `json:"scope"`
}

type kvCandidate struct {
	Worker  string   `json:"worker"`
	Score   *float64 `json:"score"`
	Matched *float64 `json:"matched"`
	Load    *float64 `json:"load"`
}

// parseKvtop reads a line that must be a kvtop audit record.
func parseKvtop(line []byte) (Result, error) {
	if line[0] != '{' {
		return Result{}, errors.New("not JSON (kvtop audit lines are JSON objects)")
	}
	var rec kvRecord
	if !decodeKvtop(line, &rec) {
		if err := json.Unmarshal(line, &rec); err != nil {
			return Result{}, jsonError(err)
		}
	}
	if rec.Kind == "" {
		return Result{}, errors.New("missing kind")
	}
	return rec.result()
}

// tryKvtop is auto detection's fast path: ok reports that the line is a
// kvtop record (a top-level string "kind" and no logger message), in which
// case r and err are final.
func tryKvtop(line []byte) (r Result, ok bool, err error) {
	var rec kvRecord
	// Decode errors are reported by the generic path, which also
	// recognizes other loggers' records.
	if !decodeKvtop(line, &rec) && json.Unmarshal(line, &rec) != nil {
		return Result{}, false, nil
	}
	if rec.Kind == "" || rec.Msg != nil || rec.Message != nil {
		return Result{}, false, nil
	}
	r, err = rec.result()
	return r, true, err
}

func (rec *kvRecord) result() (Result, error) {
	switch rec.Kind {
	case "decision", "outcome":
	default:
		// A newer kvtop may add record kinds: not an error.
		return skip(SkipUnknownKind), nil
	}
	var ts time.Time
	if rec.TS != "" {
		t, err := time.Parse(time.RFC3339Nano, rec.TS)
		if err != nil {
			return Result{}, errors.New("ts: not an RFC3339 time")
		}
		ts = t
	}
	reqID, err := idField("request_id", rec.RequestID)
	if err != nil {
		return Result{}, err
	}
	if reqID == "" {
		return Result{}, fmt.Errorf("%s without request_id", rec.Kind)
	}
	attempt, err := idField("attempt_id", rec.AttemptID)
	if err != nil {
		return Result{}, err
	}
	if rec.Kind == "decision" {
		d, err := rec.decision()
		if err != nil {
			return Result{}, err
		}
		d.TS, d.RequestID, d.AttemptID = ts, reqID, attempt
		return Result{Decision: d}, nil
	}
	o, err := rec.outcome()
	if err != nil {
		return Result{}, err
	}
	o.TS, o.RequestID, o.AttemptID = ts, reqID, attempt
	return Result{Outcome: o}, nil
}

func (rec *kvRecord) decision() (*collectors.Decision, error) {
	d := &collectors.Decision{
		Router:        rec.Router,
		RouterVersion: rec.RouterVersion,
		Model:         rec.Model,
		Pool:          rec.Pool,
		Endpoint:      rec.Endpoint,
		Chosen:        rec.Chosen,
		Reason:        rec.Reason,
		Prefix:        rec.Prefix,
		Format:        FormatKvtop,
	}
	if p := rec.Prediction; p != nil {
		bs, err := wholeNumber("prediction.block_size", p.BlockSize)
		if err != nil {
			return nil, err
		}
		d.Prediction = &collectors.Prediction{
			Source: p.Source, Input: p.Input, Units: p.Units,
			Matched: p.Matched, Total: p.Total, Owner: p.Owner, AgeMS: p.AgeMS,
		}
		if bs != nil {
			d.Prediction.BlockSize = *bs
		}
	}
	if l := rec.Load; l != nil {
		d.Load = &collectors.Load{Kind: l.Kind, Value: l.Value, Scope: l.Scope}
	}
	if len(rec.Candidates) > 0 {
		d.Candidates = make([]collectors.Candidate, len(rec.Candidates))
		for i, c := range rec.Candidates {
			d.Candidates[i] = collectors.Candidate{Worker: c.Worker, Score: c.Score, Matched: c.Matched, Load: c.Load}
		}
	}
	return d, nil
}

func (rec *kvRecord) outcome() (*collectors.Outcome, error) {
	o := &collectors.Outcome{
		Worker:       rec.Worker,
		QueueMS:      rec.QueueMS,
		TTFTMS:       rec.TTFTMS,
		E2EMS:        rec.E2EMS,
		FinishReason: rec.FinishReason,
		Done:         rec.Done, // missing stays nil: unknown, not false
		Format:       FormatKvtop,
	}
	status, err := wholeNumber("http_status", rec.HTTPStatus)
	if err != nil {
		return nil, err
	}
	if status != nil {
		o.HTTPStatus = *status
	}
	if o.PromptTokens, err = wholeNumber("prompt_tokens", rec.PromptTokens); err != nil {
		return nil, err
	}
	if o.CachedTokens, err = wholeNumber("cached_tokens", rec.CachedTokens); err != nil {
		return nil, err
	}
	if o.RetryOf, err = idField("retry_of", rec.RetryOf); err != nil {
		return nil, err
	}
	o.Error = errorField(rec.Error)
	if o.OutputTokens, err = wholeNumber("output_tokens", rec.OutputTokens); err != nil {
		return nil, err
	}
	if o.Breaks, err = wholeNumber("breaks", rec.Breaks); err != nil {
		return nil, err
	}
	if o.PromptChars, err = wholeNumber("prompt_chars", rec.PromptChars); err != nil {
		return nil, err
	}
	o.Observer, o.End = rec.Observer, rec.End
	o.TTFBMS, o.MaxGapMS = rec.TTFBMS, rec.MaxGapMS
	o.ClientSlow = rec.ClientSlow != nil && *rec.ClientSlow
	return o, nil
}

// idField normalizes an id that may be a JSON string or number ("1", 1 and
// 1.0 all give "1"); null or absent gives "".
func idField(name string, raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		if s, ok := plainString(raw); ok {
			return s, nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: bad string", name)
		}
		return s, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return string(raw), nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.FormatInt(int64(f), 10), nil
		}
		return string(bytes.TrimRight(raw, " ")), nil
	}
	return "", fmt.Errorf("%s: want string or number", name)
}

// plainString returns a JSON string literal's text when it needs no
// decoding (printable ASCII, no escapes): what json.Unmarshal gives, without
// its allocations.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	for _, c := range in {
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return "", false
		}
	}
	return string(in), true
}

// wholeNumber converts a count that may be written 320 or 320.0.
func wholeNumber(name string, f *float64) (*int, error) {
	if f == nil {
		return nil, nil
	}
	if *f != math.Trunc(*f) || *f < 0 || *f > math.MaxInt32 {
		return nil, fmt.Errorf("%s: not a whole non-negative number", name)
	}
	n := int(*f)
	return &n, nil
}

// errorField reads the outcome's error: a string, null, or (tolerated) an
// object with a message.
func errorField(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		if s, ok := plainString(raw); ok {
			return s
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '{':
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Message != "" {
			return e.Message
		}
		return "error"
	case 'n', 'f': // null, false
		return ""
	}
	return "error"
}
