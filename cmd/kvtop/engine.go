package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/decisions"
	"github.com/kvtop/kvtop/collectors/kvevents"
	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/collectors/natsevents"
	"github.com/kvtop/kvtop/collectors/promapi"
	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/pool"
)

// engine is the collectors and the pool running together: the one code path
// behind the console, `kvtop demo` and `kvtop snapshot`.
type engine struct {
	Pool *pool.Pool
	// Err receives the collectors' first fatal error as soon as one fails
	// (the others are stopped), or nil once all stopped with ctx.
	Err <-chan error
}

// observationBuffer absorbs bursts of KV events while the pool applies them.
const observationBuffer = 8192

func startEngine(ctx context.Context, c config.Config) (*engine, error) {
	cs, err := buildCollectors(c)
	if err != nil {
		return nil, err
	}
	return runEngine(ctx, c, cs), nil
}

// runEngine starts the pool on c and the collectors cs feeding it. A
// collector's fatal error stops the other collectors, so that RunAll
// returns it now rather than when the operator quits.
func runEngine(ctx context.Context, c config.Config, cs []collectors.Collector) *engine {
	obs := make(chan collectors.Observation, observationBuffer)
	p := pool.New(c.PoolOptions())
	go p.Run(ctx, obs)
	cctx, stop := context.WithCancelCause(ctx)
	for i := range cs {
		cs[i] = stopOnError{cs[i], stop}
	}
	errc := make(chan error, 1)
	go func() {
		defer stop(nil)
		err := collectors.RunAll(cctx, cs, obs)
		if err == nil && ctx.Err() == nil {
			err = context.Cause(cctx) // the collector that stopped the rest
		}
		errc <- err
	}()
	return &engine{Pool: p, Err: errc}
}

// stopOnError stops the other collectors when this one fails.
type stopOnError struct {
	collectors.Collector
	stop context.CancelCauseFunc
}

func (c stopOnError) Run(ctx context.Context, out chan<- collectors.Observation) error {
	err := c.Collector.Run(ctx, out)
	if err != nil && ctx.Err() == nil {
		c.stop(err)
	}
	return err
}

