package views_test

import (
	"strings"
	"testing"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// The pool table's EVICT/s: a measured 0 is 0, unknown is –, and a worker
// that thrashes (its share at thresholds.thrash_share) is painted as a
// warning with a NOTE that says so, which words carry without colour.
func TestEvictColumn(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Pool), 200, 50, th)
	if !strings.Contains(out, "EVICT/s") {
		t.Fatalf("no EVICT/s column at 200 columns:\n%s", out)
	}
	for name, want := range map[string]string{"w1": "       0  ", "w8": "       –  ", "w4": "     118  "} {
		if r := rowOf(t, out, name); !strings.Contains(r, want) {
			t.Errorf("%s row %q: want EVICT/s %q", name, r, strings.TrimSpace(want))
		}
	}
	if r := rowOf(t, out, "w4"); !strings.Contains(r, "thrash 34% of stores") {
		t.Errorf("w4 row %q: want the thrash note", r)
	}
	ct := coloured(t)
	if out := views.Render(s, state(views.Pool), 200, 50, ct); !strings.Contains(out, ct.Paint(themes.Warn, "118")) {
		t.Errorf("w4's EVICT/s is not painted as a warning")
	}
	// The column goes second, after TOK/s and before TTFT p95.
	if out := views.Render(s, state(views.Pool), 160, 48, th); strings.Contains(out, "EVICT/s") || !strings.Contains(out, "TTFT p95") {
		t.Errorf("160 columns should drop EVICT/s and keep TTFT p95:\n%s", out)
	}
}

// The streams screen says whether the workers hash blocks alike: nothing
// to compare yet, agreement with its evidence, or who disagrees.
func TestStreamsHashCheck(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	out := views.Render(s, state(views.Streams), 160, 48, th)
	if !strings.Contains(out, "HASHES ✓ no mismatch seen: 38 root prefixes stored under one hash by several workers · 5.1k root fingerprints of 65.5k") {
		t.Errorf("agreeing pool:\n%s", out)
	}
	s.Pool.HashMismatch = snapshot.HashMismatch{Pairs: []snapshot.HashPair{}, AcrossRestart: []string{}, AcrossRanks: []string{}, BlockSizes: []snapshot.BlockSizeGroup{}, FingerprintsLimit: 65536}
	if out := views.Render(s, state(views.Streams), 160, 48, th); !strings.Contains(out, "nothing to compare yet: no root prefix stored by two workers") {
		t.Errorf("empty check:\n%s", out)
	}
	out = views.Render(fixture.HashMismatch(), state(views.Streams), 160, 48, th)
	for _, want := range []string{"⚠ workers disagree on how they hash blocks", "w0 ≠ w5 · 9 identical prefixes under other hashes since 14:01:46",
		"w7 · its hashes changed at its restart", "block sizes differ · 16 tokens: w0, w1, w3, w4, w5, w6, w7 · 32 tokens: w2"} {
		if !strings.Contains(out, want) {
			t.Errorf("streams screen lacks %q:\n%s", want, out)
		}
	}
}

// The prefixes screen puts the rest beside the hot stream: the rest's
// TTFT p50/p95/p99 with n, and a prefix with too few requests shows –.
func TestPrefixesRest(t *testing.T) {
	th := plain(t)
	out := views.Render(fixture.Snapshot(), state(views.Prefixes), 160, 48, th)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"rest under no hot prefix: TTFT p50/p95/p99 0.4/1.9/2.6 s (n 640)",
		"on overheating workers TTFT p95 1.9 s (n 402) vs 560 ms (n 821) on the others", "TTFT p95", "JOINED"} {
		if !strings.Contains(flat, want) {
			t.Errorf("prefixes screen lacks %q:\n%s", want, out)
		}
	}
	if r := rowOf(t, out, "5e6f7a8b…"); !strings.Contains(r, "  –  ") || !strings.Contains(r, " 12 ") {
		t.Errorf("row %q: 12 requests, quantiles unknown (–)", r)
	}
}

// The words of a held verdict follow the pool's verdict, not this
// refresh's figure (issue 25): a worker whose thrash share dipped to 19 %
// while its thrash verdict holds keeps its NOTE and warning; one at 25 %
// the pool has not judged yet (fewer stores than thrash_min_stored) has
// neither; an engine whose KV reads 89 % while its saturated verdict
// holds still says SATURATED, and one at 93 % the pool no longer holds
// saturated does not.
func TestHeldVerdictWords(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	w4, w1 := &s.Workers[4], &s.Workers[1]
	w4.Cache.ThrashShare, w4.ThrashHigh = f(0.19), true
	w1.Cache.ThrashShare, w1.ThrashHigh = f(0.25), false
	out := views.Render(s, state(views.Pool), 200, 50, th)
	if r := rowOf(t, out, "w4"); !strings.Contains(r, "thrash 19% of stores") {
		t.Errorf("w4 row %q: its thrash verdict holds at 19%%, want the note", r)
	}
	if r := rowOf(t, out, "w1"); strings.Contains(r, "thrash") {
		t.Errorf("w1 row %q: no thrash verdict, want no note at 25%%", r)
	}
	w2 := &s.Workers[2]
	w2.Engines[0].KVUsage, w2.Engines[0].Saturated = f(0.89), true
	w2.Engines[1].KVUsage, w2.Engines[1].Saturated = f(0.93), false
	st := state(views.Pool)
	st.Engines = true
	out = views.Render(s, st, 200, 50, th)
	var dp0, dp1 string
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, " w2 ") && i+2 < len(lines) && strings.Contains(lines[i+1], "└ dp") {
			dp0, dp1 = lines[i+1], lines[i+2]
		}
	}
	if !strings.Contains(dp0, "SATURATED") || strings.Contains(dp1, "SATURATED") {
		t.Errorf("engine rows\n%q\n%q\nwant dp0 (held at 89%%) SATURATED, dp1 (93%%, not held) not", dp0, dp1)
	}
}
