// Package tap is kvtop's client-side observer: an OpenAI-compatible
// pass-through that forwards every byte as it arrives and records, per
// request, what the client received — the first content token, gaps in the
// stream, and whether the stream really ended (finish_reason and
// data: [DONE]) — without ever keeping prompt or completion text.
package tap

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	DefaultBreakAfter     = time.Second
	DefaultIdleTimeout    = 10 * time.Minute
	DefaultStreamBuffer   = 1 << 20
	DefaultStreamReserve  = 64 << 10
	DefaultSharedBuffer   = 256 << 20
	DefaultMaxRequestBody = 8 << 20
	DefaultMaxResponse    = 4 << 20
	// readSize is one read of the upstream's body: an SSE chunk is a few
	// hundred bytes; a larger read buffer is memory every open stream
	// holds while it waits.
	readSize = 8 << 10
)

// DefaultWorkerHeaders are the response headers that name the serving
// worker, first found wins (PROTOCOLS.md §13): the SGLang model gateway's
// x-smg-routed-worker-id, and the Gateway API Inference Extension's
// destination endpoint when a gateway is set up to return it (it is a
// request header toward the model server: tap behind the gateway, or a
// response header the gateway adds). vllm-router and production-stack name
// no worker; Dynamo names it in the body (nvext.worker_id) when the client
// asks for it, and tap reads that too.
var DefaultWorkerHeaders = []string{"x-smg-routed-worker-id", "x-gateway-destination-endpoint-served", "x-gateway-destination-endpoint"}

// Options configure a Proxy.
type Options struct {
	Upstream string // base URL of the router (or engine): http://router:8000
	Name     string // the tap's name, in records
	// Sample is the share of inspected requests recorded, 0 < Sample ≤ 1
	// (0 means 1): chosen by a hash of the request id, so taps with the
	// same share agree.
	Sample float64
	// BreakAfter is the gap between reads, after the first content, that
	// counts as a streaming break.
	BreakAfter time.Duration
	// IdleTimeout ends a response that sends nothing for this long (0:
	// never).
	IdleTimeout time.Duration
	// StreamReserve, StreamBuffer and SharedBuffer bound what a slow
	// client makes tap hold (pipe.go): each stream may queue its reserve,
	// then up to StreamBuffer out of SharedBuffer for all.
	StreamReserve, StreamBuffer int
	SharedBuffer                int64
	// MaxRequestBody is the largest request body tap reads to measure the
	// prompt; a larger one is forwarded unread. MaxResponse is the same
	// for a response that does not stream.
	MaxRequestBody, MaxResponse int
	// WorkerHeaders name the serving worker (DefaultWorkerHeaders).
	WorkerHeaders []string
	// FingerprintKey keys the prefix fingerprint (NewFingerprintKey).
	FingerprintKey []byte
	// Record receives each recorded request once it ended, on the
	// request's goroutine.
	Record func(*Record)
	// Transport reaches the upstream (default: a tuned http.Transport).
	Transport http.RoundTripper

	// Measuring tap's own part of the latency (bench_test.go): the time
	// from a request's arrival to its forwarding, and from a read of the
	// upstream to its flush to the client.
	onForward, onHop func(time.Duration)
}

// Proxy is the pass-through, an http.Handler.
type Proxy struct {
	o        Options
	up       *url.URL
	shared   *budget
	inflight atomic.Int64
	bufs     sync.Pool
	stats    counters
}

// inspected are the paths whose requests tap reads and records; anything
// else is forwarded untouched.
var inspected = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/responses": true}

