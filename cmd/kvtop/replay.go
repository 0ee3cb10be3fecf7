package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/journal"
	"github.com/kvtop/kvtop/tui"
)

func init() { commands = append(commands, newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var (
		speed float64
		at    string
		theme string
	)
	cmd := &cobra.Command{
		Use:   "replay FILE...",
		Short: "open the console on a journal written by kvtop record (or serve --record)",
		Long: `replay opens the console on a journal: the pool is rebuilt from what the live
pool consumed, so every snapshot is the one the console showed then. The header
says REPLAY and the journal's date and time. Time controls:
  space  pause / resume        ←/→  back / forward 10 s
  [ ]    speed ×½ / ×2         g/G  the journal's start / end
(the first and last row are home and end while replaying).

Given the live file of a rotated journal (FILE), replay finds the older
segments of the same recording on disk (FILE.1, FILE.2 …) and plays them all;
several FILEs are played in the order given (oldest first). A segment without
the ones before it replays from an empty pool: its index holds only the blocks
stored since it began, and the screen says so.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if speed < journal.MinSpeed || speed > journal.MaxSpeed {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--speed %g: want %g to %g", speed, journal.MinSpeed, float64(journal.MaxSpeed))}
			}
			p, err := openJournal(cmd.ErrOrStderr(), args)
			if err != nil {
				return err
			}
			defer p.Close()
			r := journal.NewReplay(p, speed)
			if at != "" {
				t, err := journalTime(p, at)
				if err != nil {
					return err
				}
				r.SeekTo(t)
			}
			if err := needTTY("`" + self() + " snapshot --journal " + shellArg(args[len(args)-1]) + " --at +60s --format text`"); err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			go r.Run(ctx)
			uiErr := tui.Run(ctx, tui.Replay(r), tui.Options{Theme: theme, Refresh: p.Header().Pool.Refresh, Banner: r.Banner})
			cancel()
			if uiErr != nil {
				return fmt.Errorf("console: %w", uiErr)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&speed, "speed", 1, "journal seconds per second ([ and ] halve and double it)")
	fl.StringVar(&at, "at", "", "start at `T`: an RFC 3339 time, +90s from the start or -30s from the end")
	fl.StringVar(&theme, "theme", "", "theme: default, dark, light, high-contrast, mono")
	return cmd
}

// openJournal opens the journal of args (one file: with the older
// segments of its recording found on disk) and says on stderr what it
// holds and lacks.
func openJournal(stderr io.Writer, args []string) (*journal.Player, error) {
	paths := args
	if len(args) == 1 {
		chain, err := journal.Chain(args[0])
		if err != nil {
			return nil, &exitError{code: exitUsage, msg: "journal: " + err.Error()}
		}
		paths = chain
	}
	p, err := journal.NewPlayer(paths...)
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: "journal: " + err.Error()}
	}
	h := p.Header()
	what := fmt.Sprintf("journal %s: pool %s, %d snapshots from %s to %s (recorded by kvtop %s",
		strings.Join(paths, ", "), h.Pool.Name, p.Ticks(), p.Start().Format(time.RFC3339), p.End().Format(time.RFC3339), h.Kvtop)
	if h.Config != "" {
		what += ", config " + h.Config
	}
	printLine(stderr, what+")")
	for _, n := range journal.Notes(p) {
		printLine(stderr, "warning: "+n)
	}
	return p, nil
}

// journalTime reads a time in a journal: RFC 3339, +D from its first
// snapshot, -D from its last, or "start" / "end".
func journalTime(p *journal.Player, s string) (time.Time, error) {
	switch {
	case s == "start":
		return p.Start(), nil
	case s == "end":
		return p.End(), nil
	case strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-"):
		d, err := time.ParseDuration(s[1:])
		if err == nil && d >= 0 {
			if s[0] == '+' {
				return p.Start().Add(d), nil
			}
			return p.End().Add(-d), nil
		}
	default:
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, &exitError{code: exitUsage, msg: fmt.Sprintf("--at %q: want an RFC 3339 time (%s), +90s from the start, -30s from the end, start or end",
		s, p.Start().Format(time.RFC3339))}
}
