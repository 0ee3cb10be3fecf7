package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/journal"
)

func init() { commands = append(commands, newRecordCmd) }

// recordFlags bound a journal: kvtop record's, and serve's --record-….
type recordFlags struct {
	maxSize byteSize
	maxAge  time.Duration
	keep    int
}

func (f *recordFlags) add(fl *pflag.FlagSet, prefix string) {
	f.maxSize = journal.DefaultMaxSize
	fl.Var(&f.maxSize, prefix+"max-size", "rotate the journal past this size (e.g. 1GiB, 512MiB)")
	fl.DurationVar(&f.maxAge, prefix+"max-age", journal.DefaultMaxAge, "rotate the journal past this age (0: never by age)")
	fl.IntVar(&f.keep, prefix+"keep", journal.DefaultKeep, "rotated journal files kept (FILE.1 newest … FILE.N); 0 keeps none")
}

func (f *recordFlags) check(prefix string) error {
	if f.maxSize < 64<<10 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--%smax-size %s: want at least 64KiB", prefix, f.maxSize.String())}
	}
	if f.maxAge < 0 || f.keep < 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--%smax-age and --%skeep must not be negative", prefix, prefix)}
	}
	return nil
}

// startRecorder creates the journal of the pool of c at path.
func startRecorder(stderr io.Writer, path string, c config.Config, f recordFlags) (*journal.Recorder, error) {
	keep := f.keep
	if keep == 0 {
		keep = -1 // none
	}
	maxAge := f.maxAge
	if maxAge == 0 {
		maxAge = -1 // never
	}
	rec, err := journal.Create(journal.Options{
		Path: path, Kvtop: version, ConfigDigest: config.Digest(c), Pool: c.PoolOptions(),
		MaxSize: int64(f.maxSize), MaxAge: maxAge, Keep: keep,
		Logf: func(format string, args ...any) { printLine(stderr, fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: "record: " + err.Error()}
	}
	age := "never by age"
	if f.maxAge > 0 {
		age = "or " + f.maxAge.String()
	}
	printLine(stderr, fmt.Sprintf("recording the pool to %s (a segment rotates at %s %s; %d rotated kept: at most %s on disk)",
		path, journal.Bytes(int64(f.maxSize)), age, f.keep, journal.Bytes(int64(f.maxSize)*int64(f.keep+1))))
	return rec, nil
}

// stopRecorder closes the journal once the pool has stopped (its
// snapshot channel closed, or a second passed) and says what it holds.
func stopRecorder(stderr io.Writer, rec *journal.Recorder, e *engine) error {
	if e != nil {
		wait := time.After(time.Second)
	drain:
		for {
			select {
			case _, ok := <-e.Pool.Snapshots():
				if !ok {
					break drain
				}
			case <-wait:
				break drain
			}
		}
	}
	err := rec.Close()
	printLine(stderr, "recorded "+rec.Stats().String())
	if err != nil {
		return &exitError{code: 1, msg: "record: " + err.Error()}
	}
	return nil
}

func newRecordCmd() *cobra.Command {
	var (
		out string
		dur time.Duration
		rf  recordFlags
	)
	cmd := &cobra.Command{
		Use:   "record --out FILE",
		Short: "run the collectors and pool headless and journal what the pool consumes, for kvtop replay",
		Long: `record runs the same collectors and pool as the console, headless, and writes a
journal of what the pool consumed (observations and refresh ticks, not screens)
until stopped (Ctrl-C) or --for has passed. ` + "`kvtop replay FILE`" + ` opens the console on
it; ` + "`kvtop snapshot --journal FILE --at T`" + ` prints the snapshot as of T.

The journal is append-only and crash-safe: a frame torn by a crash is skipped
on reading, with everything before it kept. A segment rotates past --max-size
or --max-age: FILE becomes FILE.1 (FILE.1 becomes FILE.2 …, past --keep the
oldest is removed). Each segment replays on its own, from an empty pool; given
the newest, replay finds the older ones of the same recording and plays them
all. An existing FILE is rotated out of the way first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return &exitError{code: exitUsage, msg: "record needs --out FILE"}
			}
			if err := rf.check(""); err != nil {
				return err
			}
			if dur < 0 {
				return &exitError{code: exitUsage, msg: "--for must not be negative"}
			}
			c, _, err := loadConfig(cmd)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			stderr := cmd.ErrOrStderr()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			rec, err := startRecorder(stderr, out, c, rf)
			if err != nil {
				return err
			}
			e, err := startEngine(ctx, c, rec)
			if err != nil {
				rec.Close()
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			runErr := recordUntil(ctx, stderr, rec, e, dur)
			cancel()
			if err := stopRecorder(stderr, rec, e); err != nil {
				return err
			}
			return runErr
		},
	}
	addConfigFlag(cmd)
	fl := cmd.Flags()
	fl.StringVarP(&out, "out", "o", "", "the journal `FILE`")
	fl.DurationVar(&dur, "for", 0, "stop after this long (0: until stopped)")
	rf.add(fl, "")
	return cmd
}

// recordEvery is how often kvtop record says how much it wrote.
const recordEvery = time.Minute

// recordUntil records until ctx is done, dur passed (if set) or the
// collectors fail (their error), saying every minute how much it wrote.
func recordUntil(ctx context.Context, stderr io.Writer, rec *journal.Recorder, e *engine, dur time.Duration) error {
	var end <-chan time.Time
	if dur > 0 {
		end = time.After(dur)
	}
	tick := time.NewTicker(recordEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-end:
			return nil
		case err := <-e.Err:
			return err
		case <-tick.C:
			printLine(stderr, "recording "+rec.Stats().String())
		}
	}
}

// byteSize is a size flag: 1GiB, 512MiB, 100MB, 64k, 123.
type byteSize int64

func (b *byteSize) String() string { return journal.Bytes(int64(*b)) }
func (b *byteSize) Type() string   { return "size" }

func (b *byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
}

func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("%q: want a size like 1GiB, 512MiB or 100MB", s)
	}
	return int64(v * mult), nil
}
