package views

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// The hit-rate ladder (pool/ladder.go): the hit rate each fix would reach,
// and the losses in words.

// ladderCauses are the avoidable causes, in the ladder's order, by their
// JSON keys, with the words that name them.
var ladderCauses = []struct {
	key, word, what string
	share           func(l *snapshot.Ladder) *float64
	tokens          func(l *snapshot.Ladder) float64
}{
	{"routing", "routing", "cached on another worker when computed",
		func(l *snapshot.Ladder) *float64 { return l.Share.Routing }, func(l *snapshot.Ladder) float64 { return l.Routing }},
	{"configuration", "configuration", "the same content under another hash elsewhere",
		func(l *snapshot.Ladder) *float64 { return l.Share.Configuration }, func(l *snapshot.Ladder) float64 { return l.Configuration }},
	{"capacity", "capacity", "evicted by the same worker before",
		func(l *snapshot.Ladder) *float64 { return l.Share.Capacity }, func(l *snapshot.Ladder) float64 { return l.Capacity }},
	{"pool_capacity", "pool capacity", "evicted everywhere before",
		func(l *snapshot.Ladder) *float64 { return l.Share.PoolCapacity }, func(l *snapshot.Ladder) float64 { return l.PoolCapacity }},
}

// largestLoss is the ladder's largest avoidable cause in words and its
// share of prompt tokens (snapshot.Ladder.LargestLoss); ok false when the
// ladder is unknown or nothing was lost.
func largestLoss(l *snapshot.Ladder) (word string, share float64, ok bool) {
	key, share, known := l.LargestLoss()
	for _, c := range ladderCauses {
		if c.key == key {
			word = c.word
		}
	}
	return word, share, known && share > 0
}

// ladderHeader is the header's word on the pool's largest avoidable loss
// once it reaches thresholds.ladder_loss_share: "loss: routing 18%".
func ladderHeader(s *snapshot.Snapshot) (span, bool) {
	// The pool holds the verdict (its largest loss at the threshold,
	// ended only after it stayed below the leave mark).
	word, share, ok := largestLoss(&s.Pool.Ladder)
	if !ok || !s.Pool.Ladder.LossHigh {
		return span{}, false
	}
	return span{"loss: " + word + " " + pctf(share), themes.Warn}, true
}

// ladderPanel is the overview's ladder: each rung as a bar, what it adds
// in words, and what is left (compulsory, unexplained, stale index).
func ladderPanel(s *snapshot.Snapshot, w int, th *themes.Theme) panel {
	l := &s.Pool.Ladder
	title := line{{" HIT LADDER ", themes.Title}}
	if l.Rungs.Actual == nil {
		why := "unknown"
		if l.Reason != "" {
			why += ": " + l.Reason
		}
		return emptyPanel(title, why, w, th)
	}
	title = append(title, span{"prompt tokens " + windowNote(0, s.WindowS) + " · the hit rate each fix would reach, cumulatively" + sampleWords(l), themes.Dim})
	rows := func() []line { return append([]line{ladderSummary(l)}, ladderRows(s, w)...) }
	return listPanel(title, 6, rows, 6, "", w, th)
}

// sampleWords notes a sampled memory of hashes seen.
func sampleWords(l *snapshot.Ladder) string {
	if l.SampleRate > 0 && l.SampleRate < 1 {
		return fmt.Sprintf(" · capacity estimated from 1 in %s blocks", numf(1/l.SampleRate))
	}
	return ""
}

