// Command kvtop is a terminal console for LLM inference pools that route
// requests by KV-cache locality. See README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/views"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// commands holds the subcommands; each file adds its own in init().
var commands []func() *cobra.Command

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "kvtop",
		Short: "top for KV-cache-aware LLM inference pools",
		Long: `kvtop shows, for a pool of vLLM or SGLang workers behind a KV-cache-aware
router: per-worker queue and KV-cache use, token-weighted prefix-cache hit rate,
the health of each worker's KV event stream, hot prefixes and skew, and each
routing decision next to what actually happened to the request.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate("kvtop {{.Version}}\n") // as `kvtop version` says it
	addConfigFlag(root)
	addKubeFlags(root)
	root.Flags().Duration("refresh", 0, fmt.Sprintf("UI refresh (overrides the config; floor %s)", pool.MinRefresh))
	root.Flags().String("theme", "", "theme: default, dark, light, high-contrast, mono")
	addRemoteFlags(root)
	root.PersistentFlags().String("cpuprofile", "", "write a CPU profile to this file (for performance work)")
	_ = root.PersistentFlags().MarkHidden("cpuprofile")
	root.PersistentFlags().String("pprof", "", "serve net/http/pprof on this loopback address, e.g. 127.0.0.1:6060 (for performance work)")
	_ = root.PersistentFlags().MarkHidden("pprof")
	root.PersistentPreRunE = startProfile
	root.PersistentPostRun = func(*cobra.Command, []string) { stopProfile() }
	root.Args = cobra.NoArgs
	if rootRun != nil {
		root.RunE = rootRun
	}
	for _, c := range commands {
		root.AddCommand(c())
	}
	// A mistyped flag or a stray argument is a usage error, like a bad
	// config: exit 2, so scripts can tell it from a pool problem.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: 2, msg: err.Error()}
	})
	usageArgs(root)
	return root
}

// addConfigFlag gives a command that reads the config its --config (-c)
// flag. Only those commands have it: on `sim` or `demo` it would mean
// nothing.
func addConfigFlag(c *cobra.Command) {
	c.Flags().StringP("config", "c", "", "config file (default ./kvtop.yaml, then $XDG_CONFIG_HOME/kvtop/config.yaml)")
}

// self is how the operator ran kvtop, for the commands kvtop suggests:
// "./bin/kvtop" after make build, "kvtop" from the PATH (make install).
func self() string {
	if len(os.Args) == 0 || os.Args[0] == "" {
		return "kvtop"
	}
	if strings.ContainsRune(os.Args[0], filepath.Separator) {
		return views.Clean(os.Args[0])
	}
	return filepath.Base(os.Args[0])
}

// shellArg quotes s for a command line the operator may paste, when it
// needs it.
func shellArg(s string) string {
	s = views.Clean(s) // a flag: shown, never obeyed
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func usageArgs(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		code := 1
		var exit *exitError
		if errors.As(err, &exit) {
			code = exit.code
		}
		printError(os.Stderr, err)
		os.Exit(code)
	}
}

// exitError carries a specific exit code out of a command, with the
// message (one or more lines) and/or the error behind it.
type exitError struct {
	code int
	msg  string
	err  error
}

func (e *exitError) Error() string {
	switch {
	case e.err == nil:
		return e.msg
	case e.msg == "":
		return e.err.Error()
	}
	return e.msg + ": " + e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// printError prints an error as kvtop's lines on stderr: one per config
// problem, each cleaned — keys, values, names and messages come from
// configs, the environment, flags, files and the network, and a raw ESC or
// CR in one must not drive the terminal or forge a line.
func printError(w io.Writer, err error) {
	for _, l := range errorLines(err) {
		printLine(w, l)
	}
}

// printLine is the one way kvtop writes a message of its own on stderr.
func printLine(w io.Writer, line string) {
	fmt.Fprintln(w, "kvtop: "+views.Clean(line))
}

func errorLines(err error) []string {
	prefix := ""
	var exit *exitError
	if errors.As(err, &exit) {
		if exit.err == nil {
			if exit.msg == "" {
				return nil
			}
			return strings.Split(exit.msg, "\n")
		}
		if exit.msg != "" {
			prefix = exit.msg + ": "
		}
		err = exit.err
	}
	var lines []string
	var es config.Errors
	var one *config.Error
	var none *config.NotFound
	switch {
	case errors.As(err, &none):
		lines = append(lines, prefix+none.Error())
		lines = append(lines, firstSteps()...)
	case errors.As(err, &es):
		for _, e := range es {
			lines = append(lines, prefix+e.Error())
		}
	case errors.As(err, &one):
		lines = append(lines, prefix+one.Error())
	default:
		for _, l := range strings.Split(err.Error(), "\n") {
			lines = append(lines, prefix+l)
		}
	}
	return lines
}

// firstSteps is what to do without a config: the demo, the simulated pool
// with a config written for it, or the few lines of a real one.
func firstSteps() []string {
	k := self()
	return []string{
		"to look around on a simulated pool: " + k + " demo",
		"to point kvtop at a simulated pool: " + k + " sim --write-config sim.yaml, then (in another terminal) " + k + " -c sim.yaml",
		"to watch your pool, write kvtop.yaml (every key: README.md, Configure); at least:",
		"  workers:",
		"    - name: w0",
		"      metrics: http://10.0.0.5:8000/metrics   # the engine's /metrics",
		"      events: tcp://10.0.0.5:5557             # its KV event publisher (optional)",
	}
}

func init() {
	commands = append(commands, func() *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "print kvtop's version",
			Args:  cobra.NoArgs,
			Run: func(cmd *cobra.Command, _ []string) {
				fmt.Fprintf(cmd.OutOrStdout(), "kvtop %s\n", version)
			},
		}
	})
}

var profileFile *os.File

// startProfile starts the CPU profile the hidden --cpuprofile flag asks for,
// and the pprof endpoint of --pprof (loopback only: it exposes internals).
func startProfile(cmd *cobra.Command, _ []string) error {
	if addr, _ := cmd.Flags().GetString("pprof"); addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !net.ParseIP(host).IsLoopback() {
			return &exitError{code: 2, msg: fmt.Sprintf("--pprof %q: want a loopback address like 127.0.0.1:6060", addr)}
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return &exitError{code: 2, msg: fmt.Sprintf("--pprof: %v", err)}
		}
		go func() { _ = http.Serve(ln, nil) }() // net/http/pprof registers on the default mux
	}
	path, _ := cmd.Flags().GetString("cpuprofile")
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	profileFile = f
	return pprof.StartCPUProfile(f)
}

func stopProfile() {
	if profileFile != nil {
		pprof.StopCPUProfile()
		profileFile.Close()
		profileFile = nil
	}
}
