package decisions

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// NVIDIA Dynamo's KV router logs its choice at DEBUG as
//
//	[ROUTING] Best: worker_{id} dp_rank={r} with {overlap}/{total} blocks overlap
//
// with the structured fields request_id, worker_id, dp_rank, overlap_blocks
// and total_blocks: top-level (or under "fields"/"span"/"spans") in JSONL
// mode, trailing key=value pairs in text mode. The structured fields win; the
// message text is the fallback.
//
// Naming: Dynamo routes to the best worker, so owner == chosen ==
// "worker_<id>" for dp rank 0 (also what Dynamo reports without data
// parallelism) and "worker_<id>/dp<r>" for rank r > 0; the pool folds that
// back to worker_<id> (a rank is not a worker of its own).
//
// The INFO "Selected worker: …" lines carry the same choice but no request
// id, so they cannot be joined to outcomes: skipped with SkipNoRequestID.

var (
	routingRe   = regexp.MustCompile(`\[ROUTING\] Best: worker_(\S*?)(?: dp_rank=(\S+))? with (\S+)/(\S+) blocks overlap`)
	dynamoKVRe  = regexp.MustCompile(`(?:^|[\s{,:])(request_id|x_request_id|worker_id|dp_rank|overlap_blocks|total_blocks)=("(?:[^"\\]|\\.)*"|[^\s,}]+)`)
	dynamoKeys  = []string{"request_id", "x_request_id", "worker_id", "dp_rank", "overlap_blocks", "total_blocks"}
	selectedTag = "Selected worker:"
)

// parseDynamoJSON reads one DYN_LOGGING_JSONL record.
func parseDynamoJSON(obj map[string]any) (Result, error) {
	msg := str(lookup(obj, "message"))
	fields := map[string]string{}
	for _, k := range dynamoKeys {
		if v := str(lookup(obj, k)); v != "" {
			fields[k] = v
		}
	}
	var ts time.Time
	if t, ok := parseLogTime(str(obj["time"])); ok {
		ts = t
	} else if t, ok := parseLogTime(str(obj["timestamp"])); ok {
		ts = t
	}
	return dynamoRecord(msg, fields, ts)
}

// parseDynamoText reads one text-format line (tracing's fmt layer).
func parseDynamoText(line []byte) (Result, error) {
	line = stripANSI(line)
	s := string(line)
	if !strings.Contains(s, "[ROUTING]") && !strings.Contains(s, selectedTag) {
		return otherText(line)
	}
	fields := map[string]string{}
	for _, m := range dynamoKVRe.FindAllStringSubmatch(s, -1) {
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
		}
		fields[m[1]] = v // last wins: the event's own fields follow its span's
	}
	var ts time.Time
	if first, _, _ := strings.Cut(s, " "); first != "" {
		if t, ok := parseLogTime(first); ok {
			ts = t
		}
	}
	return dynamoRecord(s, fields, ts)
}

func dynamoRecord(msg string, fields map[string]string, ts time.Time) (Result, error) {
	if strings.Contains(msg, selectedTag) {
		if fields["request_id"] == "" {
			return skip(SkipNoRequestID), nil
		}
		return skip(SkipNotDecision), nil // the [ROUTING] line carries it
	}
	if !strings.Contains(msg, "[ROUTING]") {
		return skip(SkipNotDecision), nil
	}
	m := routingRe.FindStringSubmatch(msg)
	if m == nil && fields["worker_id"] == "" {
		return skip(SkipNotDecision), nil // another [ROUTING…] diagnostic
	}
	if m == nil {
		m = make([]string, 5)
	}
	worker := first(fields["worker_id"], m[1])
	if !isDigits([]byte(worker)) {
		return Result{}, errors.New("dynamo [ROUTING]: worker_id is not a number (redacted?)")
	}
	rank := 0
	if r := first(fields["dp_rank"], m[2]); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil || n < 0 {
			return Result{}, errors.New("dynamo [ROUTING]: dp_rank is not a whole number")
		}
		rank = n
	}
	overlap, ok1 := num(first(fields["overlap_blocks"], m[3]))
	total, ok2 := num(first(fields["total_blocks"], m[4]))
	if !ok1 || !ok2 {
		return Result{}, errors.New("dynamo [ROUTING]: overlap_blocks/total_blocks are not numbers")
	}
	reqID := first(fields["request_id"], fields["x_request_id"])
	if reqID == "" {
		return skip(SkipNoRequestID), nil
	}
	owner := dynamoWorker(worker, rank)
	return Result{Decision: &collectors.Decision{
		TS:        ts,
		RequestID: reqID,
		Chosen:    owner,
		Prediction: &collectors.Prediction{
			Source:  "kv-events",
			Input:   "tokens",
			Units:   "blocks",
			Matched: collectors.F(overlap),
			Total:   collectors.F(total),
			Owner:   owner,
		},
		Format: FormatDynamo,
	}}, nil
}

// lookup finds a field at the top level, under "fields", under "span", or
// in the innermost span of "spans" that has it (tracing-subscriber layouts).
func lookup(obj map[string]any, key string) any {
	if v, ok := obj[key]; ok {
		return v
	}
	for _, nest := range []string{"fields", "span"} {
		if m, ok := obj[nest].(map[string]any); ok {
			if v, ok := m[key]; ok {
				return v
			}
		}
	}
	if spans, ok := obj["spans"].([]any); ok {
		for i := len(spans) - 1; i >= 0; i-- {
			if m, ok := spans[i].(map[string]any); ok {
				if v, ok := m[key]; ok {
					return v
				}
			}
		}
	}
	return nil
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func dynamoWorker(id string, rank int) string {
	if rank > 0 {
		return "worker_" + id + "/dp" + strconv.Itoa(rank)
	}
	return "worker_" + id
}
