package views_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
	"github.com/muesli/termenv"
)

var update = flag.Bool("update", false, "rewrite the golden screens in testdata/golden")

// plain is the colour-off theme golden screens are rendered with.
func plain(t testing.TB) *themes.Theme {
	t.Helper()
	lipgloss.SetColorProfile(termenv.Ascii)
	th, err := themes.Load("default", nil)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// state is the view state a screen starts in; its footer and help come
// from the screen's own keys.
func state(sc *views.Screen) views.State {
	return views.State{
		Screen: sc, Refresh: time.Second, Follow: true, Theme: "default",
		Worker: "w3", Decision: views.DecisionKey{RequestID: "r-8812", AttemptID: "1"},
	}
}

type golden struct {
	name string
	snap *snapshot.Snapshot
	st   views.State
}

func goldens() []golden {
	s := fixture.Snapshot()
	with := func(sc *views.Screen, f func(*views.State)) views.State {
		st := state(sc)
		if f != nil {
			f(&st)
		}
		return st
	}
	return []golden{
		{"pool", s, state(views.Pool)},
		{"pool-engines-sorted", s, with(views.Pool, func(st *views.State) {
			st.Engines, st.Pool.Sort, st.Pool.Cursor = true, "kv", 2
			st.Prev = fixture.Later(-3) // w3's queue was 6 lower: ↑
		})},
		{"pool-frozen-filtered", s, with(views.Pool, func(st *views.State) {
			st.Frozen, st.Pool.Filter, st.Refresh = true, "st", 250*time.Millisecond
		})},
		{"pool-waiting", nil, state(views.Pool)},
		// w6 and w7 went down: their hits left the pool's sum, the
		// header says so for a window.
		{"pool-workers-left", fixture.WorkersLeft(), state(views.Pool)},
		// w5 hashes its prefixes its own way, w7 changed its seed at a
		// restart, w2 runs blocks of 32: the alerts and the streams
		// screen's HASHES say so.
		{"pool-hash-mismatch", fixture.HashMismatch(), state(views.Pool)},
		{"streams-hash-mismatch", fixture.HashMismatch(), state(views.Streams)},
		// Discovered in Kubernetes: a pod left (dim, for a window), one in
		// CrashLoopBackOff, one Pending; churn in the header; grouped by node.
		{"pool-kube", fixture.Kube(), state(views.Pool)},
		{"pool-kube-by-node", fixture.Kube(), with(views.Pool, func(st *views.State) { st.ByNode = true })},
		{"worker-kube-crashloop", fixture.Kube(), with(views.Worker, func(st *views.State) { st.Worker = "w6" })},
		{"worker-kube-proxy", fixture.Kube(), with(views.Worker, func(st *views.State) { st.Worker = "w0" })},
		// A prefill/decode pool: ROLE, each role's queue and KV in the
		// header, its median beside the table, grouped by role.
		{"pool-disaggregated", fixture.Disaggregated(), state(views.Pool)},
		{"pool-disaggregated-by-role", fixture.Disaggregated(), with(views.Pool, func(st *views.State) { st.ByRole = true })},
		{"worker-decode", fixture.Disaggregated(), with(views.Worker, func(st *views.State) { st.Worker = "w3" })},
		// Two models: MODEL, each model's hit rate, queue and KV in the
		// header, grouped by model.
		{"pool-multi-model", fixture.MultiModel(), state(views.Pool)},
		{"pool-multi-model-by-model", fixture.MultiModel(), with(views.Pool, func(st *views.State) { st.ByModel = true })},
		{"worker", s, state(views.Worker)},
		// Engines as they ship in 2026: a hybrid model's groups, offload
		// tiers, a store-only LMCache tier, hits by tier in the header.
		{"worker-tiers", fixture.Tiered(), state(views.Worker)},
		{"worker-store-only", fixture.Tiered(), with(views.Worker, func(st *views.State) { st.Worker = "w1" })},
		{"worker-dp", s, with(views.Worker, func(st *views.State) { st.Worker = "w2" })},
		{"worker-down", s, with(views.Worker, func(st *views.State) { st.Worker = "w6" })},
		{"worker-history-lost", s, with(views.Worker, func(st *views.State) { st.Worker = "w5" })},
		{"streams", s, state(views.Streams)},
		{"prefixes", s, state(views.Prefixes)},
		{"decisions", s, state(views.Decisions)},
		{"decisions-paused-filtered", s, with(views.Decisions, func(st *views.State) {
			st.Follow, st.Decisions.Filter, st.Decisions.Cursor = false, "flag:owner", 0
		})},
		{"decisions-empty-sources", fixture.NoDecisions(), state(views.Decisions)},
		{"decision-detail", s, state(views.DecisionDetail)},
		{"decision-detail-no-outcome", s, with(views.DecisionDetail, func(st *views.State) {
			st.Decision = views.DecisionKey{RequestID: "r-8807", AttemptID: "1"}
		})},
		{"decision-detail-retry", s, with(views.DecisionDetail, func(st *views.State) {
			st.Decision = views.DecisionKey{RequestID: "r-8808", AttemptID: "1"}
		})},
		// Load-balanced away from the worker holding its prefix: the
		// record names w3 and the tokens w1 recomputed.
		{"decision-detail-recompute", s, with(views.DecisionDetail, func(st *views.State) {
			st.Decision = views.DecisionKey{RequestID: "r-8803", AttemptID: "1"}
		})},
		{"decisions-recompute", s, with(views.Decisions, func(st *views.State) {
			st.Follow, st.Decisions.Filter = false, "flag:recompute"
		})},
		{"routers", s, state(views.Routers)},
		// Dynamo's router says what it believes: roles, load, estimates.
		{"routers-dynamo", fixture.DynamoRouter(), state(views.Routers)},
		// 7 s after the only router's restart its NOW covers the 6.99 s
		// since: whole seconds, the columns where they are at 10 s.
		{"routers-just-restarted", fixture.JustRestarted(), state(views.Routers)},
		// kvtop replay: REPLAY and the journal's date in the header, the
		// time controls in the footer and the help (g/G are theirs).
		{"pool-replay", s, with(views.Pool, func(st *views.State) {
			st.Replay = &views.Replay{Speed: "×2"}
			st.Banner = "replay kvtop.jnl · ▶ ×2 · +1m0s of 5m0s"
		})},
		{"help-replay", s, with(views.Help, func(st *views.State) { st.Replay = &views.Replay{Paused: true, Speed: "×1"} })},
		// kvtop --remote: REMOTE, the collector and the data's age; LOST
		// while it reconnects, the age then a warning.
		{"pool-remote", s, with(views.Pool, func(st *views.State) {
			st.Remote = &views.Remote{Host: "bastion:9470", Age: 400 * time.Millisecond}
			st.Banner = "remote bastion:9470 · live · data 0.4 s old"
		})},
		{"pool-remote-lost", s, with(views.Pool, func(st *views.State) {
			st.Remote = &views.Remote{Host: "bastion:9470", Lost: true, Age: 14 * time.Second}
			st.Banner = "remote bastion:9470 · collector lost 14:02:11 · data 14 s old · reconnecting (3): EOF"
		})},
		{"help", s, state(views.Help)},
		// Scrolled to the end: the thresholds in force, the rules in words.
		{"help-thresholds", s, with(views.Help, func(st *views.State) { st.Help.Offset = 1000 })},
	}
}

var sizes = [][2]int{{80, 24}, {160, 48}}

func TestGoldenScreens(t *testing.T) {
	th := plain(t)
	for _, g := range goldens() {
		for _, sz := range sizes {
			name := fmt.Sprintf("%s-%dx%d", g.name, sz[0], sz[1])
			t.Run(name, func(t *testing.T) {
				out := views.Render(g.snap, g.st, sz[0], sz[1], th)
				checkFits(t, out, sz[0], sz[1])
				compareGolden(t, name, out)
			})
		}
	}
	// The pool at SCREENS.md's 120×34 (both sparklines) and at 200×50;
	// with tiers, the header's hits by tier where there is room.
	for _, sz := range [][2]int{{120, 34}, {200, 50}} {
		for _, c := range []struct {
			name string
			snap *snapshot.Snapshot
		}{{"pool", fixture.Snapshot()}, {"pool-tiers", fixture.Tiered()}} {
			name := fmt.Sprintf("%s-%dx%d", c.name, sz[0], sz[1])
			t.Run(name, func(t *testing.T) {
				out := views.Render(c.snap, state(views.Pool), sz[0], sz[1], th)
				checkFits(t, out, sz[0], sz[1])
				compareGolden(t, name, out)
			})
		}
	}
	// Issue 25: the pool screen fills every size, with one alert and
	// with three (the top one whole, wrapped).
	for _, sz := range [][2]int{{80, 24}, {100, 30}, {120, 34}, {160, 48}, {200, 50}} {
		for _, n := range []int{1, 3} {
			name := fmt.Sprintf("pool-alerts%d-%dx%d", n, sz[0], sz[1])
			t.Run(name, func(t *testing.T) {
				s := fixture.Snapshot()
				s.Alerts = s.Alerts[:n]
				out := views.Render(s, state(views.Pool), sz[0], sz[1], th)
				checkFits(t, out, sz[0], sz[1])
				compareGolden(t, name, out)
			})
		}
	}
	for _, sz := range [][2]int{{50, 12}, {59, 24}, {100, 14}} {
		name := fmt.Sprintf("too-small-%dx%d", sz[0], sz[1])
		t.Run(name, func(t *testing.T) {
			out := views.Render(fixture.Snapshot(), state(views.Pool), sz[0], sz[1], th)
			checkFits(t, out, sz[0], sz[1])
			compareGolden(t, name, out)
		})
	}
}

// checkFits: exactly h lines, none wider than w, no tabs, no escapes left
// open.
func checkFits(t *testing.T, out string, w, h int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) != h {
		t.Errorf("%d lines, want exactly %d", len(lines), h)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("line %d is %d cells wide, terminal is %d: %q", i+1, n, w, ansi.Strip(l))
		}
		if strings.ContainsAny(l, "\t\r") {
			t.Errorf("line %d has a tab or carriage return: %q", i+1, l)
		}
		if strings.Count(l, "\x1b[") != strings.Count(ansi.Strip(l)+l, "\x1b[") {
			t.Errorf("line %d has a broken escape sequence: %q", i+1, l)
		}
	}
}

func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./views -run Golden -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("screen differs from %s (go test ./views -run Golden -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}
