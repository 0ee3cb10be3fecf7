package snapshot

// Recompute is the pool's recomputed prefill over the window (see the
// rule in README "Recomputed prefill").
type Recompute struct {
	// TokensPerS is recomputed prompt tokens per second; nil while no
	// measurable request was joined in the window.
	TokensPerS *float64 `json:"tokens_per_s"`
	// Share is recomputed tokens / prompt tokens of the measured requests
	// whose outcome gives its prompt; nil without them.
	Share *float64 `json:"share"`
	// Requests is how many requests recomputed (> 0 tokens) in the window.
	Requests int `json:"requests"`
	// NotMeasurable counts the joined requests whose record allowed no
	// measurement (character match, no prediction nor prefix, no
	// cached_tokens), and Measured those that did.
	NotMeasurable int `json:"not_measurable"`
	Measured      int `json:"measured"`
}

// WorkerRecompute is one worker's recomputed prefill over the window, as
// the chosen worker of the requests.
type WorkerRecompute struct {
	TokensPerS    *float64 `json:"tokens_per_s"`
	Share         *float64 `json:"share"`
	Requests      int      `json:"requests"`
	NotMeasurable int      `json:"not_measurable"`
}

// RecomputeInfo is one record's measurement.
type RecomputeInfo struct {
	// Tokens recomputed; nil until the outcome, or when not measurable.
	Tokens *int `json:"tokens"`
	// ElsewhereTokens is the best resident prefix on another up worker
	// when the decision arrived, Worker that worker ("" when none had
	// more), Source where that came from: "prediction" or "index".
	ElsewhereTokens *int   `json:"elsewhere_tokens"`
	Worker          string `json:"worker"`
	Source          string `json:"source"`
	// NotMeasurable says why no measurement was possible ("" when it was;
	// always in the JSON).
	NotMeasurable string `json:"not_measurable"`
}
