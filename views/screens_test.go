package views_test

import (
	"fmt"
	"regexp"
	"slices"
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

// rowOf returns the rendered line of a table row starting with name.
func rowOf(t *testing.T, screen, name string) string {
	t.Helper()
	re := regexp.MustCompile(`^ [▶ ][⚠✖! ] ` + regexp.QuoteMeta(name) + ` `)
	for _, l := range strings.Split(screen, "\n") {
		if re.MatchString(l) {
			return l
		}
	}
	t.Fatalf("no row for %s in:\n%s", name, screen)
	return ""
}

func TestUnknownIsDashNeverZero(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.Snapshot(), state(views.Pool), 160, 48, th)
	// w6 is down: every figure unknown.
	down := strings.Fields(rowOf(t, out, "w6"))
	// gutter ✖, name, state, WAIT, RUN, KV, HIT tok
	if got := strings.Join(down[1:7], " "); got != "w6 down – – – –" {
		t.Errorf("down worker row starts %q, want unknowns as –", got)
	}
	// w1 is idle: measured zeros stay 0, its unknown hit rate stays –.
	idle := strings.Fields(rowOf(t, out, "w1"))
	if got := strings.Join(idle[0:4], " "); got != "w1 ok 0 0" {
		t.Errorf("idle worker row starts %q, want measured zeros", got)
	}
	if !strings.Contains(rowOf(t, out, "w1"), "0%        –") {
		t.Errorf("idle worker: KV 0%% and HIT tok – expected: %q", rowOf(t, out, "w1"))
	}
	// The reason is on the row.
	if !strings.Contains(rowOf(t, out, "w6"), "down: connection refused") {
		t.Errorf("down worker's reason missing from its row: %q", rowOf(t, out, "w6"))
	}
	if !strings.Contains(rowOf(t, out, "w8"), "not scraped yet") {
		t.Errorf("unscraped worker's reason missing from its row")
	}
	// The error shows in the status line too, at every width.
	for _, w := range []int{60, 80, 160} {
		lines := strings.Split(views.Render(fixture.Snapshot(), state(views.Pool), w, 24, th), "\n")
		if status := lines[len(lines)-2]; !strings.Contains(status, "✖ w6 scrape") {
			t.Errorf("width %d: status line %q does not name the failing target", w, status)
		}
	}
}

func TestPoolColumnsDropInStatedOrder(t *testing.T) {
	th := plain(t)
	// Columns in the order they go as the terminal narrows: NOTE, the
	// reason for a state, outlasts the sparklines and BLOCKS.
	order := []string{"HIT 60s", "BLOCKS", "WAIT 60s", "NOTE", "HOT", "KV USE"}
	always := []string{"WORKER", "STATE", "WAIT", "RUN", "HIT tok", "STREAM"}
	prevGone := 0
	for w := 200; w >= 60; w -= 2 {
		out := views.Render(fixture.Snapshot(), state(views.Pool), w, 30, th)
		var header string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "WORKER  STATE") {
				header = l
			}
		}
		if header == "" {
			t.Fatalf("width %d: no table header", w)
		}
		titles := map[string]bool{}
		for _, c := range regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(header), -1) {
			titles[strings.TrimRight(c, "▼▲")] = true
		}
		has := func(c string) bool { return titles[c] }
		gone := 0
		for gone < len(order) && !has(order[gone]) {
			gone++
		}
		for _, c := range order[gone:] {
			if !has(c) {
				t.Errorf("width %d: %s dropped before %s (header %q)", w, c, order[gone], header)
			}
		}
		if gone < prevGone {
			t.Errorf("width %d: a column came back while narrowing", w)
		}
		prevGone = gone
		if gone == len(order) && !has("KV") {
			t.Errorf("width %d: KV USE must shorten to a KV number column, header %q", w, header)
		}
		for _, c := range always {
			if !strings.Contains(header, c) {
				t.Errorf("width %d: %s must never drop (header %q)", w, c, header)
			}
		}
	}
	if prevGone != len(order) {
		t.Errorf("at 60 columns only %d of the droppable columns went", prevGone)
	}
	// 80×24 is the reference: exactly SCREENS.md's set.
	out := views.Render(fixture.Snapshot(), state(views.Pool), 80, 24, th)
	if !strings.Contains(out, "WORKER  STATE         WAIT   RUN    KV  HIT tok  STREAM") {
		t.Errorf("80×24 header is not WORKER STATE WAIT RUN KV HIT tok STREAM:\n%s", out)
	}
}

