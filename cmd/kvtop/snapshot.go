package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/figures"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
)

func init() { commands = append(commands, newSnapshotCmd) }

// Exit codes of kvtop snapshot (also in its --help and README.md).
const (
	exitUnreachable = 1 // no worker reached, events_bind not bound, or no snapshot at all
	exitUsage       = 2 // bad flags or config
	exitDown        = 3 // --fail-on down matched
	exitHistoryLost = 4 // --fail-on history_lost matched
	exitOverheating = 5 // --fail-on overheating matched
)

// failWords are the rules --fail-on takes.
var failWords = []string{"down", "history_lost", "overheating"}

// defaultRecent is how many recent decisions a snapshot keeps by default:
// enough to see what the router is doing, without the decisions dwarfing
// the rest (the pool holds hundreds; a 10 s demo snapshot was 650 KB).
const defaultRecent = 50

func newSnapshotCmd() *cobra.Command {
	var (
		dur    time.Duration
		format string
		failOn []string
		recent int
		jfile  string
		at     string
	)
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "collect for a while, then print one snapshot (json for scripts, text for people)",
		Long: `snapshot runs the same collectors and pool as the console, headless, for --for,
then prints the latest snapshot. The JSON keys are a contract for scripts
(see README.md); unknown values are null, never 0. A --for shorter than the
first scrape round is stretched until every worker's first scrape is in the
snapshot (at most scrape_timeout + 2 refreshes from the start).

The snapshot is printed whenever one was taken, even when kvtop then exits
non-zero; the reason is one line per problem on stderr. Exit codes:
  0  the pool was seen (and no --fail-on rule matched)
  1  no worker could be reached during --for (no scrape succeeded, no event
     stream connected or delivered), events_bind is not bound (its last
     attempt failed), or no snapshot was taken at all
  2  bad flags or config
  3  --fail-on down: a configured worker is down (scrapes fail, no events)
  4  --fail-on history_lost: an event stream lost history (blocks missing
     from the index until they are evicted or re-stored)
  5  --fail-on overheating: a worker is overheating on a hot prefix
When several apply, the lowest code is the exit status.

With --journal FILE (written by kvtop record or serve --record) it collects
nothing: it rebuilds the pool from the journal and prints the snapshot as of
--at T (an RFC 3339 time, +90s from the journal's start, -30s from its end;
default: the end), the one the live console showed then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "json" && format != "text" {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--format %q: want json or text", format)}
			}
			if jfile != "" {
				return snapshotFromJournal(cmd, jfile, at, format, recent, len(failOn) > 0)
			}
			if at != "" {
				return &exitError{code: exitUsage, msg: "--at goes with --journal"}
			}
			if dur <= 0 {
				return &exitError{code: exitUsage, msg: "--for must be positive"}
			}
			rules, err := parseFailOn(failOn)
			if err != nil {
				return err
			}
			c, _, err := loadConfig(cmd)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			start := time.Now()
			e, err := startEngine(ctx, c)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			select {
			case <-time.After(dur):
			case <-ctx.Done():
			case err := <-e.Err:
				if err != nil {
					return err
				}
			}
			s, err := firstScrapeRound(ctx, e, start.Add(firstRoundWait(c)))
			if err != nil {
				return err
			}
			if s == nil {
				return &exitError{code: exitUnreachable, msg: fmt.Sprintf("no snapshot after %s (refresh is %s)", dur, c.Refresh)}
			}
			if err := writeSnapshot(cmd.OutOrStdout(), trimRecent(s, recent), format); err != nil {
				return err
			}
			if ex := judge(s, c, dur, rules); ex != nil {
				return ex
			}
			return nil
		},
	}
	addConfigFlag(cmd)
	addKubeFlags(cmd)
	cmd.Flags().DurationVar(&dur, "for", 5*time.Second, "how long to collect before printing (at least until every worker's first scrape is in)")
	cmd.Flags().StringVar(&format, "format", "json", "json or text")
	cmd.Flags().StringSliceVar(&failOn, "fail-on", nil, "exit non-zero when any of these hold (comma separated): down (exit 3), history_lost (4), overheating (5)")
	cmd.Flags().IntVar(&recent, "decisions", defaultRecent, "keep the N most recent decisions in decisions.recent (0 = none, -1 = all the pool holds)")
	cmd.Flags().StringVar(&jfile, "journal", "", "print a snapshot rebuilt from this journal `FILE` (kvtop record) instead of collecting")
	cmd.Flags().StringVar(&at, "at", "", "with --journal: the snapshot as of `T` (RFC 3339, +90s from the start, -30s from the end; default the end)")
	return cmd
}

// snapshotFromJournal prints the snapshot as of at, rebuilt from the
// journal, through the same writeSnapshot as a live one.
func snapshotFromJournal(cmd *cobra.Command, file, at, format string, recent int, failOn bool) error {
	for _, name := range []string{"for", "config"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return &exitError{code: exitUsage, msg: "--" + name + " does not apply with --journal: the journal holds the pool and its config"}
		}
	}
	if failOn {
		return &exitError{code: exitUsage, msg: "--fail-on does not apply with --journal (read the JSON: workers[].state, streams[].state, workers[].overheating)"}
	}
	p, err := openJournal(cmd.ErrOrStderr(), []string{file})
	if err != nil {
		return err
	}
	defer p.Close()
	t := p.End()
	if at != "" {
		if t, err = journalTime(p, at); err != nil {
			return err
		}
	}
	s, err := p.SnapshotAt(t)
	if err != nil {
		return &exitError{code: exitUsage, msg: "--at: " + err.Error()}
	}
	if s.At.Before(t) && p.Pos() == p.Ticks() && t.After(p.End()) {
		printLine(cmd.ErrOrStderr(), fmt.Sprintf("warning: --at %s is after the journal's end: the last snapshot (%s)", at, s.At.Format(time.RFC3339)))
	}
	return writeSnapshot(cmd.OutOrStdout(), trimRecent(s, recent), format)
}

// parseFailOn checks the --fail-on words.
func parseFailOn(words []string) (map[string]bool, error) {
	rules := map[string]bool{}
	for _, w := range words {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if !contains(failWords, w) {
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("--fail-on %q: want a comma-separated list of %s", w, strings.Join(failWords, ", "))}
		}
		rules[w] = true
	}
	return rules, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// trimRecent keeps the n most recent decisions (newest are last); n < 0
// keeps all. The snapshot is shared and immutable: this is a copy.
func trimRecent(s *snapshot.Snapshot, n int) *snapshot.Snapshot {
	if n < 0 || len(s.Decisions.Recent) <= n {
		return s
	}
	t := *s
	t.Decisions.Recent = s.Decisions.Recent[len(s.Decisions.Recent)-n:]
	return &t
}

// firstRoundWait is how long after start the first scrape of every worker
// is in a published snapshot, at the latest: the scrapes start at once and
// end within scrape_timeout; the pool publishes at its next refresh.
func firstRoundWait(c config.Config) time.Duration {
	return c.ScrapeTimeout + 2*c.Refresh
}

// firstScrapeRound returns the latest snapshot once every worker's first
// scrape is in it, or at deadline. A --for shorter than a scrape round
// (--for 1s with a 1 s refresh) took the snapshot published at start, before
// any scrape, and said no worker could be reached while all were up: an
// operator asking for a snapshot wants one with the pool in it.
func firstScrapeRound(ctx context.Context, e *engine, deadline time.Time) (*snapshot.Snapshot, error) {
	poll := time.NewTicker(25 * time.Millisecond)
	defer poll.Stop()
	for {
		s := e.Pool.Latest()
		if s != nil && !awaitingFirstScrape(s) || !time.Now().Before(deadline) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return e.Pool.Latest(), nil
		case err := <-e.Err:
			if err != nil {
				return nil, err
			}
			return e.Pool.Latest(), nil
		case <-poll.C:
		}
	}
}

// awaitingFirstScrape says whether a worker with metrics to scrape has not
// had its first scrape attempt (good or failed) yet.
func awaitingFirstScrape(s *snapshot.Snapshot) bool {
	for _, w := range s.Workers {
		if w.LastScrape == nil && w.State == snapshot.WorkerUnknown && strings.HasPrefix(w.Reason, snapshot.ReasonNotScraped) {
			return true
		}
	}
	return false
}

// bindStillFailing is how recent the last bind error must be for
// events_bind to count as not bound: the collector retries every second
// while the address is taken, so a bind that succeeded stops reporting.
const bindStillFailing = 3 * time.Second

// judge reads the snapshot as a script would and says what is wrong: one
// line per problem, the exit code of the most basic one.
func judge(s *snapshot.Snapshot, c config.Config, dur time.Duration, rules map[string]bool) *exitError {
	var lines []string
	code := 0
	fail := func(c int, line string) {
		if code == 0 || c < code {
			code = c
		}
		lines = append(lines, line)
	}
	if c.EventsBind != "" {
		for _, e := range s.Errors {
			if e.Kind == "bind" && e.Source == "events bind "+c.EventsBind && s.At.Sub(e.At) <= bindStillFailing {
				fail(exitUnreachable, fmt.Sprintf("events_bind %s is not bound: %s", c.EventsBind, strings.TrimSuffix(e.Last, " (retrying)")))
				break
			}
		}
	}
	if msg := unreachable(s, c, dur); msg != "" {
		fail(exitUnreachable, msg)
	}
	configured := map[string]bool{}
	for _, w := range c.Workers {
		configured[w.Name] = true
	}
	var down, lost, hot []string
	for _, w := range s.Workers {
		if (configured[w.Name] || w.Kube != nil) && w.State == snapshot.WorkerDown {
			down = append(down, fmt.Sprintf("%s (%s)", w.Name, w.Reason))
		}
		for _, st := range w.Streams {
			if st.State == snapshot.StreamHistoryLost {
				lost = append(lost, fmt.Sprintf("%s rank %d (%d batches lost)", w.Name, st.Rank, st.Lost))
			}
		}
		if w.Overheating {
			what := w.Name
			if w.OverheatPrefix != nil && w.OverheatShare != nil {
				what += fmt.Sprintf(" (%s of prefix %s)", figures.Pct(*w.OverheatShare), *w.OverheatPrefix)
			}
			hot = append(hot, what)
		}
	}
	for _, r := range []struct {
		word    string
		code    int
		matched []string
	}{
		{"down", exitDown, down},
		{"history_lost", exitHistoryLost, lost},
		{"overheating", exitOverheating, hot},
	} {
		if rules[r.word] && len(r.matched) > 0 {
			fail(r.code, fmt.Sprintf("--fail-on %s: %s", r.word, strings.Join(r.matched, ", ")))
		}
	}
	if code == 0 {
		return nil
	}
	return &exitError{code: code, msg: strings.Join(lines, "\n")}
}

// unreachable says why no worker was reached at all during the run ("" if
// one was): none is up or was ever scraped successfully (its engine would
// be known), and no event stream left connecting or delivered a batch.
func unreachable(s *snapshot.Snapshot, c config.Config, dur time.Duration) string {
	var why []string
	for _, w := range s.Workers {
		if w.Up || w.Engine != "unknown" {
			return ""
		}
		for _, st := range w.Streams {
			if st.Batches > 0 || st.State != snapshot.StreamConnecting {
				return ""
			}
		}
		r := w.Reason
		if r == "" {
			r = string(w.State)
		}
		if len(w.Streams) > 0 {
			r += "; events never connected"
		}
		why = append(why, w.Name+": "+r)
	}
	if len(why) == 0 && c.Kubernetes.On() {
		k := c.Kubernetes
		what := "selector " + k.Selector
		if k.InferencePool != "" {
			what = "InferencePool " + k.InferencePool
		}
		r := "kubernetes found no worker pod (" + what + ")"
		for _, e := range s.Errors {
			if strings.HasPrefix(e.Source, "kubernetes") || strings.HasPrefix(e.Source, "inferencepool") {
				r += ": " + e.Last
				break
			}
		}
		why = append(why, r)
	}
	if len(why) == 0 {
		if c.EventsBind == "" {
			return "" // nothing configured to reach (config validation prevents this)
		}
		why = append(why, "no publisher sent to events_bind "+c.EventsBind)
	}
	const show = 3
	if len(why) > show {
		why = append(why[:show], fmt.Sprintf("and %d more", len(why)-show))
	}
	return fmt.Sprintf("no worker could be reached during %s: %s", dur, strings.Join(why, "; "))
}

func writeSnapshot(w io.Writer, s *snapshot.Snapshot, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	// Names, errors and alerts come from the network: a raw ESC in one must
	// not drive the operator's terminal, so every line is cleaned.
	var buf bytes.Buffer
	if err := writeText(&buf, s); err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = views.Clean(l)
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}
