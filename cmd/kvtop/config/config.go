// Package config holds kvtop's configuration: the YAML schema of DESIGN.md,
// loading through viper (file, KVTOP_* env, flags), validation with one
// clear message per problem, and writing a config (for `kvtop sim`).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/themes"
)

// Config is the whole kvtop configuration.
type Config struct {
	Pool           string        `mapstructure:"pool" yaml:"pool,omitempty"`
	Refresh        time.Duration `mapstructure:"refresh" yaml:"refresh"`
	ScrapeInterval time.Duration `mapstructure:"scrape_interval" yaml:"scrape_interval"`
	ScrapeTimeout  time.Duration `mapstructure:"scrape_timeout" yaml:"scrape_timeout"`
	Window         time.Duration `mapstructure:"window" yaml:"window"`
	Workers        []Worker      `mapstructure:"workers" yaml:"workers"`
	EventsBind     string        `mapstructure:"events_bind" yaml:"events_bind"`
	Routers        []Router      `mapstructure:"routers" yaml:"routers"`
	Decisions      []Decisions   `mapstructure:"decisions" yaml:"decisions"`
	Thresholds     Thresholds    `mapstructure:"thresholds" yaml:"thresholds,omitempty"`
	Limits         Limits        `mapstructure:"limits" yaml:"limits,omitempty"`
	Theme          string        `mapstructure:"theme" yaml:"theme,omitempty"`
	// ThemeFile is a YAML file of colour overrides by role name (role:
	// colour), shared between configs; relative to the config's folder.
	ThemeFile string `mapstructure:"theme_file" yaml:"theme_file,omitempty"`
	// Colors override theme colours by role name (see `kvtop` help screen);
	// they win over the theme file.
	Colors map[string]string `mapstructure:"colors" yaml:"colors,omitempty"`

	// File is where the config was read from ("" for defaults only).
	File string `mapstructure:"-" yaml:"-"`
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
	// Engine forces the metrics profile: auto (default) | vllm | sglang.
	Engine string `mapstructure:"engine" yaml:"engine,omitempty"`
	// Aliases are other names routers and logs use for this worker (e.g.
	// Dynamo's worker_<id>, a pod name); URLs and host:port of the metrics
	// endpoint are matched without being listed.
	Aliases []string `mapstructure:"aliases" yaml:"aliases,omitempty"`
	Auth    `mapstructure:",squash" yaml:",inline"`
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

// Decisions is one decision log to follow.
type Decisions struct {
	Path   string `mapstructure:"path" yaml:"path"`
	Format string `mapstructure:"format" yaml:"format"`
}

// Thresholds mirror pool.Thresholds; zero fields take the defaults.
type Thresholds struct {
	HotPrefixShare     float64 `mapstructure:"hot_prefix_share" yaml:"hot_prefix_share,omitempty"`
	OverheatShare      float64 `mapstructure:"overheat_share" yaml:"overheat_share,omitempty"`
	OverheatQueueRatio float64 `mapstructure:"overheat_queue_ratio" yaml:"overheat_queue_ratio,omitempty"`
	OverheatMinQueue   float64 `mapstructure:"overheat_min_queue" yaml:"overheat_min_queue,omitempty"`
	KVUsageHigh        float64 `mapstructure:"kv_usage_high" yaml:"kv_usage_high,omitempty"`
	RecoveryTolerance  float64 `mapstructure:"recovery_tolerance" yaml:"recovery_tolerance,omitempty"`
	RecoveryHoldS      float64 `mapstructure:"recovery_hold_s" yaml:"recovery_hold_s,omitempty"`
}

// Limits mirror pool.Limits plus collector bounds; zero fields take defaults.
type Limits struct {
	Decisions       int   `mapstructure:"decisions" yaml:"decisions,omitempty"`
	RecentDecisions int   `mapstructure:"recent_decisions" yaml:"recent_decisions,omitempty"`
	Prefixes        int   `mapstructure:"prefixes" yaml:"prefixes,omitempty"`
	PrefixCounters  int   `mapstructure:"prefix_counters" yaml:"prefix_counters,omitempty"`
	Incidents       int   `mapstructure:"incidents" yaml:"incidents,omitempty"`
	Errors          int   `mapstructure:"errors" yaml:"errors,omitempty"`
	BodyBytes       int64 `mapstructure:"body_bytes" yaml:"body_bytes,omitempty"` // metrics body limit, default 16 MiB
}

// Defaults returns a config with every default filled and no targets.
func Defaults() Config {
	return Config{
		Pool:           "default",
		Refresh:        time.Second,
		ScrapeInterval: time.Second,
		ScrapeTimeout:  2 * time.Second,
		Window:         60 * time.Second,
		Theme:          "default",
	}
}

// MinRefresh is the refresh floor.
const MinRefresh = 250 * time.Millisecond

// Error is a config problem: the file, the key and the reason, in one line.
type Error struct {
	File   string
	Key    string
	Reason string
}

func (e *Error) Error() string {
	file := e.File
	if file == "" {
		file = "config"
	}
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", file, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", file, e.Key, e.Reason)
}

