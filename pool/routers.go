package pool

import (
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// recoveryLookback is the span of the "current" pool hit rate while a
// router recovers: short, so that the recovery time is not smeared by a
// long average; RecoveryHoldS then guards against a lucky moment.
const recoveryLookback = 5 * time.Second

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
	restarts    int
	lastRestart time.Time

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

func (s *State) router(name string) *router {
	if i, ok := s.routerIdx[name]; ok {
		return s.routers[i]
	}
	if len(s.routers) >= maxRouters {
		s.ignore("too many routers: " + truncate(name, 80))
		return nil
	}
	r := &router{name: name, processed: map[string]*labelWindow{}}
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

	restart := false
	if ps := finite(m.ProcessStart); ps != nil {
		if r.procStart != nil && *r.procStart != *ps {
			restart = true
		}
		r.procStart = ps
	}
	if rm := m.Router; rm != nil {
		if rm.Requests != nil && r.requests.add(m.At, *rm.Requests, s.window) {
			restart = true
		}
		// The processed counters of workers present before and now: a
		// drop of their sum is a restart (a vanished label is not).
		var before, after float64
		for label, v := range rm.Processed {
			lw := r.processed[label]
			if lw == nil {
				if len(r.processed) >= maxWorkers {
					continue
				}
				lw = &labelWindow{}
				r.processed[label] = lw
			} else if lw.w.has {
				before += lw.w.last
				after += v
			}
			lw.w.add(m.At, v, s.window)
			lw.lastSeen = m.At
		}
		if after < before {
			restart = true
		}
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

// recovery advances the recovery state at now and describes it.
func (s *State) recovery(r *router, now time.Time) Recovery {
	win := s.poolHitSince(now.Add(-s.window), now).rate()
	if r.restarts == 0 {
		return Recovery{State: "steady", Current: win}
	}
	if r.baseline == nil {
		return Recovery{State: "unknown", Current: win}
	}
	if !r.recovering {
		return Recovery{State: "recovered", Seconds: cp(r.recovered), Baseline: cp(r.baseline), Current: win}
	}
	from := now.Add(-recoveryLookback)
	if from.Before(r.lastRestart) {
		from = r.lastRestart
	}
	cur := s.poolHitSince(from, now).rate()
	th := s.opt.Thresholds
	if cur != nil && *cur >= *r.baseline-th.RecoveryTolerance {
		if r.withinSince.IsZero() {
			r.withinSince = now
		}
		if now.Sub(r.withinSince).Seconds() >= th.RecoveryHoldS {
			secs := r.withinSince.Sub(r.lastRestart).Seconds()
			r.recovered = &secs
			r.recovering = false
			return Recovery{State: "recovered", Seconds: cp(r.recovered), Baseline: cp(r.baseline), Current: cur}
		}
	} else {
		r.withinSince = time.Time{}
	}
	so := now.Sub(r.lastRestart).Seconds()
	return Recovery{State: "recovering", Seconds: &so, Baseline: cp(r.baseline), Current: cur}
}

// routed sums Δprocessed per worker name over the window; the key is the
// worker name when the label aliases one, else the label itself.
func (s *State) routed(r *router, now time.Time) (per map[string]float64, total float64, covered time.Duration) {
	per = map[string]float64{}
	for label, lw := range r.processed {
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
