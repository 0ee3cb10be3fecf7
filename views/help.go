package views

import (
	"fmt"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// Help is the help screen, opened with ? from any screen: the keys of the
// screen it was opened from, the colours and glyphs, the states and the
// thresholds in force. ↑/↓ scroll it; esc or ? go back.
var Help = &Screen{
	Name: "help", Body: helpBody,
	Rows: func(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) (int, int) {
		if n <= 0 {
			return 0, 0
		}
		return len(helpLines(s, st, w, th)), n
	},
	List: func(st *State) *List { return &st.Help },
	Move: func(_ *snapshot.Snapshot, st *State, d, total, visible int) {
		st.Help.Offset = max(0, min(st.Help.Offset+d, total-visible))
	},
	Back: func(st *State) { st.Screen = st.helpFrom() },
	Keys: func(*snapshot.Snapshot, *State) ScreenKeys {
		return ScreenKeys{Up: "scroll up", Down: "scroll down", Pages: true, Ends: true, Back: "back", Help: "close help"}
	},
}

// helpBody lists what the screen help was opened from says about itself
// and every key that works there (the same bindings the console matches),
// the colour and glyph legend, the states and the thresholds in force. It
// scrolls with st.Help.Offset when it does not fit.
func helpBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	lines := helpLines(s, st, w, th)
	off := max(0, min(st.Help.Offset, len(lines)-n))
	end := min(len(lines), off+n)
	out := append([]string(nil), lines[off:end]...)
	if end < len(lines) && len(out) > 0 {
		out[len(out)-1] = th.Paint(themes.Dim, truncate(fmt.Sprintf(" ↓ %d more lines (j/k or ↑/↓ scroll)", len(lines)-end+1), w))
	}
	return out
}

// helpLines lays the help out in two columns when the terminal is wide.
func helpLines(s *snapshot.Snapshot, st *State, w int, th *themes.Theme) []string {
	col := func(ls []line, w int) []string {
		var out []string
		for _, l := range ls {
			out = append(out, wrapLine(l, hangIndent(l), w, th)...)
		}
		return out
	}
	// Errors come first: the status line sends the operator here for them.
	errs := errorLines(s)
	if w >= 120 {
		lw := w / 2
		keys, legend := col(append(keyLines(s, st), figureLines()...), lw-1), col(append(errs, legendLines(s, st)...), w-lw)
		var out []string
		for i := 0; i < max(len(keys), len(legend)); i++ {
			var l, r string
			if i < len(keys) {
				l = keys[i]
			}
			if i < len(legend) {
				r = legend[i]
			}
			pad := lw - visWidth(l)
			out = append(out, strings.TrimRight(l+strings.Repeat(" ", max(pad, 1))+r, " "))
		}
		return out
	}
	return col(append(append(append(errs, keyLines(s, st)...), figureLines()...), legendLines(s, st)...), w)
}

