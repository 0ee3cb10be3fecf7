package pool

import "github.com/kvtop/kvtop/snapshot"

// The snapshot's types, states and rules moved to package snapshot, which
// views, remote consoles and the API read without the pool. These aliases
// keep code that names them here compiling until it is rewritten
// (`go fix -inline` replaces each use by the snapshot's own name).

//go:fix inline
type Cache = snapshot.Cache

//go:fix inline
type Residency = snapshot.Residency

//go:fix inline
type CacheTiers = snapshot.CacheTiers

//go:fix inline
type TierHit = snapshot.TierHit

//go:fix inline
type HashMismatch = snapshot.HashMismatch

//go:fix inline
type HashPair = snapshot.HashPair

//go:fix inline
type BlockSizeGroup = snapshot.BlockSizeGroup

//go:fix inline
type Ladder = snapshot.Ladder

//go:fix inline
type LadderRungs = snapshot.LadderRungs

//go:fix inline
type LadderLosses = snapshot.LadderLosses

//go:fix inline
type Latency = snapshot.Latency

//go:fix inline
type Tokens = snapshot.Tokens

//go:fix inline
type RequestQuantiles = snapshot.RequestQuantiles

//go:fix inline
type RequestLatency = snapshot.RequestLatency

//go:fix inline
type Recompute = snapshot.Recompute

//go:fix inline
type WorkerRecompute = snapshot.WorkerRecompute

//go:fix inline
type RecomputeInfo = snapshot.RecomputeInfo

//go:fix inline
type Snapshot = snapshot.Snapshot

//go:fix inline
type PoolSummary = snapshot.PoolSummary

//go:fix inline
type HitRate = snapshot.HitRate

//go:fix inline
type PoolHitRate = snapshot.PoolHitRate

//go:fix inline
type Skew = snapshot.Skew

//go:fix inline
type Point = snapshot.Point

//go:fix inline
type PoolSeries = snapshot.PoolSeries

//go:fix inline
type WorkerSeries = snapshot.WorkerSeries

//go:fix inline
type Worker = snapshot.Worker

//go:fix inline
type Tier = snapshot.Tier

//go:fix inline
type Group = snapshot.Group

//go:fix inline
type Engine = snapshot.Engine

//go:fix inline
type Invalid = snapshot.Invalid

//go:fix inline
type Stream = snapshot.Stream

//go:fix inline
type Incident = snapshot.Incident

//go:fix inline
type WorkerPrefix = snapshot.WorkerPrefix

//go:fix inline
type Prefix = snapshot.Prefix

//go:fix inline
type Router = snapshot.Router

//go:fix inline
type Recovery = snapshot.Recovery

//go:fix inline
type FlaggedTotal = snapshot.FlaggedTotal

//go:fix inline
type Decisions = snapshot.Decisions

//go:fix inline
type DecisionSource = snapshot.DecisionSource

//go:fix inline
type DecisionRow = snapshot.DecisionRow

//go:fix inline
type PredictionInfo = snapshot.PredictionInfo

//go:fix inline
type LoadInfo = snapshot.LoadInfo

//go:fix inline
type OutcomeInfo = snapshot.OutcomeInfo

//go:fix inline
type ErrorCount = snapshot.ErrorCount

//go:fix inline
type Alert = snapshot.Alert

//go:fix inline
type Thresholds = snapshot.Thresholds

//go:fix inline
type WorkerState = snapshot.WorkerState

//go:fix inline
type RecoveryState = snapshot.RecoveryState

//go:fix inline
type Severity = snapshot.Severity

//go:fix inline
type AlertKind = snapshot.AlertKind

//go:fix inline
type Kube = snapshot.Kube

//go:fix inline
type Termination = snapshot.Termination

//go:fix inline
type Churn = snapshot.Churn

//go:fix inline
const (
	SkewHigh              = snapshot.SkewHigh
	SkewSevere            = snapshot.SkewSevere
	WorkerOK              = snapshot.WorkerOK
	WorkerOverheating     = snapshot.WorkerOverheating
	WorkerSaturated       = snapshot.WorkerSaturated
	WorkerStale           = snapshot.WorkerStale
	WorkerDown            = snapshot.WorkerDown
	WorkerNoMetrics       = snapshot.WorkerNoMetrics
	WorkerUnknown         = snapshot.WorkerUnknown
	WorkerLeft            = snapshot.WorkerLeft
	RecoverySteady        = snapshot.RecoverySteady
	RecoveryRecovering    = snapshot.RecoveryRecovering
	RecoveryRecovered     = snapshot.RecoveryRecovered
	RecoveryUnknown       = snapshot.RecoveryUnknown
	SeverityCritical      = snapshot.SeverityCritical
	SeverityWarning       = snapshot.SeverityWarning
	SeverityInfo          = snapshot.SeverityInfo
	AlertOverheating      = snapshot.AlertOverheating
	AlertHistoryLost      = snapshot.AlertHistoryLost
	AlertDown             = snapshot.AlertDown
	AlertNoMetrics        = snapshot.AlertNoMetrics
	AlertDisconnected     = snapshot.AlertDisconnected
	AlertIndexFull        = snapshot.AlertIndexFull
	AlertBreakerOpen      = snapshot.AlertBreakerOpen
	AlertRouterRecovering = snapshot.AlertRouterRecovering
	AlertGap              = snapshot.AlertGap
	AlertNotConnected     = snapshot.AlertNotConnected
	AlertJoinedLate       = snapshot.AlertJoinedLate
	AlertDecodeErrors     = snapshot.AlertDecodeErrors
	AlertWorkerRestart    = snapshot.AlertWorkerRestart
	AlertUnmappedWorker   = snapshot.AlertUnmappedWorker
	AlertBadLines         = snapshot.AlertBadLines
	AlertHashMismatch     = snapshot.AlertHashMismatch
	AlertBlockSizes       = snapshot.AlertBlockSizes
	AlertHashRestart      = snapshot.AlertHashRestart
	AlertHashRanks        = snapshot.AlertHashRanks
	AlertThrash           = snapshot.AlertThrash
	ReasonNotScraped      = snapshot.ReasonNotScraped
)

//go:fix inline
func MaxOwners(up int) int { return snapshot.MaxOwners(up) }

//go:fix inline
func QueueMedian(ws []snapshot.Worker) *float64 { return snapshot.QueueMedian(ws) }

//go:fix inline
func DefaultThresholds() snapshot.Thresholds { return snapshot.DefaultThresholds() }
