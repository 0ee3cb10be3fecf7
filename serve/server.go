// Package serve is kvtop's headless face: the HTTP server of `kvtop serve`.
// It reads only the pool's snapshots (DESIGN.md, "Faces only read
// Snapshots") and serves
//
//	/metrics            the latest snapshot in the Prometheus text format
//	/api/v1/snapshot    the latest snapshot, in the JSON contract of `kvtop snapshot`
//	/api/v1/snapshots   newline-delimited JSON, one snapshot per refresh
//	/healthz            whether the pool publishes (never authenticated)
//
// Every endpoint but /healthz wants the bearer token when one is set. A
// slow stream client never slows the pool or the other clients: frames it
// cannot take are dropped for it and counted, and the number of streams is
// bounded.
package serve

import (
	"compress/gzip"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvtop/kvtop/snapshot"
)

// DefaultListen is where `kvtop serve` listens unless told otherwise:
// loopback, so nothing is exposed by accident.
const DefaultListen = "127.0.0.1:9470"

// Defaults of Options.
const (
	DefaultMaxStreams = 32
	// DefaultDecisions is how many recent decisions /api/v1/snapshot keeps
	// unless ?decisions= says otherwise: the same as `kvtop snapshot`.
	DefaultDecisions = 50
)

const (
	// streamBuffer is how many frames a stream client may be behind
	// before frames are dropped for it.
	streamBuffer = 4
	// writeTimeout bounds one frame's write: a client that takes no bytes
	// for that long is disconnected (it reconnects and gets the latest).
	writeTimeout = 30 * time.Second
)

// Source is what the server reads: the latest snapshot. *pool.Pool has it.
type Source interface {
	Latest() *snapshot.Snapshot
}

// Options configure a Server.
type Options struct {
	Source Source
	// Token, when set, is the bearer token every endpoint but /healthz
	// wants (compared in constant time). It is never logged.
	Token       string
	Version     string // kvtop_build_info
	HotPrefixes int    // top prefixes in /metrics (DefaultHotPrefixes when 0)
	MaxStreams  int    // concurrent /api/v1/snapshots clients (DefaultMaxStreams when 0)
	// Logf reports what the operator of the server should know (a stream
	// rejected at the limit, a snapshot that does not encode). Optional.
	Logf func(format string, args ...any)
}

// Server is the HTTP face of one pool. Create it with New, feed it the
// pool's snapshots with Run, and serve Handler (or call Serve).
type Server struct {
	o       Options
	token   []byte
	handler http.Handler
	done    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	clients map[*client]struct{}

	// last is /api/v1/snapshot's latest answer: scripts polling faster
	// than the refresh cost one encoding per snapshot, not per request.
	lastMu sync.Mutex
	last   struct {
		snap      *snapshot.Snapshot
		decisions int
		data      []byte
	}

	streams      prometheus.Gauge
	dropped      prometheus.Counter
	rejected     prometheus.Counter
	unauthorized prometheus.Counter
	encodeErrors prometheus.Counter
}

// client is one /api/v1/snapshots connection.
type client struct {
	frames    chan frame
	decisions int
}

// frame is one encoded snapshot, a line of the stream.
type frame struct {
	seq  uint64
	data []byte
}

// New builds a server.
func New(o Options) (*Server, error) {
	if o.Source == nil {
		return nil, errors.New("serve: no snapshot source")
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	s := &Server{o: o, done: make(chan struct{}), clients: map[*client]struct{}{}}
	if o.Token != "" {
		s.token = []byte(o.Token)
	}
	reg := prometheus.NewRegistry()
	s.streams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvtop_serve_streams",
		Help: "Clients attached to /api/v1/snapshots."})
	s.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvtop_serve_stream_dropped_frames_total",
		Help: "Snapshots not sent to a stream client because it was still behind on earlier ones."})
	s.rejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvtop_serve_streams_rejected_total",
		Help: "Stream clients refused (503) because the limit of attached clients was reached."})
	s.unauthorized = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvtop_serve_unauthorized_total",
		Help: "Requests refused (401) for a missing or wrong bearer token."})
	s.encodeErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvtop_serve_encode_errors_total",
		Help: "Snapshots that could not be encoded as JSON (not sent)."})
	reg.MustRegister(s.streams, s.dropped, s.rejected, s.unauthorized, s.encodeErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The snapshot's families are gathered directly (Collector.Gather),
	// beside the registry of the server's own and the process's metrics:
	// their names are disjoint, so nothing needs merging.
	kvtop := NewCollector(o.Source.Latest, o.Version, o.HotPrefixes)
	metrics := promhttp.InstrumentMetricHandler(reg, promhttp.HandlerForTransactional(concat{reg, kvtop}, promhttp.HandlerOpts{
		// A collector that fails does not take the others down.
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      logger{s.logf},
		// Compressed below, faster than promhttp's default level.
		DisableCompression: true,
	}))

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.auth(gzipped(metrics)))
	mux.Handle("GET /api/v1/snapshot", s.auth(http.HandlerFunc(s.snapshot)))
	mux.Handle("GET /api/v1/snapshots", s.auth(http.HandlerFunc(s.stream)))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /{$}", s.index)
	s.handler = mux
	return s, nil
}