// New checks o and returns a Proxy.
func New(o Options) (*Proxy, error) {
	u, err := url.Parse(o.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q: want http://host:port or https://host:port", o.Upstream)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream %q: a base URL has no query or fragment", o.Upstream)
	}
	if o.Sample < 0 || o.Sample > 1 || math.IsNaN(o.Sample) {
		return nil, fmt.Errorf("sample %g: want a share between 0 and 1 (0.1 records one request in ten)", o.Sample)
	}
	if o.Sample == 0 {
		o.Sample = 1
	}
	if o.BreakAfter <= 0 {
		o.BreakAfter = DefaultBreakAfter
	}
	if o.IdleTimeout < 0 {
		return nil, fmt.Errorf("idle timeout %s: want 0 (none) or more", o.IdleTimeout)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.StreamReserve, DefaultStreamReserve)
	def(&o.StreamBuffer, DefaultStreamBuffer)
	def(&o.MaxRequestBody, DefaultMaxRequestBody)
	def(&o.MaxResponse, DefaultMaxResponse)
	if o.StreamBuffer < o.StreamReserve {
		o.StreamBuffer = o.StreamReserve
	}
	if o.SharedBuffer <= 0 {
		o.SharedBuffer = DefaultSharedBuffer
	}
	if o.WorkerHeaders == nil {
		o.WorkerHeaders = DefaultWorkerHeaders
	}
	if len(o.FingerprintKey) == 0 {
		o.FingerprintKey = NewFingerprintKey()
	}
	if o.Record == nil {
		o.Record = func(*Record) {}
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	p := &Proxy{o: o, up: u, shared: newBudget(o.SharedBuffer)}
	p.bufs.New = func() any { b := make([]byte, readSize); return &b }
	return p, nil
}

// NewTransport is the upstream transport: many idle connections to one
// host (every stream is one), no compression of its own (bytes pass as
// the upstream sent them), no response-header timeout (a long prompt's
// prefill, or a whole non-streamed answer, comes before the headers).
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil, // the upstream is reached directly
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   4096,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// hopHeaders are not forwarded (RFC 9110 §7.6.1), nor those a Connection
// header names.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k][:0:0], vs...)
	}
	for _, f := range src["Connection"] {
		for _, name := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(name))
		}
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// maxIDBytes bounds a request id tap records (the header is forwarded
// whole).
const maxIDBytes = 200

