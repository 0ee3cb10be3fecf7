package decisions

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

const waitLimit = 10 * time.Second

// harness runs a collector until the test ends and gathers what it sends.
type harness struct {
	t   *testing.T
	c   *Collector
	out chan collectors.Observation
	got []collectors.Observation
	// reports are the DecisionSource observations, apart from got.
	reports []*collectors.DecisionSource
}

func start(t *testing.T, o Options) *harness {
	t.Helper()
	if o.Poll == 0 {
		o.Poll = 10 * time.Millisecond
	}
	if o.IdlePoll == 0 {
		o.IdlePoll = 40 * time.Millisecond
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, c: c, out: make(chan collectors.Observation, 1024)}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h.out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitLimit):
			t.Error("Run did not return after cancel")
		}
	})
	return h
}

// until receives observations until cond holds for what arrived so far.
func (h *harness) until(what string, cond func([]collectors.Observation) bool) {
	h.t.Helper()
	h.wait(what, func() bool { return cond(h.got) })
}

// untilReport receives until cond holds for the latest report per source.
func (h *harness) untilReport(what string, cond func(map[string]*collectors.DecisionSource) bool) {
	h.t.Helper()
	h.wait(what, func() bool {
		latest := map[string]*collectors.DecisionSource{}
		for _, r := range h.reports {
			latest[r.Source] = r
		}
		return cond(latest)
	})
}

func (h *harness) wait(what string, done func() bool) {
	h.t.Helper()
	deadline := time.After(waitLimit)
	for !done() {
		select {
		case o := <-h.out:
			if r, ok := o.(*collectors.DecisionSource); ok {
				h.reports = append(h.reports, r)
			} else {
				h.got = append(h.got, o)
			}
		case <-deadline:
			h.t.Fatalf("timed out waiting for %s; got %s", what, describe(h.got))
		}
	}
}

// untilCounts receives until the latest report of source path (what the
// pool is told about it) satisfies cond, and returns that report. Reports
// come at most every reportEvery: this waits up to about a second.
func (h *harness) untilCounts(what, path string, cond func(r *collectors.DecisionSource) bool) *collectors.DecisionSource {
	h.t.Helper()
	var last *collectors.DecisionSource
	h.untilReport(what, func(m map[string]*collectors.DecisionSource) bool {
		last = m[path]
		return last != nil && cond(last)
	})
	return last
}

// ids lists the request ids of decisions (D:id), outcomes (O:id) and bad
// lines (B) received, in order.
func ids(obs []collectors.Observation) []string {
	var s []string
	for _, o := range obs {
		switch x := o.(type) {
		case *collectors.Decision:
			s = append(s, "D:"+x.RequestID)
		case *collectors.Outcome:
			s = append(s, "O:"+x.RequestID)
		case *collectors.SourceError:
			if x.Kind == "bad_line" {
				s = append(s, "B")
			}
		}
	}
	return s
}

func hasN(n int) func([]collectors.Observation) bool {
	return func(o []collectors.Observation) bool { return len(ids(o)) >= n }
}

func describe(obs []collectors.Observation) string {
	var b strings.Builder
	for _, o := range obs {
		switch x := o.(type) {
		case *collectors.SourceError:
			fmt.Fprintf(&b, "[%s %s: %s] ", x.Kind, x.Source, x.Message)
		default:
			fmt.Fprintf(&b, "%v ", ids([]collectors.Observation{o}))
		}
	}
	return b.String()
}

