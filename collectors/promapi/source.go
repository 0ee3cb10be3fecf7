package promapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/metrics"
)

// Defaults for Options fields left zero.
const (
	DefaultWorkerLabel = "pod"
	DefaultInterval    = time.Second
	DefaultTimeout     = 5 * time.Second
	DefaultBodyLimit   = 64 << 20
	DefaultMaxWorkers  = 4096
)

// Via is what a scrape read through this source says about its origin.
const Via = "prometheus"

// Worker is a configured worker: the label values it answers to are its
// name and its aliases (the pool maps them the same way).
type Worker struct {
	Name    string
	Aliases []string
}

// Options configure the source. Zero fields take the defaults.
type Options struct {
	URL         string // Prometheus, Thanos Query or Mimir query base URL
	Selector    string // label matchers in braces, e.g. {namespace="llm",pod=~"vllm-.*"}
	WorkerLabel string // the label that names a worker (default pod)
	Workers     []Worker
	// Exclude lists label values of workers kvtop scrapes itself (their
	// own metrics URL): their series in Prometheus are not read.
	Exclude  []string
	Profile  string        // engine profile: "" or auto (detect), vllm, sglang
	Interval time.Duration // between refreshes (kvtop's scrape_interval)
	Timeout  time.Duration // per query, also asked of the server
	// Window is the pool's rate window: a window shorter than two of
	// Prometheus' scrapes is said on screen, since no rate can be finer.
	Window time.Duration
	// Bearer token from a file (re-read every query) or an environment
	// variable; never logged. CAFile verifies the server.
	BearerTokenFile, BearerTokenEnv string
	CAFile                          string
	InsecureSkipVerify              bool
	BodyLimit                       int64 // bytes per answer
	MaxWorkers                      int   // distinct label values kept
}

// Source reads worker metrics through the Prometheus HTTP API and sends
// them as *collectors.MetricsScrape, one per Prometheus scrape of a
// worker. It implements collectors.Collector.
type Source struct {
	o      Options
	shown  string // URL for messages
	source string // SourceError.Source of query problems
	q      *queries
	client api.Client
	tr     *transport
	ans    answer // the data query's answer, reused
	status answer // the targets query's
	parser *metrics.Parser
	page   []byte

	workers map[string]*workerState
	absent  map[string]bool // configured workers reported absent
	exclude map[string]bool
	// failing is when the queries began to fail (zero while they work),
	// fails how many refreshes failed since; downSent: the workers were
	// marked down for it.
	failing  time.Time
	fails    int
	downSent bool
	told     map[string]time.Time // rate limit of repeated notes, by text
	warnedW  time.Duration        // window warning sent for this interval
}

// workerState is what the source remembers of one label value.
type workerState struct {
	lastTS   float64 // Prometheus' time of the last scrape handed over (unix s)
	up       bool
	absent   bool
	deltas   [4]float64 // recent spacings of its scrapes, seconds
	nDeltas  int
	interval time.Duration
}

var _ collectors.Collector = (*Source)(nil)

// New checks the options. Errors name the key at fault.
func New(o Options) (*Source, error) {
	if o.WorkerLabel == "" {
		o.WorkerLabel = DefaultWorkerLabel
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = DefaultBodyLimit
	}
	if o.MaxWorkers <= 0 {
		o.MaxWorkers = DefaultMaxWorkers
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheus: %q is not an http(s) URL", o.URL)
	}
	if !labelName.MatchString(o.WorkerLabel) {
		return nil, fmt.Errorf("worker_label: %q is not a Prometheus label name", o.WorkerLabel)
	}
	inner, err := parseSelector(o.Selector)
	if err != nil {
		return nil, err
	}
	switch o.Profile {
	case "", "auto", metrics.ProfileVLLM, metrics.ProfileVLLMLegacy, metrics.ProfileSGLang:
	default:
		return nil, fmt.Errorf("engine: %q is not one of auto, %s, %s", o.Profile, metrics.ProfileVLLM, metrics.ProfileSGLang)
	}
	tr, err := newTransport(&o)
	if err != nil {
		return nil, err
	}
	client, err := api.NewClient(api.Config{Address: o.URL, Client: &http.Client{Transport: tr}})
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	s := &Source{
		o: o, shown: shownURL(u), q: newQueries(inner, o.WorkerLabel), client: client, tr: tr,
		parser: metrics.NewParser(), workers: map[string]*workerState{}, absent: map[string]bool{},
		told: map[string]time.Time{}, exclude: map[string]bool{},
	}
	for _, x := range o.Exclude {
		s.exclude[x] = true
	}
	s.source = "prometheus " + s.shown
	return s, nil
}

