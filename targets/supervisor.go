package targets

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/kvevents"
	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/pool"
)

// Options configure the collectors the Supervisor runs per target.
type Options struct {
	// Metrics is the template of every metrics collector (Targets is
	// ignored: each target gets its own).
	Metrics metrics.Options
	// Events is the template of the one event collector (Endpoints is
	// ignored, Dynamic is set). Bind keeps the centralized layout: its
	// topic ids are matched to the current workers by name, alias or
	// host:port (Resolve), unless ResolveEndpoint is set.
	Events kvevents.Options
}

// Supervisor runs the collectors of the current set of targets. It is a
// collectors.Collector: Run it beside the others.
type Supervisor struct {
	o   Options
	src Source
	kv  *kvevents.Collector

	mu      sync.RWMutex // guards workers for Resolve (kvevents' goroutine)
	workers map[string]*runningWorker
	order   []string // worker names in the order they joined
	routers map[string]*runningRouter
	kvOn    bool // the event collector runs (started at the first stream)
	kvDone  chan struct{}
	kvStop  context.CancelFunc
}

type runningWorker struct {
	w      Worker
	stop   context.CancelFunc // its metrics collector
	done   chan struct{}
	events bool // its streams were added to the event collector
}

type runningRouter struct {
	r    Router
	stop context.CancelFunc
	done chan struct{}
}

var _ collectors.Collector = (*Supervisor)(nil)

// New prepares a supervisor fed by src. A Static source is checked here:
// a bad endpoint in the config is an error now, as before, while one a
// discovery source finds later is a SourceError that leaves the others
// running.
func New(o Options, src Source) (*Supervisor, error) {
	if st, ok := src.(Static); ok {
		if err := Check(st.Set, o); err != nil {
			return nil, err
		}
	}
	eo := o.Events
	eo.Endpoints, eo.Dynamic = nil, true
	s := &Supervisor{o: o, src: src, workers: map[string]*runningWorker{}, routers: map[string]*runningRouter{}}
	if eo.Bind != "" && eo.ResolveEndpoint == nil {
		eo.ResolveEndpoint = s.Resolve
	}
	kv, err := kvevents.New(eo)
	if err != nil {
		return nil, err
	}
	s.kv = kv
	s.o.Events = eo
	return s, nil
}

// Check reports the first target of set whose endpoints cannot be used
// (not a URL, not a ZMQ endpoint, a bad profile), with the message the
// collector gives.
func Check(set Set, o Options) error {
	for _, w := range set.Workers {
		if w.Metrics != "" {
			if _, err := metrics.New(metricsOptions(o, metricsTarget(w.Name, collectors.RoleWorker, w.Metrics, w.Engine, w.Auth))); err != nil {
				return err
			}
		}
		if _, err := workerEndpoints(w); err != nil {
			return err
		}
	}
	for _, r := range set.Routers {
		if _, err := metrics.New(metricsOptions(o, metricsTarget(r.Name, collectors.RoleRouter, r.Metrics, r.Profile, r.Auth))); err != nil {
			return err
		}
	}
	return nil
}

// Name implements collectors.Collector.
func (s *Supervisor) Name() string { return "targets" }

// Run follows the source until ctx is done, starting and stopping
// collectors per target. It returns the source's fatal error, else nil.
func (s *Supervisor) Run(ctx context.Context, out chan<- collectors.Observation) error {
	sets := make(chan Set)
	werr := make(chan error, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	go func() { werr <- s.src.Watch(wctx, sets, out) }()
	if s.o.Events.Bind != "" {
		s.startEvents(ctx, out)
	}
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case set := <-sets:
			s.apply(ctx, set, out)
		case err = <-werr:
			if err != nil {
				break loop
			}
			werr = nil // a source that ended: its last set stays
		}
	}
	stopWatch()
	s.stopAll()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Resolve maps the id in a centralized-layout topic (kv@<id>@<model>) to a
// current worker by name, alias, or host:port (the pool's rule), with its
// replay endpoint and first seq. An id nobody claims becomes a worker of
// its own.
func (s *Supervisor) Resolve(id string) kvevents.Endpoint {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, name := range s.order {
		w := &s.workers[name].w
		match := w.Name == id
		for _, a := range w.Aliases {
			match = match || a == id || pool.SameEndpoint(a, id)
		}
		if match {
			return kvevents.Endpoint{Worker: w.Name, Replay: w.Replay, FirstSeq: w.FirstSeq}
		}
	}
	return kvevents.Endpoint{Worker: id}
}

