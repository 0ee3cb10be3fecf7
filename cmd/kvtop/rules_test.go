package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/internal/testproc"
	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// rulesFile is the shipped alert rules, from this package's folder.
var rulesFile = filepath.Join("..", "..", "deploy", "prometheus", "kvtop-rules.yaml")

// captureInterval is the scrape interval one capture stands for in the
// promtool tests. The incidents are played compressed: one capture per
// simulated second, each taken as one 15 s scrape, so a scenario's minute
// is a quarter of an hour of alerting time and `for:` clauses of minutes
// can hold.
const captureInterval = 15 * time.Second

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) map[string]rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	out := map[string]rule{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r
		}
	}
	return out
}

var labelRef = regexp.MustCompile(`\{\{\s*\$labels\.(\w+)\s*\}\}`)

// TestAlertRulesCheck: promtool accepts the rules, and each alert tells the
// on-call what to look at: a severity, a summary, and a description that
// names the kvtop screen to open. Templates use only $labels, so what the
// on-call reads is exact in the rule tests below.
func TestAlertRulesCheck(t *testing.T) {
	promtool := testproc.Binary(t, "promtool", "prometheus")
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	rules := loadRules(t)
	for _, name := range []string{"KvtopHotPrefixOverheating", "KvtopLoadSkew", "KvtopStreamHistoryLost", "KvtopWorkerIndexIncomplete",
		"KvtopRouterNotRecovered", "KvtopWorkerDown", "KvtopCollectorDown", "KvtopRoutingLoss"} {
		r, ok := rules[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q", name, s)
		}
		if r.Annotations["summary"] == "" || !strings.Contains(r.Annotations["description"], "kvtop") {
			t.Errorf("%s: want a summary and a description that says what to open in kvtop", name)
		}
		for _, a := range r.Annotations {
			if rest := labelRef.ReplaceAllString(a, ""); strings.Contains(rest, "{{") {
				t.Errorf("%s: a template other than $labels: %q", name, a)
			}
		}
	}
	if len(rules) != 8 {
		t.Errorf("%d alerts; this test knows 8: add the new one to it and to an incident below", len(rules))
	}
}

// incident is a simulated incident captured from a real `kvtop serve`:
// one capture per simulated second from sim time from, then expected
// alerts at some captures.
type incident struct {
	name     string
	opts     sim.Options
	tweak    func(*config.Config)
	from     time.Duration
	captures int
	// at, if set, runs before capture k (faults, stopping the server).
	at     func(k int, r *scnRun, sv *serving)
	checks []alertCheck
	// after, if set, adds checks from what was captured (an alert whose
	// firing capture depends on how the machine paced the run).
	after func(t *testing.T, rc *recorder) []alertCheck
}

// alertCheck: at capture k, alert fires with exactly these label sets
// (the series' own labels; job, instance and the rule's are added).
type alertCheck struct {
	k     int
	alert string
	// firing returns the expected label sets, given kvtop's snapshot at
	// capture k (nil: none).
	firing func(t *testing.T, s *snapshot.Snapshot) []map[string]string
}

func none(*testing.T, *snapshot.Snapshot) []map[string]string { return nil }

func labels(kv ...string) func(*testing.T, *snapshot.Snapshot) []map[string]string {
	return func(*testing.T, *snapshot.Snapshot) []map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return []map[string]string{m}
	}
}

// quietAt expects no alert at all at capture k.
func quietAt(k int, rules map[string]rule) []alertCheck {
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []alertCheck
	for _, name := range names {
		out = append(out, alertCheck{k, name, none})
	}
	return out
}

