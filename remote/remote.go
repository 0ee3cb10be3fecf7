// Package remote is the console's snapshot source when it attaches to a
// collector (`kvtop --remote http://bastion:9470`): it reads the
// collector's /api/v1/snapshots stream (see package serve), decodes each
// line into a snapshot.Snapshot and hands it to the console, as the local pool
// would. It is one more snapshot source, never a second pool: nothing here
// builds a snapshot.
//
// It is read-only: it sends GET requests and nothing else. It reconnects
// with backoff when the collector goes, and says so (Banner, Status): the
// host, the connection state and the data's age on this machine's clock.
package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kvtop/kvtop/internal/tlsca"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views"
)

// StreamPath is the collector's snapshot stream.
const StreamPath = "/api/v1/snapshots"

// Defaults of Options.
const (
	DefaultMaxFrame   = 256 << 20 // one snapshot line; a 256-worker snapshot is ~2.5 MB
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	// DefaultIdle is how long a stream may stay silent before the collector
	// counts as lost, unless three of its refreshes are longer.
	DefaultIdle = 10 * time.Second
)

// Options configure a Source.
type Options struct {
	URL    string // the collector: http(s)://host:port (a path prefix is kept)
	Token  string // bearer token; sent only to URL's host
	CAFile string // PEM CA certificates to trust for https, besides the system's
	// Client replaces the HTTP client (its transport is kept; tests).
	Client     *http.Client
	MaxFrame   int
	MinBackoff time.Duration
	MaxBackoff time.Duration
	Idle       time.Duration
}

// Connection states, in Status.State.
const (
	StateConnecting   = "connecting"
	StateLive         = "live"
	StateReconnecting = "reconnecting"
)

// Status is what the console shows about the connection.
type Status struct {
	Host     string        // host:port of the collector
	State    string        // connecting | live | reconnecting
	Attempts int           // failed attempts since the stream was last live
	Err      string        // why the last attempt failed or the stream ended (cleaned)
	LostAt   time.Time     // when the stream ended (this machine's clock)
	Received time.Time     // when the last snapshot arrived (this machine's clock)
	Frames   uint64        // snapshots received since start
	Refresh  time.Duration // the collector's refresh, from its last snapshot
}

// Source is a tui.Source fed by a collector's stream.
type Source struct {
	o      Options
	stream string // the stream's URL
	host   string
	client *http.Client
	snaps  chan *snapshot.Snapshot
	now    func() time.Time

	mu     sync.Mutex
	st     Status
	last   *snapshot.Snapshot
	body   io.ReadCloser // opened by Connect, read by Run
	closed bool          // Snapshots is closed (Run returned)
}

// New checks the options; nothing is sent until Connect or Run.
func New(o Options) (*Source, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote %q: want http://host:port or https://host:port of a `kvtop serve`", o.URL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("remote %s: no user or password in the URL: use --auth-token-file", u.Redacted())
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	client := &http.Client{}
	if o.Client != nil {
		c := *o.Client
		client = &c
	}
	if o.CAFile != "" {
		roots, err := tlsca.Roots(o.CAFile, true)
		if err != nil {
			return nil, tlsca.Setting("remote CA file", err)
		}
		client.Transport = &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	}
	// The token goes to the collector only: never follow a redirect.
	client.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the collector redirects to %s: not followed (the token goes to --remote only)", req.URL.Redacted())
	}
	client.Timeout = 0 // a stream is long; the idle watchdog bounds silence
	u.Path = strings.TrimSuffix(u.Path, "/") + StreamPath
	u.RawQuery, u.Fragment = "", ""
	s := &Source{o: o, stream: u.String(), host: u.Host, client: client, snaps: make(chan *snapshot.Snapshot, 1), now: time.Now}
	s.st = Status{Host: u.Host, State: StateConnecting}
	return s, nil
}

// Host is the collector's host:port, for the header.
func (s *Source) Host() string { return s.host }

// Snapshots implements tui.Source. Like the pool's, it holds one snapshot
// and a newer one replaces it unread. While the data is stale (the stream
// is lost or silent) the last snapshot is delivered again every second, so
// the status line's age and state keep moving.
func (s *Source) Snapshots() <-chan *snapshot.Snapshot { return s.snaps }

// SetRefresh implements tui.Source and does nothing: the collector's
// refresh is its own (a console only reads). The console knows it from
// RemoteState and does not call this: its +/- say the refresh is set by
// the collector.
func (s *Source) SetRefresh(time.Duration) {}

// Status is the connection as of now.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// RemoteState is the header's view of the connection (tui.Remoter):
// the host, whether the stream is lost, and the data's age here.
func (s *Source) RemoteState() views.Remote {
	st := s.Status()
	r := views.Remote{Host: st.Host, Lost: st.State == StateReconnecting, Refresh: st.Refresh}
	if !st.Received.IsZero() {
		r.Age = s.now().Sub(st.Received)
	}
	return r
}