// figureLines say what each latency and throughput figure is and where it
// comes from, one line each.
func figureLines() []line {
	fig := func(name, text string) line {
		return line{{"   " + fit(name, 11, false) + " ", themes.Key}, {text, themes.Text}}
	}
	return []line{
		{{" FIGURES", themes.Title}, {"  over the window, from each engine's /metrics", themes.Dim}},
		fig("TTFT p95", "time to first token: bucket increases of *:time_to_first_token_seconds, as histogram_quantile over rate does; ≥ = above the top bucket; its chart draws p50 and p99 dim"),
		fig("ITL", "inter-token latency p95: vllm:inter_token_latency_seconds (time_per_output_token before 0.11), sglang:inter_token_latency_seconds"),
		fig("queue", "time waiting to be scheduled, p95: vllm:request_queue_time_seconds, sglang:queue_time_seconds"),
		fig("e2e", "request latency end to end, p95: *:e2e_request_latency_seconds"),
		fig("TOK/s", "prompt + generation tokens a second: Δ*:prompt_tokens_total + Δ*:generation_tokens_total"),
		fig("req/s", "finished requests a second: vllm:request_success_total, sglang:num_requests_total"),
		fig("recomputed", "prompt tokens a worker computed while another up worker held a longer prefix, from decisions joined to outcomes (the router's match in blocks or tokens, else the record's prefix in kvtop's index); % of their prompt tokens; drawn dim under TOK/s"),
		fig("EVICT/s", "GPU blocks removed a second (BlockRemoved events, live batches); its chart draws the thrash dim: blocks stored again after their own eviction within the window"),
		fig("residency", "how long an evicted block had been resident, store to removal on kvtop's clock (p50, mean), from a hash-chosen sample of the blocks"),
		fig("CACHE tok", "resident tokens of the index (GPU blocks × block size) under the capacity, num_gpu_blocks × block_size (vllm:cache_config_info), drawn dim"),
		fig("tiers", "blocks per storage medium as the events name it (GPU, CPU, STORAGE, CPU_PINNED, DISK, …; never folded into GPU): only the GPU's count in BLOCKS, CACHE tok and KV; \"no removals published\": a tier that only stores (LMCache), not residency"),
		fig("groups", "a hybrid model's KV cache groups: full-attention (and MLA) groups count in prefix figures; sliding-window and other groups are shown, never mixed in"),
		fig("hits", "share of prompt tokens served per tier over the window: GPU (the engine's own cache), its offload tiers (vllm:prompt_tokens_by_source, tiering chunk hits; SGLang cached_tokens by cache_source; LMCache); offload bytes read back vs stored, \"stores with no loads\" when nothing was read back"),
		fig("reannounced", "stores of blocks already resident (vLLM's kv_cache_report_mode=full): touches, not stores or thrash; inconsistent: full-attention stores whose tokens ≠ block size × hashes, not indexed"),
		fig("rest", "TTFT and queue time of the joined requests under no hot prefix, beside each hot prefix's: exact p50/p95/p99 (nearest rank), – below 20 requests"),
		fig("ladder", "why the hit rate is what it is, over the window in prompt tokens: every block a GPU computed, classified when stored (the engines' prompt and hit counters give the total)"),
		fig("perfect routing", "the hit rate had every block another up worker held been routed there (routing loss)"),
		fig("consistent hashing", "…and had the workers hashed alike content alike (configuration: the same root content under another hash on another worker)"),
		fig("enough capacity", "…and had no cache evicted what was stored again (capacity: the same worker; pool capacity: every worker): the workload's ceiling, 1 − compulsory (first sight) / prompt tokens; unexplained: avoidable beyond what the engines computed (sampling, lost history); stale index: tokens the router predicted on the chosen worker that it did not have"),
		fig("ROLE", "prefill, decode or aggr(egated), from the config (role:), the pod's labels (llm-d.ai/role, Dynamo's component type), Dynamo's router (worker_type), else aggregated (dim); each role's queue and KV in the header, its median beside the table: the overheating and skew rules compare workers of one role; a decode worker's prompt tokens that arrived by KV transfer are out of its hit rate"),
		fig("MODEL", "the model a worker's pages name (model_name, its organisation left out); in a pool of several, each model's hit rate, queue and KV in the header, and m groups the table by model"),
		fig("HASHES", "the same root-block content stored under different block hashes on two workers (or across a restart): their hash seed or algorithm differs"),
	}
}

// hangIndent is where a wrapped help line continues: under the start of
// its last span's text (the description after a key, glyph or label).
func hangIndent(l line) int {
	if len(l) < 2 {
		return 3
	}
	n := 0
	for _, sp := range l[:len(l)-1] {
		n += width(sp.text)
	}
	last := l[len(l)-1].text
	return n + width(last) - width(strings.TrimLeft(last, " "))
}

func keyLines(s *snapshot.Snapshot, st *State) []line {
	from := st.helpFrom()
	out := []line{{{" KEYS", themes.Title}, {"  on the " + from.Name + " screen · ? or esc closes help", themes.Dim}}}
	for _, h := range from.Help {
		out = append(out, line{{"   ", themes.Text}, {h, themes.Text}})
	}
	for _, g := range helpGroups(s, st) {
		out = append(out, line{{" " + g.title, themes.Title}})
		for _, k := range g.keys {
			out = append(out, line{{"   " + fit(k.Key, 14, false), themes.Key}, {k.Desc, themes.Text}})
		}
	}
	return out
}

