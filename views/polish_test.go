package views_test

import (
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// Screen tests for what operators reported as misleading: each asserts
// what the operator now sees.

func headerOf(out string) string { return strings.Split(out, "\n")[0] }

func statusOf(out string) string {
	lines := strings.Split(out, "\n")
	return lines[len(lines)-2]
}

func flat(out string) string { return strings.Join(strings.Fields(out), " ") }

// withQueues sets every up worker's queue (and the pool's sum and skew as
// the pool would compute them).
func withQueues(s *snapshot.Snapshot, q []float64, skew *float64) {
	sum, k := 0.0, 0
	for i := range s.Workers {
		if s.Workers[i].Up {
			s.Workers[i].Queue = f(q[k%len(q)])
			sum += q[k%len(q)]
			k++
		}
	}
	s.Pool.Queue, s.Pool.LoadSkew.MaxOverMean = f(sum), skew
}

// One request waiting in an idle pool is not "skew 4.0×": the header says
// low load (dim), the Prefixes screen keeps the figures but explains them,
// and empty queues are "all queues empty", not "longest 0 on w0".
func TestSkewAtLowLoad(t *testing.T) {
	th := plain(t)
	cases := []struct {
		name        string
		queues      []float64
		skew        *float64
		wantHead    string
		wantPrefix  []string
		notInPrefix []string
	}{
		{"one request waits", []float64{1, 0, 0, 0, 0, 0, 0}, f(7), "skew low load",
			[]string{"queue max/mean 7.0× · Gini 0.41 (low load: 1 waiting over 7 up workers — skew means little)", "longest 1 on w0"}, nil},
		{"every queue empty", []float64{0}, nil, "skew low load",
			[]string{"queue max/mean – · Gini 0.41 (low load: 0 waiting over 7 up workers", "all queues empty"}, []string{"longest 0"}},
		{"below the overheating floor", []float64{0, 0, 3}, f(3), "skew low load", []string{"(low load: 6 waiting"}, nil},
		{"a loaded pool", []float64{19, 2, 9, 4, 3, 6, 2}, f(2.9), "skew 2.9×", []string{"longest 19 on w0"}, []string{"low load"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := fixture.Snapshot()
			withQueues(s, c.queues, c.skew)
			if h := headerOf(views.Render(s, state(views.Pool), 200, 50, th)); !strings.Contains(h, c.wantHead) {
				t.Errorf("header %q lacks %q", h, c.wantHead)
			}
			out := flat(views.Render(s, state(views.Prefixes), 200, 50, th))
			for _, want := range c.wantPrefix {
				if !strings.Contains(out, want) {
					t.Errorf("prefixes screen lacks %q:\n%s", want, out)
				}
			}
			for _, not := range c.notInPrefix {
				if strings.Contains(out, not) {
					t.Errorf("prefixes screen says %q:\n%s", not, out)
				}
			}
		})
	}
	// Low load is dim, never an alarm colour.
	ct := coloured(t)
	s := fixture.Snapshot()
	withQueues(s, []float64{1, 0}, f(7))
	if h := headerOf(views.Render(s, state(views.Pool), 200, 50, ct)); !strings.Contains(h, ct.Paint(themes.Dim, "skew low load")) {
		t.Errorf("low-load skew is not dim: %q", h)
	}
}

// noMetrics turns w6 into a worker whose /metrics times out while its
// events still arrive, as the pool reports it.
func noMetrics(s *snapshot.Snapshot) {
	w := &s.Workers[6]
	msg := "GET http://10.0.0.11:8000/metrics: no answer within 2s"
	w.State, w.Error = "no_metrics", &msg
	w.Reason = "no metrics: " + msg + " — its events are still arriving"
	w.Streams[0].State, w.Streams[0].LastMessageAgeS, w.Streams[0].History = "live", f(0.1), nil
	s.Alerts[2] = snapshot.Alert{Severity: "warning", Kind: "no_metrics", Subject: "w6", Since: s.At.Add(-8 * time.Second),
		Text: "w6 metrics: " + msg + " — its events are still arriving"}
}

// A worker whose scrape fails while it serves says "no metrics" (a
// warning), not "down"; its title says its state once.
func TestNoMetricsIsNotDown(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	noMetrics(s)
	out := views.Render(s, state(views.Pool), 200, 50, th)
	r := rowOf(t, out, "w6")
	if !strings.HasPrefix(r, "  ! w6      no metrics") || !strings.Contains(r, "live") ||
		!strings.Contains(r, "no metrics: GET http://10.0.0.11:8000/metrics") {
		t.Errorf("w6 row %q: want the ! mark, state \"no metrics\", a live stream and the reason", r)
	}
	if !strings.Contains(out, "⚠ w6 metrics: GET http://10.0.0.11:8000/metrics: no answer within 2s — its events are still arriving") {
		t.Errorf("no warning alert for w6's metrics:\n%s", out)
	}
	st := state(views.Worker)
	st.Worker = "w6"
	w := views.Render(s, st, 160, 48, th)
	if title := strings.Split(w, "\n")[5]; !strings.Contains(title, "WORKER w6  vllm · no metrics · last good scrape") {
		t.Errorf("worker title %q", title)
	}
	if strings.Contains(w, "(last known)") || strings.Contains(w, "✖") && strings.Contains(w, "✖ no metrics") {
		t.Errorf("a serving worker's figures are current, its reason not critical:\n%s", w)
	}
	st = state(views.Pool)
	st.Pool.Filter = "no metrics"
	if rows := views.Pool.Items(s, st); len(rows) != 1 || rows[0] != "w6" {
		t.Errorf("filter \"no metrics\" rows = %v, want w6 only", rows)
	}
	ct := coloured(t)
	if out := views.Render(s, state(views.Pool), 200, 50, ct); !strings.Contains(out, ct.Paint(themes.Warn, "no metrics")) {
		t.Errorf("\"no metrics\" is not painted as a warning")
	}
	help := flat(views.Render(s, state(views.Help), 200, 80, th))
	for _, want := range []string{"down: metrics fail and no events arrive",
		"no metrics: metrics fail but its events still arrive — it is serving"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// The worker title says the state once: "down", not "down · not up".
func TestWorkerTitleSaysStateOnce(t *testing.T) {
	th := plain(t)
	// A worker not up says next how old its figures are.
	cases := map[string]string{"w6": "vllm · down · last good scrape 41 s ago, failed 1.0 s ago · routed –",
		"w8": "unknown · unknown · routed –", "w0": "vllm · ok · up · routed 12%"}
	for name, want := range cases {
		st := state(views.Worker)
		st.Worker = name
		out := views.Render(fixture.Snapshot(), st, 160, 48, th)
		title := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, " WORKER "+name) {
				title = l
			}
		}
		if !strings.Contains(title, want) || strings.Contains(title, "not up") {
			t.Errorf("%s title %q, want %q and no \"not up\"", name, title, want)
		}
	}
}

// The status line shows an error only while it is recent; older ones are
// counted and listed on the help screen.
func TestStatusLineShowsRecentErrors(t *testing.T) {
	th := plain(t)
	age := func(s *snapshot.Snapshot, sec ...float64) {
		for i := range s.Errors {
			s.Errors[i].At = s.At.Add(-time.Duration(sec[i] * float64(time.Second)))
		}
	}
	cases := []struct {
		name string
		ages []float64
		want string
	}{
		{"two recent", []float64{1, 2, 80, 300}, "✖ w6 scrape ×12: dial tcp 10.0.0.11:8000: connect: connection refused (14:02:10) · +1 more error source"},
		{"one recent", []float64{1, 61, 80, 300}, "✖ w6 scrape ×12: dial tcp 10.0.0.11:8000: connect: connection refused (14:02:10)"},
		{"all old", []float64{61, 70, 80, 300}, "✓ no errors in the last 60s (4 earlier sources: see ? help)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := fixture.Snapshot()
			age(s, c.ages...)
			st := statusOf(views.Render(s, state(views.Pool), 160, 48, th))
			if strings.TrimSpace(st) != c.want {
				t.Errorf("status %q, want %q", strings.TrimSpace(st), c.want)
			}
		})
	}
	s := fixture.Snapshot()
	s.Errors = nil
	if st := statusOf(views.Render(s, state(views.Pool), 160, 48, th)); strings.TrimSpace(st) != "✓ no errors" {
		t.Errorf("status %q with no errors at all", st)
	}
	// A long banner (kvtop demo's phase) gives way to a recent error.
	st := state(views.Pool)
	st.Banner = "demo tour: truncated-streams: HTTP 200 without done, and a few more words"
	if line := statusOf(views.Render(fixture.Snapshot(), st, 80, 24, th)); !strings.Contains(line, "✖ w6 scrape ×12") {
		t.Errorf("80 columns: the banner hides the error: %q", line)
	}
	// Help lists every error source, newest first, with its time.
	s = fixture.Snapshot()
	help := flat(views.Render(s, state(views.Help), 200, 90, th))
	for _, want := range []string{"ERRORS by source, newest first; kvtop clock",
		"14:02:10 w6 scrape ×12: dial tcp 10.0.0.11:8000: connect: connection refused",
		"13:57:11 decisions /var/log/router/decisions.jsonl bad_line ×2: line 1041"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

// One waiting request does not draw a full bar: count sparklines are
// scaled to at least 4, and the label says so.
func TestSparklineFloor(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	for i := range s.Workers {
		w := &s.Workers[i]
		for k := range w.Series.Queue {
			w.Series.Queue[k].V = 0
		}
		if n := len(w.Series.Queue); n > 0 {
			w.Series.Queue[n-1].V = 1
		}
	}
	out := views.Render(s, state(views.Pool), 200, 50, th)
	col := -1
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "WAIT 60s"); i >= 0 {
			col = len([]rune(l[:i]))
		}
	}
	for _, name := range []string{"w0", "w2", "w3"} {
		r := []rune(rowOf(t, out, name))
		if spark := string(r[col : col+10]); spark != "▁▁▁▁▁▁▁▁▁▃" {
			t.Errorf("%s WAIT sparkline %q: one waiting request should be a low bar on a scale of 4", name, spark)
		}
	}
	st := state(views.Worker)
	st.Worker = "w0"
	wk := views.Render(s, st, 80, 24, th)
	var wait string
	for _, l := range strings.Split(wk, "\n") {
		if strings.HasPrefix(l, " WAIT ") {
			wait = l
		}
	}
	if strings.ContainsAny(wait, "▇█") || !strings.Contains(wait, "max 1 of 4") {
		t.Errorf("worker WAIT row %q: want a low bar and \"max 1 of 4\"", wait)
	}
	// Above the floor the scale is the next step of 4, 6, 8, 12, 16, 24…
	st.Worker = "w3"
	if wk := views.Render(fixture.Snapshot(), st, 80, 24, th); !strings.Contains(wk, "19 max 19 of 24") {
		t.Errorf("w3's WAIT row should say max 19 of 24:\n%s", wk)
	}
}

