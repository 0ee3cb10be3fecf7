// Package decisions follows router decision logs (files like `tail -F`, or
// stdin) and turns each line into Decision and Outcome observations.
//
// One adapter per log format, each in its own file: kvtop audit JSONL,
// NVIDIA Dynamo ([ROUTING] records, JSONL or text), Dynamo's request traces
// (request_end records: a decision and its outcome per line), the SGLang
// model gateway's cache-aware and sticky routing lines (text or JSON),
// llm-d / Gateway API EPP zap JSON ("Request handled") and the vLLM
// production-stack router's "Routing request … to …" lines. Format "auto"
// detects the format per line. A file whose name ends in .gz is read as
// gzip members (tail.go).
//
// Adapters copy named metadata fields only: no line content (which may carry
// prompt text in some routers' logs) ever reaches an observation or an error
// message.
package decisions

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/kvtop/kvtop/collectors"
)

// Formats a decision log can be read as.
const (
	FormatAuto            = "auto"
	FormatKvtop           = "kvtop"
	FormatDynamo          = "dynamo"
	FormatDynamoTrace     = "dynamo-trace"
	FormatSMG             = "smg"
	FormatLLMD            = "llm-d"
	FormatProductionStack = "production-stack"
)

// FormatNames lists the formats a source may name, for messages.
const FormatNames = "auto, kvtop, dynamo, dynamo-trace, smg, llm-d, production-stack"

// Reasons a valid line is skipped (Result.Reason).
const (
	SkipBlank       = "blank"
	SkipNotDecision = "not a decision"
	SkipNoRequestID = "no request id"
	SkipUnknownKind = "unknown kind"
)

// Result is what one line yields: a decision, an outcome, both (a Dynamo
// request trace is the decision and its outcome, for the same request), or
// a skip (a valid line that is not a decision, e.g. another log line of the
// router).
type Result struct {
	Decision *collectors.Decision
	Outcome  *collectors.Outcome
	Skip     bool
	Reason   string // why the line was skipped; one of the Skip* constants
}

// ValidFormat reports whether f names a format ParseLine accepts ("" is auto).
func ValidFormat(f string) bool {
	switch f {
	case "", FormatAuto, FormatKvtop, FormatDynamo, FormatDynamoTrace, FormatSMG, FormatLLMD, FormatProductionStack:
		return true
	}
	return false
}

// ParseLine turns one log line (without its newline) into a Result, or a
// bad-line error whose message says why without quoting the line.
func ParseLine(line []byte, format string) (Result, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return skip(SkipBlank), nil
	}
	switch format {
	case "", FormatAuto:
		return parseAuto(line)
	case FormatKvtop:
		return parseKvtop(line)
	case FormatDynamo:
		if line[0] == '{' {
			obj, err := decodeObject(line)
			if err != nil {
				return Result{}, err
			}
			return parseDynamoJSON(obj)
		}
		return parseDynamoText(line)
	case FormatDynamoTrace:
		if line[0] != '{' {
			return Result{}, errors.New("dynamo-trace: not JSON (trace lines are JSON objects)")
		}
		obj, err := decodeObject(line)
		if err != nil {
			return Result{}, err
		}
		return parseDynamoTrace(obj)
	case FormatSMG:
		if line[0] == '{' {
			obj, err := decodeObject(line)
			if err != nil {
				return Result{}, err
			}
			return parseSMGJSON(obj)
		}
		return parseSMGText(line)
	case FormatLLMD:
		if line[0] == '{' {
			obj, err := decodeObject(line)
			if err != nil {
				return Result{}, err
			}
			return parseLLMD(obj)
		}
		return otherText(line)
	case FormatProductionStack:
		return parseProductionStack(line)
	}
	return Result{}, fmt.Errorf("unknown format %q", format)
}