func legendLines(s *snapshot.Snapshot, st *State) []line {
	theme := st.Theme
	if theme == "" {
		theme = "default"
	}
	out := []line{{{" COLOURS & GLYPHS", themes.Title}, {"  theme " + theme + " (t cycles; NO_COLOR turns colour off)", themes.Dim}}}
	for _, r := range []themes.Role{themes.OK, themes.Warn, themes.Crit, themes.Dim, themes.Selected, themes.Spark} {
		out = append(out, line{{"   ", themes.Text}, {fit(r.String(), 9, false), r}, {" " + r.Description(), themes.Text}})
	}
	for _, g := range [][2]string{
		{"▶", "cursor: the selected row"},
		{"⚠", "overheating worker, or an alert"},
		{"✖", "down, lost history, failed request"},
		{"!", "needs a look: stale, saturated, no metrics, replaying, flagged"},
		{"↑ ↓", "changed since the last refresh (wait ±3, hot ±5 pts)"},
		{dash, "unknown: no data yet or source down — never 0"},
		{"▁▃▅▇", "sparkline over the window; blank = no data then; scale 4, 6, 8, 12…"},
		{"·░▒▓█", "heat: a worker's share of a prefix's traffic"},
	} {
		out = append(out, line{{"   " + fit(g[0], 9, false), themes.Key}, {" " + g[1], themes.Text}})
	}
	// One line per meaning; wrapLine breaks them to the column width.
	out = append(out, line{{" STATES", themes.Title}},
		line{{"   worker    ", themes.Key}, {"ok · OVERHEATING: takes most of a hot prefix, alone or with a few others, with a long queue · SATURATED: KV use at the threshold", themes.Text}},
		line{{"             ", themes.Key}, {"stale: index incomplete (history lost, a gap, a stream disconnected)", themes.Text}},
		line{{"             ", themes.Key}, {"down: metrics fail and no events arrive", themes.Text}},
		line{{"             ", themes.Key}, {"no metrics: metrics fail but its events still arrive — it is serving; its figures are unknown", themes.Text}},
		line{{"             ", themes.Key}, {"unknown: not scraped yet, or no metrics configured", themes.Text}},
		line{{"   stream    ", themes.Key}, {"connecting · live · joined late · disconnected", themes.Text}},
		line{{"             ", themes.Key}, {"REPLAYING: a gap being filled from the replay", themes.Text}},
		line{{"             ", themes.Key}, {"HISTORY LOST: a gap the replay could not fill", themes.Text}},
		line{{"   decision  ", themes.Key}, {"… pending: the request is still running, its outcome not in yet", themes.Text}},
		line{{"   skew      ", themes.Key}, {"max/mean of queue depth; \"low load\" while fewer requests wait than workers are up", themes.Text}},
		line{{"   hit tok   ", themes.Key}, {"Δhits/Δqueries in tokens over the window", themes.Text}},
		line{{"   hit req   ", themes.Key}, {"share of requests with cached tokens > 0", themes.Text}},
		line{{"   HOT       ", themes.Key}, {"share of the #1 prefix's traffic: the same prefix in every row (an overheating one is named in NOTE)", themes.Text}},
		line{{"   " + fit(reqTitle(s), 9, false) + " ", themes.Key}, {"≈ a prefix's requests over the window, estimated: the counts decay with age", themes.Text}},
		line{{"   prod. ts  ", themes.Key}, {"producer ts: the publisher's clock, shown as it is, never compared with kvtop's", themes.Text}},
	)
	out = append(out, line{{" THRESHOLDS IN FORCE", themes.Title}})
	if s == nil {
		return append(out, line{{"   (shown once the first snapshot arrives)", themes.Dim}})
	}
	t := s.Thresholds
	out = append(out,
		line{{"   hot prefix    ", themes.Key}, {"≥ " + pctf(t.HotPrefixShare) + " of pool traffic", themes.Text}},
		// One sentence: wrapLine breaks it to the column.
		line{{"   overheating   ", themes.Key}, {fmt.Sprintf("the fewest workers that together take ≥ %s of a hot prefix's traffic, if at most %s, each with a queue ≥ %.1f× pool median and ≥ %s",
			pctf(t.OverheatShare), ownersLimit(s), t.OverheatQueueRatio, numf(t.OverheatMinQueue)), themes.Text}},
		line{{"   saturated     ", themes.Key}, {"KV usage ≥ " + pctf(t.KVUsageHigh) + " (any engine's)", themes.Text}},
		line{{"   thrash        ", themes.Key}, {"≥ " + pctf(thrashShare(s)) + " of a worker's stores re-store blocks it evicted within the window (judged from " +
			numf(float64(t.ThrashMinStored)) + " stores on), while saturated", themes.Text}},
		// The hysteresis of the three above (pool/verdict.go), in one sentence.
		line{{"   verdicts      ", themes.Key}, {fmt.Sprintf("hold: each begins at its threshold and ends once its figures stay below %s× it (KV %s, thrash %s, queue %.1f× median, skew %.1f×/%.1f× of 2×/3×, ladder loss %s) for %s; at once when unknown",
			numf(t.LeaveRatio), pctf(t.KVUsageHigh*t.LeaveRatio), pctf(thrashShare(s)*t.LeaveRatio), t.OverheatQueueRatio*t.LeaveRatio,
			snapshot.SkewHigh*t.LeaveRatio, snapshot.SkewSevere*t.LeaveRatio, pctf(t.LadderLossShare*t.LeaveRatio), secs(t.LeaveAfterS)), themes.Text}},
		line{{"   recovered     ", themes.Key}, {fmt.Sprintf("pool token hit back within %.0f pts", t.RecoveryTolerance*100), themes.Text}},
		line{{"                 ", themes.Key}, {"of its pre-restart baseline for " + secs(t.RecoveryHoldS), themes.Text}},
		line{{"   window        ", themes.Key}, {fmt.Sprintf("%.0fs for rates and hit rates", s.WindowS), themes.Text}},
		line{{"   refresh       ", themes.Key}, {dur(st.Refresh) + " (+/- change it; floor 250ms)", themes.Text}},
	)
	return out
}