// Errors is several config problems, reported together.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
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

// Load reads the config from v (which may hold bound flags and KVTOP_* env).
// file is the explicit --config path or "" to search SearchPaths; a missing
// explicit file is an error, a missing searched file is not.
func Load(v *viper.Viper, file string) (Config, error) {
	if v == nil {
		v = viper.New()
	}
	setDefaults(v)
	v.SetEnvPrefix("KVTOP")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()

	if file == "" {
		for _, p := range SearchPaths() {
			if _, err := os.Stat(p); err == nil {
				file = p
				break
			}
		}
	} else if _, err := os.Stat(file); err != nil {
		return Config{}, &Error{File: file, Reason: "cannot read: " + errors.Unwrap(err).Error()}
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return Config{}, &Error{File: file, Reason: "cannot read: " + err.Error()}
		}
		var probe yaml.Node
		if err := yaml.Unmarshal(data, &probe); err != nil {
			return Config{}, &Error{File: file, Reason: "not valid YAML: " + strings.TrimPrefix(oneLine(err.Error()), "yaml: ")}
		}
		if errs := checkKeys(&probe, file); len(errs) > 0 {
			return Config{}, errs
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, &Error{File: file, Reason: "not valid YAML: " + oneLine(err.Error())}
		}
	}
	var c Config
	err := v.Unmarshal(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
	)))
	if err != nil {
		return Config{}, &Error{File: file, Reason: oneLine(err.Error())}
	}
	c.File = file
	if err := c.loadThemeFile(); err != nil {
		return Config{}, err
	}
	if errs := c.Validate(); len(errs) > 0 {
		return Config{}, errs
	}
	return c, nil
}

