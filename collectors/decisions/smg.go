package decisions

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// The SGLang model gateway (SMG, smg-project/smg) logs each routing choice
// of its cache-aware policy at DEBUG (target smg::policies::cache_aware;
// --log-level debug or RUST_LOG=smg::policies::cache_aware=debug) as
//
//	Cache-aware selection index="tree" branch=… worker=… model_id=… matched_ratio=… threshold=…
//	Cache-aware selection index="hash" branch=… level=… worker=… model_id=…
//
// and the sticky routing-key gate (smg::policies::registry) as
//
//	Sticky routing decision source=… key=… branch=… worker=… model_id=…
//
// in tracing's text format (key=value after the message; strings quoted) or,
// with --log-json, as flattened JSON (the fields at the top level beside
// "message"). The event has no request id, but an HTTP request's line is
// logged inside its http_request span, whose request_id field (the
// x-request-id header, or one the gateway made) tracing prints in the
// span's prefix (text: `http_request{… request_id="…"}:`) or under
// "span"/"spans" (JSON). kvtop reads the id from there; a line without one
// (no span: a format without span context, or a path that selects outside
// the request's span) cannot be joined and is skipped as "no request id",
// counted on the source like Dynamo's INFO lines.
//
// worker is the worker's URL (matched to a configured worker by host:port);
// "none" means the policy selected nothing. Branches:
//
//	tree: tree_match (a tenant of the matched prefix: best-match, owner the
//	chosen worker), spill (matched_ratio above threshold, but load sent it
//	to a worker that is not a tenant: load-balance, owner unknown),
//	min_load_fallback (matched_ratio at or below threshold: fallback),
//	first_healthy_fallback (nothing selected: fallback), no_tree_random
//	(fallback) and kv_pressure_min_load (load-balance), the last two
//	without a ratio. matched_ratio is matched ÷ input in characters on the
//	HTTP path and in tokens on gRPC; the line does not say which, so the
//	prediction's unit is "ratio" and its input unknown.
//	hash: hash_hit (best-match; level = tokens of the matched head, owner
//	the chosen worker), hash_spill (load-balance; the holder is not named),
//	min_load_fallback (fallback, level 0), short_request and
//	kv_pressure_min_load (load-balance, no prediction).
//	sticky: occupied_hit, vacant (affinity), occupied_miss,
//	no_healthy_workers (fallback), cap_respill (load-balance); the key is
//	not kept.
//
// The event-driven lines ("Event-driven routing: overlap match") name the
// best-overlap worker before the load gate, which may send the request
// elsewhere without a line: not a decision. A request that logs two lines
// (a sticky gate over the policy, the prefill and decode legs of PD
// routing, a retry) is one record whose last line wins: the log names no
// attempt or leg.

const (
	smgSelection = "Cache-aware selection"
	smgSticky    = "Sticky routing decision"
)

var (
	smgFieldRe = regexp.MustCompile(`(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|\S+)`)
	smgSpanRe  = regexp.MustCompile(`[{\s](request_id|uri)=("(?:[^"\\]|\\.)*"|[^\s{}]+)`)
)

// smgMessage finds an SMG decision message in a text line: its position
// after the span and target prefix, or -1.
func smgMessage(s string) (msg string, at int) {
	for _, m := range []string{smgSelection, smgSticky} {
		if i := strings.Index(s, m); i >= 0 {
			return m, i
		}
	}
	return "", -1
}

// parseSMGText reads one line of tracing's text format.
func parseSMGText(line []byte) (Result, error) {
	line = stripANSI(line)
	s := string(line)
	msg, at := smgMessage(s)
	if at < 0 {
		return otherText(line)
	}
	fields := map[string]string{}
	for _, m := range smgFieldRe.FindAllStringSubmatch(s[at+len(msg):], -1) {
		fields[m[1]] = unquote(m[2])
	}
	span := map[string]string{}
	for _, m := range smgSpanRe.FindAllStringSubmatch(s[:at], -1) {
		span[m[1]] = unquote(m[2]) // the innermost span's comes last
	}
	return smgRecord(msg, fields, span["request_id"], span["uri"], smgTime(s))
}

