package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/decisions"
	"github.com/kvtop/kvtop/collectors/kvevents"
	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/collectors/natsevents"
	"github.com/kvtop/kvtop/collectors/promapi"
	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/discovery/etcd"
	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/tap"
	"github.com/kvtop/kvtop/targets"
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

// startEngine starts the engine on c; tap, if given, sees what the pool
// consumes (a journal recorder: kvtop record, serve --record).
func startEngine(ctx context.Context, c config.Config, tap ...pool.Tap) (*engine, error) {
	cs, err := buildCollectors(c)
	if err != nil {
		return nil, err
	}
	return runEngine(ctx, c, cs, tap...), nil
}

// runEngine starts the pool on c and the collectors cs feeding it. A
// collector's fatal error stops the other collectors, so that RunAll
// returns it now rather than when the operator quits.
func runEngine(ctx context.Context, c config.Config, cs []collectors.Collector, tap ...pool.Tap) *engine {
	return runPool(ctx, c.PoolOptions(), cs, tap...)
}

// runPool is runEngine on pool options of the caller's (tests set the
// ones no config does).
func runPool(ctx context.Context, po pool.Options, cs []collectors.Collector, tap ...pool.Tap) *engine {
	obs := make(chan collectors.Observation, observationBuffer)
	p := pool.New(po)
	for _, t := range tap {
		p.SetTap(t) // one: the pool has one tap
	}
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

// buildCollectors turns the config into the collectors: the targets
// supervisor, which runs a metrics collector per worker and router and
// one event collector for every stream, over the config's workers (a set
// that never changes) and, with kubernetes on, the discovered pods; the
// Prometheus source and Dynamo's event plane when configured (one
// collector each, whatever the pool's size); and the decision logs.
func buildCollectors(c config.Config) ([]collectors.Collector, error) {
	var out []collectors.Collector
	src, err := targetSource(c)
	if err != nil {
		return nil, err
	}
	eo := kvevents.Options{
		Bind: c.EventsBind, ReplayDeadline: c.ReplayDeadline,
		MaxMsgSize: c.Limits.EventMessageBytes, QueueBytes: c.Limits.EventQueueBytes,
	}
	if !c.Kubernetes.On() {
		eo.ResolveEndpoint = topicResolver(c) // else the supervisor's, over the current set
	}
	sup, err := targets.New(targets.Options{
		Metrics: metrics.Options{
			Interval: c.ScrapeInterval, Timeout: c.ScrapeTimeout, BodyLimit: c.Limits.BodyBytes,
			MaxEngines: c.Limits.Engines, MaxSeries: c.Limits.Series,
		},
		Events: eo,
	}, src)
	if err != nil {
		return nil, err
	}
	out = append(out, sup)

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
	if ep := c.EventPlane; ep.Kind == config.EventPlaneDynamoZMQ {
		o := natsevents.Options{ZMQ: ep.Endpoints, Resolve: dynamoResolver(c), Window: c.Window}
		switch ep.Discover {
		case config.DiscoverKubernetes:
			// Where Dynamo's workers advertise their publishers: the
			// kubernetes section says which cluster and namespace.
			k := c.Kubernetes
			d, err := kube.NewDynamo(kube.DynamoOptions{Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace})
			if err != nil {
				return nil, fmt.Errorf("event_plane: %w", err)
			}
			o.Discover = d
		case config.DiscoverEtcd:
			var urls []string
			for _, u := range strings.Split(ep.Etcd, ",") {
				urls = append(urls, strings.TrimSpace(u))
			}
			d, err := etcd.New(etcd.Options{Endpoints: urls, User: ep.User, PasswordEnv: ep.PasswordEnv,
				CAFile: ep.CAFile, InsecureSkipVerify: ep.InsecureSkipVerify})
			if err != nil {
				return nil, fmt.Errorf("event_plane: %w", err)
			}
			o.Discover = d
		}
		n, err := natsevents.New(o)
		if err != nil {
			return nil, fmt.Errorf("event_plane: %w", err)
		}
		out = append(out, n)
	} else if ep.NATS != "" {
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

	if len(c.Taps) > 0 {
		t, err := tapCollector(c)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
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

// targetSource is who to watch: the config's workers and routers, and
// with kubernetes on the pods it finds beside them.
func targetSource(c config.Config) (targets.Source, error) {
	static := targets.Static{Set: configSet(c)}
	if !c.Kubernetes.On() {
		return static, nil
	}
	k := c.Kubernetes
	ks, err := kube.New(kube.Options{
		Kubeconfig: k.Kubeconfig, Context: k.Context, Namespace: k.Namespace,
		Selector: k.Selector, InferencePool: k.InferencePool, Access: k.Access,
	})
	if err != nil {
		return nil, err
	}
	var found targets.Source = ks
	if c.MetricsSource.Prometheus != "" {
		found = targets.MetricsElsewhere(ks)
	}
	if len(c.Workers) == 0 && len(c.Routers) == 0 {
		return found, nil
	}
	if err := targets.Check(static.Set, targets.Options{}); err != nil {
		return nil, err
	}
	return targets.Merge(static, found), nil
}

// configSet is the config's workers and routers as targets.
func configSet(c config.Config) targets.Set {
	var set targets.Set
	for _, w := range c.Workers {
		set.Workers = append(set.Workers, targets.Worker{
			Name: w.Name, Aliases: config.Aliases(w), Metrics: w.Metrics, Engine: w.Engine,
			MetricsElsewhere: w.Metrics == "" && c.MetricsSource.Prometheus != "",
			Auth:             targets.Auth{BearerTokenFile: w.BearerTokenFile, BearerTokenEnv: w.BearerTokenEnv, CAFile: w.CAFile, InsecureSkipVerify: w.InsecureSkipVerify},
			Events:           w.Events, Replay: w.Replay, Topic: w.Topic, DPRanks: max(1, w.DPRanks), FirstSeq: uint64(w.FirstSeq),
		})
	}
	for _, r := range c.Routers {
		set.Routers = append(set.Routers, targets.Router{
			Name: r.Name, Metrics: r.Metrics, Profile: r.Profile,
			Auth: targets.Auth{BearerTokenFile: r.BearerTokenFile, BearerTokenEnv: r.BearerTokenEnv, CAFile: r.CAFile, InsecureSkipVerify: r.InsecureSkipVerify},
		})
	}
	return set
}

// tapCollector runs the config's taps in kvtop: their records go straight
// into the pool (and to each tap's out file, when it has one).
func tapCollector(c config.Config) (collectors.Collector, error) {
	var taps []tap.Tap
	for i, t := range c.Taps {
		name := t.Name
		if name == "" {
			name = fmt.Sprintf("tap%d", i)
		}
		key := fmt.Sprintf("taps[%d]", i)
		tc, err := tap.LoadTLS(t.TLSCert, t.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("%s.tls_cert: %w", key, err)
		}
		var fpKey []byte
		if t.FingerprintKeyFile != "" {
			if fpKey, _, err = tap.ReadFingerprintKey(t.FingerprintKeyFile); err != nil {
				return nil, fmt.Errorf("%s.fingerprint_key_file: %w", key, err)
			}
		}
		var sink *tap.Sink
		if t.Out != "" {
			if sink, err = tap.OpenSink(t.Out); err != nil {
				return nil, fmt.Errorf("%s.out: %w", key, err)
			}
		}
		idle := t.IdleTimeout
		if idle == 0 {
			idle = tap.DefaultIdleTimeout
		}
		taps = append(taps, tap.Tap{
			Options: tap.Options{Upstream: t.Upstream, Name: name, Sample: t.Sample, BreakAfter: t.BreakAfter,
				IdleTimeout: idle, WorkerHeaders: t.WorkerHeaders, FingerprintKey: fpKey},
			Listen: t.Listen, TLS: tc, Sink: sink,
		})
	}
	return tap.NewCollector(taps)
}

// tapWarnings are what to say at start about the config's taps: one
// listening beyond loopback without TLS, a key file others may read.
func tapWarnings(c config.Config) []string {
	var out []string
	for _, t := range c.Taps {
		if w := tap.ListenWarning(t.Listen, t.TLSCert != ""); w != "" {
			out = append(out, "taps: "+w)
		}
		if t.FingerprintKeyFile != "" {
			if _, w, err := tap.ReadFingerprintKey(t.FingerprintKeyFile); err == nil && w != "" {
				out = append(out, w)
			}
		}
	}
	return out
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