// Name implements collectors.Collector.
func (s *Source) Name() string { return "prometheus" }

// Run refreshes every Interval until ctx is done, the first at once. A
// refresh longer than the interval makes the next start right after it.
func (s *Source) Run(ctx context.Context, out chan<- collectors.Observation) error {
	defer s.tr.closeIdle()
	if w := TokenFileWarning(s.o.BearerTokenFile); w != "" {
		if !send(ctx, out, s.note("config", "%s", w)) {
			return nil
		}
	}
	tick := time.NewTicker(s.o.Interval)
	defer tick.Stop()
	for {
		for _, o := range s.refresh(ctx) {
			if !send(ctx, out, o) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
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

// status is the per-refresh answer about one worker.
type status struct {
	up, hasUp bool
	ts        float64
}

// refresh is one round: the targets query, then the series of the workers
// Prometheus scraped since the last round. It returns the observations to
// send, in order.
func (s *Source) refresh(ctx context.Context) []collectors.Observation {
	var out []collectors.Observation
	start := time.Now()
	warns, err := s.queryRaw(ctx, s.q.status, &s.status)
	if err != nil {
		return s.failed(err, start)
	}
	out = append(out, s.warnings(warns, start)...)
	if s.downSent {
		out = append(out, s.note("refused", "answering again after failing since %s", s.failing.Format("15:04:05")))
	}
	s.failing, s.fails, s.downSent = time.Time{}, 0, false

	seen := map[string]*status{}
	unlabelled := 0
	for i := range s.status.samples {
		smp := &s.status.samples[i]
		w := smp.label(s.o.WorkerLabel)
		if w == "" {
			unlabelled++
			continue
		}
		if s.exclude[w] {
			continue
		}
		st := seen[w]
		if st == nil {
			if len(seen) >= s.o.MaxWorkers {
				continue
			}
			st = &status{}
			seen[w] = st
		}
		if smp.label(qLabel) == "ts" {
			st.ts = smp.value
		} else {
			st.up, st.hasUp = smp.value >= 1, true
		}
	}
	if unlabelled > 0 {
		out = append(out, s.noteOnce("config", "%d series of up%s carry no %s label: those targets are not workers",
			unlabelled, s.selectorText(), s.o.WorkerLabel)...)
	}
	if len(seen) >= s.o.MaxWorkers {
		out = append(out, s.noteOnce("too_large", "the selector matches more than %d workers (%s values); the rest are not read",
			s.o.MaxWorkers, s.o.WorkerLabel)...)
	}

	// Workers that vanished from Prometheus' answer are down: their pod
	// went away, or Prometheus no longer scrapes it.
	now := time.Now()
	for w, ws := range s.workers {
		if seen[w] == nil && !ws.absent {
			ws.absent, ws.up = true, false
			out = append(out, s.down(w, "absent", now, fmt.Sprintf("absent in Prometheus: no up series with %s=%q matches %s (pod deleted, or no longer scraped)",
				s.o.WorkerLabel, w, s.selectorText())))
		}
	}
	for _, cw := range s.o.Workers {
		present := seen[cw.Name] != nil
		for _, a := range cw.Aliases {
			present = present || seen[a] != nil
		}
		switch {
		case present:
			delete(s.absent, cw.Name)
		case !s.absent[cw.Name] && s.workers[cw.Name] == nil:
			s.absent[cw.Name] = true
			out = append(out, s.down(cw.Name, "absent", now, fmt.Sprintf("absent in Prometheus: no up series with %s=%q (or an alias) matches %s",
				s.o.WorkerLabel, cw.Name, s.selectorText())))
		}
	}

	var changed []string
	for w, st := range seen {
		ws := s.workers[w]
		if ws == nil {
			ws = &workerState{}
			s.workers[w] = ws
		}
		ws.absent = false
		if !st.hasUp || st.ts <= ws.lastTS {
			continue
		}
		if !st.up {
			ws.advance(st.ts)
			ws.up = false
			out = append(out, s.down(w, "refused", ageTime(now, s.status.evalSec, st.ts), fmt.Sprintf("Prometheus cannot scrape it (up = 0 at %s, Prometheus' clock); its targets page says why",
				time.Unix(0, int64(st.ts*1e9)).Format("15:04:05"))))
			continue
		}
		changed = append(changed, w)
	}
	if len(changed) == 0 {
		return append(out, s.windowNote()...)
	}
	sort.Strings(changed)
	out = append(out, s.fetch(ctx, changed, len(seen))...)
	return append(out, s.windowNote()...)
}

// fetchChunk bounds the workers named in one data query: each answer
// (and Prometheus' work for it) stays a few megabytes, whatever the pool.
const fetchChunk = 256

// fetch reads the series of the workers whose scrape is new, by name, a
// chunk at a time.
func (s *Source) fetch(ctx context.Context, changed []string, _ int) []collectors.Observation {
	var out []collectors.Observation
	want := map[string]bool{}
	for _, w := range changed {
		want[w] = true
	}
	var batches [][]string
	for i := 0; i < len(changed); i += fetchChunk {
		batches = append(batches, changed[i:min(i+fetchChunk, len(changed))])
	}
	for _, b := range batches {
		start := time.Now()
		warns, err := s.queryRaw(ctx, s.q.data(b), &s.ans)
		if err != nil {
			return append(out, s.failed(err, start)...)
		}
		out = append(out, s.warnings(warns, start)...)
		out = append(out, s.scrapes(&s.ans, want, time.Now())...)
	}
	return out
}

// workerAnswer collects one worker's part of a data answer.
type workerAnswer struct {
	series  []*asample
	target  map[string]bool // labels Prometheus put on its targets
	ts      float64
	dur     float64
	hasDur  bool
	skipped int // native histogram samples: not a classic page
}

// scrapes turns a data answer into one MetricsScrape per wanted worker
// whose scrape is newer than the last one handed over.
func (s *Source) scrapes(ans *answer, want map[string]bool, recv time.Time) []collectors.Observation {
	label := s.o.WorkerLabel
	byW := map[string]*workerAnswer{}
	for i := range ans.samples {
		smp := &ans.samples[i]
		w := smp.label(label)
		if !want[w] {
			continue
		}
		a := byW[w]
		if a == nil {
			a = &workerAnswer{target: map[string]bool{label: true}}
			byW[w] = a
		}
		switch name := smp.label(model.MetricNameLabel); {
		case smp.label(qLabel) == "ts":
			a.ts = max(a.ts, smp.value)
		case name == "up":
			for _, l := range smp.labels {
				a.target[l.name] = true
			}
		case name == "scrape_duration_seconds":
			a.dur, a.hasDur = max(a.dur, smp.value), true
		case smp.hist:
			a.skipped++
		default:
			a.series = append(a.series, smp)
		}
	}
	names := make([]string, 0, len(byW))
	for w := range byW {
		names = append(names, w)
	}
	sort.Strings(names)
	var out []collectors.Observation
	for _, w := range names {
		a := byW[w]
		ws := s.workers[w]
		if ws == nil || a.ts <= ws.lastTS {
			continue // not newer than what was handed over
		}
		ws.advance(a.ts)
		ws.up = true
		out = append(out, s.scrape(w, a, ws, ageTime(recv, ans.evalSec, a.ts))...)
	}
	return out
}

// scrape parses one worker's series as the page its engine served.
func (s *Source) scrape(w string, a *workerAnswer, ws *workerState, at time.Time) []collectors.Observation {
	ss := make([]series, 0, len(a.series))
	for _, smp := range a.series {
		sr := series{value: smp.value}
		for _, l := range smp.labels {
			switch {
			case l.name == model.MetricNameLabel:
				sr.name = l.value
			case !a.target[l.name]:
				sr.labels = append(sr.labels, l)
			}
		}
		slices.SortFunc(sr.labels, func(x, y lpair) int { return strings.Compare(x.name, y.name) })
		ss = append(ss, sr)
	}
	s.page = writePage(s.page, ss)
	m := &collectors.MetricsScrape{
		Target: w, Role: collectors.RoleWorker, URL: s.shown + " " + s.o.WorkerLabel + "=" + w,
		At: at, Via: Via, Interval: ws.interval,
	}
	if a.hasDur {
		m.Duration = time.Duration(a.dur * float64(time.Second))
	}
	src := w + " metrics (prometheus)"
	page, err := s.parser.Parse(s.page, "text/plain; version=0.0.4", collectors.RoleWorker, s.o.Profile)
	if err != nil {
		kind := "parse"
		if strings.Contains(err.Error(), "over the limit") {
			kind = "too_large"
		}
		m.Err = &collectors.SourceError{Source: src, Kind: kind, At: at,
			Message: fmt.Sprintf("%s's series in Prometheus: %s", w, oneLine(err.Error()))}
		return []collectors.Observation{m}
	}
	m.Profile, m.ProcessStart, m.Engines, m.WorkerTotals, m.Router, m.Skipped, m.Invalid =
		page.Profile, page.ProcessStart, page.Engines, page.WorkerTotals, page.Router, page.Skipped+a.skipped, page.Invalid
	out := []collectors.Observation{m}
	if a.skipped > 0 {
		out = append(out, &collectors.SourceError{Source: src, Kind: "parse", At: at,
			Message: fmt.Sprintf("%d native histogram sample(s) skipped: kvtop reads classic buckets", a.skipped)})
	}
	if len(page.Warnings) > 0 {
		out = append(out, &collectors.SourceError{Source: src, Kind: "parse", At: at, Message: page.Warnings[0]})
	}
	if len(page.Invalid) > 0 {
		out = append(out, &collectors.SourceError{Source: src, Kind: "invalid", At: at, Message: page.Invalid[0].Note})
	}
	return out
}

// advance records a new scrape time and learns the interval: the median
// of the recent spacings of the scrapes kvtop was handed (the lower one of
// an even count), to 0.1 s: Prometheus' start times jitter by
// milliseconds. It is the spacing behind the pool's windows, so a refresh
// slower than Prometheus' scrapes, which sees only some of them, reports
// that wider spacing: never finer than what the figures rest on.
func (ws *workerState) advance(ts float64) {
	if ws.lastTS > 0 {
		ws.deltas[ws.nDeltas%len(ws.deltas)] = ts - ws.lastTS
		ws.nDeltas++
		n := min(ws.nDeltas, len(ws.deltas))
		d := append([]float64(nil), ws.deltas[:n]...)
		slices.Sort(d)
		m := max(math.Round(d[(n-1)/2]*10)/10, 0.1)
		ws.interval = time.Duration(m * float64(time.Second))
	}
	ws.lastTS = ts
}

// ageTime places Prometheus' scrape time ts on kvtop's clock: the
// answer's arrival minus the data's age, both ages measured on
// Prometheus' clock (its evaluation time minus its sample time). Clocks
// are never compared: only a duration crosses over.
func ageTime(recv time.Time, eval, ts float64) time.Time {
	age := time.Duration((eval - ts) * float64(time.Second))
	if age < 0 || eval == 0 {
		age = 0
	}
	return recv.Add(-age)
}

// down is a failed scrape of one worker: the pool shows it down with why.
func (s *Source) down(w, kind string, at time.Time, msg string) *collectors.MetricsScrape {
	return &collectors.MetricsScrape{
		Target: w, Role: collectors.RoleWorker, URL: s.shown + " " + s.o.WorkerLabel + "=" + w, At: at, Via: Via,
		Err: &collectors.SourceError{Source: w + " metrics (prometheus)", Kind: kind, Message: msg, At: at},
	}
}

// staleAfter is how long the queries may fail before the workers they
// feed are shown down: their last figures are still recent until then.
func (s *Source) staleAfter() time.Duration {
	d := 3 * s.o.Interval
	for _, ws := range s.workers {
		d = max(d, 2*ws.interval)
	}
	return max(d, 5*time.Second)
}

// failed reports a failed query. Past staleAfter every worker it feeds is
// marked down, once, with the reason: kvtop cannot see them.
func (s *Source) failed(err error, start time.Time) []collectors.Observation {
	now := time.Now()
	kind, msg := s.classify(err)
	out := []collectors.Observation{s.note(kind, "%s", msg)}
	if s.failing.IsZero() {
		s.failing = start
	}
	// Two failed refreshes at least: one slow answer is not an outage.
	if s.fails++; !s.downSent && s.fails >= 2 && now.Sub(s.failing) >= s.staleAfter() {
		s.downSent = true
		names := make([]string, 0, len(s.workers))
		for w, ws := range s.workers {
			if !ws.absent {
				names = append(names, w)
			}
		}
		sort.Strings(names)
		for _, w := range names {
			s.workers[w].up = false
			out = append(out, s.down(w, kind, now, "Prometheus is not answering: "+msg))
		}
	}
	return out
}

// warnings reports a partial answer (Prometheus warnings, a Thanos or
// Mimir store that did not answer): the figures may miss some workers.
func (s *Source) warnings(w v1.Warnings, at time.Time) []collectors.Observation {
	if len(w) == 0 {
		return nil
	}
	msg := oneLine(w[0])
	if len(w) > 1 {
		msg += fmt.Sprintf(" (and %d more)", len(w)-1)
	}
	return s.noteOnce("partial", "partial answer: %s", truncate(msg, 300))
}

// windowNote says once per interval when the pool's window is shorter
// than two of Prometheus' scrapes: its rates then average over longer
// than the window says.
func (s *Source) windowNote() []collectors.Observation {
	var iv time.Duration
	for _, ws := range s.workers {
		iv = max(iv, ws.interval)
	}
	if s.o.Window <= 0 || iv == 0 || s.o.Window >= 2*iv || iv == s.warnedW {
		return nil
	}
	s.warnedW = iv
	return []collectors.Observation{s.note("config", "window %s is shorter than two of Prometheus' scrapes (%s): rates cover at least %s; set window to %s or more",
		s.o.Window, iv, 2*iv, 2*iv)}
}

func (s *Source) selectorText() string {
	if s.q.inner == "" {
		return "(no selector)"
	}
	return "{" + s.q.inner + "}"
}

func (s *Source) note(kind, format string, args ...any) *collectors.SourceError {
	return &collectors.SourceError{Source: s.source, Kind: kind, Message: fmt.Sprintf(format, args...), At: time.Now()}
}

// noteOnce is note, at most once a minute per text: a partial answer
// repeats every refresh.
func (s *Source) noteOnce(kind, format string, args ...any) []collectors.Observation {
	n := s.note(kind, format, args...)
	if last, ok := s.told[n.Message]; ok && n.At.Sub(last) < time.Minute {
		return nil
	}
	if len(s.told) > 64 {
		clear(s.told)
	}
	s.told[n.Message] = n.At
	return []collectors.Observation{n}
}

// classify names a failed query in the SourceError kinds.
func (s *Source) classify(err error) (kind, msg string) {
	var ae *v1.Error
	var ue *url.Error
	var re *redirectError
	var te *tokenError
	switch {
	case errors.As(err, &te):
		return "config", te.msg
	case errors.As(err, &re):
		return "redirect", fmt.Sprintf("POST %s/api/v1/query: %s", s.shown, re.Error())
	case errors.Is(err, errTooLarge):
		return "too_large", fmt.Sprintf("an answer from %s is over %d bytes: the selector matches too much", s.shown, s.o.BodyLimit)
	case errors.As(err, &ae):
		if ae.Type == v1.ErrServer || ae.Type == v1.ErrClient {
			// Prometheus answers a timed-out query 503 with an API error
			// body, which the client leaves in Detail.
			var body struct {
				Type  v1.ErrorType `json:"errorType"`
				Error string       `json:"error"`
			}
			if json.Unmarshal([]byte(ae.Detail), &body) == nil && body.Type != "" {
				ae = &v1.Error{Type: body.Type, Msg: body.Error}
			}
		}
		switch ae.Type {
		case v1.ErrBadData:
			return "config", fmt.Sprintf("%s rejected kvtop's query: %s (check selector %s and worker_label %s)",
				s.shown, truncate(oneLine(ae.Msg), 200), s.selectorText(), s.o.WorkerLabel)
		case v1.ErrTimeout, v1.ErrCanceled:
			return "timeout", fmt.Sprintf("%s: query timed out on the server (%s)", s.shown, truncate(oneLine(ae.Msg), 200))
		case v1.ErrBadResponse:
			if errors.As(err, &ue) || strings.Contains(ae.Msg, "bad response code") {
				return "http_status", fmt.Sprintf("%s: %s", s.shown, truncate(oneLine(ae.Msg), 200))
			}
			return "parse", fmt.Sprintf("%s: answer is not a Prometheus API response (%s)", s.shown, truncate(oneLine(ae.Msg), 200))
		}
		return "http_status", fmt.Sprintf("%s: %s: %s", s.shown, ae.Type, truncate(oneLine(ae.Msg), 200))
	}
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if isTimeout(err) {
		return "timeout", fmt.Sprintf("%s: no answer within %s", s.shown, s.o.Timeout)
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		verifyErr *tls.CertificateVerificationError
		recordErr tls.RecordHeaderError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalid) ||
		errors.As(err, &verifyErr) || errors.As(err, &recordErr) {
		return "tls", fmt.Sprintf("%s: %s", s.shown, truncate(oneLine(err.Error()), 200))
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "refused", fmt.Sprintf("%s: connection refused", s.shown)
	}
	return "refused", fmt.Sprintf("%s: %s", s.shown, truncate(oneLine(err.Error()), 200))
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
