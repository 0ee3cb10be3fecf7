package views_test

import (
	"regexp"

	"github.com/charmbracelet/x/ansi"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// At 80×24 (issue 25, item 6) the worker screen's figures lines end on a
// whole item — never a number without its unit ("scraped 1.0 s ago in
// 0.8…") — and its title and now lines are wrapped whole: state, scrape
// age and hit rate stay on screen.
func TestWorkerFiguresNotCutInsideAUnit(t *testing.T) {
	th := plain(t)
	cutInside := regexp.MustCompile(`[0-9A-Za-z(%/]…$`)
	for _, name := range []string{"w3", "w2", "w6", "w5"} {
		{
			st := state(views.Worker)
			st.Worker = name
			out := views.Render(fixture.Snapshot(), st, 80, 24, th)
			checkFits(t, out, 80, 24)
			for _, l := range strings.Split(out, "\n") {
				for _, label := range []string{" WORKER ", " now ", " latency ", " cache ", " tiers ", " groups ", " hits "} {
					if strings.HasPrefix(l, label) && cutInside.MatchString(l) {
						t.Errorf("%s at 80×24: %q is cut inside an item", name, l)
					}
				}
			}
			if name == "w3" {
				for _, want := range []string{"scraped 0.4 s ago in 14 ms", "hit 91% tok, 88% req (60s)", "OVERHEATING"} {
					if !strings.Contains(out, want) {
						t.Errorf("w3 at 80×24 lacks %q:\n%s", want, out)
					}
				}
			}
		}
	}
	st := state(views.Worker)
	st.Worker = "w3"
	out := views.Render(fixture.Tiered(), st, 80, 24, th)
	for _, l := range strings.Split(out, "\n") {
		if (strings.HasPrefix(l, " tiers ") || strings.HasPrefix(l, " hits ")) && cutInside.MatchString(l) {
			t.Errorf("tiered w3 at 80×24: %q is cut inside an item", l)
		}
	}
}

// The streams screen's timeline at 80×24 shows its newest incident even
// when only one row is left for it, never "… 6 older" and no row.
func TestTimelineShowsItsNewestIncident(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.HashMismatch(), state(views.Streams), 80, 24, th)
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, " TIMELINE ") {
			if i+1 >= len(lines)-2 || !strings.Contains(lines[i+1], "w7/0  gap seq 77001") {
				t.Errorf("the timeline shows no incident under its title:\n%s", out)
			}
			return
		}
	}
	t.Errorf("no timeline at 80×24:\n%s", out)
}

// The decisions list keeps OWNER at 80 columns: "≠owner" alone does not
// say whose cache the request missed.
func TestDecisionsOwnerAt80(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.Snapshot(), state(views.Decisions), 80, 24, th)
	if !strings.Contains(out, "CHOSEN  OWNER") {
		t.Fatalf("no OWNER column at 80×24:\n%s", out)
	}
	if r := rowOf(t, out, "r-8803"); !strings.Contains(r, "w1      w3") {
		t.Errorf("r-8803 was routed to w1 away from its owner w3: %q", r)
	}
}

// Change marks keep the column aligned: "19↑" sits over "4 ", not a
// cell off (issue 25, item 5).
func TestChangeMarksKeepFiguresAligned(t *testing.T) {
	th := plain(t)
	st := state(views.Pool)
	st.Prev = fixture.Later(-3)
	out := views.Render(fixture.Snapshot(), st, 160, 48, th)
	at := func(name, fig string) int {
		r := rowOf(t, out, name)
		return ansi.StringWidth(r[:strings.Index(r, fig)] + fig)
	}
	if a, b := at("w3", "19↑"), at("w5", "  4 "); a != b {
		t.Errorf("WAIT misaligned: w3's 19↑ ends at %d, w5's 4 at %d:\n%s\n%s", a, b, rowOf(t, out, "w3"), rowOf(t, out, "w5"))
	}
}

// Two figures from two sources say which is which: the workers holding a
// prefix (index) and where its traffic went (decisions or events); KV in
// use beside the cached share, each named.
func TestFiguresSayTheirSource(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.Snapshot(), state(views.Pool), 160, 48, th)
	if !regexp.MustCompile(`resident on +2  routed to w3 83%`).MatchString(out) {
		t.Errorf("hottest prefix lacks resident/routed labels:\n%s", out)
	}
	st := state(views.Worker)
	st.Worker = "w3"
	out = views.Render(fixture.Snapshot(), st, 160, 48, th)
	if !strings.Contains(out, "KV in use 93% · cached 190k of 192k tok (99%), evictable") {
		t.Errorf("worker screen does not name KV use and the cached share side by side:\n%s", out)
	}
	if !strings.Contains(out, "TTFT p50/p95/p99 0.9/1.9/2.4 s") {
		t.Errorf("the TTFT percentiles are not named before their figures:\n%s", out)
	}
}