// ladderRows are the rungs as bars with what each adds, then the rest.
func ladderRows(s *snapshot.Snapshot, w int) []line {
	l := &s.Pool.Ladder
	barW := 20
	if w < 100 {
		barW = 10
	}
	r := l.Rungs
	rung := func(name string, v *float64, add string, role themes.Role) line {
		full, empty := "", strings.Repeat(" ", barW)
		if v != nil {
			full, empty = bar(*v, barW)
		}
		out := line{{"   " + fit(name, 18, false) + " ", themes.Text}, {full, themes.BarFull}, {empty, themes.BarEmpty}, {" " + fit(pct(v), 4, true), themes.Text}}
		if add != "" {
			out = append(out, span{"  " + add, role})
		}
		return out
	}
	gain := func(c int) (string, themes.Role) {
		cause := ladderCauses[c]
		sh := cause.share(l)
		if sh == nil || *sh <= 0 {
			return "+0% " + cause.word, themes.Dim
		}
		return fmt.Sprintf("+%s %s: %s of prompt tokens were %s%s", pctf(*sh), cause.word, pctf(*sh), cause.what, mostOn(s, cause.key)), themes.Warn
	}
	capShare := 0.0
	for _, v := range []*float64{l.Share.Capacity, l.Share.PoolCapacity} {
		if v != nil {
			capShare += *v
		}
	}
	routeAdd, routeRole := gain(0)
	cfgAdd, cfgRole := gain(1)
	capAdd, capRole := "+0% capacity", themes.Dim
	if capShare > 0 {
		capAdd, capRole = fmt.Sprintf("+%s capacity: evicted before (%s by the same worker, %s everywhere) — the workload's ceiling",
			pctf(capShare), pct(l.Share.Capacity), pct(l.Share.PoolCapacity)), themes.Warn
	}
	rest := fmt.Sprintf("   compulsory %s (first sight)", pct(l.Share.Compulsory))
	if l.Unexplained > 0 {
		rest += " · unexplained " + tokensText(intp(l.Unexplained)) + " tok"
	}
	if l.StaleIndex > 0 {
		rest += " · stale index " + tokensText(intp(l.StaleIndex)) + " tok predicted, not cached"
	}
	return []line{
		rung("actual", r.Actual, "", themes.Text),
		rung("perfect routing", r.PerfectRouting, routeAdd, routeRole),
		rung("consistent hashing", r.ConsistentHashing, cfgAdd, cfgRole),
		rung("enough capacity", r.EnoughCapacity, capAdd, capRole),
		{{rest, themes.Dim}},
	}
}

func intp(v float64) *int {
	n := int(v + 0.5)
	return &n
}

// ladderSummary is the ladder in one line, first in the panel (all a
// short panel shows): "71% now → 83% perfect routing → 83% same hashing
// → 91% ceiling · loss: routing 12%".
func ladderSummary(l *snapshot.Ladder) line {
	r := l.Rungs
	out := line{{"   " + pct(r.Actual) + " now → " + pct(r.PerfectRouting) + " perfect routing → " +
		pct(r.ConsistentHashing) + " same hashing → " + pct(r.EnoughCapacity) + " ceiling", themes.Text}}
	if word, share, ok := largestLoss(l); ok {
		out = append(out, span{" · loss: " + word + " " + pctf(share), themes.Warn})
	}
	return out
}

// ladderLine is the worker screen's ladder: its rungs and largest loss.
func ladderLine(wk *snapshot.Worker) line {
	l := &wk.Ladder
	out := line{{" ladder ", themes.Title}}
	if l.Rungs.Actual == nil {
		why := "–"
		if l.Reason != "" {
			why += " (" + l.Reason + ")"
		}
		return append(out, span{why, themes.Dim})
	}
	r := l.Rungs
	out = append(out, span{"actual " + pct(r.Actual) + " · perfect routing " + pct(r.PerfectRouting) +
		" · consistent hashing " + pct(r.ConsistentHashing) + " · ceiling " + pct(r.EnoughCapacity), themes.Text})
	if word, share, ok := largestLoss(l); ok {
		out = append(out, span{" · largest loss " + word + " " + pctf(share) + " of prompt tokens", themes.Warn})
	}
	return out
}

// mostOn names the workers that lost the most tokens to a cause, at most
// two: " — most on w1, w5".
func mostOn(s *snapshot.Snapshot, key string) string {
	var tokens func(l *snapshot.Ladder) float64
	for _, c := range ladderCauses {
		if c.key == key {
			tokens = c.tokens
		}
	}
	type lost struct {
		name string
		v    float64
	}
	var top []lost
	for i := range s.Workers {
		if v := tokens(&s.Workers[i].Ladder); v > 0 {
			top = append(top, lost{s.Workers[i].Name, v})
		}
	}
	sort.Slice(top, func(a, b int) bool { return top[a].v > top[b].v || top[a].v == top[b].v && top[a].name < top[b].name })
	if len(top) == 0 {
		return ""
	}
	names := top[0].name
	if len(top) > 1 {
		names += ", " + top[1].name
	}
	return " — most on " + names
}
