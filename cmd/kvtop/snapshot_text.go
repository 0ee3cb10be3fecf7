package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kvtop/kvtop/figures"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
)

// writeText prints a snapshot for people: the same facts as the JSON, in
// tables, with units, and `–` for what is unknown.
func writeText(w io.Writer, s *snapshot.Snapshot) error {
	p := s.Pool
	fmt.Fprintf(w, "kvtop snapshot  pool %s  %s\n", p.Name, s.At.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(w, "workers %d/%d up · hit %s tok · %s req (%gs window, %.0fs covered) · queue %s · running %s · KV %s · skew %s max/mean, gini %s · blocks %s%s\n",
		p.Up, p.Workers, pct(p.PrefixHitRate.Tokens), pct(p.PrefixHitRate.Requests), s.WindowS, p.PrefixHitRate.CoveredS,
		num(p.Queue), num(p.Running), pct(p.KVUsage), ratio(p.LoadSkew.MaxOverMean), fixed(p.LoadSkew.Gini), count(p.Blocks),
		map[bool]string{true: "", false: " (index incomplete)"}[p.IndexComplete])
	if ph := p.PrefixHitRate; ph.Left > 0 {
		// The console's header says the same for a window.
		fmt.Fprintf(w, "%d %s left the hit figure within the window (%s): their hits and queries are out of the sum\n",
			ph.Left, map[bool]string{true: "worker", false: "workers"}[ph.Left == 1], strings.Join(ph.LeftWorkers, ", "))
	}
	fmt.Fprintf(w, "latency TTFT %s · ITL %s · queue %s · e2e %s (p50/p95/p99) · tokens/s %s prompt, %s generation · %s req/s · %s\n",
		latency(p.TTFTMS), latency(p.ITLMS), latency(p.QueueMS), latency(p.E2EMS), num(p.TokensPerS.Prompt), num(p.TokensPerS.Generation),
		num(p.RequestsPerS), recomputeText(p.Recompute))
	fmt.Fprintf(w, "cache %s\n", cacheText(p.Cache))
	if t := tiersText(p.Tiers, p.CacheTiers); t != "" {
		fmt.Fprintf(w, "tiers %s\n", t)
	}
	fmt.Fprintf(w, "hashes %s\n", hashText(p.HashMismatch))
	for _, a := range s.Alerts {
		fmt.Fprintf(w, "%s %s\n", severityMark[a.Severity], a.Text)
	}

	if p.Mixed() { // a disaggregated pool: each role's own figures, and each worker's role below
		var parts []string
		for _, f := range p.Roles {
			parts = append(parts, fmt.Sprintf("%s %d/%d up, queue %s (median %s), KV %s", f.Role, f.Up, f.Workers, num(f.Queue), num(f.QueueMedian), pct(f.KVUsage)))
		}
		fmt.Fprintf(w, "roles %s\n", strings.Join(parts, " · "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WORKER\tSTATE\tWAIT\tRUN\tKV USE\tHIT tok\tHIT req\tBLOCKS\tSTREAMS\tHOT\tTTFT p95\tITL p95\tPROMPT tok/s\tGEN tok/s\tREQ/s\tRECOMP tok/s\tRECOMP\tEVICT/s\tTHRASH\t")
	for _, wk := range s.Workers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", wk.Name, wk.State, num(wk.Queue), num(wk.Running),
			pct(wk.KVUsage), pct(wk.PrefixHitRate.Tokens), pct(wk.PrefixHitRate.Requests), count(wk.Blocks), streamSummary(wk.Streams), pct(wk.HotShare),
			quantile(wk.TTFTMS, wk.TTFTMS.P95, "p95"), quantile(wk.ITLMS, wk.ITLMS.P95, "p95"), num(wk.TokensPerS.Prompt), num(wk.TokensPerS.Generation),
			num(wk.RequestsPerS), num(wk.Recompute.TokensPerS), pct(wk.Recompute.Share), num(wk.Cache.RemovedPerS), pct(wk.Cache.ThrashShare))
	}
	tw.Flush()
	for _, wk := range s.Workers {
		if wk.Reason != "" {
			fmt.Fprintf(w, "  %s: %s\n", wk.Name, wk.Reason)
		}
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STREAM\tRANK\tSTATE\tLAST SEQ\tBATCHES\tGAPS\tMISSING\tREPLAYED\tLOST\tRESTARTS\tDECODE ERR\tUNKNOWN\t")
	for _, wk := range s.Workers {
		for _, st := range wk.Streams {
			last := "–"
			if st.LastSeq != nil {
				last = fmt.Sprint(*st.LastSeq)
			}
			fmt.Fprintf(tw, "%s %s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", wk.Name, st.Endpoint, st.Rank, st.State, last,
				st.Batches, st.Gaps, st.Missing, st.Replayed, st.Lost, st.Restarts, st.DecodeErrors, st.UnknownEvents)
		}
	}
	tw.Flush()

	if len(s.Prefixes) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "PREFIX\tTOKENS\tSHARE\tREPLICAS\tSOURCE\tWORKERS\tOVERHEATING\tTTFT p95\tQUEUE p95\tJOINED\t")
		for _, pr := range s.Prefixes {
			over := "–"
			if len(pr.OverheatingWorkers) > 0 {
				over = strings.Join(pr.OverheatingWorkers, ",")
			} else if pr.Overheating != nil {
				over = *pr.Overheating
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", shortID(pr.ID), count(pr.Tokens), pct(&pr.Share), pr.Replicas, pr.Source, shares(pr.Workers), over,
				millis(pr.TTFTMS.P95), millis(pr.QueueMS.P95), pr.TTFTMS.N)
		}
		tw.Flush()
	}
	// The tail away from the hot prefixes, measured on its own (a hot
	// stream's win can hide it in the pool's figures).
	for _, c := range []struct {
		what string
		l    snapshot.RequestLatency
	}{{"requests under no hot prefix", p.Rest}, {"requests on overheating workers", p.OverheatingWorkers}, {"requests on the other workers", p.OtherWorkers}} {
		fmt.Fprintf(w, "%s: TTFT %s · queue %s\n", c.what, classText(c.l.TTFTMS), classText(c.l.QueueMS))
	}

	if len(s.Routers) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ROUTER\tPROFILE\tUP\tRESTARTS\tRECOVERY\tSECONDS\tBASELINE\tCURRENT\t")
		for _, r := range s.Routers {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\t%s\t%s\t%s\t\n", r.Name, r.Profile, r.Up, r.Restarts, r.Recovery.State,
				num(r.Recovery.Seconds), pct(r.Recovery.Baseline), pct(r.Recovery.Current))
		}
		tw.Flush()
	}

	d := s.Decisions
	flagged := 0
	for _, r := range d.Recent {
		if slices.Contains(r.Flags, "recompute") {
			flagged++
		}
	}
	fmt.Fprintf(w, "\ndecisions %d · with outcome %d · owner mismatch %d · prediction errors %d · truncated %d · bad lines %d · recompute %d of the %d recent\n",
		d.Records, d.WithOutcome, d.OwnerMismatch, d.PredictionErrors, d.Truncated, d.BadLines, flagged, len(d.Recent))

	if len(s.Errors) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SOURCE\tKIND\tCOUNT\tLAST")
		for _, e := range s.Errors {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", e.Source, e.Kind, e.Count, e.Last)
		}
		tw.Flush()
	}
	return nil
}

