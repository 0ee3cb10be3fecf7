package snapshot

// Ladder is the hit-rate ladder of a worker or the pool over the window
// (pool/ladder.go): the prompt and hit tokens the engines counted, what the
// computed rest was, and the hit rate each fix would have reached. Token
// counts are over the window; figures are null while unknown, and Reason
// says why.
type Ladder struct {
	PromptTokens *float64 `json:"prompt_tokens"` // T
	HitTokens    *float64 `json:"hit_tokens"`    // H
	// Computed prompt tokens C = T − H by cause. Compulsory is C minus
	// the avoidable causes; Unexplained the avoidable beyond C.
	Compulsory    *float64 `json:"compulsory"`
	Routing       float64  `json:"routing"`
	Capacity      float64  `json:"capacity"`
	PoolCapacity  float64  `json:"pool_capacity"`
	Configuration float64  `json:"configuration"`
	Unexplained   float64  `json:"unexplained"`
	// NewBlocks is tokens in blocks seen for the first time, prompt or
	// generated: not a loss, never in T.
	NewBlocks float64 `json:"new_blocks"`
	// StaleIndex is tokens the router predicted on the chosen worker that
	// the engine did not have (joined decisions).
	StaleIndex float64     `json:"stale_index"`
	Rungs      LadderRungs `json:"rungs"`
	// PerS is each cause in tokens per second, Share as a share of T.
	PerS  LadderLosses `json:"per_s"`
	Share LadderLosses `json:"share"`
	// SampleRate is the share of hashes the memory of hashes seen follows
	// (1 while it has room); capacity, pool capacity and new blocks are
	// estimated from them.
	SampleRate float64 `json:"sample_rate"`
	Reason     string  `json:"reason"` // why figures are null; "" when known
	// LossHigh (the pool's ladder) is the held verdict that its largest
	// avoidable loss reaches thresholds.ladder_loss_share: the header
	// names it while it holds.
	LossHigh bool `json:"loss_high"`
}

// LadderRungs are the hit rates the pool would have had with each class
// of avoidable loss removed, cumulatively: actual (today's token hit
// rate), with perfect routing, with consistent hashing too, and with
// enough capacity too — the workload's ceiling, 1 − compulsory/T.
type LadderRungs struct {
	Actual            *float64 `json:"actual"`
	PerfectRouting    *float64 `json:"perfect_routing"`
	ConsistentHashing *float64 `json:"consistent_hashing"`
	EnoughCapacity    *float64 `json:"enough_capacity"`
}

// LadderLosses is one figure per cause.
type LadderLosses struct {
	Routing       *float64 `json:"routing"`
	Capacity      *float64 `json:"capacity"`
	PoolCapacity  *float64 `json:"pool_capacity"`
	Configuration *float64 `json:"configuration"`
	Compulsory    *float64 `json:"compulsory"`
}

// LargestLoss is the ladder's largest avoidable cause by its JSON key
// (routing, configuration, capacity, pool_capacity: the first of equals
// in that order) and its share of prompt tokens; known is false while no
// cause's share is known.
func (l *Ladder) LargestLoss() (cause string, share float64, known bool) {
	for _, c := range []struct {
		key string
		v   *float64
	}{{"routing", l.Share.Routing}, {"configuration", l.Share.Configuration}, {"capacity", l.Share.Capacity}, {"pool_capacity", l.Share.PoolCapacity}} {
		if c.v == nil {
			continue
		}
		if !known || *c.v > share {
			cause, share = c.key, *c.v
		}
		known = true
	}
	return cause, share, known
}
