// Package config holds kvtop's configuration: the YAML schema of DESIGN.md,
// loading through viper (file, KVTOP_* env, flags), validation with one
// clear message per problem, and writing a config (for `kvtop sim`).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
)

// Config is the whole kvtop configuration. Its mapstructure tags are the
// schema: the keys checked for typos, the KVTOP_* variables and the line
// lookups all derive from them (keys.go).
type Config struct {
	Pool           string        `mapstructure:"pool" yaml:"pool,omitempty"`
	Refresh        time.Duration `mapstructure:"refresh" yaml:"refresh"`
	ScrapeInterval time.Duration `mapstructure:"scrape_interval" yaml:"scrape_interval"`
	ScrapeTimeout  time.Duration `mapstructure:"scrape_timeout" yaml:"scrape_timeout"`
	Window         time.Duration `mapstructure:"window" yaml:"window"`
	// ReplayDeadline bounds one whole replay (all its rounds), default 30s.
	ReplayDeadline time.Duration `mapstructure:"replay_deadline" yaml:"replay_deadline,omitempty"`
	Workers        []Worker      `mapstructure:"workers" yaml:"workers"`
	EventsBind     string        `mapstructure:"events_bind" yaml:"events_bind"`
	// MetricsSource reads the workers' metrics from Prometheus' HTTP API
	// instead of scraping each one; EventPlane reads their KV events from
	// Dynamo's NATS event plane. With either, workers may be omitted.
	MetricsSource MetricsSource `mapstructure:"metrics_source" yaml:"metrics_source,omitempty"`
	EventPlane    EventPlane    `mapstructure:"event_plane" yaml:"event_plane,omitempty"`
	Routers       []Router      `mapstructure:"routers" yaml:"routers"`
	Decisions     []Decisions   `mapstructure:"decisions" yaml:"decisions"`
	// Taps are kvtop taps run inside kvtop: pass-throughs in front of a
	// router whose records go straight into the pool.
	Taps       []Tap      `mapstructure:"taps" yaml:"taps,omitempty"`
	Thresholds Thresholds `mapstructure:"thresholds" yaml:"thresholds,omitempty"`
	Limits     Limits     `mapstructure:"limits" yaml:"limits,omitempty"`
	Theme      string     `mapstructure:"theme" yaml:"theme,omitempty"`
	// ThemeFile is a YAML file of colour overrides by role name (role:
	// colour), shared between configs; relative to the config's folder.
	ThemeFile string `mapstructure:"theme_file" yaml:"theme_file,omitempty"`
	// Colors override theme colours by role name (see `kvtop` help screen);
	// they win over the theme file.
	Colors map[string]string `mapstructure:"colors" yaml:"colors,omitempty"`
	// Kubernetes finds the workers in a cluster (pods by selector or an
	// InferencePool) beside or instead of workers.
	Kubernetes Kubernetes `mapstructure:"kubernetes" yaml:"kubernetes,omitempty"`

	// File is where the config was read from ("" for defaults only).
	File string `mapstructure:"-" yaml:"-"`
	// src says where each value came from, so Validate can name the flag,
	// the variable or the file line; nil for a config built in code.
	src *origin
}

// Auth is how kvtop authenticates to a metrics endpoint. Secrets are read
// from a file or an environment variable, never written in the config.
type Auth struct {
	BearerTokenFile    string `mapstructure:"bearer_token_file" yaml:"bearer_token_file,omitempty"`
	BearerTokenEnv     string `mapstructure:"bearer_token_env" yaml:"bearer_token_env,omitempty"`
	CAFile             string `mapstructure:"ca_file" yaml:"ca_file,omitempty"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify" yaml:"insecure_skip_verify,omitempty"`
}