var sgr = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// TestEveryScreenFitsEverySize renders every screen at many sizes, with
// colour on and off, the reference and the 256-worker pool, and checks the
// frame: exactly h lines, none wider than w, escapes intact and closed.
func TestEveryScreenFitsEverySize(t *testing.T) {
	all := [][2]int{{60, 15}, {61, 17}, {80, 24}, {99, 30}, {120, 34}, {160, 48}, {200, 50}, {240, 70}, {30, 8}, {59, 40}}
	some := [][2]int{{60, 15}, {80, 24}, {133, 41}, {200, 50}}
	snaps := map[string]*snapshot.Snapshot{"fixture": fixture.Snapshot(), "large": fixture.Large(256), "none": nil, "empty": {At: fixture.At}}
	// Every size without colour; colour (where truncation could cut an
	// escape) in every theme at fewer sizes, to keep the test short.
	runs := []struct {
		profile termenv.Profile
		themes  []string
		sizes   [][2]int
	}{
		{termenv.Ascii, []string{"default"}, all},
		{termenv.ANSI256, []string{"default", "mono"}, some},
		{termenv.TrueColor, themes.Names(), some},
	}
	for _, run := range runs {
		profile, sizes := run.profile, run.sizes
		lipgloss.SetColorProfile(profile)
		for _, name := range run.themes {
			th, err := themes.Load(name, nil)
			if err != nil {
				t.Fatal(err)
			}
			for sn, s := range snaps {
				for _, sc := range views.Screens {
					for _, sz := range sizes {
						st := state(sc)
						st.Engines, st.Pool.Cursor, st.Decisions.Cursor = true, 200, 3
						out := views.Render(s, st, sz[0], sz[1], th)
						lines := strings.Split(out, "\n")
						where := fmt.Sprintf("%s/%s/%s/%s %dx%d", profile.Name(), name, sn, sc, sz[0], sz[1])
						if len(lines) != sz[1] {
							t.Errorf("%s: %d lines", where, len(lines))
						}
						if profile != termenv.Ascii && s != nil && sz[0] >= views.MinWidth && sz[1] >= views.MinHeight && !strings.Contains(out, "\x1b[") {
							t.Errorf("%s: no colour at all on a colour terminal", where)
						}
						for i, l := range lines {
							if n := ansi.StringWidth(l); n > sz[0] {
								t.Errorf("%s: line %d is %d wide: %q", where, i+1, n, ansi.Strip(l))
							}
							if strings.Count(l, "\x1b[") != len(sgr.FindAllString(l, -1)) {
								t.Errorf("%s: line %d has a cut escape sequence: %q", where, i+1, l)
							}
							if m := sgr.FindAllString(l, -1); len(m) > 0 && m[len(m)-1] != "\x1b[0m" && m[len(m)-1] != "\x1b[m" {
								t.Errorf("%s: line %d leaves colour on (%q): it would bleed", where, i+1, m[len(m)-1])
							}
						}
					}
				}
			}
		}
	}
	lipgloss.SetColorProfile(termenv.Ascii)
}

func TestHeaderSaysFrozenRefreshAndWindow(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	st := state(views.Pool)
	st.Frozen, st.Refresh = true, 250*time.Millisecond
	head := strings.Split(views.Render(s, st, 160, 40, th), "\n")[0]
	for _, want := range []string{"FROZEN 14:02:11", "refresh 250ms", "hit 71% tok · 48% req (60s)", "queue 43", "skew 3.1×", "7/9 up", "pool prod-qwen3", "index incomplete"} {
		if !strings.Contains(head, want) {
			t.Errorf("header %q lacks %q", head, want)
		}
	}
	// A window still filling says how much it covers; unknowns are –.
	s.Pool.PrefixHitRate.HitRate = snapshot.HitRate{Tokens: nil, Requests: nil, CoveredS: 23}
	s.Pool.IndexComplete = true
	head = strings.Split(views.Render(s, state(views.Pool), 160, 40, th), "\n")[0]
	for _, want := range []string{"hit – tok · – req (23 of 60s)", "LIVE 14:02:11"} {
		if !strings.Contains(head, want) {
			t.Errorf("header %q lacks %q", head, want)
		}
	}
	if strings.Contains(head, "index incomplete") {
		t.Error("complete index still flagged")
	}
}

