package config

import (
	"fmt"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// errorAt is a problem with key, blamed on where its value came from: the
// flag, the KVTOP_* variable, the theme file or the config file's line.
func (c *Config) errorAt(key, reason string) *Error {
	e := &Error{File: c.File, Key: key, Reason: reason}
	s := c.src
	if s == nil {
		return e
	}
	if f := s.flags[key]; f != "" {
		return &Error{Flag: f, Key: key, Reason: reason}
	}
	if v := s.env[key]; v != "" {
		return &Error{Env: v, Key: key, Reason: reason}
	}
	if n := nodeAt(s.doc, key); n != nil {
		e.Line = n.Line
		return e
	}
	if role, ok := strings.CutPrefix(key, "colors."); ok && s.theme != nil {
		if n := nodeAt(s.theme, role); n != nil {
			return &Error{File: s.themePath, Key: role, Line: n.Line, Reason: reason}
		}
	}
	return e
}

// Validate checks values and returns every problem found.
func (c *Config) Validate() Errors {
	var errs Errors
	bad := func(key, reason string) { errs = append(errs, c.errorAt(key, reason)) }

	if c.Refresh < pool.MinRefresh {
		bad("refresh", fmt.Sprintf("%s is below the floor of %s", c.Refresh, pool.MinRefresh))
	}
	if c.ScrapeInterval <= 0 {
		bad("scrape_interval", "must be positive")
	}
	if c.ScrapeTimeout <= 0 {
		bad("scrape_timeout", "must be positive")
	}
	if c.Window < 2*c.ScrapeInterval {
		bad("window", fmt.Sprintf("%s must cover at least two scrapes (scrape_interval %s)", c.Window, c.ScrapeInterval))
	}
	if c.ReplayDeadline < 0 {
		bad("replay_deadline", fmt.Sprintf("%s must not be negative (0 = the default %s)", c.ReplayDeadline, DefaultReplayDeadline))
	}
	viaProm, viaNATS := c.MetricsSource.Prometheus != "", c.EventPlane.On()
	if len(c.Workers) == 0 && c.EventsBind == "" && !c.Kubernetes.On() && !viaProm && !viaNATS {
		bad("workers", "no workers configured (and no events_bind, kubernetes, metrics_source or event_plane)")
	}
	if k := c.Kubernetes; k.On() {
		switch {
		case k.Selector == "" && k.InferencePool == "":
			bad("kubernetes", "say which pods are workers: kubernetes.selector (-l) or kubernetes.inference_pool (--inference-pool)")
		case k.Selector != "" && k.InferencePool != "":
			bad("kubernetes.selector", "and kubernetes.inference_pool both say which pods: give one")
		}
		switch k.Access {
		case "", "auto", "direct", "proxy":
		default:
			bad("kubernetes.access", fmt.Sprintf("%q is not one of direct, proxy, auto", k.Access))
		}
	}
	c.validateSources(bad)
	names := map[string]string{}
	for i, w := range c.Workers {
		key := fmt.Sprintf("workers[%d]", i)
		if w.Name == "" {
			bad(key+".name", "missing")
		} else if prev, dup := names[w.Name]; dup {
			bad(key+".name", fmt.Sprintf("%q is also the name of %s", w.Name, prev))
		} else {
			names[w.Name] = key
		}
		if w.Metrics == "" && w.Events == "" && c.EventsBind == "" && !viaProm && !viaNATS {
			bad(key, "needs metrics or events")
		}
		if w.Metrics != "" {
			checkHTTP(w.Metrics, key+".metrics", bad)
		}
		if w.Events != "" {
			checkZMQ(w.Events, key+".events", bad)
		}
		if w.Replay != "" {
			checkZMQ(w.Replay, key+".replay", bad)
		}
		if w.DPRanks < 0 || w.DPRanks > 1024 {
			bad(key+".dp_ranks", "must be between 1 and 1024")
		}
		if w.FirstSeq != 0 && w.FirstSeq != 1 {
			bad(key+".first_seq", fmt.Sprintf("%d is not 0 or 1 (1 for publishers that count from 1, like llm-d-inference-sim)", w.FirstSeq))
		}
		switch w.Engine {
		case "", "auto", "vllm", "sglang":
		default:
			bad(key+".engine", fmt.Sprintf("%q is not one of auto, vllm, sglang", w.Engine))
		}
		if w.Role != "" {
			if r, ok := snapshot.ParseRole(w.Role); !ok || r != strings.ToLower(strings.TrimSpace(w.Role)) {
				bad(key+".role", fmt.Sprintf("%q is not one of prefill, decode, aggregated", w.Role))
			}
		}
		checkAuth(w.Auth, key, bad)
	}
	if c.EventsBind != "" {
		checkZMQ(c.EventsBind, "events_bind", bad)
	}
	for i, r := range c.Routers {
		key := fmt.Sprintf("routers[%d]", i)
		if r.Name == "" {
			bad(key+".name", "missing")
		}
		if r.Metrics == "" {
			bad(key+".metrics", "missing")
		} else {
			checkHTTP(r.Metrics, key+".metrics", bad)
		}
		switch r.Profile {
		case "", "auto", "vllm-router", "sglang-router", "dynamo", "llm-d-epp", "production-stack":
		default:
			bad(key+".profile", fmt.Sprintf("%q is not one of auto, vllm-router, sglang-router, dynamo, llm-d-epp, production-stack", r.Profile))
		}
		checkAuth(r.Auth, key, bad)
	}
	for i, d := range c.Decisions {
		key := fmt.Sprintf("decisions[%d]", i)
		if d.Path == "" {
			bad(key+".path", "missing (a file, or - for stdin)")
		}
		switch d.Format {
		case "", "auto", "kvtop", "dynamo", "dynamo-trace", "smg", "llm-d", "production-stack":
		default:
			bad(key+".format", fmt.Sprintf("%q is not one of auto, kvtop, dynamo, dynamo-trace, smg, llm-d, production-stack", d.Format))
		}
	}
	c.validateTaps(bad)
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"thresholds.hot_prefix_share", c.Thresholds.HotPrefixShare},
		{"thresholds.overheat_share", c.Thresholds.OverheatShare},
		{"thresholds.kv_usage_high", c.Thresholds.KVUsageHigh},
		{"thresholds.recovery_tolerance", c.Thresholds.RecoveryTolerance},
		{"thresholds.thrash_share", c.Thresholds.ThrashShare},
		{"thresholds.leave_ratio", c.Thresholds.LeaveRatio},
		{"thresholds.ladder_loss_share", c.Thresholds.LadderLossShare},
	} {
		if f.v < 0 || f.v > 1 {
			bad(f.key, fmt.Sprintf("%g is not a fraction between 0 and 1", f.v))
		}
	}
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"thresholds.overheat_queue_ratio", c.Thresholds.OverheatQueueRatio},
		{"thresholds.overheat_min_queue", c.Thresholds.OverheatMinQueue},
		{"thresholds.recovery_hold_s", c.Thresholds.RecoveryHoldS},
		{"thresholds.leave_after_s", c.Thresholds.LeaveAfterS},
		{"thresholds.thrash_min_stored", float64(c.Thresholds.ThrashMinStored)},
	} {
		if f.v < 0 {
			bad(f.key, fmt.Sprintf("%g must not be negative", f.v))
		}
	}
	c.validateLimits(bad)
	switch c.Theme {
	case "", "default", "dark", "light", "high-contrast", "mono":
	default:
		bad("theme", fmt.Sprintf("%q is not one of default, dark, light, high-contrast, mono", c.Theme))
	}
	roles := make([]string, 0, len(c.Colors))
	for r := range c.Colors {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, r := range roles {
		if _, ok := themes.RoleByName(r); !ok {
			names := []string{}
			for _, role := range themes.Roles() {
				names = append(names, role.String())
			}
			bad("colors."+r, "unknown colour role (one of "+strings.Join(names, ", ")+")")
			continue
		}
		if _, err := themes.ParseColor(c.Colors[r]); err != nil {
			bad("colors."+r, err.Error())
		}
	}
	return errs
}

