package decisions

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// decodeKvtop is a hand-written decoder for the kvtop audit record: it fills
// rec exactly as json.Unmarshal(line, rec) would, or reports false (rec left
// zero) and the caller asks encoding/json, whose errors and odd cases are
// then today's. It exists because encoding/json was the largest Go cost of a
// busy pool's decision log (reflection, one allocation per string and per
// *float64: 50+ for a 16-candidate decision); this one makes a handful: all
// field strings share one string, all RawMessages one byte slice, all
// *float64 one backing array (per 256 numbers), and candidates one slice
// sized by a pre-count.
//
// It parses the whole line (every byte is checked against the JSON grammar,
// as encoding/json's checkValid does first) and declines, rather than
// imitate encoding/json, on:
//   - a key of a known struct that is not exactly a field name but equals one
//     ignoring case (encoding/json would fill the field), and any such key
//     with an escape or a non-ASCII byte (which may fold to a field name:
//     U+212A KELVIN SIGN folds to k);
//   - a known key given twice in one object (encoding/json merges a second
//     object into the first and reuses slice elements: last wins per leaf);
//   - a value of the wrong type for its field (encoding/json reports an
//     UnmarshalTypeError, or sets a zero value for some), and a number
//     strconv.ParseFloat refuses (overflow: 1e999);
//   - anything that is not valid JSON (leading zeros, "1.", "+1", bad
//     escapes, control characters in strings, data after the object);
//   - unknown values nested deeper than maxSkipDepth.
//
// Field strings with escapes or non-ASCII bytes are decoded by encoding/json
// itself (json.Unmarshal of that one string literal: it substitutes U+FFFD
// for invalid UTF-8 and pairs surrogates), so they are exact by construction.
// Unknown keys' values (any JSON, with any escapes or bytes) are scanned and
// skipped. null leaves a string field empty and a pointer or slice nil, as
// encoding/json does; a RawMessage gets the bytes "null". A candidate that is
// null is a zero candidate; "candidates":[] is an empty, non-nil slice.
func decodeKvtop(line []byte, rec *kvRecord) bool {
	d := kvDecoders.Get().(*kvDecoder)
	d.data, d.i, d.strs, d.raws, d.pend, d.nums = line, 0, d.strs[:0], d.raws[:0], d.pend[:0], nil
	d.ws()
	ok := d.record(rec)
	d.ws()
	if ok = ok && d.i == len(d.data); ok {
		d.finish(rec)
	} else {
		*rec = kvRecord{}
	}
	d.data, d.nums = nil, nil
	if cap(d.strs)+cap(d.raws)+16*cap(d.pend) <= maxPooledBytes {
		kvDecoders.Put(d) // a huge line's buffers are left to the GC
	}
	return ok
}

// kvDecoders keeps the decoders' buffers from line to line: a line's
// strings and RawMessages are copied out of them by finish.
var kvDecoders = sync.Pool{New: func() any { return new(kvDecoder) }}

const maxPooledBytes = 64 << 10

// maxSkipDepth bounds the nesting of unknown values the fast path skips
// (encoding/json allows 10 000; deeper here is declined, not an error).
const maxSkipDepth = 64

// kvDecoder is one line's decoding state. Strings and RawMessages are
// collected in buffers (reused through kvDecoders) and handed out by finish
// from one allocation each; a pending entry names its field by number, so
// the pooled decoder holds no pointer into a record.
type kvDecoder struct {
	data []byte
	i    int
	strs []byte    // decoded field strings, back to back
	raws []byte    // RawMessage values, back to back
	pend []pending // where each collected string or RawMessage goes
	nums []float64 // backing of the *float64 fields (never grown: new chunks)
}

// pending is a field value collected in strs or raws: field says which field,
// cand which candidate (for pCandWorker).
type pending struct {
	field    uint8
	cand     int32
	off, end int32
}