// Worker is one inference worker.
type Worker struct {
	Name    string `mapstructure:"name" yaml:"name"`
	Metrics string `mapstructure:"metrics" yaml:"metrics,omitempty"`
	Events  string `mapstructure:"events" yaml:"events,omitempty"`
	Replay  string `mapstructure:"replay" yaml:"replay,omitempty"`
	Topic   string `mapstructure:"topic" yaml:"topic"`
	DPRanks int    `mapstructure:"dp_ranks" yaml:"dp_ranks"`
	// FirstSeq is the first seq this worker's publishers send: 0 (vLLM,
	// SGLang) or 1 (llm-d-inference-sim and others that count from 1), so
	// joining at seq 1 is not taken for a missed batch 0.
	FirstSeq int `mapstructure:"first_seq" yaml:"first_seq,omitempty"`
	// Engine forces the metrics profile: auto (default) | vllm | sglang.
	Engine string `mapstructure:"engine" yaml:"engine,omitempty"`
	// Role is the worker's part in a disaggregated pool: prefill | decode
	// | aggregated. Empty: what its pod's labels or the router say, else
	// aggregated.
	Role string `mapstructure:"role" yaml:"role,omitempty"`
	// Aliases are other names routers and logs use for this worker (e.g.
	// Dynamo's worker_<id>, a pod name); URLs and host:port of the metrics
	// endpoint are matched without being listed.
	Aliases []string `mapstructure:"aliases" yaml:"aliases,omitempty"`
	Auth    `mapstructure:",squash" yaml:",inline"`
}

// MetricsSource is a Prometheus (or Thanos Query, Mimir) that scrapes the
// workers: kvtop reads their series back with a few queries per refresh.
type MetricsSource struct {
	Prometheus string `mapstructure:"prometheus" yaml:"prometheus,omitempty"` // base URL
	// Selector is label matchers in braces: the workers' targets.
	Selector string `mapstructure:"selector" yaml:"selector,omitempty"`
	// WorkerLabel names a worker (default pod); listed workers match by
	// name or alias, other values are discovered.
	WorkerLabel string `mapstructure:"worker_label" yaml:"worker_label,omitempty"`
	// Engine forces the metrics profile: auto (default) | vllm | sglang.
	Engine string `mapstructure:"engine" yaml:"engine,omitempty"`
	Auth   `mapstructure:",squash" yaml:",inline"`
}

// EventPlane is Dynamo's event plane: the workers' KV events, on NATS or
// (kind dynamo-zmq, Dynamo's default since mid-2026) on the ZMQ PUBs its
// workers bind.
type EventPlane struct {
	// Kind is nats (the default where nats is set) or dynamo-zmq.
	Kind string `mapstructure:"kind" yaml:"kind,omitempty"`
	// Endpoints are the workers' ZMQ event plane publishers (dynamo-zmq):
	// tcp://host:port, one per worker process and data-parallel rank.
	Endpoints []string `mapstructure:"endpoints" yaml:"endpoints,omitempty"`
	// Discover finds the publishers (dynamo-zmq) where Dynamo's workers
	// advertise them, and follows them as they come and go: kubernetes
	// (the DynamoWorkerMetadata of the kubernetes section's namespace) or
	// etcd (v1/event_channels in the etcd at Etcd).
	Discover string `mapstructure:"discover" yaml:"discover,omitempty"`
	// Etcd is Dynamo's etcd for discover: etcd, http(s)://host:2379 (its
	// ETCD_ENDPOINTS; several, comma-separated). user, password_env,
	// ca_file and insecure_skip_verify apply to it.
	Etcd string `mapstructure:"etcd" yaml:"etcd,omitempty"`
	NATS string `mapstructure:"nats" yaml:"nats,omitempty"` // nats://host:4222
	// Subject for core NATS (default namespace.*.component.*.kv-events);
	// with jetstream, a filter on the stream ("" = all of it).
	Subject   string    `mapstructure:"subject" yaml:"subject,omitempty"`
	JetStream JetStream `mapstructure:"jetstream" yaml:"jetstream,omitempty"`
	// NATS authentication: secrets from files or variables only.
	User               string `mapstructure:"user" yaml:"user,omitempty"`
	PasswordEnv        string `mapstructure:"password_env" yaml:"password_env,omitempty"`
	TokenFile          string `mapstructure:"token_file" yaml:"token_file,omitempty"`
	TokenEnv           string `mapstructure:"token_env" yaml:"token_env,omitempty"`
	CredsFile          string `mapstructure:"creds_file" yaml:"creds_file,omitempty"`
	CAFile             string `mapstructure:"ca_file" yaml:"ca_file,omitempty"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify" yaml:"insecure_skip_verify,omitempty"`
}