// parseSMGJSON reads one --log-json line (flatten_event: fields at the top
// level; span fields under "span" and "spans").
func parseSMGJSON(obj map[string]any) (Result, error) {
	msg := str(obj["message"])
	if msg != smgSelection && msg != smgSticky {
		return skip(SkipNotDecision), nil
	}
	fields := map[string]string{}
	for _, k := range []string{"index", "branch", "worker", "model_id", "matched_ratio", "threshold", "level", "source"} {
		if v, ok := obj[k]; ok {
			fields[k] = str(v)
		}
	}
	var ts time.Time
	if t, ok := parseSMGStamp(str(obj["timestamp"])); ok {
		ts = t
	}
	return smgRecord(msg, fields, str(lookup(obj, "request_id")), str(lookup(obj, "uri")), ts)
}

// isSMGJSON: a --log-json line of the gateway (auto detection).
func isSMGJSON(obj map[string]any) bool {
	if m := str(obj["message"]); m == smgSelection || m == smgSticky {
		return true
	}
	return strings.HasPrefix(str(obj["target"]), "smg::")
}

func unquote(v string) string {
	if strings.HasPrefix(v, `"`) {
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
		return strings.Trim(v, `"`)
	}
	return v
}

// smgTime reads the text line's leading "2026-08-22 13:07:01" (ChronoUtc).
func smgTime(s string) time.Time {
	if len(s) >= 19 {
		if t, ok := parseSMGStamp(s[:19]); ok {
			return t
		}
	}
	if first, _, _ := strings.Cut(s, " "); first != "" {
		if t, ok := parseLogTime(first); ok {
			return t
		}
	}
	return time.Time{}
}

func parseSMGStamp(s string) (time.Time, bool) {
	if t, err := time.Parse("2006-01-02 15:04:05", s); err == nil {
		return t, true
	}
	return parseLogTime(s)
}

func smgRecord(msg string, f map[string]string, reqID, uri string, ts time.Time) (Result, error) {
	branch := f["branch"]
	if branch == "" {
		return Result{}, errors.New("smg: " + msg + " without a branch")
	}
	if reqID == "" {
		return skip(SkipNoRequestID), nil
	}
	d := &collectors.Decision{TS: ts, RequestID: reqID, Chosen: orNone(f["worker"]), Model: orNone(f["model_id"]), Format: FormatSMG}
	if path, _, _ := strings.Cut(uri, "?"); strings.HasPrefix(path, "/") && len(path) <= 100 {
		d.Endpoint = path
	}
	if msg == smgSticky {
		d.Prediction = &collectors.Prediction{Source: "session", Input: "routing_key"}
		switch branch {
		case "occupied_miss", "no_healthy_workers":
			d.Reason = "fallback"
		case "cap_respill":
			d.Reason = "load-balance"
		}
		return Result{Decision: d}, nil
	}
	// The owner is the chosen worker only where the line says the chosen
	// worker holds the match.
	switch index := f["index"]; index {
	case "hash":
		var level *float64
		if v, ok := f["level"]; ok {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return Result{}, errors.New("smg: level is not a whole number")
			}
			x := float64(n)
			level = &x
		}
		hash := func(owner string) *collectors.Prediction {
			return &collectors.Prediction{Source: "hash", Input: "tokens", Units: "tokens", Matched: level, Owner: owner}
		}
		switch branch {
		case "hash_hit":
			d.Reason, d.Prediction = "best-match", hash(d.Chosen)
		case "hash_spill":
			d.Reason, d.Prediction = "load-balance", hash("")
		case "min_load_fallback":
			d.Reason, d.Prediction = "fallback", hash("")
		case "short_request", "kv_pressure_min_load":
			d.Reason = "load-balance"
		}
	case "tree", "": // PR #2210's first tree line had no index field
		var ratio *float64
		if v, ok := f["matched_ratio"]; ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || !finite(x) || x < 0 || x > 1 {
				return Result{}, errors.New("smg: matched_ratio is not a number between 0 and 1")
			}
			ratio = &x
		}
		tree := func(owner string) *collectors.Prediction {
			if ratio == nil {
				return nil
			}
			one := 1.0
			return &collectors.Prediction{Source: "tree", Units: "ratio", Matched: ratio, Total: &one, Owner: owner}
		}
		switch branch {
		case "tree_match":
			d.Reason, d.Prediction = "best-match", tree(d.Chosen)
		case "spill":
			d.Reason, d.Prediction = "load-balance", tree("")
		case "min_load_fallback", "first_healthy_fallback":
			d.Reason, d.Prediction = "fallback", tree("")
		case "no_tree_random":
			d.Reason = "fallback"
		case "kv_pressure_min_load":
			d.Reason = "load-balance"
		default:
			d.Prediction = tree("")
		}
	}
	return Result{Decision: d}, nil
}

func orNone(s string) string {
	if s == "none" {
		return ""
	}
	return s
}