// A decision whose request is still running shows … and "pending", not
// "–" (unknown); one past the no_outcome timeout keeps "–".
func TestPendingDecisions(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Decisions), 160, 48, th)
	p := strings.Fields(rowOf(t, out, "14:02:10  r-8830"))
	if got := strings.Join(p[5:], " "); got != "512/2.0k tok … … … … pending" {
		t.Errorf("pending row ends %q, want … in CACHED, QUEUE, TTFT, DONE and the word pending", got)
	}
	if r := rowOf(t, out, "14:02:03  r-8807"); !strings.HasSuffix(strings.Join(strings.Fields(r), " "), "tok – – – – no-outcome") {
		t.Errorf("no-outcome row %q: its figures are unknown (–)", r)
	}
	if !strings.HasPrefix(rowOf(t, out, "14:02:10  r-8830"), " ▶  ") {
		t.Errorf("a pending row is not a problem: no mark")
	}
	st := state(views.Decisions)
	st.Decisions.Filter = "flag:pend"
	if rows := views.Decisions.Items(s, st); len(rows) != 1 || rows[0] != "r-8830\x001" {
		t.Errorf("flag:pend rows %v, want r-8830 only", rows)
	}
	st = state(views.DecisionDetail)
	st.Decision = views.DecisionKey{RequestID: "r-8830", AttemptID: "1"}
	d := flat(views.Render(s, st, 120, 40, th))
	if !strings.Contains(d, "EXECUTION pending: the request is still running — its outcome has not arrived yet") ||
		!strings.Contains(d, "CLIENT TTFT … · HTTP … · pending") || strings.Contains(d, "unknown, not zero") {
		t.Errorf("pending record detail:\n%s", d)
	}
}

