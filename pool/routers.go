package pool

import (
	"math"
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// RecoveryLookback is the span of a router's "current" pool hit rate, in
// every recovery state (one meaning for the NOW column): short, so that
// the recovery time is not smeared by a long average; RecoveryHoldS then
// guards against a lucky moment. After a restart the span starts at the
// restart, so the figure never mixes in the rate from before it.
const RecoveryLookback = 10 * time.Second

// router is one router target.
type router struct {
	name        string
	scraped     bool
	up          bool
	errMsg      string
	profile     string
	procStart   *float64
	requests    counterWindow
	processed   map[string]*labelWindow
	cb          map[string]cbState // circuit breakers by worker label, from the last good scrape
	restarts    int
	lastRestart time.Time

	// Dynamo's router and frontend figures from the last good scrape
	// (roles, load per worker, predicted hits) and its transfer estimates
	// over the window.
	dyn         *collectors.RouterMetrics
	transferEst histWindow

	// Recovery after the last restart.
	recovering  bool
	baseline    *float64
	withinSince time.Time // start of the current run within tolerance
	recovered   *float64  // seconds it took, once recovered
}

type labelWindow struct {
	w        counterWindow
	lastSeen time.Time
}

// cbState is one circuit breaker's value and since when it has had it.
type cbState struct {
	v     float64
	since time.Time
}

func (s *State) router(name string) *router {
	if i, ok := s.routerIdx[name]; ok {
		return s.routers[i]
	}
	if len(s.routers) >= maxRouters {
		s.ignore("too many routers: " + truncate(name, 80))
		return nil
	}
	r := &router{name: name, processed: map[string]*labelWindow{}, cb: map[string]cbState{}}
	s.routerIdx[name] = len(s.routers)
	s.routers = append(s.routers, r)
	return r
}

func (s *State) applyRouterScrape(m *collectors.MetricsScrape) {
	r := s.router(m.Target)
	if r == nil {
		return
	}
	r.scraped = true
	if m.Err != nil {
		r.up = false
		r.errMsg = message(m.Err.Message, 300)
		if r.errMsg == "" {
			r.errMsg = m.Err.Kind
		}
		s.errors.add(m.Err.Source, m.Err.Kind, m.Err.Message, m.Err.At)
		return
	}
	r.up, r.errMsg = true, ""
	r.profile = m.Profile

	// A restart is a changed process start, or a drop of a per-label
	// series that still exists. The summed requests counter alone proves
	// nothing: it drops when a label set vanishes, with no restart.
	restart := false
	if ps := finite(m.ProcessStart); ps != nil {
		if r.procStart != nil && *r.procStart != *ps {
			restart = true
		}
		r.procStart = ps
	}
	rm := m.Router
	if rm != nil && !restart {
		for label, v := range rm.Processed {
			if lw := r.processed[label]; lw != nil && lw.w.has && v < lw.w.last {
				restart = true
				break
			}
		}
		// A router exposing no per-label series has only its sum to go by.
		if len(rm.Processed) == 0 && rm.Requests != nil && r.requests.has && *rm.Requests < r.requests.last {
			restart = true
		}
	}
	if restart {
		r.requests.restarted()
		for _, lw := range r.processed {
			lw.w.restarted()
		}
	}
	if rm != nil {
		if rm.Requests != nil {
			// Not a restart: a drop is a vanished label set, not traffic.
			r.requests.addRebase(m.At, *rm.Requests, s.window)
		}
		for label, v := range rm.Processed {
			lw := r.processed[label]
			if lw == nil {
				if len(r.processed) >= maxWorkers {
					continue
				}
				lw = &labelWindow{}
				r.processed[label] = lw
			}
			lw.w.add(m.At, v, s.window)
			lw.lastSeen = m.At
		}
		s.applyBreakers(r, rm.CBState, m.At)
		r.dyn = rm
		r.transferEst.observe(m.At, rm.KVTransferEstimate, s.window)
	}
	for label, lw := range r.processed {
		if m.At.Sub(lw.lastSeen) > s.window {
			delete(r.processed, label)
		}
	}
	if restart {
		s.routerRestarted(r, m.At)
	}
}

// applyBreakers keeps the latest circuit breaker states, remembering since
// when each has held its value.
func (s *State) applyBreakers(r *router, cb map[string]float64, at time.Time) {
	for label := range r.cb {
		if _, ok := cb[label]; !ok {
			delete(r.cb, label)
		}
	}
	for label, v := range cb {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if old, ok := r.cb[label]; ok && old.v == v {
			continue
		}
		if len(r.cb) >= maxWorkers {
			continue
		}
		r.cb[label] = cbState{v: v, since: at}
	}
}

// routerRestarted starts tracking recovery. The baseline is the pool token
// hit rate over the window before the restart; a restart while still
// recovering keeps the older, healthy baseline.
func (s *State) routerRestarted(r *router, at time.Time) {
	r.restarts++
	r.lastRestart = at
	if !(r.recovering && r.baseline != nil) {
		r.baseline = s.poolHitSince(at.Add(-s.window), at).rate()
	}
	r.recovering = true
	r.withinSince = time.Time{}
	r.recovered = nil
}

// recovery advances the recovery state at now and describes it. Current
// is always the pool token hit over the last RecoveryLookback (from the
// restart when that is sooner): one meaning whatever the state.
func (s *State) recovery(r *router, now time.Time) snapshot.Recovery {
	from := now.Add(-RecoveryLookback)
	if !r.lastRestart.IsZero() && from.Before(r.lastRestart) {
		from = r.lastRestart
	}
	cur := s.poolHitSince(from, now).rate()
	span := max(now.Sub(from), 0).Seconds()
	if r.restarts == 0 {
		return snapshot.Recovery{State: snapshot.RecoverySteady, Current: cur, CurrentS: span}
	}
	if r.baseline == nil {
		return snapshot.Recovery{State: snapshot.RecoveryUnknown, Current: cur, CurrentS: span}
	}
	if !r.recovering {
		return snapshot.Recovery{State: snapshot.RecoveryRecovered, Seconds: cp(r.recovered), Baseline: cp(r.baseline), Current: cur, CurrentS: span}
	}
	th := s.opt.Thresholds
	if cur != nil && *cur >= *r.baseline-th.RecoveryTolerance {
		if r.withinSince.IsZero() {
			r.withinSince = now
		}
		if now.Sub(r.withinSince).Seconds() >= th.RecoveryHoldS {
			secs := r.withinSince.Sub(r.lastRestart).Seconds()
			r.recovered = &secs
			r.recovering = false
			return snapshot.Recovery{State: snapshot.RecoveryRecovered, Seconds: cp(r.recovered), Baseline: cp(r.baseline), Current: cur, CurrentS: span}
		}
	} else {
		r.withinSince = time.Time{}
	}
	so := now.Sub(r.lastRestart).Seconds()
	return snapshot.Recovery{State: snapshot.RecoveryRecovering, Seconds: &so, Baseline: cp(r.baseline), Current: cur, CurrentS: span}
}

// routed sums Δprocessed per worker name over the window; the key is the
// worker name when the label aliases one, else the label itself.
func (s *State) routed(r *router, now time.Time) (per map[string]float64, total float64, covered time.Duration) {
	per = map[string]float64{}
	// In label order: float sums come out the same every time, as a
	// replay of a journal must (a map's order changes from run to run).
	labels := make([]string, 0, len(r.processed))
	for label := range r.processed {
		labels = append(labels, label)
	}
	sort.Strings(labels)
	for _, label := range labels {
		lw := r.processed[label]
		d, c, ok := lw.w.delta(now, s.window)
		if !ok {
			continue
		}
		per[s.workerName(label)] += d
		total += d
		if c > covered {
			covered = c
		}
	}
	return per, total, covered
}