// Fields filled from the collected strings (pKind…pCandWorker) and
// RawMessages (pRequestID…).
const (
	pKind uint8 = iota
	pTS
	pRouter
	pRouterVersion
	pModel
	pPool
	pEndpoint
	pChosen
	pReason
	pPrefix
	pWorker
	pFinishReason
	pPredSource
	pPredInput
	pPredUnits
	pPredOwner
	pLoadKind
	pLoadScope
	pCandWorker
	pObserver
	pEnd
	pRequestID // first RawMessage field
	pAttemptID
	pError
	pRetryOf
	pMsg
	pMessage
)

// The JSON names of each struct's fields, for the case-folding check.
var (
	recordNames = []string{"kind", "ts", "request_id", "attempt_id", "router", "router_version", "model", "pool",
		"endpoint", "prediction", "chosen", "reason", "load", "prefix", "candidates", "worker", "http_status",
		"prompt_tokens", "cached_tokens", "queue_ms", "ttft_ms", "e2e_ms", "finish_reason", "done", "error",
		"retry_of", "msg", "message", "observer", "end", "ttfb_ms", "max_gap_ms", "breaks", "prompt_chars",
		"output_tokens", "client_slow"}
	predictionNames = []string{"source", "input", "units", "matched", "total", "owner", "block_size", "age_ms"}
	loadNames       = []string{"kind", "value", "scope"}
	candidateNames  = []string{"worker", "score", "matched", "load"}
)

func (d *kvDecoder) record(rec *kvRecord) bool {
	return d.object(recordNames, 1, func(key []byte) (uint64, bool, bool) {
		switch string(key) {
		case "kind":
			return 1 << 0, d.str(pKind, 0), true
		case "ts":
			return 1 << 1, d.str(pTS, 0), true
		case "request_id":
			return 1 << 2, d.raw(pRequestID), true
		case "attempt_id":
			return 1 << 3, d.raw(pAttemptID), true
		case "router":
			return 1 << 4, d.str(pRouter, 0), true
		case "router_version":
			return 1 << 5, d.str(pRouterVersion, 0), true
		case "model":
			return 1 << 6, d.str(pModel, 0), true
		case "pool":
			return 1 << 7, d.str(pPool, 0), true
		case "endpoint":
			return 1 << 8, d.str(pEndpoint, 0), true
		case "prediction":
			return 1 << 9, d.prediction(&rec.Prediction), true
		case "chosen":
			return 1 << 10, d.str(pChosen, 0), true
		case "reason":
			return 1 << 11, d.str(pReason, 0), true
		case "load":
			return 1 << 12, d.load(&rec.Load), true
		case "prefix":
			return 1 << 13, d.str(pPrefix, 0), true
		case "candidates":
			return 1 << 14, d.candidates(&rec.Candidates), true
		case "worker":
			return 1 << 15, d.str(pWorker, 0), true
		case "http_status":
			return 1 << 16, d.num(&rec.HTTPStatus), true
		case "prompt_tokens":
			return 1 << 17, d.num(&rec.PromptTokens), true
		case "cached_tokens":
			return 1 << 18, d.num(&rec.CachedTokens), true
		case "queue_ms":
			return 1 << 19, d.num(&rec.QueueMS), true
		case "ttft_ms":
			return 1 << 20, d.num(&rec.TTFTMS), true
		case "e2e_ms":
			return 1 << 21, d.num(&rec.E2EMS), true
		case "finish_reason":
			return 1 << 22, d.str(pFinishReason, 0), true
		case "done":
			return 1 << 23, d.boolean(&rec.Done), true
		case "error":
			return 1 << 24, d.raw(pError), true
		case "retry_of":
			return 1 << 25, d.raw(pRetryOf), true
		case "msg":
			return 1 << 26, d.raw(pMsg), true
		case "message":
			return 1 << 27, d.raw(pMessage), true
		case "observer":
			return 1 << 28, d.str(pObserver, 0), true
		case "end":
			return 1 << 29, d.str(pEnd, 0), true
		case "ttfb_ms":
			return 1 << 30, d.num(&rec.TTFBMS), true
		case "max_gap_ms":
			return 1 << 31, d.num(&rec.MaxGapMS), true
		case "breaks":
			return 1 << 32, d.num(&rec.Breaks), true
		case "prompt_chars":
			return 1 << 33, d.num(&rec.PromptChars), true
		case "output_tokens":
			return 1 << 34, d.num(&rec.OutputTokens), true
		case "client_slow":
			return 1 << 35, d.boolean(&rec.ClientSlow), true
		}
		return 0, false, false
	})
}

