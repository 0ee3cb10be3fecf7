package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/journal"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/serve"
)

func init() { commands = append(commands, newServeCmd) }

// serveFlags are kvtop serve's flags.
type serveFlags struct {
	listen, tokenFile, cert, key string
	hotPrefixes                  int
	maxStreams                   int
	record                       string
	rec                          recordFlags
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the collectors and pool headless and serve /metrics and the snapshot API",
		Long: `serve runs the same collectors and pool as the console, headless, and serves:
  /metrics            the latest snapshot in the Prometheus text format
  /api/v1/snapshot    the latest snapshot, the JSON of ` + "`kvtop snapshot`" + ` (?decisions=N)
  /api/v1/snapshots   one snapshot a line at each refresh (what ` + "`kvtop --remote`" + ` reads)
  /healthz            200 while the pool publishes (never authenticated)
It listens on loopback (` + serve.DefaultListen + `) unless --listen names another
address; without --auth-token-file it then warns, since anyone who reaches the
port reads the pool. deploy/prometheus/kvtop-rules.yaml holds alert rules over
its metrics.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, f) },
	}
	addConfigFlag(cmd)
	addKubeFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", serve.DefaultListen, "address to serve on (host:port)")
	fl.StringVar(&f.tokenFile, "auth-token-file", "", "`FILE` holding the bearer token every endpoint but /healthz requires")
	fl.StringVar(&f.cert, "tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	fl.StringVar(&f.key, "tls-key", "", "the PEM key of --tls-cert")
	fl.IntVar(&f.hotPrefixes, "hot-prefixes", serve.DefaultHotPrefixes, "hot prefixes exported in /metrics (their ids are label values)")
	fl.IntVar(&f.maxStreams, "max-streams", serve.DefaultMaxStreams, "consoles that may attach to /api/v1/snapshots at once")
	fl.StringVar(&f.record, "record", "", "also journal what the pool consumes to `FILE`, for kvtop replay (as kvtop record)")
	f.rec.add(fl, "record-")
	return cmd
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	if (f.cert == "") != (f.key == "") {
		return &exitError{code: exitUsage, msg: "--tls-cert and --tls-key go together"}
	}
	if f.hotPrefixes < 0 || f.maxStreams < 1 {
		return &exitError{code: exitUsage, msg: "--hot-prefixes must be 0 or more and --max-streams 1 or more"}
	}
	if err := f.rec.check("record-"); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("--listen %q: want host:port, e.g. %s", f.listen, serve.DefaultListen)}
	}
	if f.cert != "" {
		if _, err := tls.LoadX509KeyPair(f.cert, f.key); err != nil {
			return &exitError{code: exitUsage, msg: "--tls-cert/--tls-key: " + err.Error()}
		}
	}
	token := ""
	if f.tokenFile != "" {
		t, err := serve.ReadTokenFile(f.tokenFile)
		if err != nil {
			return &exitError{code: exitUsage, msg: "--auth-token-file: " + err.Error()}
		}
		token = t
	}
	c, _, err := loadConfig(cmd)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	for _, w := range serveWarnings(f) {
		printLine(cmd.ErrOrStderr(), "warning: "+w)
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	var taps []pool.Tap
	var rec *journal.Recorder
	if f.record != "" {
		if rec, err = startRecorder(cmd.ErrOrStderr(), f.record, c, f.rec); err != nil {
			return err
		}
		defer rec.Close() // on the early returns; stopRecorder closes it first otherwise
		taps = append(taps, rec)
	}
	e, err := startEngine(ctx, c, taps...)
	if err != nil {
		return &exitError{code: exitUsage, msg: err.Error()}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("serve: %v", err)}
	}
	err = serveEngine(ctx, cmd.ErrOrStderr(), e, ln, serve.Options{
		Token: token, Version: version, HotPrefixes: hotN(f.hotPrefixes), MaxStreams: f.maxStreams,
	}, f.cert, f.key)
	if rec != nil {
		cancel()
		if rerr := stopRecorder(cmd.ErrOrStderr(), rec, e); err == nil {
			err = rerr
		}
	}
	return err
}

// hotN maps --hot-prefixes 0 (none) to the server's "none" (negative).
func hotN(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// serveWarnings are what kvtop serve says at start about its exposure.
func serveWarnings(f serveFlags) []string {
	var out []string
	if !serve.IsLoopback(f.listen) && f.tokenFile == "" {
		out = append(out, fmt.Sprintf("--listen %s is not loopback and there is no --auth-token-file: anyone who reaches it reads the pool", f.listen))
	}
	if w := serve.TokenFileWarning(f.tokenFile); w != "" {
		out = append(out, w)
	}
	return out
}

// serveEngine serves e's snapshots on ln until ctx is done (nil) or the
// collectors fail (their error).
func serveEngine(ctx context.Context, stderr io.Writer, e *engine, ln net.Listener, o serve.Options, cert, key string) error {
	o.Source = e.Pool
	o.Logf = func(format string, args ...any) { printLine(stderr, "serve: "+fmt.Sprintf(format, args...)) }
	srv, err := serve.New(o)
	if err != nil {
		ln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(ctx, e.Pool.Snapshots())
	scheme := "http"
	if cert != "" {
		scheme = "https"
	}
	printLine(stderr, fmt.Sprintf("serving %s://%s: /metrics, /api/v1/snapshot, /api/v1/snapshots, /healthz", scheme, ln.Addr()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln, cert, key) }()
	select {
	case err := <-errc:
		if err != nil {
			return &exitError{code: 1, msg: fmt.Sprintf("serve: %v", err)}
		}
		return nil
	case err := <-e.Err:
		cancel()
		<-errc
		return err
	}
}
