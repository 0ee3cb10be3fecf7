package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/views"
)

func init() { commands = append(commands, newSnapshotCmd) }

func newSnapshotCmd() *cobra.Command {
	var (
		dur    time.Duration
		format string
	)
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "collect for a while, then print one snapshot (json for scripts, text for people)",
		Long: `snapshot runs the same collectors and pool as the console, headless, for --for,
then prints the latest snapshot. The JSON keys are a contract for scripts
(see README.md); unknown values are null, never 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "json" && format != "text" {
				return &exitError{code: 2, msg: fmt.Sprintf("--format %q: want json or text", format)}
			}
			if dur <= 0 {
				return &exitError{code: 2, msg: "--for must be positive"}
			}
			c, err := loadConfig(cmd)
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			e, err := startEngine(ctx, c)
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			select {
			case <-time.After(dur):
			case <-ctx.Done():
			case err := <-e.Err:
				if err != nil {
					return err
				}
			}
			s := e.Pool.Latest()
			if s == nil {
				return &exitError{code: 1, msg: fmt.Sprintf("no snapshot after %s (refresh is %s)", dur, c.Refresh)}
			}
			return writeSnapshot(cmd.OutOrStdout(), s, format)
		},
	}
	cmd.Flags().DurationVar(&dur, "for", 5*time.Second, "how long to collect before printing")
	cmd.Flags().StringVar(&format, "format", "json", "json or text")
	return cmd
}

func writeSnapshot(w io.Writer, s *pool.Snapshot, format string) error {
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