func (d *kvDecoder) prediction(dst **kvPrediction) bool {
	if d.null() {
		return true
	}
	p := new(kvPrediction)
	*dst = p
	return d.object(predictionNames, 2, func(key []byte) (uint64, bool, bool) {
		switch string(key) {
		case "source":
			return 1 << 0, d.str(pPredSource, 0), true
		case "input":
			return 1 << 1, d.str(pPredInput, 0), true
		case "units":
			return 1 << 2, d.str(pPredUnits, 0), true
		case "matched":
			return 1 << 3, d.num(&p.Matched), true
		case "total":
			return 1 << 4, d.num(&p.Total), true
		case "owner":
			return 1 << 5, d.str(pPredOwner, 0), true
		case "block_size":
			return 1 << 6, d.num(&p.BlockSize), true
		case "age_ms":
			return 1 << 7, d.num(&p.AgeMS), true
		}
		return 0, false, false
	})
}

func (d *kvDecoder) load(dst **kvLoad) bool {
	if d.null() {
		return true
	}
	l := new(kvLoad)
	*dst = l
	return d.object(loadNames, 2, func(key []byte) (uint64, bool, bool) {
		switch string(key) {
		case "kind":
			return 1 << 0, d.str(pLoadKind, 0), true
		case "value":
			return 1 << 1, d.num(&l.Value), true
		case "scope":
			return 1 << 2, d.str(pLoadScope, 0), true
		}
		return 0, false, false
	})
}

func (d *kvDecoder) candidates(dst *[]kvCandidate) bool {
	if d.null() {
		return true
	}
	start := d.i
	n, ok := d.countArray()
	if !ok {
		return false
	}
	d.i = start + 1 // past '['
	cands := make([]kvCandidate, n)
	*dst = cands
	for k := 0; k < n; k++ {
		d.ws()
		if k > 0 {
			d.i++ // ',' (countArray checked the array's structure)
			d.ws()
		}
		if !d.null() && !d.candidate(&cands[k], int32(k)) {
			return false
		}
	}
	d.ws()
	d.i++ // ']'
	return true
}

func (d *kvDecoder) candidate(c *kvCandidate, k int32) bool {
	return d.object(candidateNames, 3, func(key []byte) (uint64, bool, bool) {
		switch string(key) {
		case "worker":
			return 1 << 0, d.str(pCandWorker, k), true
		case "score":
			return 1 << 1, d.num(&c.Score), true
		case "matched":
			return 1 << 2, d.num(&c.Matched), true
		case "load":
			return 1 << 3, d.num(&c.Load), true
		}
		return 0, false, false
	})
}