// EventPlaneDynamoZMQ is the event plane kind of Dynamo's ZMQ PUBs.
const EventPlaneDynamoZMQ = "dynamo-zmq"

// Where event_plane.discover reads the publishers: Dynamo's Kubernetes
// discovery, or its etcd.
const (
	DiscoverKubernetes = "kubernetes"
	DiscoverEtcd       = "etcd"
)

// On reports whether an event plane is read.
func (e EventPlane) On() bool { return e.NATS != "" || len(e.Endpoints) > 0 || e.Discover != "" }

// JetStream reads the events from a JetStream stream (Dynamo's durable KV
// events): gaps are replayed from it.
type JetStream struct {
	Stream   string `mapstructure:"stream" yaml:"stream,omitempty"`     // e.g. namespace-dynamo-component-backend-kv-events
	Consumer string `mapstructure:"consumer" yaml:"consumer,omitempty"` // durable name; "" = ephemeral
	Start    string `mapstructure:"start" yaml:"start,omitempty"`       // all (default) | new | a duration (10m)
}

// Router is one router's metrics endpoint.
type Router struct {
	Name    string `mapstructure:"name" yaml:"name"`
	Metrics string `mapstructure:"metrics" yaml:"metrics"`
	// Profile forces the router profile: auto (default) | vllm-router |
	// sglang-router | dynamo | llm-d-epp | production-stack.
	Profile string `mapstructure:"profile" yaml:"profile,omitempty"`
	Auth    `mapstructure:",squash" yaml:",inline"`
}

// Kubernetes is discovery of the workers in a cluster (README
// "Kubernetes"). It is on with --kube, or when the section names a
// selector or an InferencePool.
type Kubernetes struct {
	Enabled bool `mapstructure:"enabled" yaml:"enabled,omitempty"`
	// Kubeconfig is a kubeconfig file; "" reads $KUBECONFIG, else
	// ~/.kube/config (in a pod: its service account).
	Kubeconfig string `mapstructure:"kubeconfig" yaml:"kubeconfig,omitempty"`
	Context    string `mapstructure:"context" yaml:"context,omitempty"`     // "" = the current context
	Namespace  string `mapstructure:"namespace" yaml:"namespace,omitempty"` // "" = the context's
	Selector   string `mapstructure:"selector" yaml:"selector,omitempty"`   // label selector of the worker pods
	// InferencePool names an InferencePool (Gateway API Inference
	// Extension): its selector, target port and endpoint picker.
	InferencePool string `mapstructure:"inference_pool" yaml:"inference_pool,omitempty"`
	// Access is how kvtop reaches the pods: direct (pod IPs), proxy (the
	// API server's pods/proxy and port-forwards: from a bastion), auto
	// (direct when a pod IP answers, else proxy; the default).
	Access string `mapstructure:"access" yaml:"access,omitempty"`
}

// On reports whether discovery runs.
func (k Kubernetes) On() bool { return k.Enabled || k.Selector != "" || k.InferencePool != "" }

