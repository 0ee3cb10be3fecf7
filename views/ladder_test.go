package views_test

import (
	"strings"
	"testing"

	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// The ladder on screen (issue 26): the overview shows each rung as a bar
// with its loss in words and who lost most; the header names the largest
// loss once it passes thresholds.ladder_loss_share, not before; the
// worker screen has its own ladder; unknown says why.
func TestLadderOnScreen(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Pool), 200, 50, th)
	for _, want := range []string{
		" HIT LADDER ",
		"perfect routing    █████████████████░░░  83%  +12% routing: 12% of prompt tokens were cached on another worker when computed — most on w3",
		"enough capacity    ██████████████████░░  91%  +8% capacity",
		"compulsory 9% (first sight)",
		"71% now → 83% perfect routing → 83% same hashing → 91% ceiling · loss: routing 12%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pool screen lacks %q:\n%s", want, out)
		}
	}
	if head := strings.SplitN(out, "\n", 2)[0]; !strings.Contains(head, "─ loss: routing 12% ─") {
		t.Errorf("the header does not name the largest loss: %q", head)
	}
	s.Pool.Ladder.LossHigh = false // the pool's verdict: ended (or never begun)
	if out := views.Render(s, state(views.Pool), 200, 50, th); strings.Contains(strings.SplitN(out, "\n", 2)[0], "loss: routing") {
		t.Errorf("the header names a loss the pool does not hold")
	}
	st := state(views.Worker)
	st.Worker = "w3"
	if out := views.Render(fixture.Snapshot(), st, 200, 50, th); !strings.Contains(out, "ladder actual 91% · perfect routing 92% · consistent hashing 92% · ceiling 97% · largest loss capacity 5%") {
		t.Errorf("worker screen lacks w3's ladder:\n%s", out)
	}
	u := fixture.Snapshot()
	u.Pool.Ladder.Rungs.Actual, u.Pool.Ladder.Reason = nil, "no prompt tokens in the window"
	if out := views.Render(u, state(views.Pool), 200, 50, th); !strings.Contains(out, "HIT LADDER unknown: no prompt tokens in the window") {
		t.Errorf("an unknown ladder does not say why:\n%s", out)
	}
}
