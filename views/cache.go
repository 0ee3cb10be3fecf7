package views

import (
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// The cache's own health in words and cells: capacity against what the
// index holds, stores and evictions per second, how long evicted blocks had
// lived, and thrash (blocks stored again after their own eviction). Every
// figure is the pool's; the views only format it.

// tokensText is a token count compactly: "192k", "1.2M".
func tokensText(v *int) string {
	if v == nil {
		return dash
	}
	return numi(*v)
}

// residencyWords is "residency p50 4.2 s, mean 9.1 s", or "" unknown.
func residencyWords(r snapshot.Residency) string {
	if r.P50 == nil || r.Mean == nil {
		return ""
	}
	p := ""
	if r.Capped {
		p = "≥"
	}
	return "residency p50 " + p + secs(*r.P50) + ", mean " + secs(*r.Mean)
}

// cacheLine is the worker screen's line of cache figures over the window:
// "cache 191k of 192k tok resident · stored 120/s · evicted 118/s ·
// thrash 41/s (34% of stored) · residency p50 4.2 s, mean 9.1 s (1 in 16
// blocks followed) (60s)".
func cacheLine(s *snapshot.Snapshot, wk *snapshot.Worker, win string) line {
	c := wk.Cache
	kept := themes.Text
	if wk.State == snapshot.WorkerDown {
		kept = themes.Dim
	}
	l := line{{" cache ", themes.Title}}
	if c.SampleRate == nil && c.CapacityTokens == nil {
		return append(l, span{"– (no event stream for this worker)", themes.Dim})
	}
	// Side by side, each with its meaning: KV use counts the blocks
	// running requests hold; the cache holds more, free to evict (vLLM's
	// KV 22% beside a full cache is not a contradiction).
	l = append(l, span{"KV in use " + pct(wk.KVUsage) + " · cached " + tokensText(c.ResidentTokens) + " of " + tokensText(c.CapacityTokens) + " tok" + cachedShare(c) + ", evictable", kept})
	if c.StoredPerS == nil {
		return append(l, span{" · no live batch in the window yet", themes.Dim})
	}
	l = append(l, span{" · stored " + num(c.StoredPerS) + "/s · evicted " + num(c.RemovedPerS) + "/s", kept})
	thrash := " · thrash " + num(c.ThrashPerS) + "/s"
	if c.ThrashShare != nil {
		thrash += " (" + pctf(*c.ThrashShare) + " of stored)"
	}
	role := kept
	if c.ThrashShare != nil && wk.ThrashHigh { // the pool's held verdict
		role = themes.Warn
	}
	l = append(l, span{thrash, role})
	if r := residencyWords(c.ResidencyS); r != "" {
		l = append(l, span{" · " + r, kept})
	}
	if c.SampleRate != nil && *c.SampleRate < 1 {
		l = append(l, span{" (1 in " + numf(1 / *c.SampleRate) + " blocks followed)", themes.Dim})
	}
	return append(l, span{" " + win, themes.Dim})
}

// cacheCharts are the worker screen's cache charts: GPU blocks evicted per
// second with the thrash (stored again after their own eviction) dim
// beneath, and resident tokens with the capacity dim above.
func cacheCharts(s *snapshot.Snapshot, wk *snapshot.Worker) []chartSpec {
	c, ws := wk.Cache, wk.Series
	evict := num(c.RemovedPerS)
	if c.ThrashPerS != nil {
		evict += " · thrash " + num(c.ThrashPerS)
		if c.ThrashShare != nil {
			evict += " (" + pctf(*c.ThrashShare) + ")"
		}
	}
	var capLine []snapshot.Point
	if c.CapacityTokens != nil {
		v := float64(*c.CapacityTokens)
		win := time.Duration(s.WindowS * float64(time.Second))
		capLine = []snapshot.Point{{T: s.At.Add(-win), V: v}, {T: s.At, V: v}}
	}
	return []chartSpec{
		{title: "EVICTED/s", short: "EVICT/s", pts: ws.RemovedPerS, more: [][]snapshot.Point{ws.ThrashPerS}, now: evict, nowShort: num(c.RemovedPerS)},
		{title: "CACHE tokens", short: "CACHE tok", pts: ws.ResidentTokens, more: [][]snapshot.Point{capLine},
			now: tokensText(c.ResidentTokens) + " of " + tokensText(c.CapacityTokens), nowShort: tokensText(c.ResidentTokens)},
	}
}

// hashCheckLines are the streams screen's words on the hash-boundary
// check: whether workers agree on how they hash blocks.
func hashCheckLines(s *snapshot.Snapshot, w int, th *themes.Theme) []string {
	hm := s.Pool.HashMismatch
	head := line{{" HASHES ", themes.Title}}
	bad := len(hm.Pairs) > 0 || len(hm.AcrossRestart) > 0 || len(hm.AcrossRanks) > 0 || len(hm.BlockSizes) > 1
	table := " · " + numi(hm.Fingerprints) + " root fingerprints of " + numi(hm.FingerprintsLimit)
	if hm.FingerprintsDropped > 0 {
		table += " (" + numu(hm.FingerprintsDropped) + " forgotten: table full)"
	}
	if !bad {
		word := "✓ no mismatch seen"
		if hm.Agreeing == 0 {
			word = "nothing to compare yet: no root prefix stored by two workers"
		} else {
			word += ": " + numi(hm.Agreeing) + " root " + plural(hm.Agreeing, "prefix", "prefixes") + " stored under one hash by several workers"
		}
		return []string{append(head, span{word, themes.OK}, span{table, themes.Dim}).render(th, w)}
	}
	out := []string{append(head, span{"⚠ workers disagree on how they hash blocks: an event-fed index cannot match between them", themes.Crit}, span{table, themes.Dim}).render(th, w)}
	for _, name := range hm.AcrossRestart {
		out = append(out, line{{"   " + name, themes.Warn}, {" · its hashes changed at its restart: its seed is not pinned (PYTHONHASHSEED)", themes.Text}}.render(th, w))
	}
	for _, name := range hm.AcrossRanks {
		out = append(out, line{{"   " + name, themes.Warn}, {" · its DP ranks hash differently", themes.Text}}.render(th, w))
	}
	if len(hm.BlockSizes) > 1 {
		parts := make([]string, len(hm.BlockSizes))
		for i, g := range hm.BlockSizes {
			parts[i] = numi(g.BlockSize) + " tokens: " + strings.Join(g.Workers, ", ")
		}
		out = append(out, line{{"   block sizes differ", themes.Crit}, {" · " + strings.Join(parts, " · "), themes.Text}}.render(th, w))
	}
	// The pairs last: a pool with one odd worker has as many as workers,
	// the findings about one worker above would scroll away under them.
	for _, p := range hm.Pairs {
		out = append(out, line{{"   " + p.A + " ≠ " + p.B, themes.Crit},
			{" · " + numi(p.Prefixes) + " identical " + plural(p.Prefixes, "prefix", "prefixes") + " under other hashes since " + clock(p.Since), themes.Text}}.render(th, w))
	}
	return out
}

// cachedShare is " (99%)": the resident tokens' share of the capacity.
func cachedShare(c snapshot.Cache) string {
	if c.ResidentTokens == nil || c.CapacityTokens == nil || *c.CapacityTokens <= 0 {
		return ""
	}
	return " (" + pctf(float64(*c.ResidentTokens)/float64(*c.CapacityTokens)) + ")"
}
