package metrics

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/kvtop/kvtop/collectors"

	"github.com/kvtop/kvtop/internal/secret"
	"github.com/kvtop/kvtop/internal/tlsca"
)

// Defaults for Options fields left zero.
const (
	DefaultInterval  = time.Second
	DefaultTimeout   = 2 * time.Second
	DefaultBodyLimit = 16 << 20
)

// Target is one /metrics endpoint.
type Target struct {
	Name    string // configured worker or router name
	Role    collectors.Role
	URL     string
	Profile string // "" or "auto" = detect per scrape; else a Profile* name

	// Bearer token from a file (re-read every scrape) or an environment
	// variable; never logged.
	BearerTokenFile, BearerTokenEnv string
	// CAFile verifies the server with this PEM bundle instead of the
	// system roots.
	CAFile             string
	InsecureSkipVerify bool
	// Transport, when set, carries every request instead of kvtop's own
	// (the TLS and bearer fields above are then not used): the
	// Kubernetes API server's authenticated transport for a pod read
	// through pods/proxy.
	Transport http.RoundTripper
}

// Options configure the collector. Zero fields take the defaults.
type Options struct {
	Targets  []Target
	Interval time.Duration // between scrapes of one target; the first is immediate
	// Timeout bounds a whole scrape from its start: fetch, body, parse and
	// fold.
	Timeout   time.Duration
	BodyLimit int64 // bytes, on the wire and decompressed
	// MaxEngines bounds the engines (distinct engine / dp_rank label
	// values) of one worker page; MaxSeries the sample lines of the
	// families kvtop reads. A page over either fails as too_large.
	MaxEngines int
	MaxSeries  int
}

// Collector scrapes every target in its own goroutine and sends one
// *collectors.MetricsScrape per scrape (plus a *collectors.SourceError when
// a page was read with problems).
type Collector struct {
	interval time.Duration
	targets  []*target
}

var _ collectors.Collector = (*Collector)(nil)

// New checks the options and prepares one HTTP client per target. Errors
// name the target.
func New(o Options) (*Collector, error) {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = DefaultBodyLimit
	}
	if o.MaxEngines <= 0 {
		o.MaxEngines = DefaultMaxEngines
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	c := &Collector{interval: o.Interval}
	names := map[string]bool{}
	for _, tg := range o.Targets {
		t, err := newTarget(tg, o)
		if err != nil {
			return nil, fmt.Errorf("metrics target %q: %w", tg.Name, err)
		}
		if names[tg.Name] {
			return nil, fmt.Errorf("metrics target %q: name used twice", tg.Name)
		}
		names[tg.Name] = true
		c.targets = append(c.targets, t)
	}
	return c, nil
}

func newTarget(tg Target, o Options) (*target, error) {
	if tg.Name == "" {
		return nil, fmt.Errorf("no name")
	}
	u, err := url.Parse(tg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q is not an http(s) URL", tg.URL)
	}
	if _, ok := groupOf(tg.Profile); !ok {
		return nil, fmt.Errorf("profile %q is not one of auto, %s, %s, %s, %s, %s, %s, %s", tg.Profile,
			ProfileVLLM, ProfileSGLang, ProfileVLLMRouter, ProfileSGLangRouter, ProfileDynamo, ProfileLLMDEPP, ProfileProductionStack)
	}
	if tg.BearerTokenFile != "" && tg.BearerTokenEnv != "" {
		return nil, fmt.Errorf("both bearer_token_file and bearer_token_env are set")
	}
	tlsConf := &tls.Config{InsecureSkipVerify: tg.InsecureSkipVerify} //nolint:gosec // the operator asked for it, per target
	if tg.CAFile != "" {
		pool, err := tlsca.Roots(tg.CAFile, false)
		if err != nil {
			return nil, tlsca.Setting("ca_file", err)
		}
		tlsConf.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	tr.DisableCompression = true // gzip is asked for and undone by hand, under the body limit
	tr.MaxIdleConnsPerHost = 2
	var rt http.RoundTripper = tr
	if tg.Transport != nil {
		rt = tg.Transport
	}
	return &target{
		Target: tg,
		shown:  shownURL(u),
		source: tg.Name + " metrics",
		// Redirects are not followed: Go's client would send the token on
		// to the same host on another port or path, or from https to http.
		client: &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		tokenWarning: TokenFileWarning(tg.BearerTokenFile),
		timeout:      o.Timeout,
		limit:        o.BodyLimit,
		budget:       budget{maxSeries: o.MaxSeries, maxEngines: o.MaxEngines, timeout: o.Timeout},
		parser:       NewParser(),
	}, nil
}

// TokenFileWarning says when a bearer_token_file can be read by group or
// others (any of the mode bits 0o077), as ssh does for keys: one line to
// print at start, "" when the mode is fine or the file cannot be looked
// at (a missing file is reported by every scrape).
func TokenFileWarning(path string) string { return secret.FileWarning("bearer_token_file", path) }

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "metrics" }

// Run scrapes until ctx is done; it returns nil then. Call it once.
func (c *Collector) Run(ctx context.Context, out chan<- collectors.Observation) error {
	var wg sync.WaitGroup
	for _, t := range c.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.loop(ctx, c.interval, out)
		}()
	}
	wg.Wait()
	for _, t := range c.targets {
		t.client.CloseIdleConnections()
	}
	return nil
}

// loop scrapes one target at every tick, the first one at once. A scrape
// longer than the interval makes the next one start right after it (ticks
// are not queued up).
func (t *target) loop(ctx context.Context, interval time.Duration, out chan<- collectors.Observation) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s, notes := t.scrape(ctx)
		if ctx.Err() != nil {
			return
		}
		if !send(ctx, out, s) {
			return
		}
		for _, n := range notes {
			if !send(ctx, out, n) {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func send(ctx context.Context, out chan<- collectors.Observation, o collectors.Observation) bool {
	select {
	case out <- o:
		return true
	case <-ctx.Done():
		return false
	}
}