// loadThemeFile merges the theme file's colours under the inline ones.
func (c *Config) loadThemeFile() error {
	if c.ThemeFile == "" {
		return nil
	}
	path := c.ThemeFile
	if !filepath.IsAbs(path) && c.File != "" {
		path = filepath.Join(filepath.Dir(c.File), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return &Error{File: c.File, Key: "theme_file", Reason: "cannot read: " + err.Error()}
	}
	var colors map[string]string
	if err := yaml.Unmarshal(data, &colors); err != nil {
		return &Error{File: path, Reason: "not a map of role: colour: " + strings.TrimPrefix(oneLine(err.Error()), "yaml: ")}
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

func setDefaults(v *viper.Viper) {
	d := Defaults()
	v.SetDefault("pool", d.Pool)
	v.SetDefault("refresh", d.Refresh)
	v.SetDefault("scrape_interval", d.ScrapeInterval)
	v.SetDefault("scrape_timeout", d.ScrapeTimeout)
	v.SetDefault("window", d.Window)
	v.SetDefault("theme", d.Theme)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// known lists the keys each YAML mapping may hold, to catch typos.
var known = map[string][]string{
	"":           {"pool", "refresh", "scrape_interval", "scrape_timeout", "window", "workers", "events_bind", "routers", "decisions", "thresholds", "limits", "theme", "theme_file", "colors"},
	"workers":    {"name", "metrics", "events", "replay", "topic", "dp_ranks", "engine", "aliases", "bearer_token_file", "bearer_token_env", "ca_file", "insecure_skip_verify"},
	"routers":    {"name", "metrics", "profile", "bearer_token_file", "bearer_token_env", "ca_file", "insecure_skip_verify"},
	"decisions":  {"path", "format"},
	"thresholds": {"hot_prefix_share", "overheat_share", "overheat_queue_ratio", "overheat_min_queue", "kv_usage_high", "recovery_tolerance", "recovery_hold_s"},
	"limits":     {"decisions", "recent_decisions", "prefixes", "prefix_counters", "incidents", "errors", "body_bytes"},
}

// durationKeys are the top-level keys holding durations.
var durationKeys = []string{"refresh", "scrape_interval", "scrape_timeout", "window"}

// checkKeys walks the YAML and names every key kvtop does not know (with
// the closest known key as a hint) and every duration that does not parse,
// with its line: viper's own messages name neither.
func checkKeys(root *yaml.Node, file string) Errors {
	var errs Errors
	var walk func(n *yaml.Node, section, path string)
	walk = func(n *yaml.Node, section, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, val := n.Content[i].Value, n.Content[i+1]
				kp := k
				if path != "" {
					kp = path + "." + k
				}
				if section == "colors" {
					continue
				}
				if !contains(known[section], k) {
					reason := "unknown key"
					if s := closest(k, known[section]); s != "" {
						reason += fmt.Sprintf(" (did you mean %q?)", s)
					}
					errs = append(errs, &Error{File: file, Key: fmt.Sprintf("%s (line %d)", kp, n.Content[i].Line), Reason: reason})
					continue
				}
				if section == "" && contains(durationKeys, k) && val.Kind == yaml.ScalarNode {
					if _, err := time.ParseDuration(val.Value); err != nil {
						errs = append(errs, &Error{File: file, Key: fmt.Sprintf("%s (line %d)", kp, val.Line),
							Reason: fmt.Sprintf("%q is not a duration (write it like 1s, 500ms, 2m)", val.Value)})
					}
				}
				if section == "" {
					walk(val, k, kp)
				}
			}
		case yaml.SequenceNode:
			for i, item := range n.Content {
				if item.Kind == yaml.MappingNode {
					walk(item, section, fmt.Sprintf("%s[%d]", path, i))
				}
			}
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, section, path)
			}
		}
	}
	walk(root, "", "")
	return errs
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// closest returns the known key within edit distance 2 of k, if any.
func closest(k string, keys []string) string {
	best, bestD := "", 3
	for _, c := range keys {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Validate checks values and returns every problem found.
func (c *Config) Validate() Errors {
	var errs Errors
	bad := func(key, reason string) { errs = append(errs, &Error{File: c.File, Key: key, Reason: reason}) }

	if c.Refresh < MinRefresh {
		bad("refresh", fmt.Sprintf("%s is below the floor of %s", c.Refresh, MinRefresh))
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
	if len(c.Workers) == 0 && c.EventsBind == "" {
		bad("workers", "no workers configured (and no events_bind)")
	}
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
		if w.Metrics == "" && w.Events == "" && c.EventsBind == "" {
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
		switch w.Engine {
		case "", "auto", "vllm", "sglang":
		default:
			bad(key+".engine", fmt.Sprintf("%q is not one of auto, vllm, sglang", w.Engine))
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
		case "", "auto", "kvtop", "dynamo", "llm-d", "production-stack":
		default:
			bad(key+".format", fmt.Sprintf("%q is not one of auto, kvtop, dynamo, llm-d, production-stack", d.Format))
		}
	}
	for _, f := range []struct {
		key string
		v   float64
	}{
		{"thresholds.hot_prefix_share", c.Thresholds.HotPrefixShare},
		{"thresholds.overheat_share", c.Thresholds.OverheatShare},
		{"thresholds.kv_usage_high", c.Thresholds.KVUsageHigh},
		{"thresholds.recovery_tolerance", c.Thresholds.RecoveryTolerance},
	} {
		if f.v < 0 || f.v > 1 {
			bad(f.key, fmt.Sprintf("%g is not a fraction between 0 and 1", f.v))
		}
	}
	if c.Thresholds.OverheatQueueRatio < 0 || c.Thresholds.OverheatMinQueue < 0 || c.Thresholds.RecoveryHoldS < 0 {
		bad("thresholds", "values must not be negative")
	}
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

func checkAuth(a Auth, key string, bad func(string, string)) {
	if a.BearerTokenFile != "" && a.BearerTokenEnv != "" {
		bad(key, "set bearer_token_file or bearer_token_env, not both")
	}
}

// PoolOptions turns the config into pool options.
func (c *Config) PoolOptions() pool.Options {
	t := pool.DefaultThresholds()
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

	o := pool.Options{
		Name:       c.Pool,
		Window:     c.Window,
		Refresh:    c.Refresh,
		Thresholds: t,
		Limits:     l,
	}
	for _, w := range c.Workers {
		o.Workers = append(o.Workers, pool.WorkerSpec{Name: w.Name, Aliases: Aliases(w), NoMetrics: w.Metrics == ""})
	}
	for _, r := range c.Routers {
		o.Routers = append(o.Routers, pool.RouterSpec{Name: r.Name})
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