// apply moves the running collectors from the current set to set.
func (s *Supervisor) apply(ctx context.Context, set Set, out chan<- collectors.Observation) {
	at := set.At
	if at.IsZero() {
		at = time.Now()
	}
	next := make(map[string]*Worker, len(set.Workers))
	for i := range set.Workers {
		next[set.Workers[i].Name] = &set.Workers[i]
	}
	// Left first: a name that moved to another pod is stopped before the
	// new one starts.
	for _, name := range append([]string(nil), s.order...) {
		if _, ok := next[name]; ok {
			continue
		}
		s.stopWorker(name)
		why := set.Left[name]
		if why == "" {
			why = "no longer discovered"
		}
		emit(ctx, out, &collectors.TargetChange{Name: name, Role: collectors.RoleWorker, Kind: collectors.TargetLeft, Reason: why, At: at})
	}
	// The event streams of every worker that starts are added in one
	// call: each Add is a round trip to the event collector's state
	// goroutine, which at start is busy with every publisher's join
	// replay (one Add a worker started ~590 of 1 000 workers in 95 s).
	var adds []pendingEvents
	for i := range set.Workers {
		w := set.Workers[i]
		rw := s.workers[w.Name]
		switch {
		case rw == nil:
			emit(ctx, out, change(&w, collectors.TargetJoined, "", at))
			adds = s.startWorker(ctx, w, out, adds)
		case !sameEndpoints(&rw.w, &w):
			why := "endpoints changed"
			kind := collectors.TargetUpdated
			if uid(&rw.w) != uid(&w) {
				why, kind = "pod replaced (new UID)", collectors.TargetJoined
			}
			s.stopWorker(w.Name)
			emit(ctx, out, change(&w, kind, why, at))
			adds = s.startWorker(ctx, w, out, adds)
		case !sameKube(rw.w.Kube, w.Kube) || !sameAliases(rw.w.Aliases, w.Aliases):
			s.mu.Lock()
			rw.w = w
			s.mu.Unlock()
			emit(ctx, out, change(&w, collectors.TargetUpdated, "", at))
		}
	}
	s.addEvents(ctx, adds, out)
	seen := map[string]bool{}
	for i := range set.Routers {
		r := set.Routers[i]
		seen[r.Name] = true
		rr := s.routers[r.Name]
		if rr != nil && sameRouter(&rr.r, &r) {
			continue
		}
		if rr != nil {
			rr.halt()
		}
		emit(ctx, out, &collectors.TargetChange{Name: r.Name, Role: collectors.RoleRouter, Kind: collectors.TargetJoined, At: at})
		s.routers[r.Name] = s.startRouter(ctx, r, out)
	}
	for name, rr := range s.routers {
		if !seen[name] {
			rr.halt()
			delete(s.routers, name)
			emit(ctx, out, &collectors.TargetChange{Name: name, Role: collectors.RoleRouter, Kind: collectors.TargetLeft,
				Reason: "no longer discovered", At: at})
		}
	}
}

func change(w *Worker, kind collectors.TargetChangeKind, why string, at time.Time) *collectors.TargetChange {
	c := &collectors.TargetChange{Name: w.Name, Role: collectors.RoleWorker, Kind: kind, Reason: why,
		Aliases: append([]string(nil), w.Aliases...), NoMetrics: w.Metrics == "" && !w.MetricsElsewhere, At: at}
	if w.Kube != nil {
		k := *w.Kube
		if t := k.LastTermination; t != nil {
			tt := *t
			k.LastTermination = &tt
		}
		c.Kube = &k
	}
	return c
}

// pendingEvents are the event streams of a worker started, not yet added
// to the event collector.
type pendingEvents struct {
	rw  *runningWorker
	eps []kvevents.Endpoint
}

// startWorker starts a worker's metrics collector and appends its event
// streams to adds (addEvents adds them).
func (s *Supervisor) startWorker(ctx context.Context, w Worker, out chan<- collectors.Observation, adds []pendingEvents) []pendingEvents {
	rw := &runningWorker{w: w}
	s.mu.Lock()
	s.workers[w.Name] = rw
	s.order = append(s.order, w.Name)
	s.mu.Unlock()
	if w.Metrics != "" {
		m, err := metrics.New(metricsOptions(s.o, metricsTarget(w.Name, collectors.RoleWorker, w.Metrics, w.Engine, w.Auth)))
		if err != nil {
			emit(ctx, out, &collectors.SourceError{Source: w.Name + " metrics", Kind: "config", Message: err.Error(), At: time.Now()})
		} else {
			rw.stop, rw.done = runCollector(ctx, m, out)
		}
	}
	eps, err := workerEndpoints(w)
	if err != nil {
		emit(ctx, out, &collectors.SourceError{Source: w.Name + " events", Kind: "config", Message: err.Error(), At: time.Now()})
		return adds
	}
	if len(eps) == 0 {
		return adds
	}
	return append(adds, pendingEvents{rw: rw, eps: eps})
}