// Handler serves the endpoints.
func (s *Server) Handler() http.Handler { return s.handler }

// Run sends every snapshot from updates to the stream clients until ctx
// is done or updates closes; then the streams end. Call it once.
func (s *Server) Run(ctx context.Context, updates <-chan *snapshot.Snapshot) {
	defer s.once.Do(func() { close(s.done) })
	for {
		select {
		case <-ctx.Done():
			return
		case snap, ok := <-updates:
			if !ok {
				return
			}
			s.broadcast(snap)
		}
	}
}

// broadcast encodes snap once per distinct ?decisions= and offers it to
// every client without waiting: a client still behind loses this frame.
func (s *Server) broadcast(snap *snapshot.Snapshot) {
	if snap == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.clients) == 0 {
		return
	}
	encoded := map[int][]byte{}
	for c := range s.clients {
		data, ok := encoded[c.decisions]
		if !ok {
			data = s.encode(snap, c.decisions)
			encoded[c.decisions] = data
		}
		if data == nil {
			continue
		}
		select {
		case c.frames <- frame{seq: snap.Seq, data: data}:
		default:
			s.dropped.Inc()
		}
	}
}

// encode is one line of the stream, nil (counted, logged) when the
// snapshot does not encode.
func (s *Server) encode(snap *snapshot.Snapshot, decisions int) []byte {
	b, err := json.Marshal(trimRecent(snap, decisions))
	if err != nil {
		s.encodeErrors.Inc()
		s.logf("snapshot %d not sent: %v", snap.Seq, err)
		return nil
	}
	return append(b, '\n')
}

// encodeLatest is encode, remembered for the same snapshot and count
// (/api/v1/snapshot, and the first frame of each new stream).
func (s *Server) encodeLatest(snap *snapshot.Snapshot, decisions int) []byte {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	if s.last.snap == snap && s.last.decisions == decisions && s.last.data != nil {
		return s.last.data
	}
	b := s.encode(snap, decisions)
	s.last.snap, s.last.decisions, s.last.data = snap, decisions, b
	return b
}

// trimRecent keeps the n most recent decisions (newest are last); n < 0
// keeps all. The snapshot is shared and immutable: this is a copy.
func trimRecent(s *snapshot.Snapshot, n int) *snapshot.Snapshot {
	if n < 0 || len(s.Decisions.Recent) <= n {
		return s
	}
	t := *s
	t.Decisions.Recent = s.Decisions.Recent[len(s.Decisions.Recent)-n:]
	return &t
}

// decisionsParam reads ?decisions=N (-1 = all the pool holds).
func decisionsParam(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("decisions")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -1 {
		return 0, fmt.Errorf("decisions=%q: want a count, or -1 for all", v)
	}
	return n, nil
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	n, err := decisionsParam(r, DefaultDecisions)
	if err != nil {
		http.Error(w, "kvtop: "+err.Error(), http.StatusBadRequest)
		return
	}
	snap := s.o.Source.Latest()
	if snap == nil {
		http.Error(w, "kvtop: no snapshot yet: the pool has not published", http.StatusServiceUnavailable)
		return
	}
	b := s.encodeLatest(snap, n)
	if b == nil {
		http.Error(w, "kvtop: the snapshot could not be encoded (see the server's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// stream is /api/v1/snapshots: the latest snapshot at once, then each one
// the pool publishes, one JSON object a line, flushed.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	n, err := decisionsParam(r, -1)
	if err != nil {
		http.Error(w, "kvtop: "+err.Error(), http.StatusBadRequest)
		return
	}
	c := &client{frames: make(chan frame, streamBuffer), decisions: n}
	if !s.attach(c) {
		s.rejected.Inc()
		s.logf("stream from %s refused: %d clients attached (the limit)", r.RemoteAddr, s.o.MaxStreams)
		w.Header().Set("Retry-After", "5")
		http.Error(w, fmt.Sprintf("kvtop: %d consoles are attached, the limit: try again later", s.o.MaxStreams), http.StatusServiceUnavailable)
		return
	}
	defer s.detach(c)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy in front must not hold frames back
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var last uint64
	send := func(f frame) bool {
		if f.data == nil || (last != 0 && f.seq <= last) {
			return true // already sent (attached between a publish and its broadcast)
		}
		last = f.seq
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(f.data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if snap := s.o.Source.Latest(); snap != nil {
		if !send(frame{seq: snap.Seq, data: s.encodeLatest(snap, n)}) {
			return
		}
	} else if rc.Flush() != nil { // the headers, so the client knows it is attached
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case f := <-c.frames:
			if !send(f) {
				return
			}
		}
	}
}

func (s *Server) attach(c *client) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.clients) >= s.o.MaxStreams {
		return false
	}
	s.clients[c] = struct{}{}
	s.streams.Set(float64(len(s.clients)))
	return true
}

func (s *Server) detach(c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clients, c)
	s.streams.Set(float64(len(s.clients)))
}