func TestAlertsOneLineEachMostSevereFirst(t *testing.T) {
	th := plain(t)
	lines := strings.Split(views.Render(fixture.Snapshot(), state(views.Pool), 80, 24, th), "\n")
	if !strings.HasPrefix(lines[2], " ⚠ w3 overheating") || !strings.HasSuffix(lines[2], "…") {
		t.Errorf("first alert line = %q, want the overheating alert truncated with …", lines[2])
	}
	if !strings.HasPrefix(lines[3], " ⚠ w5 events: history lost") || !strings.HasSuffix(lines[3], "(+6 more)") {
		t.Errorf("second alert line = %q, want history lost and a count of the rest", lines[3])
	}
}

func TestPoolRowsFilterAndSort(t *testing.T) {
	s := fixture.Snapshot()
	// The pool's items: workers, and engines under them as "w2\x000".
	names := func(st views.State) string {
		return strings.ReplaceAll(strings.Join(views.Pool.Items(s, st), " "), "\x00", ".")
	}
	cases := []struct {
		name string
		st   views.State
		want string
	}{
		{"configured order", views.State{}, "w0 w1 w2 w3 w4 w5 w6 w7 w8"},
		{"filter by state", views.State{Pool: views.List{Filter: "down"}}, "w6"},
		{"filter by state word", views.State{Pool: views.List{Filter: "OVERHEAT"}}, "w3"},
		{"filter by name", views.State{Pool: views.List{Filter: "w7"}}, "w7"},
		{"filter matches nothing", views.State{Pool: views.List{Filter: "zzz"}}, ""},
		{"sort by wait, unknowns last", views.State{Pool: views.List{Sort: "wait"}}, "w3 w2 w4 w5 w7 w0 w1 w6 w8"},
		{"reverse wait, unknowns still last", views.State{Pool: views.List{Sort: "wait", Desc: true}}, "w1 w0 w7 w5 w4 w2 w3 w6 w8"},
		{"sort by state severity", views.State{Pool: views.List{Sort: "state"}}, "w6 w3 w4 w5 w7 w8 w0 w1 w2"},
		{"sort by hot share", views.State{Pool: views.List{Sort: "hot"}}, "w3 w4 w0 w2 w1 w5 w6 w7 w8"},
		{"engines unfold under DP workers", views.State{Engines: true, Pool: views.List{Filter: "w2"}}, "w2 w2.0 w2.1"},
	}
	for _, c := range cases {
		if got := names(c.st); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDecisionFilter(t *testing.T) {
	s := fixture.Snapshot()
	ids := func(f string) string {
		items := views.Decisions.Items(s, views.State{Decisions: views.List{Filter: f}})
		return strings.ReplaceAll(strings.Join(items, " "), "\x00", "#")
	}
	cases := map[string]string{
		"flag:truncated":       "r-8806#1 r-8812#1",
		"flag:trunc":           "r-8806#1 r-8812#1",
		"FLAG:owner_mismatch":  "r-8803#1 r-8812#1",
		"flag:pred-miss":       "r-8804#1",
		"flag:no_outcome":      "r-8807#1",
		"w1":                   "r-8803#1 r-8812#1",
		"w1 flag:truncated":    "r-8812#1",
		"r-8808":               "r-8808#1 r-8808#2",
		"r-881":                "r-8812#1 r-8813#1",
		"flag:nothing-like-it": "",
	}
	for f, want := range cases {
		if got := ids(f); got != want {
			t.Errorf("filter %q: %q, want %q", f, got, want)
		}
	}
}

// FuzzDecisionFilter: any filter text is taken, never panics, and only
// ever narrows the list.
func FuzzDecisionFilter(f *testing.F) {
	for _, s := range []string{"", "w1", "flag:", "flag:truncated w1", "r-88", "  ", "flag:flag:", "日本", "\x00"} {
		f.Add(s)
	}
	s := fixture.Snapshot()
	all := len(views.Decisions.Items(s, views.State{}))
	f.Fuzz(func(t *testing.T, filter string) {
		rows := views.Decisions.Items(s, views.State{Decisions: views.List{Filter: filter}})
		if len(rows) > all {
			t.Fatalf("filter %q widened the list", filter)
		}
		st := views.State{Screen: views.Decisions, Decisions: views.List{Filter: filter}, Follow: true}
		out := views.Render(s, st, 80, 24, plain(t))
		if len(strings.Split(out, "\n")) != 24 {
			t.Fatalf("filter %q broke the frame", filter)
		}
	})
}

func TestDecisionDetailWarnsInWords(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	cases := []struct {
		req, attempt string
		want         []string
	}{
		{"r-8812", "1", []string{"the prediction was for w2; the request went to w1", "character match on the routing string, not tokens",
			"the string was empty", "HTTP 200 but the stream never finished", "cached 0 of 3 120 prompt tokens", "load router-local counter 7 (this router only)",
			"age 0.4 s", "router r0 (vllm-router 1d10e71)"}},
		{"r-8804", "1", []string{"predicted 1.0k tokens of reuse on w2, but it had 0 cached tokens"}},
		{"r-8807", "1", []string{"no outcome recorded", "unknown, not zero", "TTFT – · HTTP –"}},
		{"r-8809", "1", []string{"an outcome without a routing decision"}},
		{"r-8808", "1", []string{"the attempt failed: upstream connect error", "HTTP 503", "#2 on w0: HTTP 200", "41 s old"}},
		{"r-8808", "2", []string{"retry of attempt 1", "#1 on w6: HTTP 503"}},
		{"r-8801", "1", []string{"stream complete", "cached 1 536 of 2 100 prompt tokens", "no error · no retry"}},
	}
	for _, c := range cases {
		st := state(views.DecisionDetail)
		st.Decision = views.DecisionKey{RequestID: c.req, AttemptID: c.attempt}
		out := views.Render(s, st, 200, 50, th)
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range c.want {
			if !strings.Contains(flat, w) {
				t.Errorf("%s#%s: detail lacks %q:\n%s", c.req, c.attempt, w, out)
			}
		}
	}
	// A record that aged out of the journal says so.
	st := state(views.DecisionDetail)
	st.Decision = views.DecisionKey{RequestID: "r-1", AttemptID: "1"}
	if out := views.Render(s, st, 80, 24, th); !strings.Contains(out, "r-1 attempt 1 is no longer in memory") {
		t.Errorf("aged-out record not explained:\n%s", out)
	}
}

func TestCursorStaysVisibleAndRowsAgree(t *testing.T) {
	th := plain(t)
	s := fixture.Large(256)
	st := state(views.Pool)
	st.Pool.Cursor = 200
	total, visible := views.Rows(s, st, 80, 24, th)
	if total != 256 {
		t.Fatalf("Rows total = %d, want 256", total)
	}
	out := views.Render(s, st, 80, 24, th)
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		if regexp.MustCompile(`^ [▶ ][⚠✖! ] w\d{3} `).MatchString(l) {
			rows++
		}
	}
	if rows != visible {
		t.Errorf("Rows says %d visible, the view drew %d", visible, rows)
	}
	if !strings.Contains(rowOf(t, out, "w200"), "▶") {
		t.Errorf("cursor row w200 not on screen:\n%s", out)
	}
	if !strings.Contains(out, "rows ") || !strings.Contains(out, "of 256") {
		t.Errorf("title does not say which rows are shown:\n%s", out)
	}
}

func TestTooSmallSaysWhatIsNeeded(t *testing.T) {
	th := plain(t)
	for _, sz := range [][2]int{{59, 24}, {80, 14}, {50, 12}, {20, 5}} {
		out := views.Render(fixture.Snapshot(), state(views.Pool), sz[0], sz[1], th)
		lines := strings.Split(out, "\n")
		if len(lines) != sz[1] {
			t.Fatalf("%v: %d lines", sz, len(lines))
		}
		var text []string
		for _, l := range lines {
			if strings.TrimSpace(l) != "" {
				text = append(text, strings.TrimSpace(l))
			}
		}
		if len(text) != 1 || !strings.Contains(text[0], "60×15") {
			t.Errorf("%v: want one line naming 60×15, got %q", sz, text)
		}
	}
}

func TestWorkerScreenShowsHistoryAndPrefixes(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	cases := []struct {
		worker string
		want   []string
	}{
		{"w3", []string{"OVERHEATING", "hot 83%", "9f2c4e1a… 2.1k tok, 83% of its traffic here", "WAITING requests", "-60s", "now"}},
		{"w5", []string{"HISTORY LOST seq 88121–89360 · 1 240 missing · 1 240 lost", "replay buffer starts at seq 89361", "3 decode errors"}},
		{"w7", []string{"replaying, 30 so far (2.0 s)", "replayed 8 in 0.2 s"}},
		{"w6", []string{"✖ down: connection refused", "connection refused", "still down (40 s)", "wait – · run – · KV –"}},
		{"w2", []string{"dp 0", "SATURATED", "dp 1", "12%"}},
		{"w8", []string{"not scraped yet", "connecting"}},
	}
	for _, c := range cases {
		st := state(views.Worker)
		st.Worker = c.worker
		out := views.Render(s, st, 160, 48, th)
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range c.want {
			if !strings.Contains(flat, strings.Join(strings.Fields(w), " ")) {
				t.Errorf("worker %s lacks %q:\n%s", c.worker, w, out)
			}
		}
	}
}

func TestRoutersScreenTellsRecovery(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.Snapshot(), state(views.Routers), 160, 48, th)
	for _, w := range []string{"RECOVERING", "r0 restarted 42 s ago (14:01:29): pool token hit 48% vs 71% before; recovering for 42 s",
		"r1 recovered in 18 s", "r2 is down", "context deadline exceeded", "ROUTED r0", "41%"} {
		if !strings.Contains(out, w) {
			t.Errorf("routers screen lacks %q:\n%s", w, out)
		}
	}
}