// validateLimits refuses negative limits (every field of Limits, so a new
// one is covered) and a message limit no queue could hold.
func (c *Config) validateLimits(bad func(string, string)) {
	v, t := reflect.ValueOf(c.Limits), reflect.TypeOf(c.Limits)
	for i := 0; i < t.NumField(); i++ {
		if n := v.Field(i).Int(); n < 0 {
			bad("limits."+t.Field(i).Tag.Get("mapstructure"), fmt.Sprintf("%d must not be negative (0 = the default)", n))
		}
	}
	msg, queue := orDefault(c.Limits.EventMessageBytes, DefaultEventMessageBytes), orDefault(c.Limits.EventQueueBytes, DefaultEventQueueBytes)
	if msg > 0 && queue > 0 && msg > queue {
		key := "limits.event_message_bytes"
		if c.Limits.EventMessageBytes == 0 {
			key = "limits.event_queue_bytes"
		}
		bad(key, fmt.Sprintf("one event message (limits.event_message_bytes, %s) must fit in the event queue (limits.event_queue_bytes, %s)", size(msg), size(queue)))
	}
}

// size is a byte count as an operator reads it: 64 MiB, 1000 bytes.
func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

// validateTaps checks the taps: where each listens (each address once),
// where it forwards to, its share and durations, and its TLS pair.
func (c *Config) validateTaps(bad func(string, string)) {
	listens, names := map[string]string{}, map[string]string{}
	for i, t := range c.Taps {
		key := fmt.Sprintf("taps[%d]", i)
		if t.Listen == "" {
			bad(key+".listen", "missing (host:port clients send their requests to, e.g. 127.0.0.1:8080)")
		} else if _, _, err := net.SplitHostPort(t.Listen); err != nil {
			bad(key+".listen", fmt.Sprintf("%q is not host:port", t.Listen))
		} else if prev, dup := listens[t.Listen]; dup {
			bad(key+".listen", fmt.Sprintf("%q is also where %s listens", t.Listen, prev))
		} else {
			listens[t.Listen] = key
		}
		if t.Upstream == "" {
			bad(key+".upstream", "missing (the router's base URL, e.g. http://router:8000)")
		} else {
			checkHTTP(t.Upstream, key+".upstream", bad)
		}
		if t.Name != "" {
			if prev, dup := names[t.Name]; dup {
				bad(key+".name", fmt.Sprintf("%q is also the name of %s", t.Name, prev))
			}
			names[t.Name] = key
		}
		if t.Sample < 0 || t.Sample > 1 {
			bad(key+".sample", fmt.Sprintf("%g is not a share between 0 and 1 (0.1 records one request in ten)", t.Sample))
		}
		if t.BreakAfter < 0 {
			bad(key+".break_after", fmt.Sprintf("%s must not be negative", t.BreakAfter))
		}
		if t.IdleTimeout < 0 {
			bad(key+".idle_timeout", fmt.Sprintf("%s must not be negative", t.IdleTimeout))
		}
		if (t.TLSCert == "") != (t.TLSKey == "") {
			bad(key+".tls_cert", "and tls_key go together")
		}
	}
}

