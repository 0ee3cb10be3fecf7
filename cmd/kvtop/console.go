package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/kvtop/kvtop/cmd/kvtop/config"
	"github.com/kvtop/kvtop/tui"
)

func init() {
	rootRun = runConsole
}

// rootRun is what `kvtop` with no subcommand does: open the console.
var rootRun func(cmd *cobra.Command, args []string) error

// loadConfig reads the config named by --config (or searched for), with
// flags bound and KVTOP_* env applied.
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	v := viper.New()
	file, _ := cmd.Flags().GetString("config")
	if f := cmd.Flags().Lookup("refresh"); f != nil && f.Changed {
		_ = v.BindPFlag("refresh", f)
	}
	if f := cmd.Flags().Lookup("theme"); f != nil && f.Changed {
		_ = v.BindPFlag("theme", f)
	}
	return config.Load(v, file)
}

// signalContext is cancelled on SIGINT or SIGTERM.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

// needTTY refuses to draw a console where there is no terminal, and says
// what to run instead.
func needTTY() error {
	if !term.IsTerminal(os.Stdout.Fd()) || !term.IsTerminal(os.Stdin.Fd()) {
		return &exitError{code: 2, msg: "not a terminal: the console needs a TTY; for a headless view run `kvtop snapshot --for 5s --format text` (or --format json)"}
	}
	return nil
}

func runConsole(cmd *cobra.Command, _ []string) error {
	c, err := loadConfig(cmd)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	if err := needTTY(); err != nil {
		return err
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	return runTUI(ctx, c, nil)
}

// runTUI runs the collectors, the pool and the console until the operator
// quits.
func runTUI(ctx context.Context, c config.Config, banner func() string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e, err := startEngine(ctx, c)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	uiErr := tui.Run(ctx, e.Pool, tui.Options{Theme: c.Theme, Colors: c.Colors, Refresh: c.Refresh, Banner: banner})
	cancel()
	if uiErr != nil {
		return fmt.Errorf("console: %w", uiErr)
	}
	return nil
}
