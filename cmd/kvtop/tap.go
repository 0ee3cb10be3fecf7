package main

import (
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/tap"
	"github.com/kvtop/kvtop/views"
)

func init() { commands = append(commands, newTapCmd) }

type tapFlags struct {
	listen, upstream, out, name string
	sample                      float64
	breakAfter, idle            time.Duration
	streamBuf, sharedBuf        byteSize
	workerHeaders               []string
	keyFile, cert, key          string
}

func newTapCmd() *cobra.Command {
	f := tapFlags{streamBuf: tap.DefaultStreamBuffer, sharedBuf: tap.DefaultSharedBuffer}
	cmd := &cobra.Command{
		Use:   "tap --upstream URL",
		Short: "an OpenAI-compatible pass-through that records what each client received",
		Long: `tap forwards /v1/chat/completions, /v1/completions and /v1/responses (and
anything else, untouched) to --upstream, byte for byte as the bytes arrive, and
writes one kvtop audit outcome line per request: request id, model, prompt
length and a keyed fingerprint of its beginning (never text), the worker that
served it, time to the response headers and to the first content token, gaps
in the stream, and how it ended — done (finish_reason and data: [DONE]),
upstream_closed (HTTP 200 but cut short), reset, client_gone, timeout,
http_error, no_response. Point a decisions: entry (format kvtop) at --out to
see them beside the router's decisions; or configure taps: to feed the pool.

Authorization and every other header are forwarded, never recorded. A client
without x-request-id gets one (tap-…), sent upstream so that the router's
records carry it. A slow client is given --stream-buffer of queue (out of
--shared-buffer for all streams) before the upstream waits on it; no byte is
ever dropped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runTap(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on (host:port)")
	fl.StringVar(&f.upstream, "upstream", "", "the router's (or engine's) base URL, e.g. http://router:8000")
	fl.StringVar(&f.out, "out", "-", "append the records to `FILE` (- for standard output)")
	fl.StringVar(&f.name, "name", "tap", "this tap's name in its records")
	fl.Float64Var(&f.sample, "sample", 1, "share of requests recorded (0.1: one in ten, chosen by request id); all are forwarded")
	fl.DurationVar(&f.breakAfter, "break-after", tap.DefaultBreakAfter, "a gap in a stream after its first token this long is a streaming break")
	fl.DurationVar(&f.idle, "idle-timeout", tap.DefaultIdleTimeout, "end a response that sends nothing for this long (0: never)")
	fl.Var(&f.streamBuf, "stream-buffer", "what one slow client may have queued before the upstream waits on it")
	fl.Var(&f.sharedBuf, "shared-buffer", "what all slow clients together may have queued beyond 64KiB each")
	fl.StringSliceVar(&f.workerHeaders, "worker-header", nil, "response header naming the serving worker (repeat; default: "+strings.Join(tap.DefaultWorkerHeaders, ", ")+")")
	fl.StringVar(&f.keyFile, "fingerprint-key-file", "", "`FILE` keying the prefix fingerprints (default: a random key, so fingerprints compare within this process only)")
	fl.StringVar(&f.cert, "tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	fl.StringVar(&f.key, "tls-key", "", "the PEM key of --tls-cert")
	return cmd
}

func runTap(cmd *cobra.Command, f tapFlags) error {
	errw := cmd.ErrOrStderr()
	usage := func(format string, args ...any) error {
		return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
	}
	if f.upstream == "" {
		return usage("tap: --upstream is required: the router's base URL, e.g. --upstream http://router:8000")
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return usage("--listen %q: want host:port, e.g. 127.0.0.1:8080", f.listen)
	}
	if f.sample <= 0 || f.sample > 1 || math.IsNaN(f.sample) {
		return usage("--sample %g: want a share above 0 and at most 1 (0.1 records one request in ten)", f.sample)
	}
	if f.breakAfter <= 0 {
		return usage("--break-after %s: want a duration above 0, e.g. 1s", f.breakAfter)
	}
	if f.idle < 0 {
		return usage("--idle-timeout %s: want 0 (never) or more", f.idle)
	}
	if f.streamBuf < tap.DefaultStreamReserve {
		return usage("--stream-buffer %s: want at least 64KiB", f.streamBuf.String())
	}
	tc, err := tap.LoadTLS(f.cert, f.key)
	if err != nil {
		return usage("--tls-cert/--tls-key: %v", err)
	}
	var key []byte
	if f.keyFile != "" {
		k, warn, err := tap.ReadFingerprintKey(f.keyFile)
		if err != nil {
			return usage("--fingerprint-key-file: %v", err)
		}
		if warn != "" {
			printLine(errw, "warning: "+warn)
		}
		key = k
	}
	sink, err := tap.OpenSink(f.out)
	if err != nil {
		return &exitError{code: 1, msg: "tap: --out: " + err.Error()}
	}
	defer sink.Close()
	p, err := tap.New(tap.Options{
		Upstream: f.upstream, Name: f.name, Sample: f.sample, BreakAfter: f.breakAfter, IdleTimeout: f.idle,
		StreamBuffer: int(f.streamBuf), SharedBuffer: int64(f.sharedBuf), WorkerHeaders: f.workerHeaders,
		FingerprintKey: key, Record: sink.Write,
	})
	if err != nil {
		return usage("tap: --%v", err)
	}
	if w := tap.ListenWarning(f.listen, tc != nil); w != "" {
		printLine(errw, "warning: "+w)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("tap: %v", err)}
	}
	scheme := "http"
	if tc != nil {
		scheme = "https"
	}
	where := "standard output"
	if f.out != "-" {
		where = f.out
	}
	printLine(errw, fmt.Sprintf("tap %s: %s://%s → %s, recording %s of requests to %s", f.name, scheme, ln.Addr(), f.upstream, percent(f.sample), where))
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	go tapReports(ctx.Done(), errw, p, sink)
	err = tap.Serve(ctx, ln, p, tc, 10*time.Second, func(format string, args ...any) {
		printLine(errw, "tap: "+fmt.Sprintf(format, args...))
	})
	printLine(errw, "tap: "+tapSummary(p.Stats(), sink))
	if err != nil {
		return &exitError{code: 1, msg: fmt.Sprintf("tap: %v", err)}
	}
	return nil
}

// tapReports says what the tap did once a minute, when it did something.
func tapReports(done <-chan struct{}, w io.Writer, p *tap.Proxy, sink *tap.Sink) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if s := p.Stats(); s.Requests != last {
				last = s.Requests
				printLine(w, "tap: "+tapSummary(s, sink))
			}
		}
	}
}

func tapSummary(s tap.Stats, sink *tap.Sink) string {
	out := fmt.Sprintf("%d requests, %d recorded: %d finished, %d truncated, %d failed, %d left by the client",
		s.Requests, s.Recorded, s.Finished, s.Truncated, s.Failed, s.Left)
	if s.Unknown > 0 {
		out += fmt.Sprintf(", %d unknown", s.Unknown)
	}
	if s.Unsampled > 0 {
		out += fmt.Sprintf("; %d not sampled", s.Unsampled)
	}
	if s.Unread > 0 {
		out += fmt.Sprintf("; %d partly unread (bad or oversized input)", s.Unread)
	}
	if s.ClientSlow > 0 {
		out += fmt.Sprintf("; %d slow clients", s.ClientSlow)
	}
	if _, failed, err := sink.Counts(); failed > 0 {
		out += fmt.Sprintf("; %d records lost writing them: %s", failed, views.Clean(err.Error()))
	}
	return out
}

func percent(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f*100), "0"), ".") + " %"
}
