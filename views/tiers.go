package views

import (
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Tiers and groups: where a worker's blocks live (the GPU, offload tiers),
// its KV cache groups (a hybrid model's sliding-window groups beside its
// full-attention one) and where its prompt tokens hit, per tier. All of it
// the pool's figures; shown only where a worker has more than the GPU's
// one full-attention group, so a plain pool's screens do not change.

// tierHitsText is "GPU 91% · CPU 6% · storage 1%": the share of prompt
// tokens each tier served over the window ("" without shares).
func tierHitsText(c *snapshot.CacheTiers) string {
	if c == nil {
		return ""
	}
	var parts []string
	for _, h := range c.Hits {
		if h.Share == nil {
			continue
		}
		parts = append(parts, h.Tier+" "+pctf(*h.Share))
	}
	return strings.Join(parts, " · ")
}

// beyondGPU: the figures name a tier other than the GPU.
func beyondGPU(c *snapshot.CacheTiers) bool {
	if c == nil {
		return false
	}
	for _, h := range c.Hits {
		if h.Tier != "GPU" {
			return true
		}
	}
	return c.StoreBytesPerS != nil || c.HostTotalTokens != nil
}

// bytesRate is a byte rate: "48 MB/s".
func bytesRate(v *float64) string {
	if v == nil {
		return dash
	}
	return numf(*v) + "B/s"
}

// hitsTierLine is the worker screen's "hits GPU 61% · primary 18% · fs 6%
// · offload read 50MB/s, stored 100MB/s" line, nil when the worker's page
// says nothing beyond the GPU.
func hitsTierLine(wk *snapshot.Worker, win string) line {
	c := wk.CacheTiers
	if !beyondGPU(c) {
		return nil
	}
	l := line{{" hits  ", themes.Title}}
	if t := tierHitsText(c); t != "" {
		l = append(l, span{t + " of prompt tokens", themes.Text})
	} else {
		l = append(l, span{"by tier " + dash, themes.Dim})
	}
	if c.StoreBytesPerS != nil || c.LoadBytesPerS != nil {
		l = append(l, span{" · offload read back " + bytesRate(c.LoadBytesPerS) + ", stored " + bytesRate(c.StoreBytesPerS), themes.Text})
	}
	if c.StoresWithoutLoads {
		l = append(l, span{" · stores with no loads", themes.Warn})
	}
	if c.HostUsedTokens != nil && c.HostTotalTokens != nil {
		l = append(l, span{" · host pool " + numf(*c.HostUsedTokens) + " of " + numf(*c.HostTotalTokens) + " tok", themes.Text})
	}
	return append(l, span{" " + win, themes.Dim})
}

// tiersLine is "tiers GPU 4.1k blk 65k tok · CPU 40k blk, stored 120/s,
// evicted 30/s · LMCache CPU: stored, no removals published", nil when the
// worker's streams name no medium but the GPU.
func tiersLine(wk *snapshot.Worker, kept themes.Role) line {
	if len(wk.Tiers) == 0 || len(wk.Tiers) == 1 && wk.Tiers[0].Medium == "GPU" {
		return nil
	}
	l := line{{" tiers ", themes.Title}}
	for i, t := range wk.Tiers {
		if i > 0 {
			l = append(l, span{" · ", themes.Dim})
		}
		name := t.Medium
		if t.Locality != "" {
			name += " " + strings.ToLower(t.Locality)
		}
		l = append(l, span{name + " ", themes.Key})
		if t.StoreOnly && t.Blocks == nil {
			l = append(l, span{"stored " + num(t.StoredPerS) + "/s, no removals published", themes.Warn})
			continue
		}
		words := numip(t.Blocks) + " blk"
		if t.Tokens != nil {
			words += " " + numi(*t.Tokens) + " tok"
		}
		if t.StoredPerS != nil {
			words += ", stored " + num(t.StoredPerS) + "/s, evicted " + num(t.RemovedPerS) + "/s"
		}
		l = append(l, span{words, kept})
		if t.Note != "" {
			l = append(l, span{" (" + t.Note + ")", themes.Dim})
		}
	}
	return l
}

// groupsLine is "groups 0 full_attention 16 tok/blk 4.1k blk · 1
// sliding_window 1024 tok 16 tok/blk 512 blk (not in prefix figures)", nil
// for one full-attention group.
func groupsLine(wk *snapshot.Worker, kept themes.Role) line {
	if len(wk.Groups) < 2 && (len(wk.Groups) == 0 || wk.Groups[0].Prefix) {
		return nil
	}
	l := line{{" groups ", themes.Title}}
	for i, g := range wk.Groups {
		if i > 0 {
			l = append(l, span{" · ", themes.Dim})
		}
		words := numi(g.Group) + " " + g.Kind
		if g.SlidingWindow != nil {
			words += " " + numi(*g.SlidingWindow) + " tok"
		}
		if g.BlockSize != nil {
			words += " " + numi(*g.BlockSize) + " tok/blk"
		}
		words += " " + numi(g.Blocks) + " blk"
		role := kept
		if !g.Prefix {
			words += " (not in prefix figures)"
			role = themes.Dim
		}
		l = append(l, span{words, role})
	}
	return l
}
