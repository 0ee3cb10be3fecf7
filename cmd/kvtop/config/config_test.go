package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

var update = flag.Bool("update", false, "rewrite the expected messages of the invalid-config corpus")

const corpus = "../../../testdata/configs"

// TestInvalidConfigs holds every invalid config to the exact message the
// operator sees: the file, the key (with its line for typos) and the reason.
func TestInvalidConfigs(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(corpus, "invalid", "*.yaml"))
	if len(files) < 8 {
		t.Fatalf("corpus has %d invalid configs, want at least 8", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := Load(viper.New(), f)
			if err == nil {
				t.Fatalf("%s loaded without error", f)
			}
			got := strings.ReplaceAll(err.Error(), f, "kvtop.yaml") + "\n"
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

func TestValidConfigLoadsEveryKey(t *testing.T) {
	c, err := Load(viper.New(), filepath.Join(corpus, "valid", "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pool != "prod-qwen3" || c.Refresh != 500*time.Millisecond || c.Window != time.Minute {
		t.Errorf("top-level values: %+v", c)
	}
	if len(c.Workers) != 2 || c.Workers[0].DPRanks != 2 || c.Workers[0].BearerTokenEnv != "VLLM_TOKEN" || c.Workers[1].CAFile == "" {
		t.Errorf("workers: %+v", c.Workers)
	}
	if len(c.Routers) != 1 || c.Routers[0].Profile != "vllm-router" {
		t.Errorf("routers: %+v", c.Routers)
	}
	if c.Colors["warn"] != "#ffaa00" || c.Theme != "dark" {
		t.Errorf("theme: %q %v", c.Theme, c.Colors)
	}
	o := c.PoolOptions()
	if o.Thresholds.HotPrefixShare != 0.2 || o.Thresholds.OverheatShare != 0.7 {
		t.Errorf("thresholds not applied: %+v", o.Thresholds)
	}
	if o.Thresholds.KVUsageHigh == 0 || o.Limits.Decisions != 5000 || o.Limits.Prefixes == 0 {
		t.Errorf("defaults not kept: %+v %+v", o.Thresholds, o.Limits)
	}
	if got := o.Workers[0].Aliases; len(got) != 3 || got[0] != "worker_7" || got[1] != "http://10.0.0.5:8000" || got[2] != "10.0.0.5:8000" {
		t.Errorf("aliases: %v", got)
	}
}

func TestEnvAndDefaults(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "kvtop.yaml")
	if err := os.WriteFile(f, []byte("workers:\n  - name: w0\n    metrics: http://127.0.0.1:1/metrics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVTOP_WINDOW", "2m")
	c, err := Load(viper.New(), f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Window != 2*time.Minute {
		t.Errorf("KVTOP_WINDOW not applied: %s", c.Window)
	}
	if c.Refresh != time.Second || c.ScrapeTimeout != 2*time.Second || c.Pool != "default" {
		t.Errorf("defaults: refresh %s timeout %s pool %q", c.Refresh, c.ScrapeTimeout, c.Pool)
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
	if err == nil || !strings.Contains(err.Error(), "colors.warn") || !strings.Contains(err.Error(), "amberish") {
		t.Errorf("bad colour in the theme file: %v", err)
	}
}