// Prefix traffic is a decayed count: shown as a rounded estimate, the
// header naming the window.
func TestPrefixRequestsAreEstimates(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	s.Prefixes[4].Requests = 0.3
	out := views.Render(s, state(views.Prefixes), 160, 48, th)
	if !strings.Contains(out, "SHARE▼  REQ/60s  REPL") {
		t.Errorf("REQ column header does not name the window:\n%s", out)
	}
	for id, want := range map[string]string{"a1b2c3d4…": " ≈181 ", "0c0ffee0…": " ≈40 ", "9f2c4e1a…": " ≈412 ", "d00d5eed…": " <1 "} {
		if r := rowOf(t, out, id); !strings.Contains(r, want) {
			t.Errorf("%s row %q lacks %q", id, r, want)
		}
	}
	if strings.Contains(out, "180.6") || strings.Contains(out, "40.4") {
		t.Errorf("fractional requests on screen:\n%s", out)
	}
}

// At 120 columns a state's reason outranks the less telling columns: a
// SATURATED worker whose KV reads 47% says its engine 1 is at 91%, at the
// cost of the HIT sparkline and BLOCKS; the WAIT sparkline, HOT and a
// STREAM column wide enough for "live, 1 gap" stay. With no reason on any
// row, NOTE goes first. At 80 the table keeps SCREENS.md's set.
func TestPoolAt120KeepsTheReason(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	w4 := &s.Workers[4]
	w4.KVUsage, w4.Reason = f(0.47), "engine 1 KV 91%"
	w4.Engines = []snapshot.Engine{{Engine: "0", KVUsage: f(0.03)}, {Engine: "1", KVUsage: f(0.91)}}
	out := views.Render(s, state(views.Pool), 120, 34, th)
	for _, want := range []string{"WAIT 60s", "STREAM", "HOT", "NOTE"} {
		if !strings.Contains(out, want) {
			t.Errorf("120 columns lack %s:\n%s", want, out)
		}
	}
	if r := rowOf(t, out, "w4"); !strings.Contains(r, "SATURATED") || !strings.Contains(r, "47%") || !strings.Contains(r, "engine 1 KV 91%") {
		t.Errorf("w4 row %q: a SATURATED worker at 47%% should say engine 1 is at 91%%", r)
	}
	if r := rowOf(t, out, "w2"); !strings.Contains(r, "live, 1 gap") {
		t.Errorf("w2 row %q: STREAM too narrow for \"live, 1 gap\"", r)
	}
	calm := fixture.Snapshot()
	for i := range calm.Workers {
		w := &calm.Workers[i]
		w.Reason, w.Error, w.Overheating, w.Breaker, w.Restarts, w.Engines = "", nil, false, nil, 0, w.Engines[:min(len(w.Engines), 1)]
		w.Cache.ThrashShare = nil // no thrash note either
	}
	out = views.Render(calm, state(views.Pool), 120, 34, th)
	for _, want := range []string{"HIT 60s", "WAIT 60s", "BLOCKS", "HOT"} {
		if !strings.Contains(out, want) || strings.Contains(out, "NOTE") {
			t.Errorf("no reasons anywhere: 120 columns should keep %s and drop the empty NOTE:\n%s", want, out)
		}
	}
	if r := rowOf(t, views.Render(fixture.Snapshot(), state(views.Pool), 80, 24, th), "w5"); !strings.Contains(r, "HISTORY LOST, 1 gap") {
		t.Errorf("80 columns: w5 row %q lost its stream summary", r)
	}
}

