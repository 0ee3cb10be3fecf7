package snapshot

// The snapshot's state words are typed, so that views, scripts in Go and
// the pool itself match them by constant, checked by the compiler, not by
// string literals. They are strings underneath: the JSON is the word.

// WorkerState is a worker's one-word state (Worker.State).
type WorkerState string

const (
	WorkerOK          WorkerState = "ok"
	WorkerOverheating WorkerState = "overheating"
	WorkerSaturated   WorkerState = "saturated" // KV use of some engine at or above kv_usage_high
	WorkerStale       WorkerState = "stale"     // index incomplete
	WorkerDown        WorkerState = "down"      // scrapes fail and no events arrive
	WorkerNoMetrics   WorkerState = "no_metrics"
	WorkerUnknown     WorkerState = "unknown" // not scraped yet, or no metrics configured
	// WorkerLeft: the worker left the set of targets (its pod was deleted
	// or no longer matches); its row is what it was last, for one window.
	WorkerLeft WorkerState = "left"
)

// ReasonNotScraped begins the Reason of a worker whose metrics are
// configured but whose first scrape has not ended yet (State unknown).
const ReasonNotScraped = "not scraped yet"

// RecoveryState is where a router is in its recovery after a restart
// (Recovery.State).
type RecoveryState string

const (
	RecoverySteady     RecoveryState = "steady" // no restart seen
	RecoveryRecovering RecoveryState = "recovering"
	RecoveryRecovered  RecoveryState = "recovered"
	RecoveryUnknown    RecoveryState = "unknown" // restarted, but no baseline to compare with
)

// Severity is how urgent an alert is (Alert.Severity).
type Severity string

const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// AlertKind says what an alert is about (Alert.Kind).
type AlertKind string

const (
	AlertOverheating      AlertKind = "overheating"
	AlertHistoryLost      AlertKind = "history_lost"
	AlertDown             AlertKind = "down"
	AlertNoMetrics        AlertKind = "no_metrics"
	AlertDisconnected     AlertKind = "disconnected"
	AlertIndexFull        AlertKind = "index_full"
	AlertBreakerOpen      AlertKind = "breaker_open"
	AlertRouterRecovering AlertKind = "router_recovering"
	AlertGap              AlertKind = "gap"
	AlertNotConnected     AlertKind = "not_connected"
	AlertJoinedLate       AlertKind = "joined_late"
	AlertDecodeErrors     AlertKind = "decode_errors"
	AlertWorkerRestart    AlertKind = "worker_restart"
	AlertUnmappedWorker   AlertKind = "unmapped_worker"
	AlertBadLines         AlertKind = "bad_lines"
	// The cache's own health (pool/fingerprints.go, pool/cache.go).
	AlertHashMismatch AlertKind = "hash_mismatch" // two workers hash identical prefixes differently
	AlertBlockSizes   AlertKind = "block_sizes"   // workers' block sizes differ
	AlertHashRestart  AlertKind = "hash_restart"  // a worker's hashes changed at its restart
	AlertHashRanks    AlertKind = "hash_ranks"    // a worker's DP ranks hash differently
	AlertThrash       AlertKind = "thrash"        // a full cache evicts blocks it stores again
)

// StreamState is the health of one publisher's event stream.
type StreamState string

const (
	StreamConnecting   StreamState = "connecting"
	StreamLive         StreamState = "live"
	StreamReplaying    StreamState = "replaying"
	StreamHistoryLost  StreamState = "history_lost"
	StreamJoinedLate   StreamState = "joined_late"
	StreamDisconnected StreamState = "disconnected"
)
