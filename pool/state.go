// Package pool folds collector observations into immutable snapshots.
//
// All state lives in a State owned by one goroutine (Pool.Run); nothing is
// locked on the hot path. State is also usable directly, synchronously and
// with an injected clock, which is how tests and benchmarks drive it.
package pool

import (
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// MinRefresh is the refresh floor: of the snapshot cadence, the config's
// refresh and the console's +/- steps (one figure for all of them).
const MinRefresh = 250 * time.Millisecond

// maxWorkers and maxRouters bound discovery: a source that invents ids
// cannot grow the pool without limit. Later ids are counted as errors.
const (
	maxWorkers = 4096
	maxRouters = 256
)

// State is the pool's whole state. It is not safe for concurrent use:
// one goroutine applies observations and builds snapshots.
type State struct {
	opt     Options
	window  time.Duration
	refresh time.Duration

	names   *names
	workers []*worker
	pubs    map[pubKey]*publisher
	pubList []*publisher // by publisher id; nil once its worker is forgotten
	// nextWorkerID numbers workers for good: ids are never reused, as
	// workers discovered in Kubernetes come and go (targets.go).
	nextWorkerID int32
	index        *poolIndex
	// storeOnlyAfter is storeOnlyAfter, or Options.StoreOnlyAfter (tests).
	storeOnlyAfter int
	// overheatSince is when each overheating worker began to (buildAlerts).
	overheatSince map[string]time.Time
	// overheat holds the overheating verdicts in force (overheat.go).
	overheat map[heatKey]verdict
	// The pool's held verdicts on its load skew (High, Severe) and on the
	// ladder's largest loss (verdict.go).
	skewHigh, skewSevere, lossHigh verdict
	fps                            *fingerprints  // the hash-boundary check (fingerprints.go)
	ladder                         *ladder        // the hit-rate ladder's memory (ladder.go)
	classes                        []classSamples // hot versus the rest, reused per snapshot (hotrest.go)

	evPrefix  *prefixCounter // traffic estimated from BlockStored events
	decPrefix *prefixCounter // traffic from decisions that name a prefix
	hot       hotSet         // prefixes in the last snapshot's top list

	journal  *journal
	outcomes *buckets          // pool request-weighted hits: (hits, outcomes)
	recomp   *recomputeWindows // pool recomputed prefill (recompute.go)
	// outcomeSources: decision sources known to get outcomes (no_outcome
	// is flagged only for those).
	outcomeSources map[string]bool
	decSources     []snapshot.DecisionSource // latest status per decision log, in arrival order
	unmapped       unmappedNames             // decision worker names no configured worker answers to

	routers   []*router
	routerIdx map[string]int

	errors     *errorTable
	badLines   int
	badLineWin *buckets // bad lines over time, for the alert
	// ignored counts observations the pool could not place (unknown
	// type, too many workers): shown as an error row, never fatal.
	ignored int

	churn churn // workers joining and leaving (targets)

	poolHit, poolHitReq, poolQueue, poolSkew series
	poolRouting, poolCeiling                 series            // the ladder's perfect-routing and ceiling rungs
	lpool                                    poolLatencySeries // TTFT and tokens/s (build_latency.go)
	seq                                      uint64
}

// NewState returns an empty state for o, with defaults filled in.
func NewState(o Options) *State {
	o = withDefaults(o)
	s := &State{
		opt:            o,
		window:         o.Window,
		refresh:        o.Refresh,
		names:          newNames(),
		pubs:           map[pubKey]*publisher{},
		index:          newPoolIndex(o.Limits.IndexBlocks),
		storeOnlyAfter: storeOnlyAfter,
		fps:            newFingerprints(o.Limits.Fingerprints),
		ladder:         newLadder(o.Limits.LadderHashes),
		evPrefix:       newPrefixCounter(o.Window, o.Limits.PrefixCounters),
		decPrefix:      newPrefixCounter(o.Window, o.Limits.PrefixCounters),
		journal:        newJournal(o.Limits.Decisions),
		outcomeSources: map[string]bool{},
		outcomes:       newBuckets(o.Window),
		recomp:         newRecomputeWindows(o.Window),
		routerIdx:      map[string]int{},
		errors:         newErrorTable(o.Limits.Errors),
	}
	if o.StoreOnlyAfter > 0 {
		s.storeOnlyAfter = o.StoreOnlyAfter
	}
	s.badLineWin = newBuckets(o.Window)
	for _, w := range o.Workers {
		nw := s.addWorker(w.Name, w.Aliases, true)
		nw.noMetrics, nw.events, nw.cfgRole = w.NoMetrics, w.Events, w.Role
		nw.setRole(roleOf(nw, nil)) // before the first snapshot: the ladder needs it
	}
	for _, r := range o.Routers {
		if rt := s.router(r.Name); rt != nil && r.Profile != "auto" {
			rt.profile = r.Profile
		}
	}
	return s
}

func withDefaults(o Options) Options {
	if o.Window <= 0 {
		o.Window = 60 * time.Second
	}
	if o.Refresh <= 0 {
		o.Refresh = time.Second
	}
	if o.Refresh < MinRefresh {
		o.Refresh = MinRefresh
	}
	if o.Name == "" {
		o.Name = "default"
	}
	dt := snapshot.DefaultThresholds()
	t := &o.Thresholds
	for _, f := range []struct{ dst, def *float64 }{
		{&t.HotPrefixShare, &dt.HotPrefixShare},
		{&t.OverheatShare, &dt.OverheatShare},
		{&t.OverheatQueueRatio, &dt.OverheatQueueRatio},
		{&t.OverheatMinQueue, &dt.OverheatMinQueue},
		{&t.KVUsageHigh, &dt.KVUsageHigh},
		{&t.RecoveryTolerance, &dt.RecoveryTolerance},
		{&t.RecoveryHoldS, &dt.RecoveryHoldS},
		{&t.ThrashShare, &dt.ThrashShare},
		{&t.LeaveRatio, &dt.LeaveRatio},
		{&t.LeaveAfterS, &dt.LeaveAfterS},
		{&t.LadderLossShare, &dt.LadderLossShare},
	} {
		if *f.dst <= 0 {
			*f.dst = *f.def
		}
	}
	if t.LeaveRatio > 1 {
		t.LeaveRatio = 1 // a leave mark above the enter mark would end a verdict as it begins
	}
	if t.ThrashMinStored <= 0 {
		t.ThrashMinStored = dt.ThrashMinStored
	}
	dl := DefaultLimits()
	l := &o.Limits
	for _, f := range []struct{ dst, def *int }{
		{&l.Decisions, &dl.Decisions},
		{&l.RecentDecisions, &dl.RecentDecisions},
		{&l.Prefixes, &dl.Prefixes},
		{&l.PrefixCounters, &dl.PrefixCounters},
		{&l.Incidents, &dl.Incidents},
		{&l.Errors, &dl.Errors},
		{&l.IndexBlocks, &dl.IndexBlocks},
		{&l.Fingerprints, &dl.Fingerprints},
	} {
		if *f.dst <= 0 {
			*f.dst = *f.def
		}
	}
	return o
}

// Refresh is the snapshot cadence in force.
func (s *State) Refresh() time.Duration { return s.refresh }

// SetSeq numbers the next snapshot n+1: a replay of a journal segment
// that starts mid-recording continues the recording's numbers.
func (s *State) SetSeq(n uint64) { s.seq = n }

// SetRefresh changes the snapshot cadence (floor MinRefresh).
func (s *State) SetRefresh(d time.Duration) {
	if d < MinRefresh {
		d = MinRefresh
	}
	s.refresh = d
}

// Apply folds one observation into the state. Unknown observation types
// are counted and otherwise ignored.
func (s *State) Apply(o collectors.Observation) {
	switch v := o.(type) {
	case *collectors.MetricsScrape:
		if v == nil {
			return
		}
		if v.Role == collectors.RoleRouter {
			s.applyRouterScrape(v)
		} else {
			s.applyScrape(v)
		}
	case *collectors.EventBatch:
		if v != nil {
			s.applyBatch(v)
		}
	case *collectors.StreamReset:
		if v != nil {
			s.applyReset(v)
		}
	case *collectors.StreamStatus:
		if v != nil {
			s.applyStatus(v)
		}
	case *collectors.Decision:
		if v != nil {
			s.applyDecision(v)
		}
	case *collectors.Outcome:
		if v != nil {
			s.applyOutcome(v)
		}
	case *collectors.SourceError:
		if v != nil {
			s.applyError(v)
		}
	case *collectors.DecisionSource:
		if v != nil {
			s.applyDecisionSource(v)
		}
	case *collectors.TargetChange:
		if v != nil {
			s.applyTarget(v)
		}
	case nil:
	default:
		s.ignore("unknown observation type")
	}
}

func (s *State) ignore(why string) {
	s.ignored++
	s.errors.add("pool", "ignored", why, time.Time{})
}

// addWorker appends a worker (configured, or discovered from a source).
func (s *State) addWorker(name string, aliases []string, configured bool) *worker {
	w := newWorker(name, configured, s.window)
	w.id = s.nextWorkerID
	s.nextWorkerID++
	w.aliases = aliases
	s.workers = append(s.workers, w)
	s.names.add(len(s.workers)-1, name, aliases)
	return w
}

// workerFor resolves a source's id to a worker, discovering a new one
// when origin names the kind of source it came from ("" never
// discovers). It returns nil for an empty id or past maxWorkers.
func (s *State) workerFor(id, origin string) *worker {
	if id == "" {
		return nil
	}
	if i := s.names.lookup(id); i >= 0 {
		return s.workers[i]
	}
	if origin == "" {
		return nil
	}
	if len(s.workers) >= maxWorkers {
		s.ignore("too many workers: " + truncate(id, 80))
		return nil
	}
	w := s.addWorker(foldRank(id), nil, false)
	w.origin = origin
	return w
}

// workerName maps a source's id to the worker name it aliases, or returns
// it verbatim.
func (s *State) workerName(id string) string {
	if i := s.names.lookup(id); i >= 0 {
		return s.workers[i].name
	}
	return id
}

func (s *State) applyError(e *collectors.SourceError) {
	s.errors.add(e.Source, e.Kind, e.Message, e.At)
	if e.Kind == "bad_line" {
		s.badLines++
		if !e.Backfill {
			s.badLineWin.add(e.At, 1, 0)
		}
	}
}

// message makes a source's message fit one screen line: whitespace
// (newlines included) collapsed, at most n bytes.
func message(s string, n int) string {
	return truncate(strings.Join(strings.Fields(s), " "), n)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