// severityMark starts an alert's line, so it reads without colour.
var severityMark = map[snapshot.Severity]string{snapshot.SeverityCritical: "!!", snapshot.SeverityWarning: "⚠ ", snapshot.SeverityInfo: "· "}

// latency is "180/420/610 ms" or "0.24/0.64/1.7 s" (p50/p95/p99, in the
// unit the largest takes by figures' one rule for durations; ≥ marks a
// floor: the rank fell above the highest bucket), or "– (why)".
func latency(l snapshot.Latency) string {
	if l.P50 == nil && l.P95 == nil && l.P99 == nil {
		if l.Reason != "" {
			return "– (" + l.Reason + ")"
		}
		return "–"
	}
	var floor [3]bool
	for i, q := range [...]string{"p50", "p95", "p99"} {
		floor[i] = slices.Contains(l.Capped, q)
	}
	out := figures.MillisTriple([3]*float64{l.P50, l.P95, l.P99}, floor)
	if l.Merged != "" {
		out += " (" + l.Merged + ")"
	}
	return out
}

func quantile(l snapshot.Latency, v *float64, q string) string {
	if v == nil {
		return "–"
	}
	return figures.Millis(*v, slices.Contains(l.Capped, q))
}

// cacheText is a scope's KV cache in words: resident of capacity tokens,
// stores, evictions and thrash per second, residency of evicted blocks.
func cacheText(c snapshot.Cache) string {
	thrash := num(c.ThrashPerS) + "/s"
	if c.ThrashShare != nil {
		thrash += " (" + pct(c.ThrashShare) + " of stores)"
	}
	out := fmt.Sprintf("resident %s of %s tok · stored %s/s · evicted %s/s · thrash %s · residency p50 %s, mean %s (%d evictions followed",
		count(c.ResidentTokens), count(c.CapacityTokens), num(c.StoredPerS), num(c.RemovedPerS), thrash,
		seconds(c.ResidencyS.P50), seconds(c.ResidencyS.Mean), c.ResidencyS.Samples)
	if c.SampleRate != nil && *c.SampleRate < 1 {
		out += fmt.Sprintf(", 1 block in %.0f", 1 / *c.SampleRate)
	}
	return out + ")"
}