// A down worker keeps its last known blocks and hot share, dim, and its
// reason starts "down:".
func TestDownWorkerLastKnownIsDim(t *testing.T) {
	ct := coloured(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Pool), 200, 50, ct)
	row := func(name string) string {
		for _, l := range strings.Split(out, "\n") {
			if regexp.MustCompile(`^ [▶ ][⚠✖! ] ` + name + ` `).MatchString(ansi.Strip(l)) {
				return l
			}
		}
		t.Fatalf("no row for %s", name)
		return ""
	}
	r := row("w6")
	if !strings.Contains(r, ct.Paint(themes.Dim, "39.8k")) || !strings.Contains(r, ct.Paint(themes.Dim, "0%")) {
		t.Errorf("down w6: blocks and HOT should be dim: %q", r)
	}
	if !strings.Contains(r, "down: connection refused") {
		t.Errorf("down w6: reason %q", r)
	}
	if r := row("w2"); !strings.Contains(r, "51.7k") || strings.Contains(r, ct.Paint(themes.Dim, "51.7k")) {
		t.Errorf("up w2: blocks should not be dim: %q", r)
	}
	st := state(views.Worker)
	st.Worker = "w6"
	if w := views.Render(s, st, 160, 48, plain(t)); !strings.Contains(w, "blocks 39.8k (last known)") {
		t.Errorf("worker screen of down w6 does not say its blocks are last known:\n%s", w)
	}
}

