package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/kvtop/kvtop/pool"
)

var update = flag.Bool("update", false, "rewrite the expected messages of the invalid-config corpus")

const corpus = "../testdata/configs"

// TestInvalidConfigs holds every invalid config to the exact message the
// operator sees: where the value came from (the flag, the KVTOP_* variable,
// or the file, key and line) and the reason, every problem of one run
// together, then the warnings. A case sets variables and flags in its
// header: "# env: KVTOP_WINDOW=abc", "# flag: refresh=100ms".
func TestInvalidConfigs(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(corpus, "invalid", "*.yaml"))
	if len(files) < 12 {
		t.Fatalf("corpus has %d invalid configs, want at least 12", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			clearEnv(t)
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			v := viper.New()
			flags := Flags{}
			for _, l := range strings.Split(string(data), "\n") {
				if kv, ok := strings.CutPrefix(l, "# env: "); ok {
					k, val, _ := strings.Cut(kv, "=")
					t.Setenv(k, val)
				}
				if kv, ok := strings.CutPrefix(l, "# flag: "); ok {
					k, val, _ := strings.Cut(kv, "=")
					if err := v.BindFlagValue(k, setFlag{k, val}); err != nil {
						t.Fatal(err)
					}
					flags[k] = "--" + k
				}
			}
			_, warnings, err := Read(v, f, flags)
			if err == nil {
				t.Fatalf("%s loaded without error", f)
			}
			got := strings.ReplaceAll(err.Error(), f, "kvtop.yaml") + "\n"
			for _, w := range warnings {
				got += "warning: " + w + "\n"
			}
			want := strings.TrimSuffix(f, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(want, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			exp, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("no expected message (run with -update): %v", err)
			}
			if got != string(exp) {
				t.Errorf("message:\n%s\nwant:\n%s", got, exp)
			}
		})
	}
}

// setFlag is a command-line flag the operator set, as viper sees one.
type setFlag struct{ name, value string }

func (f setFlag) HasChanged() bool    { return true }
func (f setFlag) Name() string        { return f.name }
func (f setFlag) ValueString() string { return f.value }
func (f setFlag) ValueType() string   { return "string" }

// clearEnv unsets every KVTOP_* variable for the test (restored after it),
// so the machine's environment cannot change what a case says.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, EnvPrefix) {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func TestValidConfigLoadsEveryKey(t *testing.T) {
	clearEnv(t)
	c, err := Load(viper.New(), filepath.Join(corpus, "valid", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pool != "prod-qwen3" || c.Refresh != 500*time.Millisecond || c.Window != time.Minute || c.ReplayDeadline != 45*time.Second {
		t.Errorf("top-level values: %+v", c)
	}
	if len(c.Workers) != 2 || c.Workers[0].DPRanks != 2 || c.Workers[0].BearerTokenEnv != "VLLM_TOKEN" || c.Workers[1].CAFile == "" ||
		c.Workers[0].FirstSeq != 0 || c.Workers[1].FirstSeq != 1 {
		t.Errorf("workers: %+v", c.Workers)
	}
	if len(c.Routers) != 1 || c.Routers[0].Profile != "vllm-router" || !c.Routers[0].InsecureSkipVerify {
		t.Errorf("routers: %+v", c.Routers)
	}
	if c.Colors["warn"] != "#ffaa00" || c.Colors["ok"] != "green" || c.Theme != "dark" {
		t.Errorf("theme: %q %v", c.Theme, c.Colors)
	}
	want := Limits{Decisions: 5000, RecentDecisions: 100, Prefixes: 30, PrefixCounters: 60000, Incidents: 40, Errors: 100,
		BodyBytes: 32 << 20, Engines: 64, Series: 100000, EventMessageBytes: 32 << 20, EventQueueBytes: 128 << 20, IndexBlocks: 8000000,
		Fingerprints: 4096, LadderHashes: 65536}
	if c.Limits != want {
		t.Errorf("limits:\n%+v\nwant\n%+v", c.Limits, want)
	}
	o := c.PoolOptions()
	if o.Thresholds.HotPrefixShare != 0.2 || o.Thresholds.OverheatShare != 0.7 || o.Thresholds.RecoveryHoldS != 20 {
		t.Errorf("thresholds not applied: %+v", o.Thresholds)
	}
	// Every limit the pool takes reaches it: limits.index_blocks was read,
	// validated and then ignored (the pool kept its default cap).
	wantPool := pool.Limits{Decisions: 5000, RecentDecisions: 100, Prefixes: 30, PrefixCounters: 60000, Incidents: 40, Errors: 100, IndexBlocks: 8000000, Fingerprints: 4096, LadderHashes: 65536}
	if o.Limits != wantPool {
		t.Errorf("pool limits:\n%+v\nwant\n%+v", o.Limits, wantPool)
	}
	if o.Thresholds.ThrashShare != 0.3 {
		t.Errorf("thresholds.thrash_share not applied: %+v", o.Thresholds)
	}
	if o.Thresholds.ThrashMinStored != 512 || o.Thresholds.LeaveRatio != 0.8 || o.Thresholds.LeaveAfterS != 30 {
		t.Errorf("thresholds.thrash_min_stored, leave_ratio, leave_after_s not applied: %+v", o.Thresholds)
	}
	if got := o.Workers[0].Aliases; len(got) != 3 || got[0] != "worker_7" || got[1] != "http://10.0.0.5:8000" || got[2] != "10.0.0.5:8000" {
		t.Errorf("aliases: %v", got)
	}
}

// schemaPaths lists every key of the schema as a path: workers[].name,
// thresholds.kv_usage_high.
func schemaPaths() []string {
	var out []string
	var walk func(s *section, prefix string)
	walk = func(s *section, prefix string) {
		for _, f := range s.fields {
			out = append(out, prefix+f.name)
			switch f.kind {
			case kSection:
				walk(f.sub, prefix+f.name+".")
			case kList:
				walk(f.sub, prefix+f.name+"[].")
			}
		}
	}
	walk(schema, "")
	return out
}

// docPaths lists the key paths a YAML document holds, in the same form.
func docPaths(t *testing.T, data []byte) map[string]bool {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := prefix + n.Content[i].Value
				out[k] = true
				if k != "colors" {
					walk(n.Content[i+1], k+".")
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, strings.TrimSuffix(prefix, ".")+"[].")
			}
		}
	}
	walk(&doc, "")
	return out
}