// object reads one JSON object, calling member for each plain key with its
// value next: member reads it and returns the field's bit (a known key
// given twice declines: encoding/json would merge them), whether it was
// read, and whether key is a field at all. Other keys' values are skipped
// at depth, unless the key folds to a field name.
func (d *kvDecoder) object(names []string, depth int, member func(key []byte) (bit uint64, ok, known bool)) bool {
	if !d.open('{') {
		return false
	}
	var seen uint64
	for first := true; ; first = false {
		key, plain, more, ok := d.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		if !plain {
			return false
		}
		bit, ok, known := member(key)
		if !known {
			ok = unknownKey(key, names) && d.skip(depth)
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
}

// unknownKey reports whether key (plain ASCII) may be skipped: encoding/json
// matches field names ignoring case, so a key that folds to one is declined.
func unknownKey(key []byte, names []string) bool {
	for _, n := range names {
		if len(n) == len(key) && equalFoldASCII(key, n) {
			return false
		}
	}
	return true
}

func equalFoldASCII(a []byte, b string) bool {
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// str reads a string field's value: null leaves it empty (encoding/json
// ignores null for a string).
func (d *kvDecoder) str(field uint8, cand int32) bool {
	if d.null() {
		return true
	}
	if d.i >= len(d.data) || d.data[d.i] != '"' {
		return false
	}
	start := d.i
	plain, ok := d.scanString()
	if !ok {
		return false
	}
	off := len(d.strs)
	if plain {
		d.strs = append(d.strs, d.data[start+1:d.i-1]...)
	} else {
		// Escapes or non-ASCII bytes: encoding/json decodes the literal
		// (U+FFFD for invalid UTF-8, surrogate pairs), exactly as in place.
		var s string
		if json.Unmarshal(d.data[start:d.i], &s) != nil {
			return false
		}
		d.strs = append(d.strs, s...)
	}
	d.pend = append(d.pend, pending{field: field, cand: cand, off: int32(off), end: int32(len(d.strs))})
	return true
}

// raw reads a RawMessage field: the value's bytes as written (null too).
func (d *kvDecoder) raw(field uint8) bool {
	start := d.i
	if !d.skip(1) {
		return false
	}
	off := len(d.raws)
	d.raws = append(d.raws, d.data[start:d.i]...)
	d.pend = append(d.pend, pending{field: field, off: int32(off), end: int32(len(d.raws))})
	return true
}

// num reads a *float64 field: a JSON number parsed by strconv.ParseFloat,
// as encoding/json does, or null (nil).
func (d *kvDecoder) num(dst **float64) bool {
	if d.null() {
		return true
	}
	start := d.i
	if !d.scanNumber() {
		return false
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.i]), 64)
	if err != nil {
		return false
	}
	if len(d.nums) == cap(d.nums) {
		// One chunk for the line's numbers: it has at most one per ':'.
		n := min(max(bytes.Count(d.data[d.i:], []byte{':'})+1, 8), 256)
		d.nums = make([]float64, 0, n)
	}
	d.nums = append(d.nums, f)
	*dst = &d.nums[len(d.nums)-1]
	return true
}

func (d *kvDecoder) boolean(dst **bool) bool {
	switch {
	case d.null():
		return true
	case d.literal("true"):
		b := true
		*dst = &b
		return true
	case d.literal("false"):
		b := false
		*dst = &b
		return true
	}
	return false
}

// finish hands out the collected strings (one string) and RawMessages (one
// slice, each value capped so an append cannot overwrite the next).
func (d *kvDecoder) finish(rec *kvRecord) {
	s := string(d.strs)
	var raws []byte
	if len(d.raws) > 0 {
		raws = bytes.Clone(d.raws)
	}
	for _, p := range d.pend {
		if p.field >= pRequestID {
			r := json.RawMessage(raws[p.off:p.end:p.end])
			switch p.field {
			case pRequestID:
				rec.RequestID = r
			case pAttemptID:
				rec.AttemptID = r
			case pError:
				rec.Error = r
			case pRetryOf:
				rec.RetryOf = r
			case pMsg:
				rec.Msg = r
			case pMessage:
				rec.Message = r
			}
			continue
		}
		v := s[p.off:p.end]
		switch p.field {
		case pKind:
			rec.Kind = v
		case pTS:
			rec.TS = v
		case pRouter:
			rec.Router = v
		case pRouterVersion:
			rec.RouterVersion = v
		case pModel:
			rec.Model = v
		case pPool:
			rec.Pool = v
		case pEndpoint:
			rec.Endpoint = v
		case pChosen:
			rec.Chosen = v
		case pReason:
			rec.Reason = v
		case pPrefix:
			rec.Prefix = v
		case pWorker:
			rec.Worker = v
		case pFinishReason:
			rec.FinishReason = v
		case pPredSource:
			rec.Prediction.Source = v
		case pPredInput:
			rec.Prediction.Input = v
		case pPredUnits:
			rec.Prediction.Units = v
		case pPredOwner:
			rec.Prediction.Owner = v
		case pLoadKind:
			rec.Load.Kind = v
		case pLoadScope:
			rec.Load.Scope = v
		case pCandWorker:
			rec.Candidates[p.cand].Worker = v
		case pObserver:
			rec.Observer = v
		case pEnd:
			rec.End = v
		}
	}
}

// The scanner: each function starts at a value's first byte (whitespace
// already skipped) and leaves d.i just past it.

func (d *kvDecoder) ws() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *kvDecoder) open(c byte) bool {
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *kvDecoder) literal(lit string) bool {
	if bytes.HasPrefix(d.data[d.i:], []byte(lit)) {
		d.i += len(lit)
		return true
	}
	return false
}

