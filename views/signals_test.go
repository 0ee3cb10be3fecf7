package views_test

import (
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
	"github.com/muesli/termenv"
)

// coloured is the default theme with colour on; the golden theme comes
// back after the test.
func coloured(t *testing.T) *themes.Theme {
	t.Helper()
	lipgloss.SetColorProfile(termenv.TrueColor)
	t.Cleanup(func() { lipgloss.SetColorProfile(termenv.Ascii) })
	th, err := themes.Load("default", nil)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// An empty Decisions screen says what each log is doing, not only "is a
// log configured?".
func TestDecisionsEmptySaysWhy(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.NoDecisions(), state(views.Decisions), 160, 48, th)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"/var/log/dynamo/router.jsonl: 1 240 lines, 0 decisions, 0 outcomes — 1 240 skipped: 1 240 no request id (Dynamo logs at INFO?",
		"waiting for /var/log/router/decisions.jsonl to appear",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("decisions screen lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "is a decision log configured?") {
		t.Errorf("configured logs, yet the screen asks whether one is:\n%s", out)
	}
}

// HOT is one figure in every row (the #1 prefix); the overheating note
// names the prefix the worker overheats on, from its own fields.
func TestHotColumnAndOverheatNote(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	w3 := &s.Workers[3]
	w3.HotShare = f(0.1) // of the #1 prefix; it overheats on another one
	w3.OverheatPrefix, w3.OverheatShare = sp("d00d5eed0badf00d"), f(0.9)
	out := views.Render(s, state(views.Pool), 160, 48, th)
	r := rowOf(t, out, "w3")
	if !strings.Contains(r, "10%") || !strings.Contains(r, "takes 90% of prefix d00d5e") {
		t.Errorf("w3 row = %q; want HOT 10%% and the note on prefix d00d5e… at 90%%", r)
	}
	help := views.Render(s, state(views.Help), 160, 48, th)
	if !strings.Contains(help, "share of the #1 prefix's traffic: the same prefix") {
		t.Errorf("help does not say what HOT means:\n%s", help)
	}
}

// Unknown block counts print –, never 0; a measured 0 stays 0.
func TestBlocksUnknownIsDash(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.Snapshot(), state(views.Pool), 160, 48, th)
	if f := strings.Fields(rowOf(t, out, "w8")); !strings.Contains(strings.Join(f, " "), "– connecting") {
		t.Errorf("w8 (stream connecting) row %q: BLOCKS must be –", rowOf(t, out, "w8"))
	}
	if r := rowOf(t, out, "w1"); !strings.Contains(r, " 0  live") {
		t.Errorf("w1 (connected, empty) row %q: BLOCKS must be a measured 0", r)
	}
	st := state(views.Worker)
	st.Worker = "w8"
	if w := views.Render(fixture.Snapshot(), st, 160, 48, th); !strings.Contains(w, "blocks –") {
		t.Errorf("worker screen of w8 does not show unknown blocks:\n%s", w)
	}
}

// The producer's own timestamp is shown, labelled as such, on the Worker
// screen and (wide) on Streams. A silent stream is dim, not a warning:
// silence is not death.
func TestProducerTimestampAndSilence(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	st := state(views.Worker)
	st.Worker = "w0"
	if out := views.Render(s, st, 160, 48, th); !strings.Contains(strings.Join(strings.Fields(out), " "), "producer ts 14:02:10") {
		t.Errorf("worker screen lacks the producer ts:\n%s", out)
	}
	out := views.Render(s, state(views.Streams), 160, 48, th)
	if !strings.Contains(out, "PRODUCER TS") || !strings.Contains(rowOf(t, out, "w0"), "14:02:10") {
		t.Errorf("streams screen lacks the producer ts column:\n%s", out)
	}
	ct := coloured(t)
	out = views.Render(s, state(views.Streams), 160, 48, ct)
	if !strings.Contains(out, ct.Paint(themes.Dim, "32 s")) || strings.Contains(out, ct.Paint(themes.Warn, "32 s")) {
		t.Errorf("w1's 32 s of silence is not dim")
	}
}

