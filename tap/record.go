package tap

import (
	"encoding/json"
	"math"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// End is why tap stopped reading a response.
type End string

const (
	// EndDone: the response finished as the API says: a stream with a
	// finish_reason and data: [DONE] (a Responses API stream with
	// response.completed or response.incomplete), a body with a finish
	// reason.
	EndDone End = "done"
	// EndUpstreamClosed: the upstream ended the response cleanly but
	// without that end (HTTP 200, the stream cut: seed 000's third
	// request).
	EndUpstreamClosed End = "upstream_closed"
	// EndReset: the upstream connection broke mid-response (reset, or
	// closed inside a chunk). The client's connection is cut too.
	EndReset End = "reset"
	// EndClientGone: the client went away first; tap cancelled the
	// upstream request, as the client's own disconnect would have.
	EndClientGone End = "client_gone"
	// EndTimeout: nothing came from the upstream for the idle timeout.
	EndTimeout End = "timeout"
	// EndHTTPError: the upstream answered 4xx or 5xx (the body, forwarded
	// as is, is not read: it may quote the prompt).
	EndHTTPError End = "http_error"
	// EndNoResponse: the upstream could not be reached or sent no
	// response headers; the client got tap's 502.
	EndNoResponse End = "no_response"
	// EndUnchecked: the response ended, but its body could not be read
	// (compressed, or a body larger than tap reads): completion unknown.
	EndUnchecked End = "unchecked"
)

// Class is what an end means for the client (snapshot.ClassOfEnd):
// finished, truncated (a success status but no proper end), failed, left
// (the client went away) or unknown.
func (e End) Class(status int) snapshot.ClientClass { return snapshot.ClassOfEnd(string(e), status) }

// Record is what tap saw of one request: metadata only, never prompt or
// completion text, never a header value but the request id and the
// serving worker.
type Record struct {
	Tap       string // the tap's name
	RequestID string
	// GeneratedID: the client sent no x-request-id; tap made this one up
	// and sent it upstream.
	GeneratedID bool
	Arrived     time.Time
	Ended       time.Time
	Endpoint    string // the request path, e.g. /v1/chat/completions
	Model       string
	Stream      bool

	PromptChars  *int     // characters of the prompt's text
	PrefixFP     []string // keyed hashes of its first fixed-size character chunks (fingerprint.go)
	PromptTokens *int     // from usage, when the response says
	CachedTokens *int     // usage.prompt_tokens_details.cached_tokens
	OutputTokens *int     // usage.completion_tokens

	Worker     string // who served it, from a response header or nvext.worker_id
	WorkerFrom string // the header (or nvext.worker_id) it came from

	HTTPStatus int // 0: no response
	// Times from arrival, measured when the bytes reached tap from the
	// upstream: response headers, the first data event with content.
	TTFB, TTFT *time.Duration
	Events     int            // data events read
	MaxGap     *time.Duration // largest gap between reads after the first content
	Breaks     int            // gaps of at least Options.BreakAfter
	Finish     string         // the finish_reason (or Responses status)
	SawDone    bool           // data: [DONE] seen
	End        End
	// ClientSlow: the client fell a whole stream buffer behind, and the
	// upstream waited on it (Stalled in all).
	ClientSlow bool
	Stalled    time.Duration
	// Unread says why part of the exchange was not inspected (the request
	// body too large or not JSON, an event too large, a body compressed):
	// "" when everything was.
	Unread string

	bodyLen int64 // the request body's length when tap read it whole, else -1
}

// Class is the record's end for the client (End.Class).
func (r *Record) Class() snapshot.ClientClass { return r.End.Class(r.HTTPStatus) }

// Done: the client saw the response's proper end.
func (r *Record) Done() bool { return r.End == EndDone }

// line is the kvtop audit outcome line (PROTOCOLS.md §4, observer client).
type line struct {
	Kind         string   `json:"kind"`
	Observer     string   `json:"observer"`
	TS           string   `json:"ts"`
	Arrived      string   `json:"arrived"`
	RequestID    string   `json:"request_id"`
	Tap          string   `json:"tap,omitempty"`
	Endpoint     string   `json:"endpoint,omitempty"`
	Model        string   `json:"model,omitempty"`
	Stream       bool     `json:"stream"`
	Worker       string   `json:"worker,omitempty"`
	HTTPStatus   *int     `json:"http_status"`
	PromptChars  *int     `json:"prompt_chars"`
	PrefixFP     []string `json:"prefix_fp,omitempty"`
	PromptTokens *int     `json:"prompt_tokens"`
	CachedTokens *int     `json:"cached_tokens"`
	OutputTokens *int     `json:"output_tokens"`
	TTFBMS       *float64 `json:"ttfb_ms"`
	TTFTMS       *float64 `json:"ttft_ms"`
	E2EMS        float64  `json:"e2e_ms"`
	Events       int      `json:"events"`
	MaxGapMS     *float64 `json:"max_gap_ms"`
	Breaks       int      `json:"breaks"`
	FinishReason string   `json:"finish_reason,omitempty"`
	Done         bool     `json:"done"`
	End          End      `json:"end"`
	ClientSlow   bool     `json:"client_slow,omitempty"`
	StalledMS    float64  `json:"stalled_ms,omitempty"`
	Unread       string   `json:"unread,omitempty"`
}

// AppendJSON appends the record as one kvtop audit outcome line (with its
// newline).
func (r *Record) AppendJSON(b []byte) []byte {
	l := line{
		Kind: "outcome", Observer: "client", TS: stamp(r.Ended), Arrived: stamp(r.Arrived),
		RequestID: r.RequestID, Tap: r.Tap, Endpoint: r.Endpoint, Model: r.Model, Stream: r.Stream, Worker: r.Worker,
		PromptChars: r.PromptChars, PrefixFP: r.PrefixFP, PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens,
		OutputTokens: r.OutputTokens, TTFBMS: msp(r.TTFB), TTFTMS: msp(r.TTFT), E2EMS: ms(r.Ended.Sub(r.Arrived)),
		Events: r.Events, MaxGapMS: msp(r.MaxGap), Breaks: r.Breaks, FinishReason: r.Finish, Done: r.Done(),
		End: r.End, ClientSlow: r.ClientSlow, Unread: r.Unread,
	}
	if r.HTTPStatus != 0 {
		s := r.HTTPStatus
		l.HTTPStatus = &s
	}
	if r.ClientSlow {
		l.StalledMS = ms(r.Stalled)
	}
	j, err := json.Marshal(&l)
	if err != nil { // cannot happen: strings and numbers only
		return b
	}
	return append(append(b, j...), '\n')
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ms is a duration in milliseconds, to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/1e3) / 1e3
}

func msp(d *time.Duration) *float64 {
	if d == nil {
		return nil
	}
	v := ms(*d)
	return &v
}

func intp(v int) *int { return &v }