func decisionLine(id string) string {
	return fmt.Sprintf(`{"kind":"decision","ts":"2026-09-05T10:00:00Z","request_id":%q,"chosen":"w1"}`+"\n", id)
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func TestTailAppendAndPartialLine(t *testing.T) {
	// Half a line at the end: the collector reads it with the whole lines
	// before it (one read of a small file), then must wait for its newline.
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	full := decisionLine("a3")
	appendTo(t, path, decisionLine("a1")+decisionLine("a2")+full[:30])
	h := start(t, Options{Sources: []Source{{Path: path, Format: FormatKvtop}}})
	h.until("the existing lines", hasN(2))
	appendTo(t, path, full[30:]+decisionLine("a4"))
	h.until("the completed line", hasN(4))
	if got := ids(h.got); !equal(got, []string{"D:a1", "D:a2", "D:a3", "D:a4"}) {
		t.Errorf("got %v", got)
	}
	d := h.got[2].(*collectors.Decision)
	if d.Source != path || d.Format != "kvtop" || d.At.IsZero() || time.Since(d.At) > time.Minute {
		t.Errorf("decision source/format/at: %+v", d)
	}
	if st := h.untilCounts("4 lines counted", path, func(r *collectors.DecisionSource) bool { return r.Lines >= 4 }); st.Lines != 4 || st.Decisions != 4 || st.Bad != 0 {
		t.Errorf("counts %+v", st)
	}
}

// TestTailPollBacksOff: a file that stops growing is checked less and
// less often, down to once per IdlePoll (an idle router's log costs one
// wake a second, not five), and the next line brings the short poll back.
func TestTailPollBacksOff(t *testing.T) {
	var mu sync.Mutex
	var waits []time.Duration
	testHookPause = func(d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	}
	t.Cleanup(func() { testHookPause = nil })
	since := func(i int) []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), waits[min(i, len(waits)):]...)
	}
	const poll, idle = 10 * time.Millisecond, 80 * time.Millisecond
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendTo(t, path, decisionLine("a1"))
	h := start(t, Options{Sources: []Source{{Path: path, Format: FormatKvtop}}, Poll: poll, IdlePoll: idle})
	h.until("the first line", hasN(1))
	n0 := len(since(0))
	time.Sleep(800 * time.Millisecond)
	quiet := since(n0)
	if len(quiet) == 0 || quiet[len(quiet)-1] != idle {
		t.Fatalf("pauses of a quiet file: %v, want them to grow to %v", quiet, idle)
	}
	if len(quiet) > 800/80+6 {
		t.Errorf("%d pauses in 800ms of a quiet file, want about %d (every %v, not every %v)", len(quiet), 800/80, idle, poll)
	}
	n1 := len(since(0))
	appendTo(t, path, decisionLine("a2"))
	h.until("the line after the quiet", hasN(2))
	h.wait("a pause after the line", func() bool { return slices.Contains(since(n1), poll) })
}

func TestTailRotationByRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	appendTo(t, path, decisionLine("r1"))
	h := start(t, Options{Sources: []Source{{Path: path}}})
	h.until("the first line", hasN(1))

	// The writer keeps its old file open across the rename (logrotate
	// without copytruncate): those lines must not be lost.
	old, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.WriteString(decisionLine("r2") + strings.TrimSuffix(decisionLine("r3"), "\n")); err != nil {
		t.Fatal(err)
	}
	// r2 arrives in the same read as r3's unterminated start.
	h.until("the old file's new line", hasN(2))
	appendTo(t, path, decisionLine("r4")+decisionLine("r5"))
	h.until("lines of both files", hasN(5))
	// r3 had no newline when its writer moved on: it is still a whole line.
	if got := ids(h.got); !equal(got, []string{"D:r1", "D:r2", "D:r3", "D:r4", "D:r5"}) {
		t.Errorf("got %v", got)
	}
	// A second rotation, by a new file replacing the path while nobody
	// writes the old one.
	if err := os.Rename(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, path, decisionLine("r6"))
	h.until("the third file", hasN(6))
	if got := ids(h.got); !equal(got, []string{"D:r1", "D:r2", "D:r3", "D:r4", "D:r5", "D:r6"}) {
		t.Errorf("got %v", got)
	}
	if st := h.untilCounts("6 lines counted", path, func(r *collectors.DecisionSource) bool { return r.Lines >= 6 }); st.Lines != 6 || st.Bad != 0 {
		t.Errorf("counts %+v", st)
	}
}

func TestTailCopyTruncate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendTo(t, path, decisionLine("c1")+decisionLine("c2")+decisionLine("c3"))
	h := start(t, Options{Sources: []Source{{Path: path}}})
	h.until("the first lines", hasN(3))
	// copytruncate: the file is cut to zero in place, then written again.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	// Whether the collector looks before or after the new line, the file
	// is shorter than what it read: a truncation, read again from byte 0.
	appendTo(t, path, decisionLine("c4"))
	h.until("the line after truncation", hasN(4))
	if got := ids(h.got); !equal(got, []string{"D:c1", "D:c2", "D:c3", "D:c4"}) {
		t.Errorf("got %v", got)
	}
}