// Tap is one pass-through kvtop runs (what `kvtop tap` is on its own):
// clients send their requests to Listen, tap forwards them to Upstream and
// records what each client received.
type Tap struct {
	Name     string `mapstructure:"name" yaml:"name,omitempty"` // default tap<i>
	Listen   string `mapstructure:"listen" yaml:"listen"`       // host:port
	Upstream string `mapstructure:"upstream" yaml:"upstream"`   // the router's base URL
	// Sample is the share of requests recorded (default 1).
	Sample float64 `mapstructure:"sample" yaml:"sample,omitempty"`
	// BreakAfter is a streaming break's gap (default 1s); IdleTimeout
	// ends a response silent that long (default 10m).
	BreakAfter  time.Duration `mapstructure:"break_after" yaml:"break_after,omitempty"`
	IdleTimeout time.Duration `mapstructure:"idle_timeout" yaml:"idle_timeout,omitempty"`
	// Out also appends the records to this file (kvtop audit JSONL).
	Out string `mapstructure:"out" yaml:"out,omitempty"`
	// WorkerHeaders name the serving worker (default: the routers' own,
	// PROTOCOLS.md §13).
	WorkerHeaders      []string `mapstructure:"worker_headers" yaml:"worker_headers,omitempty"`
	FingerprintKeyFile string   `mapstructure:"fingerprint_key_file" yaml:"fingerprint_key_file,omitempty"`
	TLSCert            string   `mapstructure:"tls_cert" yaml:"tls_cert,omitempty"`
	TLSKey             string   `mapstructure:"tls_key" yaml:"tls_key,omitempty"`
}

// Decisions is one decision log to follow.
type Decisions struct {
	// Path is a file, or - for stdin. A name ending in .gz is read as
	// gzip members; for a Dynamo trace it may be the sink's path
	// (DYN_REQUEST_TRACE_FILE_PATH), whose newest segment is followed.
	Path string `mapstructure:"path" yaml:"path"`
	// Format is auto (per line) | kvtop | dynamo | dynamo-trace | smg |
	// llm-d | production-stack.
	Format string `mapstructure:"format" yaml:"format"`
}

// Thresholds mirror snapshot.Thresholds; zero fields take the defaults.
type Thresholds struct {
	HotPrefixShare     float64 `mapstructure:"hot_prefix_share" yaml:"hot_prefix_share,omitempty"`
	OverheatShare      float64 `mapstructure:"overheat_share" yaml:"overheat_share,omitempty"`
	OverheatQueueRatio float64 `mapstructure:"overheat_queue_ratio" yaml:"overheat_queue_ratio,omitempty"`
	OverheatMinQueue   float64 `mapstructure:"overheat_min_queue" yaml:"overheat_min_queue,omitempty"`
	KVUsageHigh        float64 `mapstructure:"kv_usage_high" yaml:"kv_usage_high,omitempty"`
	RecoveryTolerance  float64 `mapstructure:"recovery_tolerance" yaml:"recovery_tolerance,omitempty"`
	RecoveryHoldS      float64 `mapstructure:"recovery_hold_s" yaml:"recovery_hold_s,omitempty"`
	// ThrashShare: a saturated worker thrashes when this share of the
	// blocks it stored were evicted there within the window before
	// (default 0.2), judged once the window holds ThrashMinStored stored
	// blocks (default 256).
	ThrashShare     float64 `mapstructure:"thrash_share" yaml:"thrash_share,omitempty"`
	ThrashMinStored int     `mapstructure:"thrash_min_stored" yaml:"thrash_min_stored,omitempty"`
	// Verdicts hold: saturated, thrash and overheating begin at their
	// thresholds and end once their figures have stayed below LeaveRatio ×
	// the thresholds (default 0.9) for LeaveAfterS seconds (default 15).
	LeaveRatio  float64 `mapstructure:"leave_ratio" yaml:"leave_ratio,omitempty"`
	LeaveAfterS float64 `mapstructure:"leave_after_s" yaml:"leave_after_s,omitempty"`
	// LadderLossShare: the header names the hit-rate ladder's largest
	// avoidable loss once it is this share of prompt tokens (default 0.1).
	LadderLossShare float64 `mapstructure:"ladder_loss_share" yaml:"ladder_loss_share,omitempty"`
}

