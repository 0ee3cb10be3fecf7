package snapshot

import "time"

// ClientClass is what a client-side end (kvtop tap's Record.End, an
// outcome's end) means for the client, given the response's HTTP status.
type ClientClass string

const (
	ClientFinished  ClientClass = "finished"  // finish_reason and data: [DONE] (or the API's own end) seen
	ClientTruncated ClientClass = "truncated" // a success status, but the response stopped short
	ClientFailed    ClientClass = "failed"    // an HTTP error, or no response at all
	ClientLeft      ClientClass = "left"      // the client went away first
	ClientUnknown   ClientClass = "unknown"   // the end could not be checked
)

// ClassOfEnd maps an end (done, upstream_closed, reset, timeout,
// client_gone, http_error, no_response, unchecked) to its class.
func ClassOfEnd(end string, status int) ClientClass {
	switch end {
	case "done":
		return ClientFinished
	case "upstream_closed", "reset", "timeout":
		if status >= 200 && status < 300 {
			return ClientTruncated
		}
		return ClientFailed
	case "http_error", "no_response":
		return ClientFailed
	case "client_gone":
		return ClientLeft
	}
	return ClientUnknown
}

// Clients is what clients received over the window, from the records of
// kvtop tap (outcomes observed at the client) joined by request id to the
// router's decisions and outcomes. A request counts where its record
// arrived within the window; per worker, under the worker a response
// header named, else the one the router's decision chose.
type Clients struct {
	Requests  int `json:"requests"`
	Finished  int `json:"finished"`
	Truncated int `json:"truncated"`
	Failed    int `json:"failed"`
	Left      int `json:"left"`
	Unknown   int `json:"unknown"`
	// Breaks sums the streaming breaks (gaps after the first token of at
	// least the tap's --break-after); BrokenStreams counts the requests
	// with one or more.
	Breaks        int `json:"breaks"`
	BrokenStreams int `json:"broken_streams"`
	// SlowClients: requests whose client fell a whole stream buffer
	// behind (their times are the upstream's, not the client's delay).
	SlowClients int `json:"slow_clients"`
	// TTFTMS is the client's time to first token: to the first data event
	// with content, not to the response headers.
	TTFTMS RequestQuantiles `json:"ttft_ms"`
	// RouterKnown is how many of the requests have the router's own
	// outcome record, RouterOK how many of those it counted a success
	// (HTTP 2xx) — what a router's success counter says, beside Finished.
	RouterKnown int `json:"router_known"`
	RouterOK    int `json:"router_ok"`
}

// ClientInfo is one request as its client received it (a tap's record).
type ClientInfo struct {
	At           time.Time   `json:"at"`     // when the record was written (the end)
	Source       string      `json:"source"` // the tap, or the log it was read from
	Worker       string      `json:"worker"` // named by a response header; "" when none did
	HTTPStatus   int         `json:"http_status"`
	End          string      `json:"end"`
	Class        ClientClass `json:"class"`
	FinishReason string      `json:"finish_reason"`
	TTFBMS       *float64    `json:"ttfb_ms"`
	TTFTMS       *float64    `json:"ttft_ms"`
	E2EMS        *float64    `json:"e2e_ms"`
	MaxGapMS     *float64    `json:"max_gap_ms"`
	Breaks       *int        `json:"breaks"`
	PromptChars  *int        `json:"prompt_chars"`
	PromptTokens *int        `json:"prompt_tokens"`
	CachedTokens *int        `json:"cached_tokens"`
	OutputTokens *int        `json:"output_tokens"`
	ClientSlow   bool        `json:"client_slow"`
}