// healthz says whether the pool publishes: 200 while the latest snapshot
// is fresh, 503 before the first or when the pool has stalled.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	snap := s.o.Source.Latest()
	if snap == nil {
		http.Error(w, "no snapshot yet", http.StatusServiceUnavailable)
		return
	}
	age := time.Since(snap.At)
	if stale := max(10*time.Second, time.Duration(5*snap.RefreshS*float64(time.Second))); age > stale {
		http.Error(w, fmt.Sprintf("stale: the latest snapshot (%d) is %.0f s old", snap.Seq, age.Seconds()), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "ok: snapshot %d, %.1f s old\n", snap.Seq, max(0, age.Seconds()))
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "kvtop serve\n  /metrics           Prometheus text format\n  /api/v1/snapshot   the latest snapshot (JSON; ?decisions=N)\n  /api/v1/snapshots  one snapshot a line at each refresh (NDJSON)\n  /healthz           whether the pool publishes\n")
}

// auth lets a request through when no token is set or it carries it.
func (s *Server) auth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != nil && !s.authorized(r) {
			s.unauthorized.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvtop"`)
			http.Error(w, "kvtop: unauthorized: send Authorization: Bearer with the token of the server's --auth-token-file", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	const scheme = "bearer "
	h := r.Header.Get("Authorization")
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[len(scheme):])), s.token) == 1
}

// Serve serves the handler on ln until ctx is done (TLS when certFile and
// keyFile are set), then shuts down: streams end at once, other requests
// get a few seconds to finish.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() {
		if certFile != "" || keyFile != "" {
			errc <- hs.ServeTLS(ln, certFile, keyFile)
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.once.Do(func() { close(s.done) })
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.o.Logf != nil {
		s.o.Logf(format, args...)
	}
}

// gzipPool holds gzip writers at BestSpeed: a 256-worker page (~180 KB)
// compresses to ~18 KB at level 1 in a third of the default level's time,
// which is most of a scrape's cost otherwise.
var gzipPool = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// gzipped compresses the answer for clients that accept gzip (Prometheus
// does).
func gzipped(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		gz := gzipPool.Get().(*gzip.Writer)
		defer gzipPool.Put(gz)
		gz.Reset(w)
		w.Header().Set("Content-Encoding", "gzip")
		h.ServeHTTP(gzipWriter{w, gz}, r)
		_ = gz.Close()
	})
}

func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// gzipWriter sends the body through gz; headers go to the real writer.
type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (g gzipWriter) Write(b []byte) (int, error) { return g.gz.Write(b) }

// concat gathers the registry's families and the snapshot's; their
// metric names are disjoint (prometheus.Gatherers would merge, and
// re-check every sample).
type concat struct {
	reg   prometheus.Gatherer
	kvtop *Collector
}

// Gather implements prometheus.TransactionalGatherer: done is called
// once the families are written.
func (c concat) Gather() ([]*dto.MetricFamily, func(), error) {
	own, err := c.reg.Gather()
	fams, done, _ := c.kvtop.GatherTransactional()
	out := make([]*dto.MetricFamily, 0, len(own)+len(fams))
	out = append(append(out, own...), fams...)
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, done, err
}

// logger adapts Logf to promhttp's Logger.
type logger struct{ logf func(string, ...any) }

func (l logger) Println(v ...any) { l.logf("%s", strings.TrimSuffix(fmt.Sprintln(v...), "\n")) }

// IsLoopback reports whether a listen address binds loopback only:
// localhost or a loopback IP. ":9470" and "0.0.0.0:9470" bind every
// interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