func checkHTTP(raw, key string, bad func(string, string)) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(key, fmt.Sprintf("%q is not an http(s) URL", raw))
	}
}

func checkZMQ(raw, key string, bad func(string, string)) {
	switch {
	case strings.HasPrefix(raw, "tcp://"):
		host, port, err := net.SplitHostPort(strings.TrimPrefix(raw, "tcp://"))
		if err != nil || host == "" || port == "" {
			bad(key, fmt.Sprintf("%q is not tcp://host:port", raw))
		}
	case strings.HasPrefix(raw, "ipc://"), strings.HasPrefix(raw, "inproc://"):
	default:
		bad(key, fmt.Sprintf("%q is not a ZMQ endpoint (tcp://host:port or ipc://path)", raw))
	}
}

var promLabel = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// validateSources checks metrics_source and event_plane.
func (c *Config) validateSources(bad func(string, string)) {
	m := c.MetricsSource
	if m.Prometheus != "" {
		checkHTTP(m.Prometheus, "metrics_source.prometheus", bad)
		if sel := strings.TrimSpace(m.Selector); sel != "" && (!strings.HasPrefix(sel, "{") || !strings.HasSuffix(sel, "}")) {
			bad("metrics_source.selector", fmt.Sprintf("%q must be label matchers in braces, e.g. {namespace=\"llm\"}", m.Selector))
		}
		if m.WorkerLabel != "" && !promLabel.MatchString(m.WorkerLabel) {
			bad("metrics_source.worker_label", fmt.Sprintf("%q is not a Prometheus label name", m.WorkerLabel))
		}
		switch m.Engine {
		case "", "auto", "vllm", "sglang":
		default:
			bad("metrics_source.engine", fmt.Sprintf("%q is not one of auto, vllm, sglang", m.Engine))
		}
		checkAuth(m.Auth, "metrics_source", bad)
	} else if m.Selector != "" || m.WorkerLabel != "" {
		bad("metrics_source", "selector and worker_label need metrics_source.prometheus")
	}
	e := c.EventPlane
	switch e.Kind {
	case "", "nats":
		if len(e.Endpoints) > 0 {
			bad("event_plane.endpoints", "endpoints are Dynamo's ZMQ event plane: set event_plane.kind: dynamo-zmq")
		}
		if e.Discover != "" || e.Etcd != "" {
			bad("event_plane.discover", "discover finds Dynamo's ZMQ event plane publishers: set event_plane.kind: dynamo-zmq")
		}
	case EventPlaneDynamoZMQ:
		if e.NATS != "" || e.Subject != "" || e.JetStream.Stream != "" {
			bad("event_plane", "kind dynamo-zmq reads ZMQ endpoints: nats, subject and jetstream are NATS's")
		}
		switch e.Discover {
		case "", DiscoverKubernetes:
			if e.Etcd != "" {
				bad("event_plane.etcd", "an etcd is read only with discover: etcd")
			}
		case DiscoverEtcd:
			if e.Etcd == "" {
				bad("event_plane.etcd", "discover: etcd needs Dynamo's etcd (http://host:2379, its ETCD_ENDPOINTS)")
			}
			for _, u := range strings.Split(e.Etcd, ",") {
				if p, err := url.Parse(strings.TrimSpace(u)); e.Etcd != "" && (err != nil || p.Host == "" || p.Scheme != "http" && p.Scheme != "https") {
					bad("event_plane.etcd", fmt.Sprintf("%q is not an http(s)://host:port URL", strings.TrimSpace(u)))
				}
			}
		default:
			bad("event_plane.discover", fmt.Sprintf("%q is not kubernetes or etcd", e.Discover))
		}
		if len(e.Endpoints) == 0 && e.Discover == "" {
			bad("event_plane.endpoints", "kind dynamo-zmq needs the workers' publisher endpoints (tcp://host:port), or discover: kubernetes or etcd")
		}
		for _, ep := range e.Endpoints {
			if u, err := url.Parse(ep); err != nil || u.Scheme != "tcp" && u.Scheme != "ipc" || u.Scheme == "tcp" && u.Host == "" {
				bad("event_plane.endpoints", fmt.Sprintf("%q is not a tcp://host:port (or ipc://) ZMQ endpoint", ep))
			}
		}
		return
	default:
		bad("event_plane.kind", fmt.Sprintf("%q is not one of nats, dynamo-zmq", e.Kind))
		return
	}
	if e.NATS == "" {
		if e.Subject != "" || e.JetStream.Stream != "" {
			bad("event_plane", "subject and jetstream need event_plane.nats")
		}
		return
	}
	for _, u := range strings.Split(e.NATS, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls") {
			bad("event_plane.nats", fmt.Sprintf("%q is not a nats:// (or tls://) URL", strings.TrimSpace(u)))
		}
	}
	if strings.ContainsAny(e.Subject, " \t") {
		bad("event_plane.subject", fmt.Sprintf("%q has blanks", e.Subject))
	}
	j := e.JetStream
	if j.Stream == "" && (j.Consumer != "" || j.Start != "") {
		bad("event_plane.jetstream.stream", "missing (consumer and start need a stream)")
	}
	switch st := strings.TrimSpace(j.Start); st {
	case "", "all", "new":
	default:
		if d, err := time.ParseDuration(st); err != nil || d <= 0 {
			bad("event_plane.jetstream.start", fmt.Sprintf("%q is not all, new or a positive duration (10m)", j.Start))
		}
	}
}

func checkAuth(a Auth, key string, bad func(string, string)) {
	if a.BearerTokenFile != "" && a.BearerTokenEnv != "" {
		bad(key, "set bearer_token_file or bearer_token_env, not both")
	}
}