// hashText is the hash-boundary check: whether the workers hash identical
// prefixes alike, and who does not.
func hashText(h snapshot.HashMismatch) string {
	var parts []string
	for _, p := range h.Pairs {
		parts = append(parts, fmt.Sprintf("%s and %s differ on %d %s", p.A, p.B, p.Prefixes, map[bool]string{true: "prefix", false: "prefixes"}[p.Prefixes == 1]))
	}
	if len(h.AcrossRestart) > 0 {
		parts = append(parts, "across a restart: "+strings.Join(h.AcrossRestart, ", "))
	}
	if len(h.AcrossRanks) > 0 {
		parts = append(parts, "across DP ranks: "+strings.Join(h.AcrossRanks, ", "))
	}
	if len(h.BlockSizes) > 0 {
		var g []string
		for _, b := range h.BlockSizes {
			g = append(g, fmt.Sprintf("%d (%s)", b.BlockSize, strings.Join(b.Workers, ", ")))
		}
		parts = append(parts, "block sizes differ: "+strings.Join(g, ", "))
	}
	verdict := "agree"
	if len(parts) > 0 {
		verdict = "DIFFER: " + strings.Join(parts, "; ")
	}
	return fmt.Sprintf("%s · %d root prefixes stored alike on two workers · fingerprints %d of %d, %d forgotten",
		verdict, h.Agreeing, h.Fingerprints, h.FingerprintsLimit, h.FingerprintsDropped)
}

// classText is a class of requests' quantiles: "p50/p95/p99 0.41/1.9/2.6 s (n 640)",
// or "– (why) (n 12)".
func classText(q snapshot.RequestQuantiles) string {
	if q.P50 == nil {
		why := ""
		if q.Reason != "" {
			why = " (" + q.Reason + ")"
		}
		return fmt.Sprintf("–%s (n %d)", why, q.N)
	}
	return fmt.Sprintf("p50/p95/p99 %s (n %d)", figures.MillisTriple([3]*float64{q.P50, q.P95, q.P99}, [3]bool{}), q.N)
}

// millis is one duration in milliseconds by figures' rule, "–" unknown.
func millis(v *float64) string {
	if v == nil {
		return "–"
	}
	return figures.Millis(*v, false)
}

// recomputeText is the pool's recomputed prefill in words.
func recomputeText(r snapshot.Recompute) string {
	if r.Measured == 0 && r.NotMeasurable == 0 {
		return "recomputed – (no decision joined to an outcome in the window)"
	}
	return fmt.Sprintf("recomputed %s tok/s, %s of prompt tokens, %d requests (%d measured, %d not measurable)",
		num(r.TokensPerS), pct(r.Share), r.Requests, r.Measured, r.NotMeasurable)
}

func num(v *float64) string {
	if v == nil {
		return "–"
	}
	if *v == float64(int64(*v)) {
		return fmt.Sprintf("%d", int64(*v))
	}
	return fmt.Sprintf("%.1f", *v)
}

// count is an optional count: nil is unknown, never 0.
func count(v *int) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprint(*v)
}

// pct is the console's rounding (figures.Pct): one value, one text.
func pct(v *float64) string {
	if v == nil {
		return figures.Unknown
	}
	return figures.Pct(*v)
}

func ratio(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f×", *v)
}

func fixed(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *v)
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

func shares(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+" "+figures.Pct(m[n]))
	}
	return strings.Join(parts, " ")
}

// streamSummary is the worst stream state of a worker, with its gap count.
func streamSummary(ss []snapshot.Stream) string {
	if len(ss) == 0 {
		return "–"
	}
	worst := ss[0]
	var gaps uint64
	for _, st := range ss {
		gaps += st.Gaps
		if views.StreamSeverity(st.State) > views.StreamSeverity(worst.State) {
			worst = st
		}
	}
	if gaps > 0 {
		return fmt.Sprintf("%s (%d gaps)", worst.State, gaps)
	}
	return string(worst.State)
}

// tiersText is the pool's storage media and where prompt tokens hit, per
// tier ("" for a pool whose streams name only the GPU and whose pages say
// nothing beyond it).
func tiersText(ts []snapshot.Tier, c *snapshot.CacheTiers) string {
	var parts []string
	if len(ts) > 1 || len(ts) == 1 && ts[0].Medium != "GPU" {
		for _, t := range ts {
			switch {
			case t.StoreOnly && t.Blocks == nil:
				parts = append(parts, t.Medium+" stored, no removals published")
			default:
				parts = append(parts, t.Medium+" "+count(t.Blocks)+" blocks")
			}
		}
	}
	if c != nil {
		var hits []string
		for _, h := range c.Hits {
			hits = append(hits, h.Tier+" "+pct(h.Share))
		}
		if len(hits) > 1 || len(hits) == 1 && c.Hits[0].Tier != "GPU" {
			parts = append(parts, "hits "+strings.Join(hits, ", ")+" of prompt tokens")
		}
		if c.StoresWithoutLoads {
			parts = append(parts, "offload stores with no loads")
		}
	}
	return strings.Join(parts, " · ")
}

// seconds is one duration in seconds by figures' rule, "–" unknown.
func seconds(v *float64) string {
	if v == nil {
		return "–"
	}
	return figures.Seconds(*v)
}