func TestTailBadLinesCountedGoodLinesKeepComing(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(ourLogs, "kvtop-bad.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendTo(t, path, string(data))
	h := start(t, Options{Sources: []Source{{Path: path, Format: FormatKvtop}}})
	h.until("every line", hasN(13))
	want := []string{"D:r-10", "B", "B", "B", "B", "B", "B", "B", "B", "B", "O:r-10", "B", "B"}
	if got := ids(h.got); !equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	var bad []*collectors.SourceError
	for _, o := range h.got {
		if e, ok := o.(*collectors.SourceError); ok {
			bad = append(bad, e)
		}
	}
	if e := bad[0]; e.Source != "decisions "+path || e.Kind != "bad_line" ||
		e.Message != "line 2: not JSON (kvtop audit lines are JSON objects)" || e.At.IsZero() {
		t.Errorf("first bad line: %+v", e)
	}
	if e := bad[1]; e.Message != "line 3: decision without request_id" {
		t.Errorf("second bad line: %+v", e)
	}
	for _, e := range bad {
		if strings.Contains(e.Message, "twelve") || strings.Contains(e.Message, "yesterday") {
			t.Errorf("bad-line message quotes the line: %s", e.Message)
		}
	}
	// Appends after the bad lines still arrive.
	appendTo(t, path, "garbage\n"+decisionLine("r-20"))
	h.until("lines after the bad ones", hasN(15))
	if st := h.untilCounts("15 lines counted", path, func(r *collectors.DecisionSource) bool { return r.Lines >= 15 }); st.Bad != 12 || st.Decisions != 2 || st.Outcomes != 1 || st.Lines != 15 {
		t.Errorf("counts %+v", st)
	}
}

func TestTailLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	long := `{"kind":"decision","request_id":"x","pad":"` + strings.Repeat("p", 500) + `"}` + "\n"
	appendTo(t, path, long+decisionLine("l1"))
	h := start(t, Options{Sources: []Source{{Path: path}}, MaxLine: 200})
	h.until("the long line and the next", hasN(2))

	// A long line arriving in pieces is dropped without being held whole:
	// it is counted bad as soon as it passes the limit, before its end.
	appendTo(t, path, strings.Repeat("q", 150))
	appendTo(t, path, strings.Repeat("q", 150))
	h.until("the long line counted bad before its end", hasN(3))
	appendTo(t, path, strings.Repeat("q", 150)+"\n"+decisionLine("l2"))
	h.until("the line after it", hasN(4))
	if got := ids(h.got); !equal(got, []string{"B", "D:l1", "B", "D:l2"}) {
		t.Errorf("got %v", got)
	}
	if e := h.got[0].(*collectors.SourceError); e.Message != "line 1: longer than 200 bytes, skipped" {
		t.Errorf("message %q", e.Message)
	}
	if e := h.got[2].(*collectors.SourceError); e.Message != "line 3: longer than 200 bytes, skipped" {
		t.Errorf("message %q", e.Message)
	}
	if st := h.untilCounts("4 lines counted", path, func(r *collectors.DecisionSource) bool { return r.Lines >= 4 }); st.Lines != 4 || st.Bad != 2 {
		t.Errorf("counts %+v", st)
	}
}

func TestTailWaitsForFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "later.jsonl")
	h := start(t, Options{Sources: []Source{{Path: path}}, Backfill: 10})
	h.until("a waiting notice", func(o []collectors.Observation) bool { return len(o) > 0 })
	e, ok := h.got[0].(*collectors.SourceError)
	if !ok || e.Kind != "config" || e.Message != "cannot open (no such file or directory); waiting for it" {
		t.Fatalf("got %s", describe(h.got))
	}
	h.untilCounts("waiting", path, func(r *collectors.DecisionSource) bool { return r.Waiting })
	// A file that appears later is new: read whole, despite the small backfill.
	appendTo(t, path, decisionLine("w1")+decisionLine("w2"))
	h.until("its lines", hasN(2))
	if got := ids(h.got); !equal(got, []string{"D:w1", "D:w2"}) {
		t.Errorf("got %v", got)
	}
	h.untilCounts("not waiting", path, func(r *collectors.DecisionSource) bool { return !r.Waiting })
}