func (d *kvDecoder) null() bool { return d.literal("null") }

// nextKey reads an object's next key and its ':' (after '{' for the first,
// else after a value): more is false at the closing '}'. plain reports a key
// without escapes or non-ASCII bytes; key then is its text.
func (d *kvDecoder) nextKey(first bool) (key []byte, plain, more, ok bool) {
	d.ws()
	if d.i >= len(d.data) {
		return nil, false, false, false
	}
	if d.data[d.i] == '}' {
		d.i++
		return nil, false, false, true
	}
	if !first {
		if d.data[d.i] != ',' {
			return nil, false, false, false
		}
		d.i++
		d.ws()
	}
	if d.i >= len(d.data) || d.data[d.i] != '"' {
		return nil, false, false, false
	}
	start := d.i
	plain, ok = d.scanString()
	if !ok {
		return nil, false, false, false
	}
	key = d.data[start+1 : d.i-1]
	d.ws()
	if !d.open(':') {
		return nil, false, false, false
	}
	d.ws()
	return key, plain, true, true
}

// scanString moves past a string (at its '"'), checking escapes and control
// characters as the JSON grammar requires; plain reports a string of
// printable ASCII without escapes.
func (d *kvDecoder) scanString() (plain, ok bool) {
	plain = true
	for i := d.i + 1; i < len(d.data); i++ {
		if plainByte[d.data[i]] {
			continue
		}
		switch c := d.data[i]; {
		case c == '"':
			d.i = i + 1
			return plain, true
		case c == '\\':
			plain = false
			i++
			if i >= len(d.data) {
				return false, false
			}
			switch d.data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(d.data) {
					return false, false
				}
				for _, h := range d.data[i+1 : i+5] {
					if !isHex(h) {
						return false, false
					}
				}
				i += 4
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	return false, false
}

// plainByte marks the bytes a string holds as they are: printable ASCII
// other than '"' and '\\'.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber moves past a number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func (d *kvDecoder) scanNumber() bool {
	b, i := d.data, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	d.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// skip moves past any JSON value, checking it; depth is its nesting level.
func (d *kvDecoder) skip(depth int) bool {
	if d.i >= len(d.data) {
		return false
	}
	switch c := d.data[d.i]; {
	case c == '"':
		_, ok := d.scanString()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return d.scanNumber()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.null()
	case c == '{':
		if depth >= maxSkipDepth {
			return false
		}
		d.i++
		for first := true; ; first = false {
			_, _, more, ok := d.nextKey(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !d.skip(depth + 1) {
				return false
			}
		}
	case c == '[':
		if depth >= maxSkipDepth {
			return false
		}
		_, ok := d.array(depth)
		return ok
	}
	return false
}

// countArray checks the array at d.i and counts its elements, leaving d.i
// past it.
func (d *kvDecoder) countArray() (int, bool) {
	if d.i >= len(d.data) || d.data[d.i] != '[' {
		return 0, false
	}
	return d.array(1)
}

// array moves past an array (at its '['), skipping and counting its elements.
func (d *kvDecoder) array(depth int) (int, bool) {
	d.i++
	d.ws()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return 0, true
	}
	for n := 1; ; n++ {
		if !d.skip(depth + 1) {
			return 0, false
		}
		d.ws()
		if d.i >= len(d.data) {
			return 0, false
		}
		switch d.data[d.i] {
		case ']':
			d.i++
			return n, true
		case ',':
			d.i++
			d.ws()
		default:
			return 0, false
		}
	}
}
