package decisions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Defaults for Options' zero values.
const (
	DefaultPoll     = 200 * time.Millisecond
	DefaultIdlePoll = time.Second // as `tail -F` without inotify
	DefaultBackfill = 1 << 20     // an audit log's recent history is worth showing
	DefaultMaxLine  = 1 << 20
)

// Source is one decision log: a file path, or "-" for stdin.
type Source struct {
	Path   string
	Format string // auto (or "") | kvtop | dynamo | dynamo-trace | smg | llm-d | production-stack
}

// Options configure the collector. Zero values take the defaults.
type Options struct {
	Sources []Source
	Poll    time.Duration // the wait at a file's end after bytes came; default 200ms
	// IdlePoll is how long the wait at a file's end grows to (doubling
	// from Poll) while the file does not grow, or while it is missing;
	// the next bytes reset it to Poll. Default 1s, never below Poll.
	IdlePoll time.Duration
	// Backfill is how many bytes before the end of a file that exists at
	// start-up are read first (0: DefaultBackfill; negative: none, start at
	// the end). Files that appear later are read whole.
	Backfill int64
	MaxLine  int       // longer lines are counted bad and skipped; default 1 MiB
	Stdin    io.Reader // read for Path "-"; default os.Stdin
}

// sourceStats count what one source has read. The pool sees them as
// collectors.DecisionSource observations (reportEvery at most). Only the
// source's own goroutine touches them: no lock.
type sourceStats struct {
	Source    string // path or "-"
	Format    string
	Detected  string // format of the last decision line
	Lines     uint64
	Decisions uint64
	Outcomes  uint64
	Bad       uint64
	Skipped   uint64
	SkippedBy map[string]uint64 // by Result.Reason
	Waiting   bool              // the file does not exist (yet) or cannot be opened
}

// Collector follows decision logs; it implements collectors.Collector.
type Collector struct {
	sources []*source
	stdin   io.Reader
}

type source struct {
	Source
	poll     time.Duration
	idlePoll time.Duration
	backfill int64
	maxLine  int
	out      chan<- collectors.Observation

	// backfillEnd is the size of the file found at start-up: lines that
	// begin before it are history (Backfill), the rest is new. 0 for a
	// file that appeared later, stdin, or after a rotation.
	backfillEnd int64
	// backfillAll marks the lines being handed out as history regardless
	// of offsets: a gzip member that was whole at start-up (its lines'
	// offsets count uncompressed bytes, not the file's).
	backfillAll bool

	// series is the prefix of the Dynamo trace segments the source
	// follows (the newest), "" when it follows its one path.
	series string

	stats   sourceStats
	changed bool      // stats changed since the last report
	sentAt  time.Time // last report
	sentAny bool
}

// reportEvery rate-limits DecisionSource observations per source.
const reportEvery = time.Second

// New checks the options and returns a collector.
func New(o Options) (*Collector, error) {
	if len(o.Sources) == 0 {
		return nil, errors.New("decisions: no sources")
	}
	c := &Collector{stdin: o.Stdin}
	if c.stdin == nil {
		c.stdin = os.Stdin
	}
	stdin := 0
	for i, src := range o.Sources {
		if src.Path == "" {
			return nil, fmt.Errorf("decisions[%d]: path missing (a file, or - for stdin)", i)
		}
		if !ValidFormat(src.Format) {
			return nil, fmt.Errorf("decisions[%d]: format %q is not one of %s", i, src.Format, FormatNames)
		}
		if src.Path == "-" {
			if stdin++; stdin > 1 {
				return nil, fmt.Errorf("decisions[%d]: stdin (-) can be read only once", i)
			}
		}
		if src.Format == "" {
			src.Format = FormatAuto
		}
		s := &source{Source: src, poll: o.Poll, backfill: o.Backfill, maxLine: o.MaxLine}
		if src.Path != "-" {
			s.series = seriesPrefix(src.Path, src.Format)
		}
		if s.poll <= 0 {
			s.poll = DefaultPoll
		}
		if s.idlePoll = o.IdlePoll; s.idlePoll <= 0 {
			s.idlePoll = DefaultIdlePoll
		}
		s.idlePoll = max(s.idlePoll, s.poll)
		if s.backfill == 0 {
			s.backfill = DefaultBackfill
		}
		if s.maxLine <= 0 {
			s.maxLine = DefaultMaxLine
		}
		s.stats = sourceStats{Source: src.Path, Format: src.Format, SkippedBy: map[string]uint64{}}
		c.sources = append(c.sources, s)
	}
	return c, nil
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "decisions" }