func TestTailBackfill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var all strings.Builder
	for i := range 100 {
		all.WriteString(decisionLine(fmt.Sprintf("b%03d", i)))
	}
	appendTo(t, path, all.String())
	lineLen := len(decisionLine("b000"))

	t.Run("last bytes", func(t *testing.T) {
		// 3.5 lines: the cut-off line is dropped silently, the last 3 arrive.
		h := start(t, Options{Sources: []Source{{Path: path}}, Backfill: int64(lineLen*3 + lineLen/2)})
		h.until("the backfill", hasN(3))
		appendTo(t, path, decisionLine("b100"))
		h.until("the append", hasN(4))
		if got := ids(h.got); !equal(got, []string{"D:b097", "D:b098", "D:b099", "D:b100"}) {
			t.Errorf("got %v", got)
		}
		if st := h.untilCounts("4 lines counted", path, func(r *collectors.DecisionSource) bool { return r.Lines >= 4 }); st.Bad != 0 || st.Lines != 4 {
			t.Errorf("counts %+v", st)
		}
	})
	t.Run("window on a line start", func(t *testing.T) {
		h := start(t, Options{Sources: []Source{{Path: path}}, Backfill: int64(lineLen * 2)})
		h.until("the backfill", hasN(2))
		if got := ids(h.got); !equal(got, []string{"D:b099", "D:b100"}) {
			t.Errorf("got %v", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		h := start(t, Options{Sources: []Source{{Path: path}}, Backfill: -1})
		// The first report follows the open (at the end) and its read.
		h.untilCounts("the open at the end", path, func(r *collectors.DecisionSource) bool { return !r.Waiting })
		appendTo(t, path, "not a log line\n"+decisionLine("b101"))
		h.until("only the append", hasN(2))
		if got := ids(h.got); !equal(got, []string{"B", "D:b101"}) {
			t.Errorf("got %v", got)
		}
		// Mid-file, line numbers are unknown: the message gives the offset.
		want := fmt.Sprintf("byte %d: unrecognized line (not a log line of a supported router)", lineLen*101)
		if e := h.got[0].(*collectors.SourceError); e.Message != want {
			t.Errorf("message %q, want %q", e.Message, want)
		}
	})
}

func TestStdinPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := start(t, Options{Sources: []Source{{Path: "-", Format: FormatAuto}}, Stdin: r})
	io.WriteString(w, decisionLine("s1")+`{"kind":"outcome","request_id":"s1","done":true}`+"\n")
	h.until("the first lines", hasN(2))
	// The last line has no newline: the end of the stream completes it.
	io.WriteString(w, "\x01\n"+strings.TrimSuffix(decisionLine("s2"), "\n"))
	w.Close()
	h.until("the last line", hasN(4))
	if got := ids(h.got); !equal(got, []string{"D:s1", "O:s1", "B", "D:s2"}) {
		t.Errorf("got %v", got)
	}
	if e := h.got[2].(*collectors.SourceError); e.Source != "decisions -" || e.Message != "line 3: not text (control characters)" {
		t.Errorf("bad line %+v", e)
	}
	if d := h.got[3].(*collectors.Decision); d.Source != "-" || d.Format != "kvtop" {
		t.Errorf("decision %+v", d)
	}
}

