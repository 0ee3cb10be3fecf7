package views

import (
	"fmt"
	"strings"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/themes"
)

// DecisionDetail opens one record: prediction, decision, execution and
// client side, each with its units and age, and the warnings in words.
var DecisionDetail = &Screen{
	Name: "decision", Under: "decisions",
	Body: detailBody,
	Back: backToOpener,
	Keys: func(*snapshot.Snapshot, *State) ScreenKeys { return ScreenKeys{Back: "back"} },
}

func detailBody(s *snapshot.Snapshot, st *State, w, n int, th *themes.Theme) []string {
	r, fresh := findDecision(s, st, st.Decision)
	if r == nil {
		return []string{"", line{{fmt.Sprintf(" request %s attempt %s is no longer in memory (the pool lists its newest %d records)",
			st.Decision.RequestID, st.Decision.AttemptID, len(s.Decisions.Recent)), themes.Warn}}.render(th, w)}
	}
	out := detailLines(s, st, r, w, th)
	if !fresh {
		// The pool let it go: what it last said, which no longer changes.
		note := line{{" as last listed: the pool no longer lists this record, so it no longer changes", themes.Dim}}
		out = append(out[:1], append([]string{note.render(th, w)}, out[1:]...)...)
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

const labelW = 12

func detailLines(s *snapshot.Snapshot, st *State, r *snapshot.DecisionRow, w int, th *themes.Theme) []string {
	var out []string
	head := line{{" request " + r.RequestID, themes.Title}, {" · attempt " + orDash(r.AttemptID), themes.Text}}
	for _, x := range []string{r.Endpoint, r.Model} {
		if x != "" {
			head = append(head, span{" · " + x, themes.Text})
		}
	}
	if r.Router != "" {
		rt := " · router " + r.Router
		if r.RouterVersion != "" {
			rt += " (" + r.RouterVersion + ")"
		}
		head = append(head, span{rt, themes.Text})
	}
	head = append(head, span{" · " + clock(r.At) + " router clock", themes.Dim})
	out = append(out, head.render(th, w), "")

	section := func(label string, body string, warns []string) {
		out = append(out, wrapped(label, body, themes.Text, w, th)...)
		for _, x := range warns {
			out = append(out, wrapped("", "⚠ "+x, themes.Warn, w, th)...)
		}
	}
	has := func(f string) bool {
		for _, x := range r.Flags {
			if x == f {
				return true
			}
		}
		return false
	}

	// PREDICTION
	if p := r.Prediction; p != nil && p.Source == "none" && p.Units == "" && p.Matched == nil {
		section("PREDICTION", "none: the router predicts no reuse (source none: a cache-blind policy such as round-robin)", nil)
	} else if p != nil {
		body := fmt.Sprintf("source %s · input %s · matched %s of %s %s · owner %s · age %s",
			orDash(p.Source), orDash(p.Input), num(p.Matched), num(p.Total), orDash(p.Units), orDash(p.Owner), agems(p.AgeMS))
		var warns []string
		// Only characters are a character match: blocks (Dynamo, llm-d,
		// kv-events indexes) are KV blocks, in their own unit.
		if has("char_match") || p.Units == "chars" {
			x := "character match on the routing string, not tokens: it says nothing about cached KV blocks"
			if p.Total != nil && *p.Total == 0 {
				x += " — and the string was empty (no session or prompt key)"
			}
			warns = append(warns, x)
		}
		if p.AgeMS != nil && *p.AgeMS >= 1000 {
			warns = append(warns, "the prediction was "+agems(p.AgeMS)+" old when the router used it")
		}
		section("PREDICTION", body, warns)
	} else {
		section("PREDICTION", "none recorded (this router logs no prediction for the request)", nil)
	}

	// DECISION
	if has("no_decision") || r.Chosen == "" {
		section("DECISION", "none: an outcome without a routing decision", []string{"the router's log has no decision line for this request (orphan outcome)"})
	} else {
		body := "chosen " + r.Chosen
		if r.DecodeWorker != "" {
			// Disaggregated: Chosen computed the prompt, another decoded.
			body = "prefill on " + r.Chosen + " · decode on " + r.DecodeWorker
		}
		if r.Reason != "" {
			body += " · reason " + r.Reason
		}
		if l := r.Load; l != nil {
			body += " · load " + orDash(l.Kind) + " " + num(l.Value)
			if l.Scope != "" {
				body += " (" + l.Scope + ")"
			}
		}
		var warns []string
		if has("owner_mismatch") || (r.Owner != "" && r.Owner != r.Chosen) {
			warns = append(warns, fmt.Sprintf("the prediction was for %s; the request went to %s", r.Owner, r.Chosen))
		}
		section("DECISION", body, warns)
	}

	// EXECUTION
	o := r.Outcome
	if o == nil && r.Pending {
		section("EXECUTION", "pending: the request is still running — its outcome has not arrived yet", nil)
	} else if o == nil || has("no_outcome") {
		section("EXECUTION", "no outcome recorded for this attempt", []string{"cached tokens, queue time and TTFT are unknown, not zero"})
	} else {
		body := "cached " + numipWords(r.CachedTokens) + " of " + numipWords(r.PromptTokens) + " prompt tokens · queue " + ms(r.QueueMS)
		if o.PrefillMS != nil {
			body += " · prefill " + ms(o.PrefillMS)
		}
		if o.KVTransferMS != nil {
			body += " · KV transfer ~" + ms(o.KVTransferMS) + " (router's estimate)"
		}
		if o.Worker != "" && o.Worker != r.Chosen && r.Chosen != "" {
			body += " · served by " + o.Worker
		}
		if o.Error != "" {
			body += " · error: " + oneLine(o.Error)
		} else {
			body += " · no error"
		}
		if o.RetryOf != "" {
			body += " · retry of attempt " + o.RetryOf
		} else {
			body += " · no retry"
		}
		var warns []string
		if has("prediction_error") {
			warns = append(warns, fmt.Sprintf("predicted %s %s of reuse on %s, but it had %s cached tokens", num(r.Matched), orDash(r.Units), r.Chosen, numipWords(r.CachedTokens)))
		}
		if has("error") && o.Error != "" {
			warns = append(warns, "the attempt failed: "+oneLine(o.Error))
		}
		section("EXECUTION", body, warns)
	}

	// RECOMPUTE
	if rc := r.Recompute; rc != nil {
		section("RECOMPUTE", recomputeBody(r, rc), recomputeWarns(r, rc))
	}

	// CLIENT
	if c := r.Client; c != nil {
		section("CLIENT", clientBody(r, c), clientWarns(r, c))
	} else if o != nil {
		status := dash // a log that records no status (Dynamo's traces)
		if o.HTTPStatus != 0 {
			status = fmt.Sprint(o.HTTPStatus)
		}
		body := "TTFT " + ms(r.TTFTMS) + " · HTTP " + status
		if o.ITLMS != nil {
			body += " · ITL " + ms(o.ITLMS)
		}
		if o.E2EMS != nil {
			body += " · end to end " + ms(o.E2EMS)
		}
		if o.OutputTokens != nil {
			body += " · " + numi(*o.OutputTokens) + " output tokens"
		}
		if o.FinishReason != "" {
			body += " · finish " + o.FinishReason
		}
		switch {
		case r.Done == nil:
			body += " · completion unknown"
		case *r.Done:
			body += " · stream complete"
		}
		var warns []string
		if has("truncated") || (r.Done != nil && !*r.Done && o.HTTPStatus == 200) {
			warns = append(warns, "HTTP 200 but the stream never finished: no finish_reason and no [DONE]")
		}
		if o.HTTPStatus >= 400 {
			warns = append(warns, fmt.Sprintf("HTTP %d: the client got an error", o.HTTPStatus))
		}
		section("CLIENT", body, warns)
	} else if r.Pending {
		section("CLIENT", "TTFT … · HTTP … · pending", nil)
	} else {
		section("CLIENT", "TTFT – · HTTP – · completion unknown", nil)
	}

	// Other attempts of the same request, so a retry chain reads in one place.
	var others []string
	for _, x := range decisionList(s, st) {
		if x.RequestID == r.RequestID && x.AttemptID != r.AttemptID {
			st := "no outcome"
			if x.Pending {
				st = "pending"
			}
			if x.Outcome != nil {
				st = fmt.Sprintf("HTTP %d", x.Outcome.HTTPStatus)
				if x.Outcome.Error != "" {
					st += " " + oneLine(x.Outcome.Error)
				}
			}
			others = append(others, fmt.Sprintf("#%s on %s: %s", x.AttemptID, orDash(x.Chosen), st))
		}
	}
	if len(others) > 0 {
		out = append(out, "")
		out = append(out, wrapped("ATTEMPTS", strings.Join(others, " · "), themes.Text, w, th)...)
	}
	if len(r.Flags) > 0 {
		words := make([]string, len(r.Flags))
		for i, f := range r.Flags {
			words[i] = f
		}
		out = append(out, "")
		out = append(out, wrapped("FLAGS", strings.Join(words, " · "), themes.Dim, w, th)...)
	}
	out = append(out, "", line{{" esc back to the list", themes.Dim}}.render(th, w))
	return out
}

// recomputeBody says what the record's chosen worker recomputed and who
// held the longer prefix, from where kvtop knew it.
func recomputeBody(r *snapshot.DecisionRow, rc *snapshot.RecomputeInfo) string {
	if rc.NotMeasurable != "" {
		return "not measurable: " + rc.NotMeasurable
	}
	src := "the router's prediction"
	if rc.Source == "index" {
		src = "kvtop's block index, from the record's prefix"
	}
	held := "no other up worker held a longer prefix"
	if rc.Worker != "" && rc.ElsewhereTokens != nil {
		held = fmt.Sprintf("%s held %s tokens of it", rc.Worker, grouped(int64(*rc.ElsewhereTokens)))
	}
	body := held + " when the router decided (" + src + ")"
	switch {
	case r.Pending:
		body += " · recomputed … (the request is still running)"
	case rc.Tokens == nil:
		body += " · recomputed – (no outcome to compare)"
	default:
		body += " · recomputed " + grouped(int64(*rc.Tokens)) + " tokens"
	}
	return body
}

func recomputeWarns(r *snapshot.DecisionRow, rc *snapshot.RecomputeInfo) []string {
	if rc.Tokens == nil || *rc.Tokens <= 0 || rc.Worker == "" {
		return nil
	}
	return []string{fmt.Sprintf("%s recomputed %s prompt tokens that %s had cached", orDash(r.Chosen), grouped(int64(*rc.Tokens)), rc.Worker)}
}

// wrapped renders "LABEL       body" with the body word-wrapped under
// itself, so warnings are read in full instead of cut.
func wrapped(label, body string, role themes.Role, w int, th *themes.Theme) []string {
	bw := w - labelW - 2
	lines := wrap(body, bw)
	out := make([]string, len(lines))
	for i, l := range lines {
		lab := ""
		if i == 0 {
			lab = label
		}
		out[i] = line{{" " + fit(lab, labelW, false) + " ", themes.Title}, {l, role}}.render(th, w)
	}
	return out
}

// indented renders a glyph prefix and word-wraps text under itself.
func indented(prefix string, prole themes.Role, text string, role themes.Role, w int, th *themes.Theme) []string {
	pw := width(prefix)
	lines := wrap(text, w-pw)
	out := make([]string, len(lines))
	for i, l := range lines {
		if i == 0 {
			out[i] = line{{prefix, prole}, {l, role}}.render(th, w)
		} else {
			out[i] = line{{strings.Repeat(" ", pw), themes.Text}, {l, role}}.render(th, w)
		}
	}
	return out
}

// wrapLine word-wraps a multi-span line, continuing under column indent.
// Each wrapped piece keeps the role of the span it came from.
func wrapLine(l line, indent, w int, th *themes.Theme) []string {
	ls := wrapSpans(l, indent, w)
	out := make([]string, len(ls))
	for i, x := range ls {
		out[i] = x.render(th, w)
	}
	return out
}

// wrapSpans is wrapLine's pieces, not yet painted (a panel counts them
// before it knows whether it draws them).
func wrapSpans(l line, indent, w int) []line {
	if l.width() <= w {
		return []line{l}
	}
	var out []line
	cur := line{}
	curW := 0
	for _, s := range l {
		for _, word := range strings.SplitAfter(s.text, " ") {
			ww := width(word)
			if curW+ww > w && curW > indent {
				if n := len(cur) - 1; n >= 0 { // no trailing blank where the line breaks
					cur[n].text = strings.TrimRight(cur[n].text, " ")
				}
				out = append(out, cur)
				cur = line{{strings.Repeat(" ", indent), themes.Text}}
				curW = indent
				word = strings.TrimLeft(word, " ")
				ww = width(word)
			}
			cur = append(cur, span{word, s.role})
			curW += ww
		}
	}
	return append(out, cur)
}

// wrap breaks text at spaces into lines of at most w cells.
func wrap(text string, w int) []string {
	if w <= 0 {
		return []string{text}
	}
	var out []string
	cur := ""
	for _, word := range strings.Fields(text) {
		switch {
		case cur == "":
			cur = word
		case width(cur)+1+width(word) <= w:
			cur += " " + word
		default:
			out = append(out, cur)
			cur = word
		}
		for r := []rune(cur); len(r) > w; r = []rune(cur) { // an over-long word: hard break
			out = append(out, string(r[:w]))
			cur = string(r[w:])
		}
	}
	if cur != "" || len(out) == 0 {
		out = append(out, cur)
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return dash
	}
	return s
}

func numipWords(n *int) string {
	if n == nil {
		return dash
	}
	return grouped(int64(*n))
}

func agems(v *float64) string {
	if v == nil {
		return dash
	}
	return secs(*v / 1000)
}

// clientBody is what the client received, as a tap saw it: time to the
// headers and to the first token, status, gaps, how it ended.
func clientBody(r *snapshot.DecisionRow, c *snapshot.ClientInfo) string {
	status := dash
	if c.HTTPStatus != 0 {
		status = fmt.Sprint(c.HTTPStatus)
	}
	body := "TTFT " + ms(c.TTFTMS) + " (headers " + ms(c.TTFBMS) + ") · HTTP " + status
	if c.E2EMS != nil {
		body += " · end to end " + ms(c.E2EMS)
	}
	if c.MaxGapMS != nil {
		body += " · largest gap " + ms(c.MaxGapMS)
	}
	if c.Breaks != nil {
		body += fmt.Sprintf(" · %d breaks", *c.Breaks)
	}
	if c.OutputTokens != nil {
		body += " · " + numi(*c.OutputTokens) + " output tokens"
	}
	if c.FinishReason != "" {
		body += " · finish " + c.FinishReason
	}
	body += " · " + clientEndWords(c.End)
	if c.Worker != "" && c.Worker != r.Chosen && r.Chosen != "" {
		body += " · served by " + c.Worker
	}
	if c.Source != "" {
		body += " · seen by " + c.Source
	}
	return body
}

func clientEndWords(end string) string {
	switch end {
	case "done":
		return "stream complete"
	case "upstream_closed":
		return "ended early"
	case "reset":
		return "connection reset"
	case "client_gone":
		return "the client left"
	case "timeout":
		return "timed out"
	case "http_error":
		return "HTTP error"
	case "no_response":
		return "no response"
	}
	return "completion unknown"
}

func clientWarns(r *snapshot.DecisionRow, c *snapshot.ClientInfo) []string {
	var warns []string
	switch c.Class {
	case snapshot.ClientTruncated:
		w := fmt.Sprintf("HTTP %d but the stream never finished: no finish_reason and [DONE] (%s)", c.HTTPStatus, clientEndWords(c.End))
		if o := r.Outcome; o != nil && o.HTTPStatus >= 200 && o.HTTPStatus < 300 {
			w += fmt.Sprintf("; the router counted it a success (HTTP %d)", o.HTTPStatus)
		}
		warns = append(warns, w)
	case snapshot.ClientFailed:
		if c.HTTPStatus >= 400 {
			warns = append(warns, fmt.Sprintf("HTTP %d: the client got an error", c.HTTPStatus))
		} else {
			warns = append(warns, "the client got no response from the router (tap answered 502)")
		}
	}
	if c.Breaks != nil && *c.Breaks > 0 {
		warns = append(warns, fmt.Sprintf("the stream stalled %d times after its first token (largest gap %s)", *c.Breaks, ms(c.MaxGapMS)))
	}
	if c.ClientSlow {
		warns = append(warns, "the client read slower than the stream came: its times are the router's, the client got the bytes later")
	}
	return warns
}