func TestPrefixesVerdict(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Prefixes), 160, 48, th)
	if !strings.Contains(out, "w3 is OVERHEATING on prefix 9f2c4e1a… (2.1k tok): it takes 83% of that prefix's traffic, which is 41% of the pool's; queue 19 vs median 4") {
		t.Errorf("no overheating verdict:\n%s", out)
	}
	if !strings.Contains(out, "orphan") {
		t.Errorf("orphan prefix depth not marked")
	}
	// A prefix split between two workers that both overheat: one line
	// each, naming the pair and what they take together.
	split := fixture.Snapshot()
	p := &split.Prefixes[0]
	p.Workers = map[string]float64{"w3": 0.55, "w4": 0.4, "w0": 0.05}
	p.OverheatingWorkers = []string{"w3", "w4"}
	out = views.Render(split, state(views.Prefixes), 160, 48, th)
	for _, want := range []string{
		"w3 is OVERHEATING on prefix 9f2c4e1a… (2.1k tok): it takes 55% of that prefix's traffic (w3 + w4: 95%), which is 41% of the pool's; queue 19",
		"w4 is OVERHEATING on prefix 9f2c4e1a… (2.1k tok): it takes 40% of that prefix's traffic (w3 + w4: 95%), which is 41% of the pool's; queue",
		"the fewest workers taking ≥ 60% of a hot prefix's traffic, if at most 2,",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("split verdict lacks %q:\n%s", want, out)
		}
	}
	for _, p := range s.Prefixes {
		p.Overheating = nil
	}
	for i := range s.Prefixes {
		s.Prefixes[i].Overheating = nil
	}
	out = views.Render(s, state(views.Prefixes), 160, 48, th)
	if !strings.Contains(out, "no worker is overheating: the hottest prefix 9f2c4e1a… takes 41% of traffic over 2 replicas") {
		t.Errorf("no calm verdict:\n%s", out)
	}
}