// parseAuto detects the format of one line: JSON with `kind` is kvtop, a
// `schema` of Dynamo's (bare or in a file sink's {timestamp, event}) a
// Dynamo trace, JSON with `message` SMG (by its messages or its target) or
// else Dynamo, zap JSON with `msg` is llm-d; text is production-stack,
// SMG or Dynamo by its marker words.
func parseAuto(line []byte) (Result, error) {
	if line[0] == '{' {
		// Cheap pre-check keeps the kvtop path to a single decode.
		if bytes.Contains(line, []byte(`"kind"`)) {
			if r, ok, err := tryKvtop(line); ok {
				return r, err
			}
		}
		obj, err := decodeObject(line)
		if err != nil {
			return Result{}, err
		}
		switch {
		case isDynamoTrace(obj):
			return parseDynamoTrace(obj)
		case has(obj, "msg"):
			return parseLLMD(obj)
		case isSMGJSON(obj):
			return parseSMGJSON(obj)
		case has(obj, "message") || has(obj, "fields"):
			return parseDynamoJSON(obj)
		case has(obj, "kind"):
			// A kvtop record the fast path refused (bad kind or field types):
			// the kvtop adapter says why.
			return parseKvtop(line)
		}
		return Result{}, errors.New("JSON object of no known format (no kind, schema, msg or message)")
	}
	switch {
	case bytes.Contains(line, []byte("Routing request ")):
		return parseProductionStack(line)
	case bytes.Contains(line, []byte(smgSelection)), bytes.Contains(line, []byte(smgSticky)):
		return parseSMGText(line)
	case bytes.Contains(line, []byte("[ROUTING]")), bytes.Contains(line, []byte("Selected worker:")):
		return parseDynamoText(line)
	}
	return otherText(line)
}

func skip(reason string) Result { return Result{Skip: true, Reason: reason} }

// otherText classifies a text line no adapter claimed: a log line of some
// router (timestamp or level first, or a continuation line) is skipped;
// anything else is garbage in a decision log and counted as bad.
func otherText(line []byte) (Result, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return skip(SkipBlank), nil // e.g. nothing left after colour codes
	}
	if !utf8.Valid(line) {
		return Result{}, errors.New("not text (invalid UTF-8)")
	}
	for _, c := range line {
		if c < 0x20 && c != '\t' && c != 0x1b {
			return Result{}, errors.New("not text (control characters)")
		}
	}
	if line[0] == '{' {
		return Result{}, errors.New("not JSON")
	}
	if looksLikeLogLine(stripANSI(line)) {
		return skip(SkipNotDecision), nil
	}
	return Result{}, errors.New("unrecognized line (not a log line of a supported router)")
}

// looksLikeLogLine: starts with a date (2025-10-08T…, 2025-07-09 19:…,
// [2025-05-21 …]), a level word (INFO, DEBUG, …) or a Python traceback.
func looksLikeLogLine(s []byte) bool {
	if len(s) > 0 && s[0] == '[' {
		s = s[1:]
	}
	if len(s) >= 10 && isDigits(s[0:4]) && s[4] == '-' && isDigits(s[5:7]) && s[7] == '-' && isDigits(s[8:10]) {
		return true
	}
	end := 0
	for end < len(s) && s[end] >= 'A' && s[end] <= 'Z' {
		end++
	}
	switch string(s[:end]) {
	case "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "CRITICAL", "FATAL", "PANIC":
		return end == len(s) || s[end] == ':' || s[end] == ' ' || s[end] == '\t'
	}
	return bytes.HasPrefix(s, []byte("Traceback "))
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// stripANSI removes terminal colour sequences (ESC [ … letter) that text
// loggers add when attached to a terminal.
func stripANSI(b []byte) []byte {
	if bytes.IndexByte(b, 0x1b) < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '[' {
			j := i + 2
			for j < len(b) && !(b[j] >= '@' && b[j] <= '~') {
				j++
			}
			i = j
			continue
		}
		out = append(out, b[i])
	}
	return out
}

// parseLogTime reads the timestamps the supported loggers write: RFC3339
// with or without fraction, zap's ISO8601 (zone without colon), or a number
// of unix seconds. ok is false when s is none of these.
func parseLogTime(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 && f < 1e11 {
		return unixFloat(f), true
	}
	return time.Time{}, false
}

// unixFloat converts unix seconds with a fraction to a time, to the
// microsecond (float64 holds no more for current dates).
func unixFloat(f float64) time.Time {
	us := int64(f*1e6 + 0.5)
	return time.UnixMicro(us).UTC()
}