// Circuit breakers show where the operator looks: the router's note, the
// worker's row; and NOW says over how long it is measured.
func TestBreakersAndRecoveryNow(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Routers), 160, 48, th)
	if !strings.Contains(out, "NOW 10s") || !strings.Contains(rowOf(t, out, "r1"), "breaker open: w7") {
		t.Errorf("routers screen:\n%s", out)
	}
	if r := rowOf(t, views.Render(s, state(views.Pool), 160, 48, th), "w7"); !strings.Contains(r, "breaker open") {
		t.Errorf("w7 row %q does not say its breaker is open", r)
	}
	st := state(views.Worker)
	st.Worker = "w7"
	if w := views.Render(s, st, 160, 48, th); !strings.Contains(w, "breaker open") {
		t.Errorf("worker screen of w7 does not say its breaker is open:\n%s", w)
	}
}

func f(v float64) *float64 { return &v }
func sp(v string) *string  { return &v }

// sgrOf is the escape sequence a theme paints a role with.
func sgrOf(th *themes.Theme, r themes.Role) string {
	p := th.Paint(r, "x")
	return p[:strings.Index(p, "x")]
}

// What kvtop last knew of a worker that is down is dim everywhere: its
// sparklines and charts, and its engines' rows, which stay (unfolded on
// the pool screen, in the ENGINE table of the worker screen).
func TestDownWorkerSeriesAndEnginesAreDim(t *testing.T) {
	ct := coloured(t)
	spark, dim := sgrOf(ct, themes.Spark), sgrOf(ct, themes.Dim)
	s := fixture.Snapshot()
	w6 := &s.Workers[6]
	w6.Engines = []snapshot.Engine{{Engine: "0", Queue: f(3), Running: f(9), KVUsage: f(0.95), NumGPUBlocks: f(12000), HitTokens: f(0.7)},
		{Engine: "1", Queue: f(1), Running: f(4), KVUsage: f(0.4), NumGPUBlocks: f(12000), HitTokens: f(0.6)}}
	st := state(views.Pool)
	st.Engines = true
	lines := strings.Split(views.Render(s, st, 200, 50, ct), "\n")
	var down, up string
	var engines []string
	for i, l := range lines {
		plain := ansi.Strip(l)
		switch {
		case strings.HasPrefix(plain, "  ✖ w6 "):
			down = l
			for _, e := range lines[i+1:] {
				if !strings.Contains(ansi.Strip(e), "└ dp") {
					break
				}
				engines = append(engines, e)
			}
		case strings.HasPrefix(plain, "    w2 "):
			up = l
		}
	}
	if !strings.Contains(up, spark) {
		t.Fatalf("an up worker's sparklines are not in the spark colour: %q", up)
	}
	if down == "" || strings.Contains(down, spark) || !strings.Contains(down, dim+"▆▆▆▆") {
		t.Errorf("down w6: sparklines should be dim: %q", down)
	}
	if len(engines) != 2 {
		t.Fatalf("down w6's engine rows: %d, want its 2 engines kept under it:\n%s", len(engines), strings.Join(lines, "\n"))
	}
	for _, e := range engines {
		for _, code := range sgr.FindAllString(e, -1) {
			if code != dim && code != "\x1b[0m" && code != "\x1b[m" {
				t.Errorf("down w6 engine row %q has a colour other than dim: %q", ansi.Strip(e), code)
				break
			}
		}
	}
	st = state(views.Worker)
	st.Worker = "w6"
	w := views.Render(s, st, 160, 48, ct)
	if strings.Contains(w, spark) {
		t.Errorf("worker screen of down w6 draws its charts in the spark colour")
	}
	for _, l := range strings.Split(w, "\n") {
		if p := ansi.Strip(l); strings.HasPrefix(p, " dp 1") {
			for _, code := range sgr.FindAllString(l, -1) {
				if code != dim && code != "\x1b[0m" && code != "\x1b[m" {
					t.Errorf("worker screen: down w6's engine line %q is not all dim", p)
					break
				}
			}
		}
	}
}