// Banner is the console's status-line context: "remote bastion:9470 ·
// live · data 0.4 s old", "… · lost 14:02:11: EOF · reconnecting (3) ·
// data 12 s old".
func (s *Source) Banner() string {
	st := s.Status()
	parts := []string{"remote " + st.Host}
	data := ""
	if !st.Received.IsZero() {
		data = "data " + age(s.now().Sub(st.Received)) + " old"
	}
	switch st.State {
	case StateLive:
		parts = append(parts, "live", data)
	case StateReconnecting:
		lost := "collector lost"
		if !st.LostAt.IsZero() {
			lost += " " + st.LostAt.Format("15:04:05")
		}
		// The age first: the reason can be long, and the line is cut.
		parts = append(parts, lost, data, fmt.Sprintf("reconnecting (%d): %s", st.Attempts, st.Err))
	default:
		c := "connecting"
		if st.Err != "" {
			c += fmt.Sprintf(" (%d): %s", st.Attempts, st.Err)
		}
		parts = append(parts, c, data)
	}
	out := parts[:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " · ")
}

func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// Connect opens the stream and reads its first snapshot, so the console
// can refuse to start on a wrong URL or token with a clear error instead
// of an empty screen. The stream lives on ctx; opening it and its first
// snapshot are bounded by the idle bound (plus the dial's own timeout).
// Run goes on from there.
func (s *Source) Connect(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(s.o.Idle, cancel)
	body, err := s.open(rctx)
	if expired := !timer.Stop(); err != nil && expired && ctx.Err() == nil {
		err = fmt.Errorf("no answer within %s", s.o.Idle)
	}
	if err == nil {
		r := newFrames(body, s.o.MaxFrame)
		var snap *snapshot.Snapshot
		if snap, err = s.firstFrame(ctx, body, r); err == nil {
			s.received(snap)
			s.mu.Lock()
			s.body = &framed{body, r, cancel}
			s.mu.Unlock()
			return nil
		}
		body.Close()
	}
	cancel()
	s.failed(err)
	return err
}

// firstFrame reads one frame within the idle bound.
func (s *Source) firstFrame(ctx context.Context, body io.Closer, r *frames) (*snapshot.Snapshot, error) {
	w := s.watch(ctx, body, s.o.Idle)
	defer w.stop()
	snap, err := r.next()
	if err != nil {
		return nil, w.reason(err)
	}
	return snap, nil
}

// Run reads the stream until ctx is done, reconnecting with backoff, then
// closes Snapshots. Call it once (after Connect, or instead of it).
func (s *Source) Run(ctx context.Context) {
	defer func() {
		s.mu.Lock() // no deliver is under way, and none will be
		s.closed = true
		close(s.snaps)
		s.mu.Unlock()
	}()
	go s.heartbeat(ctx)
	s.mu.Lock()
	body := s.body
	s.body = nil
	s.mu.Unlock()
	for ctx.Err() == nil {
		if body == nil {
			b, err := s.open(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.failed(err)
				if !s.sleep(ctx) {
					return
				}
				continue
			}
			body = b
		}
		err := s.read(ctx, body)
		body.Close()
		body = nil
		if ctx.Err() != nil {
			return
		}
		s.lost(err)
	}
}

// open starts one stream.
func (s *Source) open(ctx context.Context) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.stream, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	if s.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.o.Token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, errors.New(s.scrub(shortNetError(err)))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		text := strings.TrimPrefix(strings.TrimSpace(firstLine(string(msg))), "kvtop: ")
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			return nil, errors.New("unauthorized: give the token of the collector's --auth-token-file with --auth-token-file")
		case http.StatusNotFound:
			return nil, fmt.Errorf("%s is not a kvtop serve (404 for %s)", s.host, StreamPath)
		case http.StatusServiceUnavailable:
			return nil, errors.New("collector busy: " + s.scrub(text))
		}
		return nil, fmt.Errorf("collector answered %s: %s", resp.Status, s.scrub(text))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		resp.Body.Close()
		return nil, fmt.Errorf("%s is not a kvtop serve: %s answers %q, not a snapshot stream", s.host, StreamPath, s.scrub(ct))
	}
	return resp.Body, nil
}

// read delivers the stream's snapshots until it ends or stays silent
// longer than the idle bound.
func (s *Source) read(ctx context.Context, body io.ReadCloser) error {
	r := newFrames(body, s.o.MaxFrame)
	if f, ok := body.(*framed); ok {
		r = f.r
	}
	w := s.watch(ctx, body, s.idle())
	defer w.stop()
	for {
		snap, err := r.next()
		if err != nil {
			return w.reason(err)
		}
		s.received(snap)
		w.reset(s.idle())
	}
}

// idle is how long the stream may be silent: the default, or three of
// the collector's refreshes when they are longer.
func (s *Source) idle() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.o.Idle, 3*s.st.Refresh)
}

func (s *Source) received(snap *snapshot.Snapshot) {
	s.mu.Lock()
	s.last = snap
	s.st.State = StateLive
	s.st.Attempts = 0
	s.st.Err = ""
	s.st.Received = s.now()
	s.st.Frames++
	s.st.Refresh = time.Duration(snap.RefreshS * float64(time.Second))
	s.mu.Unlock()
	s.deliver(snap)
}