// requestID is the client's x-request-id, else a new one.
func requestID(h http.Header) (id string, generated bool) {
	if id = h.Get("X-Request-Id"); id != "" {
		if len(id) > maxIDBytes {
			id = id[:maxIDBytes]
		}
		return id, false
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "tap-" + hex.EncodeToString(b[:]), true
}

// sampled: the request id falls in the recorded share.
func (p *Proxy) sampled(id string) bool {
	if p.o.Sample >= 1 {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	x := h.Sum64() // FNV's high bits mix poorly for ids that differ at the end: finish with splitmix64's
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/(1<<53) < p.o.Sample
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	p.stats.requests.Add(1)
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	id, generated := requestID(r.Header)
	var rec *Record
	if inspected[r.URL.Path] && r.Method == http.MethodPost {
		if p.sampled(id) {
			rec = &Record{Tap: p.o.Name, RequestID: id, GeneratedID: generated, Arrived: arrived, Endpoint: r.URL.Path}
		} else {
			p.stats.unsampled.Add(1)
		}
	}
	body := r.Body
	if rec != nil {
		body = p.readRequest(r, rec)
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target(r.URL), body)
	if err != nil { // cannot happen: the URL is built from a parsed one
		http.Error(w, "kvtop tap: "+err.Error(), http.StatusBadGateway)
		return
	}
	copyHeaders(out.Header, r.Header)
	if generated {
		out.Header.Set("X-Request-Id", id) // so the router's records carry it
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := out.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	out.ContentLength = r.ContentLength
	if rec != nil && rec.bodyLen >= 0 {
		out.ContentLength = rec.bodyLen // read whole: its length is known
	}
	if out.ContentLength == 0 {
		out.Body = http.NoBody
	}

	if p.o.onForward != nil {
		p.o.onForward(time.Since(arrived))
	}
	resp, err := p.o.Transport.RoundTrip(out)
	if err != nil {
		p.noResponse(w, r, rec, err)
		return
	}
	defer resp.Body.Close()
	if rec != nil {
		rec.HTTPStatus = resp.StatusCode
		rec.TTFB = since(rec.Arrived)
		rec.Worker, rec.WorkerFrom = p.worker(resp.Header)
	}
	copyHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)

	var wt *watch
	if rec != nil {
		wt = p.watchFor(rec, resp)
	}
	end, pp := p.relay(ctx, cancel, w, r, resp, wt)
	if rec != nil {
		p.finish(rec, wt, pp, end)
	}
	switch end {
	case EndReset, EndTimeout:
		// The client sees the break the upstream made: its response is
		// cut, not ended cleanly (which it would take for a finished one).
		panic(http.ErrAbortHandler)
	}
}

func (p *Proxy) target(u *url.URL) string {
	t := *p.up
	t.Path = p.up.Path + u.Path
	t.RawPath = ""
	if u.RawPath != "" {
		t.RawPath = p.up.EscapedPath() + u.RawPath
	}
	t.RawQuery = u.RawQuery
	return t.String()
}

// readRequest reads the body to measure the prompt, within MaxRequestBody
// and the shared budget; what it cannot read is forwarded unread.
func (p *Proxy) readRequest(r *http.Request, rec *Record) io.ReadCloser {
	rec.bodyLen = -1
	limit := int64(p.o.MaxRequestBody)
	if r.ContentLength > limit {
		rec.Unread = "request body over " + size(limit)
		return r.Body
	}
	want := limit + 1
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	if !p.shared.take(want) {
		rec.Unread = "request body not read: the shared buffer is in use by slow clients"
		return r.Body
	}
	defer p.shared.give(want)
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil || int64(len(buf)) > limit {
		// Still forwarded whole: what was read, then the rest.
		if err == nil {
			rec.Unread = "request body over " + size(limit)
		} else {
			rec.Unread = "request body cut short by the client"
		}
		return readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	}
	rec.bodyLen = int64(len(buf))
	m, perr := parseRequest(buf, rec.Endpoint, p.o.FingerprintKey)
	if perr != nil {
		rec.Unread = perr.Error()
	} else {
		rec.Model, rec.Stream, rec.PromptChars, rec.PrefixFP = m.model, m.stream, m.chars, m.fp
	}
	return io.NopCloser(bytes.NewReader(buf))
}

type readCloser struct {
	io.Reader
	io.Closer
}

func size(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n>>10, 10) + " KiB"
}

// noResponse answers 502 when the upstream sent no response (or notes
// that the client left while waiting for one).
func (p *Proxy) noResponse(w http.ResponseWriter, r *http.Request, rec *Record, err error) {
	end := EndNoResponse
	if r.Context().Err() != nil {
		end = EndClientGone
	} else {
		// The cause names the upstream and the failure; no header or
		// body is quoted.
		http.Error(w, "kvtop tap: no response from the upstream "+p.up.Host+": "+errClass(err), http.StatusBadGateway)
	}
	if rec != nil {
		rec.End, rec.Ended = end, time.Now()
		p.stats.count(rec)
		p.o.Record(rec)
	}
}

// errClass words a transport error without quoting anything the peer sent.
func errClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before the response headers"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "host not found"
	}
	return "connection failed"
}

// worker reads the serving worker from the response headers.
func (p *Proxy) worker(h http.Header) (string, string) {
	for _, name := range p.o.WorkerHeaders {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			if i := strings.IndexByte(v, ','); i >= 0 { // a list: the first was served
				v = strings.TrimSpace(v[:i])
			}
			if len(v) > maxIDBytes {
				v = v[:maxIDBytes]
			}
			return v, strings.ToLower(name)
		}
	}
	return "", ""
}

func since(t time.Time) *time.Duration {
	d := time.Since(t)
	return &d
}