// Limits mirror pool.Limits plus collector bounds; zero fields take the
// defaults (pool.DefaultLimits for the pool's, the Default* constants
// below for the collectors'). None may be negative.
type Limits struct {
	Decisions       int   `mapstructure:"decisions" yaml:"decisions,omitempty"`
	RecentDecisions int   `mapstructure:"recent_decisions" yaml:"recent_decisions,omitempty"`
	Prefixes        int   `mapstructure:"prefixes" yaml:"prefixes,omitempty"`
	PrefixCounters  int   `mapstructure:"prefix_counters" yaml:"prefix_counters,omitempty"`
	Incidents       int   `mapstructure:"incidents" yaml:"incidents,omitempty"`
	Errors          int   `mapstructure:"errors" yaml:"errors,omitempty"`
	BodyBytes       int64 `mapstructure:"body_bytes" yaml:"body_bytes,omitempty"` // metrics body limit, default 16 MiB
	// Engines bounds the engines (DP ranks, engine labels) kept per worker
	// from its metrics page.
	Engines int `mapstructure:"engines" yaml:"engines,omitempty"`
	// Series bounds the series read from one metrics page.
	Series int `mapstructure:"series" yaml:"series,omitempty"`
	// EventMessageBytes is the largest ZMQ message (one KV event batch)
	// read; larger ones are dropped and counted.
	EventMessageBytes int64 `mapstructure:"event_message_bytes" yaml:"event_message_bytes,omitempty"`
	// EventQueueBytes bounds the KV event batches queued or held (waiting
	// for a replay) at once.
	EventQueueBytes int64 `mapstructure:"event_queue_bytes" yaml:"event_queue_bytes,omitempty"`
	// IndexBlocks caps the block index (distinct resident blocks over all
	// workers).
	IndexBlocks int `mapstructure:"index_blocks" yaml:"index_blocks,omitempty"`
	// Fingerprints bounds the root-content fingerprints of the
	// hash-boundary check.
	Fingerprints int `mapstructure:"fingerprints" yaml:"fingerprints,omitempty"`
	// LadderHashes bounds the hit-rate ladder's memory of hashes seen, in
	// slots of 16 bytes (default 65 536: 1 MiB; beyond it a sample).
	LadderHashes int `mapstructure:"ladder_hashes" yaml:"ladder_hashes,omitempty"`
}

// Defaults of the collector limits and of replay_deadline (a zero value in
// the config means these).
const (
	DefaultBodyBytes         = 16 << 20
	DefaultEngines           = metrics.DefaultMaxEngines
	DefaultSeries            = metrics.DefaultMaxSeries
	DefaultEventMessageBytes = 64 << 20
	DefaultEventQueueBytes   = 256 << 20
	DefaultIndexBlocks       = pool.DefaultIndexBlocks
	DefaultReplayDeadline    = 30 * time.Second
)

// Defaults returns a config with every default filled and no targets.
func Defaults() Config {
	return Config{
		Pool:           "default",
		Refresh:        time.Second,
		ScrapeInterval: time.Second,
		ScrapeTimeout:  2 * time.Second,
		Window:         60 * time.Second,
		ReplayDeadline: DefaultReplayDeadline,
		Theme:          "default",
	}
}

// Error is a config problem in one line: where the value came from (a flag,
// a KVTOP_* variable, or the file, key and line) and the reason.
type Error struct {
	File   string // the config (or theme) file; "" for defaults only
	Key    string // dotted path: refresh, workers[1].metrics, limits.series
	Line   int    // the key's line in File; 0 when not from a file
	Env    string // the variable the value came from (KVTOP_WINDOW)
	Flag   string // the flag the value came from (--refresh)
	Reason string
}