// TestFullConfigAndReadmeNameEveryKey: the complete config of the corpus
// holds every key of the schema, the README's example shows each (at least
// in a comment) and has no key kvtop would refuse: a new field is
// documented.
func TestFullConfigAndReadmeNameEveryKey(t *testing.T) {
	full, err := os.ReadFile(filepath.Join(corpus, "valid", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(readme), "## Configure")
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	example, _, _ := strings.Cut(rest, "```")
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(example), &doc); err != nil {
		t.Fatalf("README example: %v", err)
	}
	if ck := checkKeys(&doc, "README.md"); len(ck.errs) > 0 {
		t.Errorf("README example:\n%v", ck.errs)
	}
	have := docPaths(t, full)
	for _, p := range schemaPaths() {
		if !have[p] {
			t.Errorf("full.yaml does not hold %s", p)
		}
	}
	// The README may name a key in a comment (routers take the auth keys
	// of workers).
	have = docPaths(t, []byte(example))
	for _, p := range schemaPaths() {
		if name := p[strings.LastIndexAny(p, ".")+1:]; !have[p] && !strings.Contains(example, name+":") {
			t.Errorf("the README's example does not show %s", p)
		}
	}
}

// TestEveryScalarKeyFromEnv: each scalar key, nested ones too, is set by
// its KVTOP_* variable (viper's AutomaticEnv alone would ignore keys no
// file or default mentions).
func TestEveryScalarKeyFromEnv(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "kvtop.yaml")
	if err := os.WriteFile(f, []byte("workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	theme, err := filepath.Abs(filepath.Join(corpus, "themes", "amber.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Fields(`KVTOP_POOL=from-env KVTOP_REFRESH=2s KVTOP_SCRAPE_INTERVAL=3s KVTOP_SCRAPE_TIMEOUT=4s
		KVTOP_WINDOW=2m KVTOP_REPLAY_DEADLINE=1m KVTOP_EVENTS_BIND=tcp://*:5557 KVTOP_THEME=mono KVTOP_THEME_FILE=` + theme + `
		KVTOP_THRESHOLDS_HOT_PREFIX_SHARE=0.3 KVTOP_THRESHOLDS_OVERHEAT_SHARE=0.8 KVTOP_THRESHOLDS_OVERHEAT_QUEUE_RATIO=4
		KVTOP_THRESHOLDS_OVERHEAT_MIN_QUEUE=5 KVTOP_THRESHOLDS_KV_USAGE_HIGH=0.85 KVTOP_THRESHOLDS_RECOVERY_TOLERANCE=0.02
		KVTOP_THRESHOLDS_RECOVERY_HOLD_S=15 KVTOP_THRESHOLDS_THRASH_SHARE=0.25 KVTOP_THRESHOLDS_THRASH_MIN_STORED=128
		KVTOP_THRESHOLDS_LEAVE_RATIO=0.75 KVTOP_THRESHOLDS_LEAVE_AFTER_S=20
		KVTOP_LIMITS_DECISIONS=7 KVTOP_LIMITS_RECENT_DECISIONS=8 KVTOP_LIMITS_PREFIXES=9 KVTOP_LIMITS_PREFIX_COUNTERS=10
		KVTOP_LIMITS_INCIDENTS=11 KVTOP_LIMITS_ERRORS=12 KVTOP_LIMITS_BODY_BYTES=13 KVTOP_LIMITS_ENGINES=14
		KVTOP_LIMITS_SERIES=15 KVTOP_LIMITS_EVENT_MESSAGE_BYTES=16 KVTOP_LIMITS_EVENT_QUEUE_BYTES=17 KVTOP_LIMITS_INDEX_BLOCKS=18
		KVTOP_METRICS_SOURCE_PROMETHEUS=http://prom:9090 KVTOP_METRICS_SOURCE_SELECTOR={job="vllm"} KVTOP_METRICS_SOURCE_WORKER_LABEL=instance
		KVTOP_METRICS_SOURCE_ENGINE=vllm KVTOP_METRICS_SOURCE_BEARER_TOKEN_FILE=/run/prom-token KVTOP_METRICS_SOURCE_BEARER_TOKEN_ENV=PROM_TOKEN
		KVTOP_METRICS_SOURCE_CA_FILE=/etc/prom-ca.pem KVTOP_METRICS_SOURCE_INSECURE_SKIP_VERIFY=true
		KVTOP_EVENT_PLANE_KIND=nats KVTOP_EVENT_PLANE_NATS=nats://nats:4222 KVTOP_EVENT_PLANE_SUBJECT=namespace.llm.component.backend.kv-events
		KVTOP_EVENT_PLANE_JETSTREAM_STREAM=kv KVTOP_EVENT_PLANE_JETSTREAM_CONSUMER=kvtop KVTOP_EVENT_PLANE_JETSTREAM_START=new
		KVTOP_EVENT_PLANE_USER=kvtop KVTOP_EVENT_PLANE_PASSWORD_ENV=NATS_PASSWORD KVTOP_EVENT_PLANE_TOKEN_FILE=/run/nats-token
		KVTOP_EVENT_PLANE_TOKEN_ENV=NATS_TOKEN KVTOP_EVENT_PLANE_CREDS_FILE=/run/nats.creds KVTOP_EVENT_PLANE_CA_FILE=/etc/nats-ca.pem
		KVTOP_EVENT_PLANE_INSECURE_SKIP_VERIFY=true
		KVTOP_LIMITS_FINGERPRINTS=19 KVTOP_LIMITS_LADDER_HASHES=20 KVTOP_THRESHOLDS_LADDER_LOSS_SHARE=0.15
		KVTOP_KUBERNETES_ENABLED=true KVTOP_KUBERNETES_KUBECONFIG=/k/config KVTOP_KUBERNETES_CONTEXT=prod KVTOP_KUBERNETES_NAMESPACE=llm
		KVTOP_KUBERNETES_INFERENCE_POOL=pool-a KVTOP_KUBERNETES_ACCESS=proxy`)
	// KVTOP_KUBERNETES_SELECTOR excludes KVTOP_KUBERNETES_INFERENCE_POOL:
	// TestKubernetesSelectorFromEnv sets it. KVTOP_EVENT_PLANE_DISCOVER and
	// _ETCD need kind dynamo-zmq: TestEventPlaneDiscoverFromEnv sets them.
	if len(env)+3 != len(EnvVars()) {
		t.Errorf("the test sets %d variables, kvtop reads %d: %v", len(env), len(EnvVars()), EnvVars())
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	// Both of metrics_source's bearer token keys came from the
	// environment: the one problem is that both are set.
	_, _, err = Read(viper.New(), f, nil)
	if err == nil || !strings.Contains(err.Error(), "metrics_source: set bearer_token_file or bearer_token_env, not both") ||
		strings.Count(err.Error(), "\n") > 0 {
		t.Fatalf("both bearer token variables: %v", err)
	}
	os.Unsetenv("KVTOP_METRICS_SOURCE_BEARER_TOKEN_FILE")
	c, warnings, err := Read(viper.New(), f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	if c.Pool != "from-env" || c.Refresh != 2*time.Second || c.ScrapeInterval != 3*time.Second || c.ScrapeTimeout != 4*time.Second ||
		c.Window != 2*time.Minute || c.ReplayDeadline != time.Minute || c.EventsBind != "tcp://*:5557" || c.Theme != "mono" ||
		c.Colors["warn"] != "#ffbf00" {
		t.Errorf("top level: %+v", c)
	}
	wantT := Thresholds{HotPrefixShare: 0.3, OverheatShare: 0.8, OverheatQueueRatio: 4, OverheatMinQueue: 5, KVUsageHigh: 0.85, RecoveryTolerance: 0.02, RecoveryHoldS: 15,
		ThrashShare: 0.25, ThrashMinStored: 128, LeaveRatio: 0.75, LeaveAfterS: 20, LadderLossShare: 0.15}
	if c.Thresholds != wantT {
		t.Errorf("thresholds %+v", c.Thresholds)
	}
	wantL := Limits{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	if c.Limits != wantL {
		t.Errorf("limits %+v", c.Limits)
	}
	if c.Workers[0].Name != "w0" {
		t.Errorf("the file's workers are lost: %+v", c.Workers)
	}
	wantM := MetricsSource{Prometheus: "http://prom:9090", Selector: `{job="vllm"}`, WorkerLabel: "instance", Engine: "vllm",
		Auth: Auth{BearerTokenEnv: "PROM_TOKEN", CAFile: "/etc/prom-ca.pem", InsecureSkipVerify: true}}
	wantE := EventPlane{Kind: "nats", NATS: "nats://nats:4222", Subject: "namespace.llm.component.backend.kv-events",
		JetStream: JetStream{Stream: "kv", Consumer: "kvtop", Start: "new"}, User: "kvtop", PasswordEnv: "NATS_PASSWORD",
		TokenFile: "/run/nats-token", TokenEnv: "NATS_TOKEN", CredsFile: "/run/nats.creds", CAFile: "/etc/nats-ca.pem", InsecureSkipVerify: true}
	if c.MetricsSource != wantM || !reflect.DeepEqual(c.EventPlane, wantE) {
		t.Errorf("metrics_source %+v\nevent_plane %+v", c.MetricsSource, c.EventPlane)
	}
	wantK := Kubernetes{Enabled: true, Kubeconfig: "/k/config", Context: "prod", Namespace: "llm", InferencePool: "pool-a", Access: "proxy"}
	if c.Kubernetes != wantK {
		t.Errorf("kubernetes %+v", c.Kubernetes)
	}
}

// TestEventPlaneDiscoverFromEnv: Dynamo's ZMQ event plane found in
// Kubernetes or in etcd, from the environment, needs no file and no
// workers.
func TestEventPlaneDiscoverFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want EventPlane
	}{
		{[]string{"KVTOP_EVENT_PLANE_DISCOVER=kubernetes", "KVTOP_KUBERNETES_NAMESPACE=dynamo"},
			EventPlane{Kind: EventPlaneDynamoZMQ, Discover: DiscoverKubernetes}},
		{[]string{"KVTOP_EVENT_PLANE_DISCOVER=etcd", "KVTOP_EVENT_PLANE_ETCD=http://etcd-0:2379,http://etcd-1:2379"},
			EventPlane{Kind: EventPlaneDynamoZMQ, Discover: DiscoverEtcd, Etcd: "http://etcd-0:2379,http://etcd-1:2379"}},
	} {
		t.Run(tc.want.Discover, func(t *testing.T) {
			clearEnv(t)
			t.Chdir(t.TempDir())
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			t.Setenv("KVTOP_EVENT_PLANE_KIND", "dynamo-zmq")
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			c, _, err := Read(viper.New(), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.EventPlane, tc.want) || c.Kubernetes.On() {
				t.Errorf("event_plane %+v, kubernetes %+v (pod discovery stays off)", c.EventPlane, c.Kubernetes)
			}
			if o := c.PoolOptions(); len(o.Workers) != 0 {
				t.Errorf("workers: %+v", o.Workers)
			}
		})
	}
}

// TestKubernetesSelectorFromEnv: discovery alone, from the environment,
// needs no file and no workers.
func TestKubernetesSelectorFromEnv(t *testing.T) {
	clearEnv(t)
	t.Chdir(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("KVTOP_KUBERNETES_SELECTOR", "app=vllm")
	c, _, err := Read(viper.New(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Kubernetes.On() || c.Kubernetes.Selector != "app=vllm" || len(c.Workers) != 0 {
		t.Errorf("kubernetes %+v, workers %v", c.Kubernetes, c.Workers)
	}
}

func TestEnvAndDefaults(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	f := filepath.Join(dir, "kvtop.yaml")
	if err := os.WriteFile(f, []byte("window: 30s\nworkers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVTOP_WINDOW", "2m")
	c, err := Load(viper.New(), f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Window != 2*time.Minute {
		t.Errorf("KVTOP_WINDOW does not win over the file: %s", c.Window)
	}
	if c.Refresh != time.Second || c.ScrapeTimeout != 2*time.Second || c.Pool != "default" || c.ReplayDeadline != DefaultReplayDeadline {
		t.Errorf("defaults: refresh %s timeout %s pool %q replay deadline %s", c.Refresh, c.ScrapeTimeout, c.Pool, c.ReplayDeadline)
	}
}

// TestControlCharactersStayInTheirLine: a key holding a newline cannot
// forge a second problem line (the command cleans ESC and CR when it
// prints; see cmd/kvtop).
func TestControlCharactersStayInTheirLine(t *testing.T) {
	clearEnv(t)
	f := filepath.Join(t.TempDir(), "kvtop.yaml")
	if err := os.WriteFile(f, []byte("\"a\\nkvtop.yaml: all good\": 1\nworkers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(viper.New(), f)
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Line != 1 || es[0].Key != "a\nkvtop.yaml: all good" {
		t.Fatalf("err = %#v", err)
	}
}

func TestMissingExplicitFile(t *testing.T) {
	_, err := Load(viper.New(), "/nonexistent/kvtop.yaml")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/kvtop.yaml: cannot read") {
		t.Fatalf("err = %v", err)
	}
}

// TestWriteRoundTrip: what kvtop sim writes, kvtop reads back unchanged.
func TestWriteRoundTrip(t *testing.T) {
	c := Defaults()
	c.Pool = "sim"
	c.Workers = []Worker{{Name: "w0", Metrics: "http://127.0.0.1:8001/metrics", Events: "tcp://127.0.0.1:5557", Replay: "tcp://127.0.0.1:5558", DPRanks: 2}}
	c.Routers = []Router{{Name: "r0", Metrics: "http://127.0.0.1:29000/metrics"}}
	c.Decisions = []Decisions{{Path: "/tmp/d.jsonl", Format: "kvtop"}}
	f := filepath.Join(t.TempDir(), "sim.yaml")
	if err := Write(f, c, "written by a test"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(f)
	if !strings.HasPrefix(string(raw), "# written by a test\n") || !strings.Contains(string(raw), "refresh: 1s") {
		t.Errorf("written file:\n%s", raw)
	}
	back, err := Load(viper.New(), f)
	if err != nil {
		t.Fatalf("reading back: %v\n%s", err, raw)
	}
	if back.Workers[0].Replay != c.Workers[0].Replay || back.Workers[0].DPRanks != 2 || back.Decisions[0].Format != "kvtop" || back.Refresh != time.Second {
		t.Errorf("round trip lost values: %+v", back)
	}
}

// TestThemeFile: a theme file's colours apply, inline colors win over it,
// and a bad colour in it is reported like any other config problem.
func TestThemeFile(t *testing.T) {
	dir := t.TempDir()
	theme, err := os.ReadFile(filepath.Join(corpus, "themes", "amber.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "amber.yaml"), theme, 0o644); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "kvtop.yaml")
	base := "workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\ntheme_file: amber.yaml\n"
	if err := os.WriteFile(f, []byte(base+"colors:\n  crit: \"#ff0000\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(viper.New(), f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Colors["warn"] != "#ffbf00" || c.Colors["ok"] != "green" || c.Colors["crit"] != "#ff0000" {
		t.Errorf("colours: %v", c.Colors)
	}
	if err := os.WriteFile(filepath.Join(dir, "amber.yaml"), []byte("warn: amberish\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(viper.New(), f)
	want := filepath.Join(dir, "amber.yaml") + `: warn (line 1): "amberish" is not a colour`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("bad colour in the theme file: %v\nwant the theme file, key and line: %s", err, want)
	}
}

// No --config, none at the search paths, nothing else to watch: NotFound,
// naming where kvtop looked (the first run), not "no workers configured".
// A KVTOP_EVENTS_BIND is something to watch: no NotFound then.
func TestNoConfigFound(t *testing.T) {
	t.Chdir(t.TempDir())
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	_, _, err := Read(nil, "", nil)
	var nf *NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("error %v, want NotFound", err)
	}
	if want := "no config: none given (-c FILE) and none at ./kvtop.yaml or " + filepath.Join(xdg, "kvtop", "config.yaml"); err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	t.Setenv("KVTOP_EVENTS_BIND", "tcp://127.0.0.1:5557")
	if c, _, err := Read(nil, "", nil); err != nil || c.EventsBind == "" {
		t.Errorf("with KVTOP_EVENTS_BIND: %v, %+v", err, c)
	}
}

// TestThemeFileThatIsNotAMap: a theme file that is not YAML, or is YAML
// but not a map of role: colour, stops kvtop with an error naming the
// theme file and what is wrong with it. Both were taken silently as no
// colours at all (an `err :=` in loadThemeFile shadowed the error).
func TestThemeFileThatIsNotAMap(t *testing.T) {
	for _, c := range []struct {
		name, theme, want string
	}{
		{"not YAML", "warn: [amber\nok: green\n", `: not valid YAML: line 1: did not find expected ',' or ']'`},
		{"YAML but a list", "- warn\n- amber\n", `: line 1: not a map of role: colour`},
		{"YAML but a word", "amber\n", `: line 1: not a map of role: colour`},
		{"a map of lists", "warn: [amber, red]\n", `: not a map of role: colour: unmarshal errors: line 1: cannot unmarshal !!seq into string`},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearEnv(t)
			dir := t.TempDir()
			theme := filepath.Join(dir, "theme.yaml")
			if err := os.WriteFile(theme, []byte(c.theme), 0o644); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(dir, "kvtop.yaml")
			cfg := "workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\ntheme_file: theme.yaml\n"
			if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			got, _, err := Read(viper.New(), f, nil)
			if want := theme + c.want; err == nil || err.Error() != want {
				t.Fatalf("theme file %q: error %v (colours %v)\nwant: %s", c.theme, err, got.Colors, want)
			}
		})
	}
}

// TestPoolOptionsSayWhichWorkersHaveEvents: the pool is told which
// workers have a KV event source (their events endpoint, the events_bind
// socket their publishers dial, an event plane), so one whose stream has
// sent nothing yet reads index_complete false with its blocks unknown,
// and one without (metrics only) stays as it was.
func TestPoolOptionsSayWhichWorkersHaveEvents(t *testing.T) {
	metricsOnly := Worker{Name: "m", Metrics: "http://10.0.0.5:8000/metrics"}
	withEvents := Worker{Name: "e", Metrics: "http://10.0.0.6:8000/metrics", Events: "tcp://10.0.0.6:5557"}
	for _, c := range []struct {
		name string
		cfg  Config
		want map[string]bool
	}{
		{"endpoints", Config{Workers: []Worker{metricsOnly, withEvents}}, map[string]bool{"m": false, "e": true}},
		{"events_bind", Config{Workers: []Worker{metricsOnly}, EventsBind: "tcp://0.0.0.0:5557"}, map[string]bool{"m": true}},
		{"event plane", Config{Workers: []Worker{metricsOnly}, EventPlane: EventPlane{NATS: "nats://nats:4222"}}, map[string]bool{"m": true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, w := range c.cfg.PoolOptions().Workers {
				if w.Events != c.want[w.Name] {
					t.Errorf("%s: events %v, want %v", w.Name, w.Events, c.want[w.Name])
				}
			}
		})
	}
}