// failed notes an attempt that did not connect.
func (s *Source) failed(err error) {
	s.mu.Lock()
	s.st.Attempts++
	s.st.Err = s.scrub(err.Error())
	last := s.last
	s.mu.Unlock()
	s.deliver(last)
}

// lost notes a stream that ended.
func (s *Source) lost(err error) {
	msg := "the stream ended"
	if err != nil && !errors.Is(err, io.EOF) {
		msg = err.Error()
	}
	s.mu.Lock()
	s.st.State = StateReconnecting
	s.st.LostAt = s.now()
	s.st.Err = s.scrub(msg)
	last := s.last
	s.mu.Unlock()
	s.deliver(last)
}

// sleep waits the backoff of the current attempt; false when ctx ended.
func (s *Source) sleep(ctx context.Context) bool {
	s.mu.Lock()
	n := s.st.Attempts
	s.mu.Unlock()
	d := s.o.MinBackoff
	for i := 1; i < n && d < s.o.MaxBackoff; i++ {
		d *= 2
	}
	t := time.NewTimer(min(d, s.o.MaxBackoff))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// heartbeat re-delivers the last snapshot every second while it is
// stale, so the console re-asks the banner.
func (s *Source) heartbeat(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		last, st := s.last, s.st
		s.mu.Unlock()
		if last != nil && (st.State != StateLive || s.now().Sub(st.Received) > max(2*st.Refresh, 2*time.Second)) {
			s.deliver(last)
		}
	}
}

// deliver offers snap to the console, replacing an unread one.
func (s *Source) deliver(snap *snapshot.Snapshot) {
	if snap == nil {
		return
	}
	s.mu.Lock() // one deliverer at a time, so the drain below is safe
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.snaps <- snap:
		return
	default:
	}
	select {
	case <-s.snaps:
	default:
	}
	select {
	case s.snaps <- snap:
	default:
	}
}

// scrub makes text from the network or the transport safe for one status
// line, and keeps the token out of it.
func (s *Source) scrub(text string) string {
	if s.o.Token != "" {
		text = strings.ReplaceAll(text, s.o.Token, "<token>")
	}
	text = views.Clean(firstLine(text))
	if r := []rune(text); len(r) > 120 {
		text = string(r[:119]) + "…"
	}
	return text
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}

// shortNetError keeps what went wrong of a transport error ("connect:
// connection refused"), without the "Get "url": dial tcp host:" before it:
// the banner names the host already.
func shortNetError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// framed is a stream Connect opened, with the frames reader that holds
// what it read past the first frame.
type framed struct {
	io.ReadCloser
	r      *frames
	cancel context.CancelFunc // the request's
}

func (f *framed) Close() error {
	err := f.ReadCloser.Close()
	f.cancel()
	return err
}

// frames reads newline-delimited snapshots, each at most max bytes.
type frames struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newFrames(r io.Reader, max int) *frames {
	return &frames{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// errFrame is a line that is not a snapshot; the stream is dropped.
type errFrame struct{ msg string }

func (e errFrame) Error() string { return e.msg }

func (f *frames) next() (*snapshot.Snapshot, error) {
	var line []byte
	for len(line) == 0 { // blank lines (a keep-alive) are skipped
		f.buf = f.buf[:0]
		for {
			chunk, err := f.r.ReadSlice('\n')
			if len(f.buf)+len(chunk) > f.max {
				return nil, errFrame{fmt.Sprintf("a snapshot line longer than %d MB: not a kvtop stream", max(1, f.max>>20))}
			}
			f.buf = append(f.buf, chunk...)
			if err == nil {
				break
			}
			if err != bufio.ErrBufferFull {
				return nil, err
			}
		}
		line = bytes.TrimSpace(f.buf)
	}
	var snap snapshot.Snapshot
	if err := json.Unmarshal(line, &snap); err != nil {
		return nil, errFrame{"not a snapshot: " + err.Error()}
	}
	Localize(&snap)
	// Keep the buffer of ordinary frames, not of one huge burst.
	if cap(f.buf) > 16<<20 {
		f.buf = nil
	}
	return &snap, nil
}

// watchdog closes a stream that stays silent too long, and remembers why.
type watchdog struct {
	t      *time.Timer
	mu     sync.Mutex
	why    string
	ctxEnd func() bool
}

func (s *Source) watch(ctx context.Context, body io.Closer, d time.Duration) *watchdog {
	w := &watchdog{}
	w.t = time.AfterFunc(d, func() {
		w.mu.Lock()
		w.why = fmt.Sprintf("no snapshot for %s", d.Round(time.Second))
		w.mu.Unlock()
		body.Close()
	})
	stop := context.AfterFunc(ctx, func() { body.Close() })
	w.ctxEnd = stop
	return w
}

func (w *watchdog) reset(d time.Duration) { w.t.Reset(d) }

func (w *watchdog) stop() {
	w.t.Stop()
	w.ctxEnd()
}

// reason is err, or the watchdog's reason when it closed the stream.
func (w *watchdog) reason(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.why != "" {
		return errors.New(w.why)
	}
	return err
}