// TestPoolScreenFillsAnySize (issue 25): below the table the pool screen
// places the alerts (the top one whole), hottest prefixes, flagged
// decisions and pool charts by priority in whatever lines are left, at
// every size: at 80×24 a six-worker pool shows the table, the top alert
// in full and at least one more panel; no size leaves more than two blank
// rows while a panel has more to show; a panel never shows without the
// ones above it; and growing the terminal never hides a panel.
func TestPoolScreenFillsAnySize(t *testing.T) {
	th := plain(t)
	titles := []string{" ALERTS ", " HOTTEST PREFIXES ", " FLAGGED DECISIONS ", " POOL "}
	present := func(out string) []bool {
		var got []bool
		for _, p := range titles {
			found := false
			for _, l := range strings.Split(out, "\n") {
				found = found || strings.HasPrefix(l, p)
			}
			got = append(got, found)
		}
		return got
	}
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), "") }
	withAlerts := func(n int, workers int) *snapshot.Snapshot {
		s := fixture.Snapshot()
		s.Alerts = s.Alerts[:min(n, len(s.Alerts))]
		s.Workers = s.Workers[:min(workers, len(s.Workers))]
		return s
	}
	for _, sz := range [][2]int{{80, 24}, {100, 30}, {120, 34}, {160, 48}, {200, 50}} {
		for _, nAlerts := range []int{1, 3, 8} {
			for _, workers := range []int{6, 9} {
				s := withAlerts(nAlerts, workers)
				out := views.Render(s, state(views.Pool), sz[0], sz[1], th)
				checkFits(t, out, sz[0], sz[1])
				name := fmt.Sprintf("%dx%d, %d alerts, %d workers", sz[0], sz[1], nAlerts, workers)
				got := present(out)
				for i := 1; i < len(got); i++ {
					if got[i] && !got[i-1] {
						t.Errorf("%s: %q shows without %q above it", name, titles[i], titles[i-1])
					}
				}
				if !got[0] || !got[1] {
					t.Errorf("%s: want the alerts and at least one more panel, got %v:\n%s", name, got, out)
				}
				if !strings.Contains(squeeze(out), squeeze(s.Alerts[0].Text)) {
					t.Errorf("%s: the top alert is not on the screen in full:\n%s", name, out)
				}
				// Blank rows in the body (between the header's last
				// alert line and the status line) while something is
				// hidden or cut.
				lines := strings.Split(out, "\n")
				blank := 0
				for _, l := range lines[1 : len(lines)-2] {
					if strings.TrimSpace(l) == "" {
						blank++
					}
				}
				more := !got[3] || strings.Contains(out, " more on the ") || strings.Contains(out, " shown, ")
				if blank > 2 && more {
					t.Errorf("%s: %d blank rows while a panel has more to show:\n%s", name, blank, out)
				}
			}
		}
	}
	// Growing the terminal only ever adds: no panel goes as it grows.
	prev := []bool{false, false, false, false}
	for h := 24; h <= 70; h++ {
		out := views.Render(fixture.Snapshot(), state(views.Pool), 160, h, th)
		checkFits(t, out, 160, h)
		got := present(out)
		for i := range got {
			if prev[i] && !got[i] {
				t.Errorf("160x%d: %q went when the terminal grew by a line", h, titles[i])
			}
		}
		prev = got
		if h >= 48 && !strings.Contains(out, "   ·   20 s  w5 events: 3 decode errors") {
			t.Errorf("160x%d: the alerts panel should list all 7 alerts, the last too:\n%s", h, out)
		}
	}
	// A large pool keeps the table at 60 %% of the body and scrolls it;
	// the overview has the rest.
	out := views.Render(fixture.Large(256), state(views.Pool), 200, 50, th)
	got := present(out)
	if !got[0] || !strings.Contains(out, "rows 1–") || !strings.Contains(out, " of 256") {
		t.Errorf("256 workers at 200x50: want a scrolled table and the alerts, got panels %v:\n%s", got, out)
	}
	if n := strings.Count(out, "\n  ") + strings.Count(out, "\n ▶"); n < 25 {
		t.Errorf("256 workers at 200x50: the table shows %d rows, want at least 60%% of the body", n)
	}
}

