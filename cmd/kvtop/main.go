// Command kvtop is a terminal console for LLM inference pools that route
// requests by KV-cache locality. See README.md.
package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
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
	}
	root.PersistentFlags().StringP("config", "c", "", "config file (default ./kvtop.yaml, then $XDG_CONFIG_HOME/kvtop/config.yaml)")
	root.Flags().Duration("refresh", 0, "UI refresh (overrides the config; floor 250ms)")
	root.Flags().String("theme", "", "theme: default, dark, light, high-contrast, mono")
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
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		var exit *exitError
		if errors.As(err, &exit) {
			if exit.msg != "" {
				fmt.Fprintln(os.Stderr, "kvtop:", exit.msg)
			}
			os.Exit(exit.code)
		}
		fmt.Fprintln(os.Stderr, "kvtop:", err)
		os.Exit(1)
	}
}

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

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
