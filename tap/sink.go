package tap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	secretfile "github.com/kvtop/kvtop/internal/secret"
)

// Sink writes records as kvtop audit JSONL, a line per record: the file
// kvtop's decisions: section tails (format kvtop) to join them with the
// router's decisions.
type Sink struct {
	mu     sync.Mutex
	w      io.Writer
	c      io.Closer
	buf    []byte
	lines  int64
	failed int64
	err    error // the first write error
}

// OpenSink appends to path ("-" is standard output). The file is created
// private (0600): records hold request ids and worker names.
func OpenSink(path string) (*Sink, error) {
	if path == "-" || path == "" {
		return &Sink{w: os.Stdout}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return &Sink{w: f, c: f}, nil
}

// NewSink writes to w.
func NewSink(w io.Writer) *Sink { return &Sink{w: w} }

// Write appends r's line. A failed write is counted and kept for Err; the
// proxy goes on (its clients are not the log's hostages).
func (s *Sink) Write(r *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = r.AppendJSON(s.buf[:0])
	if _, err := s.w.Write(s.buf); err != nil {
		s.failed++
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.lines++
}

// Counts are the lines written and the lines lost to write errors, with
// the first error.
func (s *Sink) Counts() (written, failed int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines, s.failed, s.err
}

// Close closes the file.
func (s *Sink) Close() error {
	if s.c == nil {
		return nil
	}
	return s.c.Close()
}

// ListenWarning is what to say about serving on addr: "" on loopback or
// with TLS; otherwise that credentials cross the network in clear.
func ListenWarning(addr string, withTLS bool) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || withTLS {
		return ""
	}
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback()) {
		return ""
	}
	return fmt.Sprintf("listening on %s without TLS: clients' Authorization headers and prompts cross the network in clear (give a TLS certificate, or listen on loopback)", addr)
}

// LoadTLS loads a server certificate, or returns nil for none.
func LoadTLS(cert, key string) (*tls.Config, error) {
	if cert == "" && key == "" {
		return nil, nil
	}
	if cert == "" || key == "" {
		return nil, errors.New("a TLS certificate and its key go together")
	}
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}, nil
}

// ReadFingerprintKey reads a key file (at least 16 bytes), with a warning
// when others may read it.
func ReadFingerprintKey(path string) (key []byte, warning string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	key, err = io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, "", err
	}
	if len(key) < 16 {
		return nil, "", fmt.Errorf("%s: %d bytes; a fingerprint key needs at least 16 (e.g. head -c 32 /dev/urandom > %s)", path, len(key), path)
	}
	return key, secretfile.FileWarning("fingerprint key file", path), nil
}

// Serve serves h on ln (with TLS when tc is set) until ctx is done, then
// gives the streams in flight grace to finish before cutting them.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, tc *tls.Config, grace time.Duration, logf func(string, ...any)) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(logWriter(logf), "", 0),
	}
	if tc != nil {
		srv.TLSConfig = tc
		ln = tls.NewListener(ln, tc)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		srv.Close()
	}
	<-errc
	return nil
}

// logWriter turns the HTTP server's log lines (TLS handshake errors and
// the like: addresses, never headers) into logf calls.
type logWriter func(string, ...any)

func (l logWriter) Write(p []byte) (int, error) {
	if l != nil {
		l("%s", strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
