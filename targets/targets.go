// Package targets turns the config and discovery into the current set of
// workers and routers with their endpoints, and runs the collectors of
// that set as it changes.
//
// A Source (the config: a set that never changes; Kubernetes: one that
// follows the watch) sends whole Sets. The Supervisor diffs each against
// the one before and, per target, stops what left, starts what joined and
// restarts what moved (a new pod IP, a new UID), then tells the pool with
// a collectors.TargetChange: the pool never talks to Kubernetes.
//
// Collectors per target: every metrics endpoint is a metrics.Collector of
// its own (one goroutine and one HTTP client, as before); every event
// stream is a stream of one kvevents.Collector in Dynamic mode, so all of
// them share one ZMQ context, one state goroutine and one memory budget
// however many workers come and go.
//
// Order, which is what makes the pool honest: a TargetChange joined is
// sent before the target's collectors start, so the pool knows its
// aliases and pod before its first scrape; a target's collectors are
// stopped, and have sent their last observation, before its
// TargetChange left.
package targets

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Auth is how kvtop authenticates to a metrics endpoint (see
// metrics.Target).
type Auth struct {
	BearerTokenFile, BearerTokenEnv string
	CAFile                          string
	InsecureSkipVerify              bool
	// Transport, when set, carries the scrapes (the API server's
	// authenticated transport for pods/proxy); the fields above are then
	// not used.
	Transport http.RoundTripper
}

// Worker is one worker to watch and where to reach it.
type Worker struct {
	Name    string
	Aliases []string
	Metrics string // URL of its /metrics; "" none (yet)
	Engine  string // metrics profile, "" auto
	// MetricsElsewhere: another collector reads its metrics (the
	// config's metrics_source, Prometheus), so no URL is not "no metrics".
	MetricsElsewhere bool
	Auth             Auth

	Events   string // ZMQ endpoint of its PUB (rank 0); "" none
	Replay   string // its ROUTER, "" none
	Topic    string
	DPRanks  int
	FirstSeq uint64

	// Kube is the pod behind the worker (nil from the config).
	Kube *collectors.KubeInfo
}

// Router is one router to scrape.
type Router struct {
	Name    string
	Metrics string
	Profile string
	Auth    Auth
}

// Set is the whole current set of targets.
type Set struct {
	Workers []Worker
	Routers []Router
	// Left says why targets that were in the previous set are gone, by
	// name ("pod deleted", "no longer matches the selector"); a target
	// missing from it left for no reason the source knows.
	Left map[string]string
	// At is when the source saw this set (zero: now).
	At time.Time
}

// Source sends the current Set whenever it changes, the first as soon as
// it is known, until ctx is done. It returns an error only for a fault
// it cannot recover from; trouble it retries is sent as
// collectors.SourceError on errs.
type Source interface {
	Name() string
	Watch(ctx context.Context, sets chan<- Set, errs chan<- collectors.Observation) error
}

// sameEndpoints: a worker whose collectors can stay as they are.
func sameEndpoints(a, b *Worker) bool {
	return a.Metrics == b.Metrics && a.Engine == b.Engine && a.Auth == b.Auth &&
		a.Events == b.Events && a.Replay == b.Replay && a.Topic == b.Topic &&
		max(a.DPRanks, 1) == max(b.DPRanks, 1) && a.FirstSeq == b.FirstSeq &&
		uid(a) == uid(b)
}

func uid(w *Worker) string {
	if w.Kube == nil {
		return ""
	}
	return w.Kube.UID
}

// sameKube: nothing the pool shows about the pod changed.
func sameKube(a, b *collectors.KubeInfo) bool {
	switch {
	case a == nil || b == nil:
		return a == b
	case a.LastTermination == nil || b.LastTermination == nil:
		if (a.LastTermination == nil) != (b.LastTermination == nil) {
			return false
		}
	case *a.LastTermination != *b.LastTermination:
		return false
	}
	x, y := *a, *b
	x.LastTermination, y.LastTermination = nil, nil
	return x == y
}

func sameRouter(a, b *Router) bool { return *a == *b }

func sameAliases(a, b []string) bool { return slices.Equal(a, b) }

// MetricsElsewhere is src with its workers' metrics read by another
// collector (metrics_source: Prometheus): their metrics URLs are dropped,
// so a thousand discovered pods are not each scraped by kvtop as well as
// read back from Prometheus.
func MetricsElsewhere(src Source) Source { return elsewhere{src} }

type elsewhere struct{ Source }

// Watch implements Source.
func (e elsewhere) Watch(ctx context.Context, sets chan<- Set, errs chan<- collectors.Observation) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan Set)
	done := make(chan error, 1)
	go func() { done <- e.Source.Watch(ctx, in, errs) }()
	for {
		select {
		case set := <-in:
			ws := make([]Worker, len(set.Workers))
			for i, w := range set.Workers {
				w.Metrics, w.MetricsElsewhere = "", true
				ws[i] = w
			}
			set.Workers = ws
			select {
			case sets <- set:
			case <-ctx.Done():
				return <-done
			}
		case err := <-done:
			return err
		}
	}
}