func (e *Error) Error() string {
	switch {
	case e.Flag != "":
		return e.Flag + ": " + e.Reason
	case e.Env != "":
		return e.Env + ": " + e.Reason
	}
	file := e.File
	if file == "" {
		file = "config"
	}
	switch {
	case e.Key != "" && e.Line > 0:
		return fmt.Sprintf("%s: %s (line %d): %s", file, e.Key, e.Line, e.Reason)
	case e.Key != "":
		return fmt.Sprintf("%s: %s: %s", file, e.Key, e.Reason)
	case e.Line > 0:
		return fmt.Sprintf("%s: line %d: %s", file, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s: %s", file, e.Reason)
}

// Errors is several config problems, reported together, one per line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sort orders problems as an operator fixes them: flags, then variables,
// then the config file top to bottom, then other files.
func (es Errors) sort(file string) {
	rank := func(e *Error) (int, int) {
		switch {
		case e.Flag != "":
			return 0, 0
		case e.Env != "":
			return 1, 0
		case e.File != file:
			return 4, e.Line
		case e.Line == 0:
			return 3, 0
		}
		return 2, e.Line
	}
	sort.SliceStable(es, func(i, j int) bool {
		ri, li := rank(es[i])
		rj, lj := rank(es[j])
		return ri < rj || ri == rj && li < lj
	})
}

// NotFound is Read's error when no --config was given, none of the
// SearchPaths holds one, and nothing else (KVTOP_EVENTS_BIND) says what to
// watch: the operator's first run, told where kvtop looked rather than
// "no workers configured".
type NotFound struct {
	Searched []string // SearchPaths, as looked for
}

func (e *NotFound) Error() string {
	shown := make([]string, len(e.Searched))
	for i, p := range e.Searched {
		if !filepath.IsAbs(p) {
			p = "." + string(filepath.Separator) + p
		}
		shown[i] = p
	}
	return "no config: none given (-c FILE) and none at " + strings.Join(shown, " or ")
}

// SearchPaths lists where kvtop looks for a config when --config is not given.
func SearchPaths() []string {
	paths := []string{"kvtop.yaml"}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		paths = append(paths, filepath.Join(x, "kvtop", "config.yaml"))
	} else if h, err := os.UserHomeDir(); err == nil {
		paths = append(paths, filepath.Join(h, ".config", "kvtop", "config.yaml"))
	}
	return paths
}

// Flags maps config keys to the command-line flags bound to them in the
// viper passed to Read (only flags the operator set), so that a bad value
// names the flag: {"refresh": "--refresh"}.
type Flags map[string]string

// origin is where the values of a loaded config came from.
type origin struct {
	doc       *yaml.Node        // the config file, for lines
	theme     *yaml.Node        // the theme file, for the colours it set
	themePath string            // as read
	env       map[string]string // key -> the KVTOP_* variable that set it
	flags     Flags
}

// Load is Read without flags, for callers that print no warnings.
func Load(v *viper.Viper, file string) (Config, error) {
	c, _, err := Read(v, file, nil)
	return c, err
}

// Read reads the config from the file, KVTOP_* variables and the flags
// bound in v (which win, in that order). file is the explicit --config path
// or "" to search SearchPaths; a missing explicit file is an error, a
// missing searched file is not. Every problem found is reported together
// (Errors), each naming its flag, variable or file line. Warnings (KVTOP_*
// variables that set nothing) are for the caller to print; they never
// quote a variable's value.
func Read(v *viper.Viper, file string, flags Flags) (Config, []string, error) {
	if v == nil {
		v = viper.New()
	}
	setDefaults(v)
	env, errs, warnings := envSettings()
	for key, name := range env {
		_ = v.BindEnv(key, name)
	}
	src := &origin{env: env, flags: flags}
	var ck checked
	fail := func(e *Error) (Config, []string, error) {
		errs = append(errs, e)
		errs.sort(file)
		return Config{}, warnings, errs
	}

	if file == "" {
		for _, p := range SearchPaths() {
			if _, err := os.Stat(p); err == nil {
				file = p
				break
			}
		}
	} else if _, err := os.Stat(file); err != nil {
		return fail(&Error{File: file, Reason: "cannot read: " + errors.Unwrap(err).Error()})
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return fail(&Error{File: file, Reason: "cannot read: " + err.Error()})
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return fail(&Error{File: file, Reason: "not valid YAML: " + strings.TrimPrefix(oneLine(err.Error()), "yaml: ")})
		}
		src.doc = &doc
		ck = checkKeys(&doc, file)
		errs = append(errs, ck.errs...)
		// viper reads the checked document, not the bytes: what checkKeys
		// refused is left out (aliases still resolve: Decode follows them).
		settings := map[string]any{}
		if len(doc.Content) > 0 {
			if err := pruned(&doc, ck).Decode(&settings); err != nil {
				return fail(&Error{File: file, Reason: "not valid YAML: " + strings.TrimPrefix(oneLine(err.Error()), "yaml: ")})
			}
		}
		if err := v.MergeConfigMap(settings); err != nil {
			return fail(&Error{File: file, Reason: oneLine(err.Error())})
		}
	}
	var c Config
	err := v.Unmarshal(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
	)))
	if err != nil {
		return fail(&Error{File: file, Reason: oneLine(err.Error())})
	}
	c.File, c.src = file, src
	if c.ReplayDeadline == 0 {
		c.ReplayDeadline = DefaultReplayDeadline
	}
	tokenVars := map[string]bool{}
	for _, w := range c.Workers {
		tokenVars[w.BearerTokenEnv] = true
	}
	for _, r := range c.Routers {
		tokenVars[r.BearerTokenEnv] = true
	}
	warnings = append(warnings, envWarnings(os.Environ(), tokenVars)...)
	if file == "" && len(errs) == 0 && len(c.Workers) == 0 && c.EventsBind == "" && !c.Kubernetes.On() && c.EventPlane.Discover == "" {
		return Config{}, warnings, &NotFound{Searched: SearchPaths()}
	}
	if err := c.loadThemeFile(); err != nil {
		errs = append(errs, err)
	}
	for _, e := range c.Validate() {
		if !ck.told(e.Key) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		errs.sort(file)
		return Config{}, warnings, errs
	}
	return c, warnings, nil
}