// Run follows every source until ctx is done; call it once. Problems (a
// missing file, bad lines) are sent as SourceErrors; Run only returns nil.
func (c *Collector) Run(ctx context.Context, out chan<- collectors.Observation) error {
	var wg sync.WaitGroup
	for _, s := range c.sources {
		s.out = out
		wg.Add(1)
		go func(s *source) {
			defer wg.Done()
			if s.Path == "-" {
				s.readStream(ctx, c.stdin)
			} else {
				s.follow(ctx)
			}
		}(s)
	}
	wg.Wait()
	return nil
}

// handle parses one line and sends what it yields; false when ctx is done.
func (s *source) handle(ctx context.Context, l lineRef) bool {
	var (
		r   Result
		err error
	)
	if l.tooLong {
		err = fmt.Errorf("longer than %d bytes, skipped", s.maxLine)
	} else {
		r, err = ParseLine(l.data, s.Format)
	}
	now := time.Now()
	backfill := l.off < s.backfillEnd || s.backfillAll
	s.count(func(st *sourceStats) {
		st.Lines++
		switch {
		case err != nil:
			st.Bad++
		case r.Decision != nil || r.Outcome != nil:
			if r.Decision != nil {
				st.Decisions++
				st.Detected = r.Decision.Format
			}
			if r.Outcome != nil {
				st.Outcomes++
				if r.Decision == nil && r.Outcome.Format != FormatKvtop {
					st.Detected = r.Outcome.Format // a trace line without a worker
				}
			}
		default:
			st.Skipped++
			st.SkippedBy[r.Reason]++
		}
	})
	switch {
	case err != nil:
		return s.send(ctx, &collectors.SourceError{
			Source: "decisions " + s.Path, Kind: "bad_line",
			Message: l.where() + ": " + err.Error(), Backfill: backfill, At: now,
		}) && s.report(ctx, now, false)
	case r.Decision == nil && r.Outcome == nil:
		return s.report(ctx, now, false)
	}
	// A line that is both (a Dynamo trace) sends the decision first: the
	// pool measures the decision before the outcome settles it.
	if d := r.Decision; d != nil {
		d.Source, d.At, d.Backfill = s.Path, now, backfill
		if !s.send(ctx, d) {
			return false
		}
	}
	if o := r.Outcome; o != nil {
		o.Source, o.At, o.Backfill = s.Path, now, backfill
		if !s.send(ctx, o) {
			return false
		}
	}
	return s.report(ctx, now, false)
}

// report sends the source's reading state when it changed, at most every
// reportEvery (force: now, changed or not); false when ctx is done.
func (s *source) report(ctx context.Context, now time.Time, force bool) bool {
	if !force && (!s.changed || now.Sub(s.sentAt) < reportEvery) {
		return ctx.Err() == nil
	}
	st := &s.stats
	obs := &collectors.DecisionSource{
		Source: st.Source, Format: st.Format, Detected: st.Detected, Lines: st.Lines, Decisions: st.Decisions,
		Outcomes: st.Outcomes, Bad: st.Bad, Skipped: st.Skipped, Waiting: st.Waiting, At: now,
		SkippedBy: make(map[string]uint64, len(st.SkippedBy)),
	}
	for k, v := range st.SkippedBy {
		obs.SkippedBy[k] = v
	}
	s.changed, s.sentAt, s.sentAny = false, now, true
	return s.send(ctx, obs)
}

// flush reports pending changes (rate-limited), and the first state
// (waiting or reading) as soon as it is known.
func (s *source) flush(ctx context.Context) bool {
	return s.report(ctx, time.Now(), !s.sentAny)
}

func (s *source) send(ctx context.Context, obs collectors.Observation) bool {
	select {
	case s.out <- obs:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *source) sourceError(ctx context.Context, kind, msg string) {
	s.send(ctx, &collectors.SourceError{Source: "decisions " + s.Path, Kind: kind, Message: msg, At: time.Now()})
}

func (s *source) count(f func(*sourceStats)) {
	f(&s.stats)
	s.changed = true
}

func (s *source) setWaiting(w bool) { s.count(func(st *sourceStats) { st.Waiting = w }) }
