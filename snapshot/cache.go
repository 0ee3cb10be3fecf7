package snapshot

import "time"

// Cache is a scope's cache figures over the window (engine, worker, pool;
// see README "Eviction and thrash").
type Cache struct {
	// CapacityTokens is num_gpu_blocks × block_size from the cache
	// geometry (vllm:cache_config_info, SGLang's pages); ResidentTokens the
	// GPU blocks the index holds × their block size. nil when unknown.
	CapacityTokens *int `json:"capacity_tokens"`
	ResidentTokens *int `json:"resident_tokens"`
	// StoredPerS and RemovedPerS are GPU blocks per second in live
	// batches over the window; nil without a live batch.
	StoredPerS  *float64 `json:"stored_per_s"`
	RemovedPerS *float64 `json:"removed_per_s"`
	// ResidencyS is how long removed blocks had been resident (store to
	// removal, kvtop's clock), from the sampled blocks.
	ResidencyS Residency `json:"residency_s"`
	// ThrashPerS is stores of blocks the same engine removed within the
	// window before, per second; ThrashShare their share of the stored
	// blocks. Estimated from the sample (2^level per sampled store).
	ThrashPerS  *float64 `json:"thrash_per_s"`
	ThrashShare *float64 `json:"thrash_share"`
	// SampleRate is the share of blocks followed for residency and
	// thrash (1 = all; the lowest of the engines summed). nil without a
	// stream.
	SampleRate *float64 `json:"sample_rate"`
}

// Residency of removed blocks, seconds.
type Residency struct {
	P50  *float64 `json:"p50"`
	Mean *float64 `json:"mean"`
	// Samples is how many sampled removals the figures come from.
	Samples int `json:"samples"`
	// Capped: p50 fell in the last bucket (beyond about 7 days): a floor.
	Capped bool `json:"capped"`
}

// CacheTiers are a worker's (or the pool's) tier figures over the window.
type CacheTiers struct {
	// PromptTokensPerS is the denominator of the shares: prompt tokens
	// per second over the window (nil: unknown, then no share).
	PromptTokensPerS *float64 `json:"prompt_tokens_per_s"`
	// Hits are hit tokens per tier, GPU first, then by tokens.
	Hits []TierHit `json:"hits"`
	// LoadBytesPerS and StoreBytesPerS: the KV connector's reads back into
	// the GPU and its stores from it; StoresWithoutLoads when the window
	// stored and read nothing back.
	LoadBytesPerS      *float64 `json:"load_bytes_per_s"`
	StoreBytesPerS     *float64 `json:"store_bytes_per_s"`
	StoresWithoutLoads bool     `json:"stores_without_loads"`
	// HostUsedTokens and HostTotalTokens: SGLang's hierarchical cache host
	// pool (gauges, the last scrape); nil elsewhere.
	HostUsedTokens  *float64 `json:"host_used_tokens"`
	HostTotalTokens *float64 `json:"host_total_tokens"`
}

// TierHit is one tier's hit tokens over the window.
type TierHit struct {
	Tier       string   `json:"tier"` // GPU; the connector's: the worker's one offload medium (CPU, …), else "offload", or vLLM's tiering tiers ("primary", "fs"); SGLang's host, storage; lmcache
	TokensPerS float64  `json:"tokens_per_s"`
	Share      *float64 `json:"share"` // of prompt tokens; nil when they are unknown
}

// HashMismatch is the hash-boundary check (see README "Hash mismatches").
type HashMismatch struct {
	// Pairs are workers that stored identical root prefixes under
	// different block hashes since the later of their last restarts.
	Pairs []HashPair `json:"pairs"`
	// AcrossRestart are workers that stored the same prefix under other
	// hashes after their last restart than before it: their hash seed is
	// not fixed. AcrossRanks: two DP ranks of one worker disagree.
	AcrossRestart []string `json:"across_restart"`
	AcrossRanks   []string `json:"across_ranks"`
	// BlockSizes groups the workers by block size when they differ (an
	// event-fed index cannot match blocks of different sizes; never
	// reported as a seed mismatch). [] when all known sizes agree.
	BlockSizes []BlockSizeGroup `json:"block_sizes"`
	// Agreeing counts root prefixes two workers stored under one hash: how
	// much the check had to compare.
	Agreeing int `json:"agreeing"`
	// Fingerprints is the table's size now, FingerprintsLimit its bound
	// (limits.fingerprints) and FingerprintsDropped the entries forgotten
	// because it was full.
	Fingerprints        int    `json:"fingerprints"`
	FingerprintsLimit   int    `json:"fingerprints_limit"`
	FingerprintsDropped uint64 `json:"fingerprints_dropped"`
}

// HashPair is two workers that hash identical prefixes differently.
type HashPair struct {
	A string `json:"a"`
	B string `json:"b"`
	// Prefixes is the distinct root prefixes seen under different hashes
	// (counted up to 1024).
	Prefixes int       `json:"prefixes"`
	Since    time.Time `json:"since"`
}

// BlockSizeGroup is the workers of one block size.
type BlockSizeGroup struct {
	BlockSize int      `json:"block_size"`
	Workers   []string `json:"workers"`
}
