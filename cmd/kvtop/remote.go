package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/remote"
	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/tui"
)

// addRemoteFlags adds the console's --remote flags to the root command.
func addRemoteFlags(root *cobra.Command) {
	root.Flags().String("remote", "", "attach the console, read-only, to the `URL` of a kvtop serve collector: http(s)://host:port")
	root.Flags().String("auth-token-file", "", "with --remote: `FILE` holding the collector's bearer token")
	root.Flags().String("remote-ca", "", "with --remote https://: a `FILE` of PEM CA certificates to trust besides the system's")
}

// remoteWanted says whether the console attaches to a collector, and
// refuses the --remote flags without --remote.
func remoteWanted(cmd *cobra.Command) (string, error) {
	url, _ := cmd.Flags().GetString("remote")
	changed := func(name string) bool { f := cmd.Flags().Lookup(name); return f != nil && f.Changed }
	if url == "" {
		for _, name := range []string{"auth-token-file", "remote-ca"} {
			if changed(name) {
				return "", &exitError{code: exitUsage, msg: "--" + name + " goes with --remote"}
			}
		}
		return "", nil
	}
	// The pool, and so its config and refresh, are the collector's.
	for _, name := range []string{"config", "refresh"} {
		if changed(name) {
			return "", &exitError{code: exitUsage, msg: "--" + name + " does not apply with --remote: the pool, its config and its refresh are the collector's"}
		}
	}
	return url, nil
}

// runRemote is the console on a collector's stream: the same screens,
// read-only. The config is not read (the pool is the collector's); the
// theme comes from --theme.
func runRemote(cmd *cobra.Command, url string) error {
	src, err := newRemoteSource(cmd, url)
	if err != nil {
		return err
	}
	if err := needTTY("`curl " + shellArg(strings.TrimSuffix(url, "/")+"/api/v1/snapshot") + "` (with the collector's token, if it wants one)"); err != nil {
		return err
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	if err := connectRemote(ctx, src, url); err != nil {
		return err
	}
	go src.Run(ctx)
	theme, _ := cmd.Flags().GetString("theme")
	uiErr := tui.Run(ctx, src, tui.Options{Theme: theme, Refresh: src.Status().Refresh, Banner: src.Banner})
	cancel()
	if uiErr != nil {
		return fmt.Errorf("console: %w", uiErr)
	}
	return nil
}

func newRemoteSource(cmd *cobra.Command, url string) (*remote.Source, error) {
	o := remote.Options{URL: url}
	if path, _ := cmd.Flags().GetString("auth-token-file"); path != "" {
		tok, err := serve.ReadTokenFile(path)
		if err != nil {
			return nil, &exitError{code: exitUsage, msg: "--auth-token-file: " + err.Error()}
		}
		if w := serve.TokenFileWarning(path); w != "" {
			printLine(cmd.ErrOrStderr(), "warning: "+w)
		}
		o.Token = tok
	}
	o.CAFile, _ = cmd.Flags().GetString("remote-ca")
	src, err := remote.New(o)
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: "--remote: " + err.Error()}
	}
	return src, nil
}

// connectRemote makes the first connection: a wrong URL or token is an
// error now, not an empty console.
func connectRemote(ctx context.Context, src *remote.Source, url string) error {
	if err := src.Connect(ctx); err != nil {
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("remote %s: %v", src.Host(), err)}
	}
	return nil
}