// TestReplayHeaderAndKeys: a replay's header says REPLAY, its state and
// the journal's date; its time controls are bound only in a replay, where
// g and G are theirs (first and last row keep home and end).
func TestReplayHeaderAndKeys(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	live := state(views.Pool)
	for _, id := range []string{views.KeyReplayPause, views.KeyReplayBack, views.KeyReplayStart} {
		for _, b := range views.Keys(s, &live) {
			if b.ID == id {
				t.Errorf("live console binds %s", id)
			}
		}
	}
	if b, _ := views.Match(views.Keys(s, &live), "g"); b.ID != views.KeyTop {
		t.Errorf("live g is %q, want the first row", b.ID)
	}

	rp := state(views.Pool)
	rp.Replay = &views.Replay{Speed: "×60"}
	for key, want := range map[string]string{
		" ": views.KeyReplayPause, "left": views.KeyReplayBack, "right": views.KeyReplayForward,
		"[": views.KeyReplaySlower, "]": views.KeyReplayFaster, "g": views.KeyReplayStart, "G": views.KeyReplayEnd,
		"home": views.KeyTop, "end": views.KeyBottom,
	} {
		if b, ok := views.Match(views.Keys(s, &rp), key); !ok || b.ID != want {
			t.Errorf("replay %q does %q, want %q", key, b.ID, want)
		}
	}
	for _, c := range []struct {
		r    views.Replay
		want string
	}{
		{views.Replay{Speed: "×60"}, "REPLAY ×60 2025-06-01 14:02:11"},
		{views.Replay{Speed: "×1", Paused: true}, "REPLAY paused 2025-06-01 14:02:11"},
		{views.Replay{Speed: "×1", AtEnd: true, Paused: true}, "REPLAY end 2025-06-01 14:02:11"},
		{views.Replay{Speed: "×1", Seeking: true}, "REPLAY seeking 2025-06-01 14:02:11"},
	} {
		st := state(views.Pool)
		st.Replay = &c.r
		head := strings.Split(views.Render(s, st, 160, 40, th), "\n")[0]
		if !strings.Contains(head, c.want) || strings.Contains(head, "LIVE") {
			t.Errorf("header %q, want %q", head, c.want)
		}
		st.Frozen = true // freezing still says so: the display is held
		if head := strings.Split(views.Render(s, st, 160, 40, th), "\n")[0]; !strings.Contains(head, "FROZEN") {
			t.Errorf("frozen replay header %q", head)
		}
	}
}