// buildCollectors turns the config into one collector per kind of source.
func buildCollectors(c config.Config) ([]collectors.Collector, error) {
	var out []collectors.Collector

	var targets []metrics.Target
	for _, w := range c.Workers {
		if w.Metrics == "" {
			continue
		}
		targets = append(targets, metrics.Target{
			Name: w.Name, Role: collectors.RoleWorker, URL: w.Metrics, Profile: w.Engine,
			BearerTokenFile: w.BearerTokenFile, BearerTokenEnv: w.BearerTokenEnv,
			CAFile: w.CAFile, InsecureSkipVerify: w.InsecureSkipVerify,
		})
	}
	for _, r := range c.Routers {
		targets = append(targets, metrics.Target{
			Name: r.Name, Role: collectors.RoleRouter, URL: r.Metrics, Profile: r.Profile,
			BearerTokenFile: r.BearerTokenFile, BearerTokenEnv: r.BearerTokenEnv,
			CAFile: r.CAFile, InsecureSkipVerify: r.InsecureSkipVerify,
		})
	}
	if len(targets) > 0 {
		m, err := metrics.New(metrics.Options{
			Targets: targets, Interval: c.ScrapeInterval, Timeout: c.ScrapeTimeout, BodyLimit: c.Limits.BodyBytes,
			MaxEngines: c.Limits.Engines, MaxSeries: c.Limits.Series,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}

	if ms := c.MetricsSource; ms.Prometheus != "" {
		// A worker with a metrics URL is scraped by kvtop itself; the
		// others are read from Prometheus.
		var ws []promapi.Worker
		var direct []string
		for _, w := range c.Workers {
			if w.Metrics != "" {
				direct = append(append(direct, w.Name), w.Aliases...)
				continue
			}
			ws = append(ws, promapi.Worker{Name: w.Name, Aliases: w.Aliases})
		}
		p, err := promapi.New(promapi.Options{
			URL: ms.Prometheus, Selector: ms.Selector, WorkerLabel: ms.WorkerLabel, Workers: ws, Exclude: direct, Profile: ms.Engine,
			Interval: c.ScrapeInterval, Window: c.Window,
			BearerTokenFile: ms.BearerTokenFile, BearerTokenEnv: ms.BearerTokenEnv,
			CAFile: ms.CAFile, InsecureSkipVerify: ms.InsecureSkipVerify,
		})
		if err != nil {
			return nil, fmt.Errorf("metrics_source: %w", err)
		}
		out = append(out, p)
	}
	if ep := c.EventPlane; ep.NATS != "" {
		o := natsevents.Options{
			URL: ep.NATS, Subject: ep.Subject, Resolve: dynamoResolver(c),
			User: ep.User, PasswordEnv: ep.PasswordEnv, TokenFile: ep.TokenFile, TokenEnv: ep.TokenEnv,
			CredsFile: ep.CredsFile, CAFile: ep.CAFile, InsecureSkipVerify: ep.InsecureSkipVerify,
		}
		if j := ep.JetStream; j.Stream != "" {
			o.JetStream = &natsevents.JetStream{Stream: j.Stream, Consumer: j.Consumer, Start: j.Start}
		}
		n, err := natsevents.New(o)
		if err != nil {
			return nil, fmt.Errorf("event_plane: %w", err)
		}
		out = append(out, n)
	}

	var eps []kvevents.Endpoint
	for _, w := range c.Workers {
		if w.Events == "" {
			continue
		}
		we, err := kvevents.WorkerEndpoints(w.Name, w.Events, w.Replay, w.Topic, max(1, w.DPRanks))
		if err != nil {
			return nil, err
		}
		for i := range we {
			we[i].FirstSeq = uint64(w.FirstSeq)
		}
		eps = append(eps, we...)
	}
	if len(eps) > 0 || c.EventsBind != "" {
		k, err := kvevents.New(kvevents.Options{
			Endpoints: eps, Bind: c.EventsBind, ResolveEndpoint: topicResolver(c),
			ReplayDeadline: c.ReplayDeadline, MaxMsgSize: c.Limits.EventMessageBytes, QueueBytes: c.Limits.EventQueueBytes,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}

	if len(c.Decisions) > 0 {
		var srcs []decisions.Source
		for _, d := range c.Decisions {
			srcs = append(srcs, decisions.Source{Path: d.Path, Format: d.Format})
		}
		d, err := decisions.New(decisions.Options{Sources: srcs})
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// tokenFileWarnings are the warnings for bearer token files that group or
// others may read, printed at start like ssh does for keys (the collector
// also shows each on screen at its first scrape).
func tokenFileWarnings(c config.Config) []string {
	var out []string
	seen := map[string]bool{}
	check := func(path string) {
		if path == "" || seen[path] {
			return
		}
		seen[path] = true
		if w := metrics.TokenFileWarning(path); w != "" {
			out = append(out, w)
		}
	}
	for _, w := range c.Workers {
		check(w.BearerTokenFile)
	}
	for _, r := range c.Routers {
		check(r.BearerTokenFile)
	}
	check(c.MetricsSource.BearerTokenFile)
	return out
}

// dynamoResolver maps a Dynamo worker id to the configured worker whose
// aliases hold "worker_<id>" (how Dynamo's router logs name it) or the
// bare id; "" leaves it worker_<id>, discovered.
func dynamoResolver(c config.Config) func(id uint64) string {
	names := map[string]string{}
	for _, w := range c.Workers {
		for _, a := range w.Aliases {
			names[a] = w.Name
		}
	}
	return func(id uint64) string {
		s := strconv.FormatUint(id, 10)
		if n, ok := names["worker_"+s]; ok {
			return n
		}
		return names[s]
	}
}

// topicResolver maps the id in a centralized-layout topic (kv@<id>@<model>)
// to a configured worker by name, alias, or host:port of its metrics URL
// (the pool's rule), with its replay endpoint and first seq. An id nobody
// claims becomes a worker of its own.
func topicResolver(c config.Config) func(id string) kvevents.Endpoint {
	return func(id string) kvevents.Endpoint {
		for _, w := range c.Workers {
			match := w.Name == id
			for _, a := range config.Aliases(w) {
				match = match || a == id || pool.SameEndpoint(a, id)
			}
			if match {
				return kvevents.Endpoint{Worker: w.Name, Replay: w.Replay, FirstSeq: uint64(w.FirstSeq)}
			}
		}
		return kvevents.Endpoint{Worker: id}
	}
}