// A hot prefix no worker holds any more says so, not "over 0 replicas".
func TestHottestPrefixHeldByNoWorker(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	s.Prefixes[0].Overheating, s.Prefixes[0].Replicas = nil, 0
	out := flat(views.Render(s, state(views.Prefixes), 160, 48, th))
	if !strings.Contains(out, "the hottest prefix 9f2c4e1a… takes 41% of traffic and no worker holds it now") || strings.Contains(out, "0 replicas") {
		t.Errorf("prefixes verdict:\n%s", out)
	}
}

// The worker screen's charts reuse their canvases between frames: what one
// frame drew never shows in the next, whatever came between (another
// worker, another size, a worker without series, another goroutine).
func TestWorkerChartsReuseLeavesNothingBehind(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	at := func(name string, w, h int) string {
		st := state(views.Worker)
		st.Worker = name
		return views.Render(s, st, w, h, th)
	}
	first := at("w3", 160, 48)
	if !strings.Contains(first, "WAITING requests") || !strings.ContainsAny(first, "⠁⠂⠄⡀⠈⠐⠠⢀") {
		t.Fatalf("w3 at 160×48 should draw charts:\n%s", first)
	}
	var wg sync.WaitGroup
	for _, name := range []string{"w0", "w8", "w6", "w2"} {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			for _, sz := range [][2]int{{160, 48}, {200, 50}, {121, 40}} {
				at(name, sz[0], sz[1])
			}
		}(name)
	}
	wg.Wait()
	if again := at("w3", 160, 48); again != first {
		t.Errorf("w3 drawn again after other charts differs:\n--- again:\n%s\n--- first:\n%s", again, first)
	}
}