// loadThemeFile merges the theme file's colours under the inline ones.
func (c *Config) loadThemeFile() *Error {
	if c.ThemeFile == "" {
		return nil
	}
	path := c.ThemeFile
	if !filepath.IsAbs(path) && c.File != "" {
		path = filepath.Join(filepath.Dir(c.File), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c.errorAt("theme_file", "cannot read: "+err.Error())
	}
	// Each check assigns the function's err: an `err :=` inside an if
	// once shadowed it, and a theme file that was not YAML, or not a map,
	// was taken silently as no colours at all.
	var doc yaml.Node
	var colors map[string]string
	if err = yaml.Unmarshal(data, &doc); err != nil {
		return &Error{File: path, Reason: "not valid YAML: " + strings.TrimPrefix(oneLine(err.Error()), "yaml: ")}
	}
	if len(doc.Content) > 0 { // an empty file is no colours
		if root := doc.Content[0]; root.Kind != yaml.MappingNode {
			return &Error{File: path, Line: root.Line, Reason: "not a map of role: colour"}
		}
		if err = doc.Decode(&colors); err != nil {
			return &Error{File: path, Reason: "not a map of role: colour: " + strings.TrimPrefix(oneLine(err.Error()), "yaml: ")}
		}
	}
	if c.src != nil {
		c.src.theme, c.src.themePath = &doc, path
	}
	merged := make(map[string]string, len(colors)+len(c.Colors))
	for k, v := range colors {
		merged[k] = v
	}
	for k, v := range c.Colors {
		merged[k] = v
	}
	c.Colors = merged
	return nil
}

// setDefaults gives viper every non-zero value of Defaults, by the keys of
// the schema: no second list of keys to keep in step.
func setDefaults(v *viper.Viper) {
	d := reflect.ValueOf(Defaults())
	for _, k := range scalarKeys {
		if f := d.FieldByIndex(k.index); !f.IsZero() {
			v.SetDefault(k.key, f.Interface())
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// PoolOptions turns the config into pool options.
func (c *Config) PoolOptions() pool.Options {
	t := snapshot.DefaultThresholds()
	set := func(dst *float64, v float64) {
		if v != 0 {
			*dst = v
		}
	}
	set(&t.HotPrefixShare, c.Thresholds.HotPrefixShare)
	set(&t.OverheatShare, c.Thresholds.OverheatShare)
	set(&t.OverheatQueueRatio, c.Thresholds.OverheatQueueRatio)
	set(&t.OverheatMinQueue, c.Thresholds.OverheatMinQueue)
	set(&t.KVUsageHigh, c.Thresholds.KVUsageHigh)
	set(&t.RecoveryTolerance, c.Thresholds.RecoveryTolerance)
	set(&t.RecoveryHoldS, c.Thresholds.RecoveryHoldS)
	set(&t.ThrashShare, c.Thresholds.ThrashShare)
	set(&t.LeaveRatio, c.Thresholds.LeaveRatio)
	set(&t.LeaveAfterS, c.Thresholds.LeaveAfterS)
	if c.Thresholds.ThrashMinStored > 0 {
		t.ThrashMinStored = c.Thresholds.ThrashMinStored
	}
	set(&t.LadderLossShare, c.Thresholds.LadderLossShare)

	l := pool.DefaultLimits()
	seti := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	seti(&l.Decisions, c.Limits.Decisions)
	seti(&l.RecentDecisions, c.Limits.RecentDecisions)
	seti(&l.Prefixes, c.Limits.Prefixes)
	seti(&l.PrefixCounters, c.Limits.PrefixCounters)
	seti(&l.Incidents, c.Limits.Incidents)
	seti(&l.Errors, c.Limits.Errors)
	seti(&l.IndexBlocks, c.Limits.IndexBlocks)
	seti(&l.Fingerprints, c.Limits.Fingerprints)
	seti(&l.LadderHashes, c.Limits.LadderHashes)

	o := pool.Options{
		Name:       c.Pool,
		Window:     c.Window,
		Refresh:    c.Refresh,
		Thresholds: t,
		Limits:     l,
	}
	// A worker has an event source when it names its endpoint, or when
	// kvtop binds a SUB its publisher may dial (events_bind) or reads an
	// event plane: its streams appear only with their first message, so
	// until then the pool must know its blocks are unknown, not absent.
	events := c.EventsBind != "" || c.EventPlane.On()
	for _, w := range c.Workers {
		o.Workers = append(o.Workers, pool.WorkerSpec{Name: w.Name, Aliases: Aliases(w),
			NoMetrics: w.Metrics == "" && c.MetricsSource.Prometheus == "", Events: events || w.Events != "", Role: w.Role})
	}
	for _, r := range c.Routers {
		o.Routers = append(o.Routers, pool.RouterSpec{Name: r.Name, Profile: r.Profile})
	}
	return o
}

// Aliases are the other names a worker goes by: those configured, its
// metrics URL (scheme, host and port, as routers label workers) and
// host:port (as topics name it).
func Aliases(w Worker) []string {
	out := append([]string(nil), w.Aliases...)
	if u, err := url.Parse(w.Metrics); err == nil && u.Host != "" {
		out = append(out, u.Scheme+"://"+u.Host, u.Host)
	}
	return out
}

// Write writes c as YAML to path, with a header comment.
func Write(path string, c Config, header string) error {
	var buf bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		if l != "" {
			buf.WriteString("# " + l + "\n")
		}
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