// addEvents adds the streams of the workers started, in one Add; if that
// is refused (one worker's streams clash), each worker's alone, so the
// error names it and the others still stream.
func (s *Supervisor) addEvents(ctx context.Context, adds []pendingEvents, out chan<- collectors.Observation) {
	if len(adds) == 0 {
		return
	}
	s.startEvents(ctx, out)
	var all []kvevents.Endpoint
	for _, a := range adds {
		all = append(all, a.eps...)
	}
	err := s.kv.Add(all...)
	if err == nil {
		for _, a := range adds {
			a.rw.events = true
		}
		return
	}
	if errors.Is(err, kvevents.ErrStopped) {
		return
	}
	for _, a := range adds {
		if err := s.kv.Add(a.eps...); err != nil {
			if !errors.Is(err, kvevents.ErrStopped) {
				emit(ctx, out, &collectors.SourceError{Source: a.rw.w.Name + " events", Kind: "config", Message: err.Error(), At: time.Now()})
			}
			continue
		}
		a.rw.events = true
	}
}

// stopWorker stops a worker's collectors and waits until they sent their
// last observation.
func (s *Supervisor) stopWorker(name string) {
	rw := s.workers[name]
	if rw == nil {
		return
	}
	if rw.stop != nil {
		rw.stop()
		<-rw.done
	}
	if rw.events {
		s.kv.Remove(name)
	}
	s.mu.Lock()
	delete(s.workers, name)
	for i, n := range s.order {
		if n == name {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
}

func (s *Supervisor) startRouter(ctx context.Context, r Router, out chan<- collectors.Observation) *runningRouter {
	rr := &runningRouter{r: r}
	m, err := metrics.New(metricsOptions(s.o, metricsTarget(r.Name, collectors.RoleRouter, r.Metrics, r.Profile, r.Auth)))
	if err != nil {
		emit(ctx, out, &collectors.SourceError{Source: r.Name + " metrics", Kind: "config", Message: err.Error(), At: time.Now()})
		return rr
	}
	rr.stop, rr.done = runCollector(ctx, m, out)
	return rr
}

func (rr *runningRouter) halt() {
	if rr.stop != nil {
		rr.stop()
		<-rr.done
	}
}

// startEvents starts the one event collector, at the first stream (an
// idle console with no streams runs no ZMQ context at all).
func (s *Supervisor) startEvents(ctx context.Context, out chan<- collectors.Observation) {
	if s.kvOn {
		return
	}
	s.kvOn = true
	kctx, stop := context.WithCancel(ctx)
	s.kvStop, s.kvDone = stop, make(chan struct{})
	go func() {
		defer close(s.kvDone)
		_ = s.kv.Run(kctx, out) // Dynamic: returns only on cancellation
	}()
}

func (s *Supervisor) stopAll() {
	for _, name := range append([]string(nil), s.order...) {
		rw := s.workers[name]
		if rw.stop != nil {
			rw.stop()
			<-rw.done
		}
	}
	for _, rr := range s.routers {
		rr.halt()
	}
	if s.kvOn {
		s.kvStop()
		<-s.kvDone
	}
}

func runCollector(ctx context.Context, c collectors.Collector, out chan<- collectors.Observation) (context.CancelFunc, chan struct{}) {
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(cctx, out) // metrics: returns nil on cancellation
	}()
	return stop, done
}

func metricsTarget(name string, role collectors.Role, url, profile string, a Auth) metrics.Target {
	return metrics.Target{
		Name: name, Role: role, URL: url, Profile: profile,
		BearerTokenFile: a.BearerTokenFile, BearerTokenEnv: a.BearerTokenEnv,
		CAFile: a.CAFile, InsecureSkipVerify: a.InsecureSkipVerify, Transport: a.Transport,
	}
}

func metricsOptions(o Options, t metrics.Target) metrics.Options {
	mo := o.Metrics
	mo.Targets = []metrics.Target{t}
	return mo
}

func workerEndpoints(w Worker) ([]kvevents.Endpoint, error) {
	if w.Events == "" {
		return nil, nil
	}
	eps, err := kvevents.WorkerEndpoints(w.Name, w.Events, w.Replay, w.Topic, max(1, w.DPRanks))
	if err != nil {
		return nil, err
	}
	for i := range eps {
		eps[i].FirstSeq = w.FirstSeq
	}
	// The collector's own check, before any stream starts.
	if _, err := kvevents.New(kvevents.Options{Endpoints: eps}); err != nil {
		return nil, err
	}
	return eps, nil
}

func emit(ctx context.Context, out chan<- collectors.Observation, o collectors.Observation) {
	select {
	case out <- o:
	case <-ctx.Done():
	}
}

// Static is a Source whose set never changes: the config's workers and
// routers.
type Static struct{ Set Set }

// Name implements Source.
func (Static) Name() string { return "config" }

// Watch sends the set once and waits for ctx.
func (st Static) Watch(ctx context.Context, sets chan<- Set, _ chan<- collectors.Observation) error {
	select {
	case sets <- st.Set:
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}