// TestAlertRulesOnSimulatedIncidents plays four incidents on the
// simulator, captures what a real `kvtop serve` exported during each
// (promtool's input_series), and runs `promtool test rules` on them: the
// alerts fire for the worker, stream or router at fault, only after their
// `for:`, and nothing fires before the incident.
func TestAlertRulesOnSimulatedIncidents(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	promtool := testproc.Binary(t, "promtool", "prometheus")
	rules := loadRules(t)
	hot := func(t *testing.T, s *snapshot.Snapshot) []map[string]string {
		var out []map[string]string
		for _, w := range s.Workers {
			if w.Overheating {
				out = append(out, map[string]string{"worker": w.Name})
			}
		}
		if len(out) == 0 {
			t.Errorf("hot-prefix: no worker overheats in kvtop's snapshot at the check: the incident did not happen")
		}
		return out
	}
	// cacheAware: before the incident the routing rung is below the
	// threshold in kvtop's snapshot too.
	cacheAware := func(t *testing.T, s *snapshot.Snapshot) []map[string]string {
		if r := s.Pool.Ladder.Share.Routing; r != nil && *r >= 0.10 {
			t.Errorf("ladder: routing loss %s of prompt tokens under the cache-aware router, want < 10%%", pctOf(r))
		}
		return nil
	}
	incidents := []incident{
		{
			// A surge on one document from 20 s to 80 s: its owner
			// overheats, the pool's load is skewed, then it cools down
			// (its queue drained by 85 s; the verdict holds
			// leave_after_s more, pool/verdict.go).
			name: "hot-prefix", opts: sim.Options{Scenario: "hot-prefix"}, from: 10 * time.Second, captures: 100,
			checks: append(quietAt(5, rules),
				alertCheck{65, "KvtopHotPrefixOverheating", hot},
				alertCheck{65, "KvtopLoadSkew", labels()},
				alertCheck{65, "KvtopStreamHistoryLost", none},
				alertCheck{65, "KvtopRouterNotRecovered", none},
				alertCheck{99, "KvtopHotPrefixOverheating", none},
			),
		},
		{
			// w3's gap outruns its replay buffer at 20 s (history lost,
			// index incomplete); w1 restarts at 25 s and stays down 50 s;
			// at 70 s the collector itself stops.
			name: "replay-overflow", opts: sim.Options{Scenario: "replay-overflow"}, from: 10 * time.Second, captures: 72,
			at: func(k int, r *scnRun, sv *serving) {
				switch k {
				case 15:
					r.inject(sim.WorkerRestart{Worker: 1, Down: 50 * time.Second})
				case 60:
					sv.stop()
				}
			},
			checks: append(quietAt(5, rules),
				alertCheck{55, "KvtopStreamHistoryLost", labels("worker", "w3", "rank", "0", "state", "history_lost")},
				alertCheck{55, "KvtopWorkerIndexIncomplete", labels("worker", "w3")},
				alertCheck{55, "KvtopWorkerDown", labels("worker", "w1")},
				alertCheck{55, "KvtopCollectorDown", none},
				alertCheck{55, "KvtopHotPrefixOverheating", none},
				alertCheck{71, "KvtopCollectorDown", labels()},
				// The collector is gone: its series are stale, its alerts resolve.
				alertCheck{71, "KvtopStreamHistoryLost", none},
				alertCheck{71, "KvtopWorkerDown", none},
			),
		},
		{
			// The router restarts at 30 s; with a recovery hold longer
			// than the run the pool hit ratio never counts as recovered.
			name: "router-restart", opts: sim.Options{Scenario: "router-restart"}, from: 20 * time.Second, captures: 60,
			tweak: func(c *config.Config) { c.Thresholds.RecoveryHoldS = 1e6 },
			checks: append(quietAt(5, rules),
				alertCheck{40, "KvtopRouterNotRecovered", none}, // recovering for less than 10 minutes
				alertCheck{58, "KvtopRouterNotRecovered", labels("router", "r0")},
				alertCheck{58, "KvtopStreamHistoryLost", none},
			),
		},
		{
			// The router of eight workers turns round-robin at 40 s: each
			// turn of a chat lands away from the worker that holds its
			// conversation, so its history is computed again while
			// another worker holds it (measured: the routing rung 1 % of
			// prompt tokens before, 13–25 % from six captures after the
			// switch). kvtop's window is wall time: 6 s holds about 20
			// captures on a quiet machine, 6 on a loaded one (the
			// cache-aware stretch before leaves it). The alert must fire
			// where the rung has held 10 % for its 5 minutes (21
			// evaluations): that capture depends on the machine's pace,
			// so it is found in what was captured — and must exist.
			name: "routing-loss", opts: sim.Options{Workers: 8}, from: 30 * time.Second, captures: 60,
			tweak: func(c *config.Config) { c.Window = 6 * time.Second },
			at: func(k int, r *scnRun, _ *serving) {
				if k == 10 {
					r.inject(sim.Policy{Name: "round-robin"})
				}
			},
			checks: []alertCheck{
				{8, "KvtopRoutingLoss", cacheAware},
				{20, "KvtopRoutingLoss", none}, // 10 captures after the switch: pending at most
			},
			after: func(t *testing.T, rc *recorder) []alertCheck {
				share := rc.ladderRouting()
				held := 0
				for k := len(share) - 1; k >= 0; k-- { // the run of ≥ 10 % that ends last
					if share[k] >= 0.10 {
						held++
						continue
					}
					if held > 0 {
						break
					}
				}
				const evals = 22 // 5m at 15 s, one to spare
				if held < evals {
					t.Errorf("the routing rung held 10%% for %d captures at the end, want %d (5 minutes): %.3f", held, evals, share)
					return nil
				}
				return []alertCheck{{len(share) - 1, "KvtopRoutingLoss", labels()}}
			},
		},
	}

	var (
		mu     sync.Mutex
		groups = map[string]string{}
	)
	t.Run("capture", func(t *testing.T) {
		for _, inc := range incidents {
			t.Run(inc.name, func(t *testing.T) {
				t.Parallel()
				g := captureIncident(t, inc, rules)
				mu.Lock()
				groups[inc.name] = g
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	var b strings.Builder
	abs, _ := filepath.Abs(rulesFile)
	fmt.Fprintf(&b, "# Generated by cmd/kvtop/rules_test.go from real kvtop serve runs on the simulator.\nrule_files:\n  - %q\nevaluation_interval: %s\ntests:\n", abs, captureInterval)
	for _, inc := range incidents {
		b.WriteString(groups[inc.name])
	}
	file := filepath.Join(t.TempDir(), "kvtop-rules-test.yaml")
	if keep := os.Getenv("KVTOP_RULES_TEST_OUT"); keep != "" {
		file = keep // to read what was tested
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n(set KVTOP_RULES_TEST_OUT=file to keep the generated test)", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool test rules said:\n%s", out)
	}
}

// captureIncident plays one incident and returns its promtool test group.
func captureIncident(t *testing.T, inc incident, rules map[string]rule) string {
	r := startScenario(t, inc.opts, inc.tweak)
	sv := startServing(t, r, serve.Options{})
	rc := newRecorder(sv.addr)
	r.jumpTo(inc.from)
	snaps := make([]*snapshot.Snapshot, inc.captures)
	for k := 0; k < inc.captures; k++ {
		if inc.at != nil {
			inc.at(k, r, sv)
		}
		if k > 0 {
			r.jumpTo(r.s.Now() + time.Second)
		}
		// Let kvtop scrape and publish what the second did: the next
		// snapshot after the step (a scrape interval is a refresh).
		seq := r.e.Pool.Latest().Seq
		r.waitFor("a snapshot after the step", func(s *snapshot.Snapshot) bool { return s.Seq >= seq+1 })
		snaps[k] = r.e.Pool.Latest()
		rc.capture()
	}
	if inc.after != nil {
		inc.checks = append(inc.checks, inc.after(t, rc)...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    interval: %s\n    input_series:\n%s    alert_rule_test:\n", inc.name, captureInterval, rc.inputSeries())
	sort.SliceStable(inc.checks, func(i, j int) bool { return inc.checks[i].k < inc.checks[j].k })
	for _, c := range inc.checks {
		rl, ok := rules[c.alert]
		if !ok {
			t.Fatalf("no alert %s in %s", c.alert, rulesFile)
		}
		fmt.Fprintf(&b, "      - eval_time: %s\n        alertname: %s\n        exp_alerts:", time.Duration(c.k)*captureInterval, c.alert)
		want := c.firing(t, snaps[c.k])
		if len(want) == 0 {
			b.WriteString(" []\n")
			continue
		}
		b.WriteString("\n")
		for _, ls := range want {
			all := map[string]string{"job": rc.job, "instance": rc.instance}
			for k, v := range ls {
				all[k] = v
			}
			for k, v := range rl.Labels {
				all[k] = v
			}
			ann := map[string]string{}
			for k, v := range rl.Annotations {
				ann[k] = labelRef.ReplaceAllStringFunc(v, func(ref string) string {
					return all[labelRef.FindStringSubmatch(ref)[1]]
				})
			}
			b.WriteString("          - exp_labels:\n")
			writeMap(&b, all, 14)
			b.WriteString("            exp_annotations:\n")
			writeMap(&b, ann, 14)
		}
	}
	return b.String()
}

func writeMap(b *strings.Builder, m map[string]string, indent int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s%s: %q\n", strings.Repeat(" ", indent), k, m[k])
	}
}

// pctOf is a fraction for a test's message, "unknown" when nil.
func pctOf(v *float64) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// ladderRouting is, per capture, the pool's routing rung as the alert
// reads it: perfect_routing − actual (-1 where either is absent).
func (rc *recorder) ladderRouting() []float64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make([]float64, len(rc.captures))
	for k, c := range rc.captures {
		out[k] = -1
		var pr, ac float64
		var hasPR, hasAC bool
		for key, v := range c {
			if !strings.HasPrefix(key, "kvtop_pool_hit_ladder{") {
				continue
			}
			switch {
			case strings.Contains(key, `rung="perfect_routing"`):
				pr, hasPR = v, true
			case strings.Contains(key, `rung="actual"`):
				ac, hasAC = v, true
			}
		}
		if hasPR && hasAC {
			out[k] = pr - ac
		}
	}
	return out
}
