package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views/fixture"
)

const secret = "s3cr3t-t0ken-do-not-print"

// started is a real server on 127.0.0.1 fed by a channel, as the pool
// feeds it.
type started struct {
	srv     *Server
	src     *latestOf
	updates chan *snapshot.Snapshot
	url     string
	cancel  context.CancelFunc
	done    chan struct{}
}

func start(t *testing.T, o Options) *started {
	t.Helper()
	src := &latestOf{}
	if o.Source == nil {
		o.Source = src
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &started{srv: srv, src: src, updates: make(chan *snapshot.Snapshot), url: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go srv.Run(ctx, st.updates)
	go func() {
		defer close(st.done)
		if err := srv.Serve(ctx, ln, "", ""); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-st.done })
	return st
}

// publish does what the pool does: the latest, then the channel.
func (st *started) publish(t *testing.T, s *snapshot.Snapshot) {
	t.Helper()
	st.src.p.Store(s)
	select {
	case st.updates <- s:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not take a snapshot within 30 s: it blocks the pool")
	}
}

func get(t *testing.T, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// seqAt is the fixture with another snapshot number.
func seqAt(base *snapshot.Snapshot, seq uint64) *snapshot.Snapshot {
	s := *base
	s.Seq = seq
	return &s
}

// TestAuthOnEveryEndpointButHealthz: without the token, or with another,
// every endpoint but /healthz answers 401 and says what to send; the
// token itself never appears in an answer.
func TestAuthOnEveryEndpointButHealthz(t *testing.T) {
	st := start(t, Options{Token: secret})
	st.src.p.Store(fixture.Snapshot())
	st.src.p.Load().At = time.Now()
	for _, path := range []string{"/metrics", "/api/v1/snapshot", "/api/v1/snapshots"} {
		for _, tok := range []string{"", "wrong", secret + "x", strings.ToUpper(secret)} {
			resp, body := get(t, st.url+path, tok)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Bearer") || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with token %q: %s %q, want 401 saying what to send", path, tok, resp.Status, body)
			}
			if strings.Contains(body, secret) {
				t.Errorf("%s: the answer shows the token", path)
			}
		}
	}
	resp, body := get(t, st.url+"/healthz", "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "ok") {
		t.Errorf("/healthz without a token: %s %q, want 200 ok", resp.Status, body)
	}
	resp, body = get(t, st.url+"/api/v1/snapshot", secret)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"prod-qwen3"`) {
		t.Errorf("with the token: %s %.80q", resp.Status, body)
	}
	// The refusals are counted where the operator of the server looks.
	_, metrics := get(t, st.url+"/metrics", secret)
	if !strings.Contains(metrics, "kvtop_serve_unauthorized_total 12") {
		t.Errorf("12 refused requests, but /metrics says:\n%s", grep(metrics, "kvtop_serve_unauthorized_total"))
	}
	if strings.Contains(metrics, secret) {
		t.Error("/metrics shows the token")
	}
}

// value is the value of an unlabelled sample in an exposition (-1 when
// absent).
func value(body, name string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			var f float64
			if _, err := fmt.Sscanf(v, "%g", &f); err == nil {
				return f
			}
		}
	}
	return -1
}

func grep(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSnapshotEndpoint: the JSON contract of `kvtop snapshot`, the newest
// 50 decisions unless ?decisions= says otherwise; a bad count is a 400, no
// snapshot yet a 503 that says so.
func TestSnapshotEndpoint(t *testing.T) {
	st := start(t, Options{})
	resp, body := get(t, st.url+"/api/v1/snapshot", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "no snapshot yet") {
		t.Errorf("before the first snapshot: %s %q", resp.Status, body)
	}
	snap := fixture.Snapshot()
	for len(snap.Decisions.Recent) < 80 {
		snap.Decisions.Recent = append(snap.Decisions.Recent, snap.Decisions.Recent...)
	}
	newest := snap.Decisions.Recent[len(snap.Decisions.Recent)-1].RequestID
	st.src.p.Store(snap)
	for _, c := range []struct {
		query string
		want  int
	}{{"", DefaultDecisions}, {"?decisions=2", 2}, {"?decisions=0", 0}, {"?decisions=-1", len(snap.Decisions.Recent)}} {
		resp, body := get(t, st.url+"/api/v1/snapshot"+c.query, "")
		var got snapshot.Snapshot
		if err := json.Unmarshal([]byte(body), &got); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %v (%s)", c.query, err, resp.Header.Get("Content-Type"))
		}
		if len(got.Decisions.Recent) != c.want || got.Seq != snap.Seq || len(got.Workers) != len(snap.Workers) {
			t.Errorf("%s: %d decisions (want %d), seq %d, %d workers", c.query, len(got.Decisions.Recent), c.want, got.Seq, len(got.Workers))
		}
		if c.want > 0 && got.Decisions.Recent[len(got.Decisions.Recent)-1].RequestID != newest {
			t.Errorf("%s: the newest decision is not kept", c.query)
		}
	}
	if resp, body := get(t, st.url+"/api/v1/snapshot?decisions=all", ""); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "decisions") {
		t.Errorf("?decisions=all: %s %q, want 400 naming the parameter", resp.Status, body)
	}
	r, err := http.Post(st.url+"/api/v1/snapshot", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s, want 405: the API is read-only", r.Status)
	}
}

// streamReader is one /api/v1/snapshots client.
type streamReader struct {
	resp  *http.Response
	lines *bufio.Reader
}

func openStream(t *testing.T, url string) *streamReader {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/snapshots")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &streamReader{resp: resp, lines: bufio.NewReaderSize(resp.Body, 1<<20)}
}

// next reads one frame (within 30 s).
func (r *streamReader) next(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	type res struct {
		s   *snapshot.Snapshot
		err error
	}
	c := make(chan res, 1)
	go func() {
		line, err := r.lines.ReadBytes('\n')
		if err != nil {
			c <- res{nil, err}
			return
		}
		var s snapshot.Snapshot
		err = json.Unmarshal(line, &s)
		c <- res{&s, err}
	}()
	select {
	case x := <-c:
		if x.err != nil {
			t.Fatalf("stream: %v", x.err)
		}
		return x.s
	case <-time.After(30 * time.Second):
		t.Fatal("no frame within 30 s")
	}
	return nil
}

// TestStreamSendsEverySnapshot: a client gets the latest snapshot at once,
// then each one published, one JSON object a line, in order, flushed.
func TestStreamSendsEverySnapshot(t *testing.T) {
	st := start(t, Options{})
	base := fixture.Snapshot()
	st.src.p.Store(seqAt(base, 1))
	r := openStream(t, st.url)
	if ct := r.resp.Header.Get("Content-Type"); r.resp.StatusCode != http.StatusOK || ct != "application/x-ndjson" {
		t.Fatalf("%s %s", r.resp.Status, ct)
	}
	if s := r.next(t); s.Seq != 1 || s.Pool.Name != "prod-qwen3" {
		t.Fatalf("first frame seq %d, want the latest (1) at once", s.Seq)
	}
	for seq := uint64(2); seq <= 5; seq++ {
		st.publish(t, seqAt(base, seq))
		if s := r.next(t); s.Seq != seq {
			t.Fatalf("frame seq %d, want %d", s.Seq, seq)
		}
	}
}

// TestSlowStreamClientDoesNotBlock: a client that stops reading does not
// hold up the pool or the other clients; what it misses is counted.
func TestSlowStreamClientDoesNotBlock(t *testing.T) {
	st := start(t, Options{})
	base := fixture.Snapshot()
	st.src.p.Store(seqAt(base, 1))

	// The slow one: a tiny receive window, and it never reads.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	slow, err := d.Dial("tcp", strings.TrimPrefix(st.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "GET /api/v1/snapshots HTTP/1.1\r\nHost: kvtop\r\n\r\n")

	fast := openStream(t, st.url)
	fast.next(t)
	began := time.Now()
	const n = 60
	for seq := uint64(2); seq <= n; seq++ {
		st.publish(t, seqAt(base, seq))
		if s := fast.next(t); s.Seq != seq {
			t.Fatalf("the fast client got seq %d, want %d", s.Seq, seq)
		}
	}
	_, metrics := get(t, st.url+"/metrics", "")
	if v := value(metrics, "kvtop_serve_stream_dropped_frames_total"); v < 1 {
		t.Errorf("the slow client cannot have taken %d frames of %d bytes, but kvtop_serve_stream_dropped_frames_total = %v", n, len(st.srv.encode(base, -1)), v)
	}
	// The slow client stays attached until its write deadline: on a
	// machine so busy that the loop outlasted it, it has rightly gone.
	if time.Since(began) < writeTimeout-5*time.Second && !strings.Contains(metrics, "kvtop_serve_streams 2") {
		t.Errorf("want 2 attached streams:\n%s", grep(metrics, "kvtop_serve_streams"))
	}
}

// TestStreamLimit: past MaxStreams a client gets a 503 that says why and
// when to retry; when one leaves, another attaches.
func TestStreamLimit(t *testing.T) {
	st := start(t, Options{MaxStreams: 2})
	st.src.p.Store(fixture.Snapshot())
	a, b := openStream(t, st.url), openStream(t, st.url)
	a.next(t)
	b.next(t)
	resp, body := get(t, st.url+"/api/v1/snapshots", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "2 consoles are attached") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third client: %s %q, want 503 naming the limit", resp.Status, body)
	}
	a.resp.Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(st.url + "/api/v1/snapshots")
		if err != nil {
			t.Fatal(err)
		}
		code := resp.StatusCode
		resp.Body.Close()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a client left, a new one still gets %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, metrics := get(t, st.url+"/metrics", "")
	if v := value(metrics, "kvtop_serve_streams_rejected_total"); v < 1 {
		t.Errorf("a refused stream, but kvtop_serve_streams_rejected_total = %v", v)
	}
}

// TestStreamsEndAtShutdown: stopping the server ends the streams (the
// consoles see the collector go), instead of holding shutdown forever.
func TestStreamsEndAtShutdown(t *testing.T) {
	st := start(t, Options{})
	st.src.p.Store(fixture.Snapshot())
	r := openStream(t, st.url)
	r.next(t)
	st.cancel()
	select {
	case <-st.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop within 30 s with a stream attached")
	}
	if _, err := r.lines.ReadBytes('\n'); err == nil {
		t.Error("the stream goes on after the server stopped")
	}
}

// TestHealthz: 503 before the first snapshot and when the pool has
// stalled, 200 while it publishes.
func TestHealthz(t *testing.T) {
	st := start(t, Options{})
	if resp, body := get(t, st.url+"/healthz", ""); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "no snapshot yet") {
		t.Errorf("before the first: %s %q", resp.Status, body)
	}
	s := fixture.Snapshot()
	s.At = time.Now()
	st.src.p.Store(s)
	if resp, body := get(t, st.url+"/healthz", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, "snapshot 1042") {
		t.Errorf("fresh: %s %q", resp.Status, body)
	}
	old := *s
	old.At = time.Now().Add(-time.Minute)
	st.src.p.Store(&old)
	if resp, body := get(t, st.url+"/healthz", ""); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "stale") {
		t.Errorf("a minute old at a 1 s refresh: %s %q", resp.Status, body)
	}
}

// TestReadTokenFile: a token is one line; an empty file would let anyone
// in, so it is refused; the messages never quote the content.
func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := ReadTokenFile(write("ok", secret+"\n", 0o600)); err != nil || tok != secret {
		t.Errorf("a token with a newline: %q, %v", tok, err)
	}
	for name, content := range map[string]string{"empty": " \n", "two": secret + "\nsecond", "space": "a b", "long": strings.Repeat("x", 5000)} {
		_, err := ReadTokenFile(write(name, content, 0o600))
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: %v, want an error that does not quote the file", name, err)
		}
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
	if w := TokenFileWarning(write("open", secret, 0o644)); !strings.Contains(w, "chmod 600") || !strings.Contains(w, "0644") {
		t.Errorf("a world-readable token file: warning %q", w)
	}
	if w := TokenFileWarning(filepath.Join(dir, "ok")); w != "" {
		t.Errorf("mode 0600: warning %q", w)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9470": true, "localhost:9470": true, "[::1]:9470": true, "127.0.0.2:1": true,
		":9470": false, "0.0.0.0:9470": false, "10.0.0.5:9470": false, "[::]:9470": false, "bastion:9470": false, "nonsense": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
