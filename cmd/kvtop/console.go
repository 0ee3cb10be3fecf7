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

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/tui"
	"github.com/kvtop/kvtop/views"
)

func init() {
	rootRun = runConsole
}

// rootRun is what `kvtop` with no subcommand does: open the console.
var rootRun func(cmd *cobra.Command, args []string) error

// configFlags are the flags that override a config key of the same name.
var configFlags = []string{"refresh", "theme"}

// loadConfig reads the config named by --config (or searched for), with
// the flags the operator set bound and KVTOP_* env applied. Its warnings
// are printed on stderr here and returned for the console to show.
func loadConfig(cmd *cobra.Command) (config.Config, []string, error) {
	v := viper.New()
	file, err := cmd.Flags().GetString("config")
	if err != nil {
		return config.Config{}, nil, fmt.Errorf("%s has no --config flag (addConfigFlag)", cmd.CommandPath())
	}
	flags := config.Flags{}
	for _, key := range configFlags {
		if f := cmd.Flags().Lookup(key); f != nil && f.Changed {
			_ = v.BindPFlag(key, f)
			flags[key] = "--" + f.Name
		}
	}
	bindKubeFlags(cmd, v, flags)
	c, warnings, err := config.Read(v, file, flags)
	if err == nil {
		warnings = append(warnings, tokenFileWarnings(c)...)
		warnings = append(warnings, tapWarnings(c)...)
	}
	for _, w := range warnings {
		printLine(cmd.ErrOrStderr(), "warning: "+w)
	}
	return c, warnings, err
}

// signalContext is cancelled on SIGINT, SIGTERM or SIGHUP (the terminal
// closed), so that every command stops the way Ctrl-C stops it: the
// console gives the terminal back, demo and sim remove their temporary
// folder, a journal is closed whole. A SIGHUP ignored at start (nohup)
// stays ignored: asking for it would undo that.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, stopSignals()...)
}

func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// needTTY refuses to draw a console where there is no terminal, and says
// what to run instead (headless).
func needTTY(instead string) error {
	if !term.IsTerminal(os.Stdout.Fd()) || !term.IsTerminal(os.Stdin.Fd()) {
		return &exitError{code: 2, msg: "not a terminal: the console needs a TTY; for a headless view run " + instead}
	}
	return nil
}

// headless is the snapshot command that shows what the console would, on
// the same config (the operator's -c kept).
func headless(cmd *cobra.Command) string {
	c := ""
	if f := cmd.Flags().Lookup("config"); f != nil && f.Value.String() != "" {
		c = " -c " + shellArg(f.Value.String())
	}
	return "`" + self() + " snapshot" + c + " --for 5s --format text` (or --format json)"
}

func runConsole(cmd *cobra.Command, _ []string) error {
	if url, err := remoteWanted(cmd); err != nil || url != "" {
		if err != nil {
			return err
		}
		return runRemote(cmd, url)
	}
	c, warnings, err := loadConfig(cmd)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := needTTY(headless(cmd)); err != nil {
		return err
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	var banner func() string
	if len(warnings) > 0 {
		// The console covers stderr: the first warning stays on screen.
		text := "warning: " + warnings[0]
		if len(warnings) > 1 {
			text += fmt.Sprintf(" (and %d more, printed on stderr)", len(warnings)-1)
		}
		text = views.Clean(text)
		banner = func() string { return text }
	}
	return runTUI(ctx, c, banner)
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
	return consoleOn(ctx, c, e, banner)
}

// consoleOn shows the console on e until the operator quits or ctx is
// done. When the engine reports a fatal error the console stops (the
// terminal is restored) and the error is returned, as `snapshot` does:
// a console that went on showing a pool nobody collects would lie.
func consoleOn(ctx context.Context, c config.Config, e *engine, banner func() string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fatal := make(chan error, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case err := <-e.Err:
			if err != nil {
				fatal <- err
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	uiErr := tui.Run(ctx, e.Pool, tui.Options{Theme: c.Theme, Colors: c.Colors, Refresh: c.Refresh, Banner: banner})
	cancel()
	<-watched
	select {
	case err := <-fatal:
		return err
	default:
	}
	if uiErr != nil {
		return fmt.Errorf("console: %w", uiErr)
	}
	return nil
}