// maxHelpErrors bounds the error list on the help screen; the snapshot
// JSON has them all.
const maxHelpErrors = 8

// errorLines lists the errors by source, newest first, with their age:
// the status line shows only recent ones and points here for the rest.
func errorLines(s *snapshot.Snapshot) []line {
	if s == nil {
		return nil
	}
	if len(s.Errors) == 0 {
		return []line{{{" ERRORS", themes.Title}, {"  none since kvtop started", themes.Dim}}}
	}
	out := []line{{{" ERRORS", themes.Title}, {"  by source, newest first; kvtop clock", themes.Dim}}}
	win := errorWindow(s)
	for i, e := range s.Errors {
		if i == maxHelpErrors {
			out = append(out, line{{fmt.Sprintf("   … %d more in kvtop snapshot --format json (errors[])", len(s.Errors)-i), themes.Dim}})
			break
		}
		role := themes.Dim // earlier than the error window: history
		if !e.At.IsZero() && s.At.Sub(e.At) <= win {
			role = themes.Crit
		}
		out = append(out, line{{"   " + fit(clock(e.At), 9, false) + " ", role},
			{fmt.Sprintf("%s %s ×%d: %s", e.Source, e.Kind, e.Count, oneLine(e.Last)), themes.Text}})
	}
	return out
}

// ownersLimit says how many workers may share a hot prefix and still
// overheat, in this pool: a third of the up workers, at least one.
func ownersLimit(s *snapshot.Snapshot) string {
	n := snapshot.MaxOwners(s.Pool.Up)
	return fmt.Sprintf("%d (a third of the %d up, at least 1)", n, s.Pool.Up)
}