// Several sources at once, each with its format; auto tags each decision
// with the format it detected.
func TestCollectorSources(t *testing.T) {
	dir := t.TempDir()
	mixed := filepath.Join(dir, "mixed.log")
	data, err := os.ReadFile(filepath.Join(ourLogs, "mixed.log"))
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, mixed, string(data))
	ps := filepath.Join(dir, "router.log")
	data, err = os.ReadFile(filepath.Join(realLogs, "production-stack-pr428.log"))
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, ps, string(data))
	h := start(t, Options{Sources: []Source{{Path: mixed}, {Path: ps, Format: FormatProductionStack}}})
	// mixed.log: 13 decisions + 3 outcomes + 4 bad lines; router.log: 1 decision.
	h.until("both files", hasN(21))
	formats := map[string]int{}
	for _, o := range h.got {
		if d, ok := o.(*collectors.Decision); ok {
			formats[d.Source+" "+d.Format]++
		}
	}
	want := map[string]int{
		mixed + " kvtop": 4, mixed + " dynamo": 5, mixed + " production-stack": 1, mixed + " llm-d": 3,
		ps + " production-stack": 1,
	}
	if fmt.Sprint(formats) != fmt.Sprint(want) {
		t.Errorf("decisions by source and format: %v, want %v", formats, want)
	}
	st0 := h.untilCounts("mixed.log counted", mixed, func(r *collectors.DecisionSource) bool { return r.Lines >= 55 })
	st1 := h.untilCounts("router.log counted", ps, func(r *collectors.DecisionSource) bool { return r.Lines >= 3 })
	if st0.Skipped != 35 || st0.SkippedBy[SkipNoRequestID] != 5 || st0.Bad != 4 || st1.Lines != 3 {
		t.Errorf("counts %+v, %+v", st0, st1)
	}
	if h.c.Name() != "decisions" {
		t.Errorf("name %q", h.c.Name())
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "no sources"},
		{Options{Sources: []Source{{Path: ""}}}, "decisions[0]: path missing"},
		{Options{Sources: []Source{{Path: "x", Format: "jsonl"}}}, `decisions[0]: format "jsonl" is not one of`},
		{Options{Sources: []Source{{Path: "-"}, {Path: "-"}}}, "decisions[1]: stdin (-) can be read only once"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// What the file held at start is history: those decisions, outcomes and
// bad lines are marked Backfill (the pool keeps them out of the current
// window); lines appended afterwards are not.
func TestBackfillMarked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendTo(t, path, decisionLine("old1")+"garbage\n"+`{"kind":"outcome","request_id":"old1","done":true}`+"\n")
	h := start(t, Options{Sources: []Source{{Path: path, Format: FormatKvtop}}})
	h.until("the backfill", hasN(3))
	appendTo(t, path, decisionLine("new1")+"more garbage\n")
	h.until("the append", hasN(5))
	var got []string
	for _, o := range h.got {
		var id string
		var bf bool
		switch x := o.(type) {
		case *collectors.Decision:
			id, bf = "D:"+x.RequestID, x.Backfill
		case *collectors.Outcome:
			id, bf = "O:"+x.RequestID, x.Backfill
		case *collectors.SourceError:
			id, bf = "B", x.Backfill
		default:
			continue
		}
		got = append(got, fmt.Sprintf("%s=%v", id, bf))
	}
	want := []string{"D:old1=true", "B=true", "O:old1=true", "D:new1=false", "B=false"}
	if !equal(got, want) {
		t.Errorf("backfill marks %v, want %v", got, want)
	}
}

// The collector tells the pool what each log is doing (rate-limited), so
// an empty decisions screen can say why: lines skipped and the reasons,
// or a file that is not there yet.
func TestDecisionSourceReported(t *testing.T) {
	dir := t.TempDir()
	dyn := filepath.Join(dir, "dynamo.jsonl")
	// INFO "Selected worker" lines carry no request id: skipped, not bad.
	line := `{"time":"2025-06-01T14:02:11Z","level":"INFO","target":"dynamo_llm::kv_router","message":"Selected worker: 7, dp_rank: 0"}` + "\n"
	appendTo(t, dyn, strings.Repeat(line, 12))
	missing := filepath.Join(dir, "later.jsonl")
	h := start(t, Options{Sources: []Source{{Path: dyn}, {Path: missing, Format: FormatKvtop}}})
	var latest map[string]*collectors.DecisionSource
	h.untilReport("both sources reported", func(m map[string]*collectors.DecisionSource) bool {
		latest = m
		d, w := m[dyn], m[missing]
		return d != nil && d.Lines == 12 && w != nil && w.Waiting
	})
	d := latest[dyn]
	if d.Decisions != 0 || d.Skipped != 12 || d.SkippedBy[SkipNoRequestID] != 12 || d.Format != FormatAuto || d.Waiting || d.At.IsZero() {
		t.Errorf("dynamo source = %+v", d)
	}
	if w := latest[missing]; w.Format != FormatKvtop || w.Lines != 0 {
		t.Errorf("missing source = %+v", w)
	}
	// Reports are rate-limited: not one per line.
	n := 0
	for _, r := range h.reports {
		if r.Source == dyn {
			n++
		}
	}
	if n > 3 {
		t.Errorf("%d reports for 12 lines read at once", n)
	}
	appendTo(t, missing, decisionLine("x1"))
	h.untilReport("the file appears", func(m map[string]*collectors.DecisionSource) bool {
		w := m[missing]
		return !w.Waiting && w.Decisions == 1 && w.Detected == "kvtop"
	})
}