// TestDisaggregatedDecisionDetail: a Dynamo trace's record names the
// prefill and the decode worker, the figures only a trace gives, and an
// HTTP status the log does not record as unknown, not 0; the worker
// filter finds the record by its decode worker too.
func TestDisaggregatedDecisionDetail(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	fp := func(v float64) *float64 { return &v }
	out, cached := 212, 0
	s.Decisions.Recent = append(s.Decisions.Recent, snapshot.DecisionRow{
		At: s.At, RequestID: "trace-1", AttemptID: "1", Chosen: "w1", DecodeWorker: "w3", Owner: "w1", Format: "dynamo-trace",
		Matched: fp(3584), Total: fp(4096), Units: "tokens", CachedTokens: &cached, TTFTMS: fp(171.9), QueueMS: fp(3.2),
		Flags:   []string{"prediction_error"},
		Outcome: &snapshot.OutcomeInfo{At: s.At, Worker: "w1", E2EMS: fp(2344), OutputTokens: &out, PrefillMS: fp(140.5), ITLMS: fp(10.2), KVTransferMS: fp(12.7)},
	})
	st := state(views.DecisionDetail)
	st.Decision = views.DecisionKey{RequestID: "trace-1", AttemptID: "1"}
	flat := strings.Join(strings.Fields(views.Render(s, st, 200, 50, th)), " ")
	for _, w := range []string{"prefill on w1 · decode on w3", "prefill 141 ms", "KV transfer ~13 ms (router's estimate)",
		"TTFT 172 ms · HTTP – · ITL 10 ms · end to end 2.3 s · 212 output tokens"} {
		if !strings.Contains(flat, w) {
			t.Errorf("detail lacks %q:\n%s", w, flat)
		}
	}
	if strings.Contains(flat, "served by") || strings.Contains(flat, "HTTP 0") {
		t.Errorf("detail says a served-by worker or HTTP 0:\n%s", flat)
	}
	rows := views.Decisions.Items(s, views.State{Decisions: views.List{Filter: "w3"}})
	if !slices.Contains(rows, "trace-1\x001") {
		t.Error("filter w3 does not find the record decoded on w3")
	}
}