// Quit is in the footer of every screen at every size, whatever else the
// footer drops, and the help lists it first.
func TestQuitIsAlwaysInTheFooterAndFirstInHelp(t *testing.T) {
	th := plain(t)
	for _, sc := range views.Screens {
		for _, busy := range []bool{false, true} {
			for _, sz := range [][2]int{{60, 15}, {61, 17}, {80, 24}, {99, 30}, {120, 34}, {200, 50}} {
				st := state(sc)
				if busy { // the longest footers: filtered, frozen, paused
					st.Pool.Filter, st.Streams.Filter, st.Decisions.Filter = "w", "w", "w"
					st.Frozen, st.Follow = true, false
				}
				lines := strings.Split(views.Render(fixture.Snapshot(), st, sz[0], sz[1], th), "\n")
				if f := lines[len(lines)-1]; !strings.HasSuffix(f, " q quit") {
					t.Errorf("%s %dx%d (busy %v): footer %q does not end with q quit", sc, sz[0], sz[1], busy, f)
				}
			}
		}
	}
	help := strings.Split(views.Render(fixture.Snapshot(), state(views.Help), 80, 24, th), "\n")
	for i, l := range help {
		if l == " SCREENS" {
			if i+1 >= len(help) || strings.Join(strings.Fields(help[i+1]), " ") != "q quit" {
				t.Errorf("the help's first key is %q, want q quit:\n%s", help[i+1], strings.Join(help, "\n"))
			}
			return
		}
	}
	t.Errorf("no SCREENS keys on the help's first page at 80×24:\n%s", strings.Join(help, "\n"))
}

// A steady value draws the same sparkline whatever else moves: the WAIT
// sparklines share a scale that moves only when the pool's peak crosses a
// step (… 16, 24, 32 …), not with every change of the busiest worker's
// queue or every refresh that slides the window.
func TestSparklineScaleIsStable(t *testing.T) {
	th := plain(t)
	waitCol := func(out string) int {
		for _, l := range strings.Split(out, "\n") {
			if i := strings.Index(l, "WAIT 60s"); i >= 0 {
				return len([]rune(l[:i]))
			}
		}
		t.Fatalf("no WAIT sparkline column:\n%s", out)
		return 0
	}
	var first string
	for k, peak := range []float64{17, 19, 20, 22, 23, 24} {
		s := fixture.Snapshot()
		s.At = s.At.Add(time.Duration(k) * 170 * time.Millisecond) // refreshes slide the window
		for i := range s.Workers {
			for j := range s.Workers[i].Series.Queue {
				q := &s.Workers[i].Series.Queue[j]
				switch s.Workers[i].Name {
				case "w2":
					q.V = 5 // steady
				case "w3":
					q.V = math.Min(peak, float64(j)) // the busiest one's peak moves
				default:
					q.V = 1
				}
			}
		}
		out := views.Render(s, state(views.Pool), 200, 50, th)
		c := waitCol(out)
		spark := string([]rune(rowOf(t, out, "w2"))[c : c+10])
		if strings.Count(spark, string([]rune(spark)[0])) != 10 {
			t.Errorf("peak %v: a steady queue of 5 draws %q, not one glyph", peak, spark)
		}
		if k == 0 {
			first = spark
		} else if spark != first {
			t.Errorf("peak %v: w2's steady queue drew %q, %q before", peak, spark, first)
		}
	}
}

// The pool screen's hottest prefixes say how many workers hold each one in
// full, however many: "10 replicas" was cut to "10 replic…", and the
// column stays aligned across rows.
func TestHottestPrefixReplicasUncut(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	if len(s.Prefixes) < 2 {
		t.Fatalf("the fixture has %d prefixes, want 2 or more", len(s.Prefixes))
	}
	s.Prefixes[0].Replicas, s.Prefixes[1].Replicas = 1000, 3
	out := views.Render(s, state(views.Pool), 160, 48, th)
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "resident on ") && !strings.Contains(l, "HOTTEST") {
			rows = append(rows, l)
		}
	}
	if len(rows) < 2 || !strings.Contains(rows[0], "resident on 1000") || !strings.Contains(rows[1], " resident on    3  ") {
		t.Fatalf("hottest prefixes rows:\n%s", strings.Join(rows, "\n"))
	}
	// Columns are cells (the ⚠ mark is three bytes, one cell); the
	// figures are right-aligned.
	end := func(r string) int {
		i := strings.Index(r, "resident on ")
		return ansi.StringWidth(r[:i]) + len(strings.Fields(r[i:])[2]) + strings.Index(r[i:], strings.Fields(r[i:])[2])
	}
	if e0, e1 := end(rows[0]), end(rows[1]); e0 != e1 {
		t.Errorf("the replicas column is not aligned (ends at %d and %d):\n%s\n%s", e0, e1, rows[0], rows[1])
	}
}
