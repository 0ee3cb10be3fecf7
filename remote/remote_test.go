package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views/fixture"
)

const token = "remote-t0ken-never-shown"

// collector is a real `kvtop serve` server on 127.0.0.1, fed by hand as
// the pool feeds it, with every request's method recorded.
type collector struct {
	t       *testing.T
	addr    string
	latest  atomic.Pointer[snapshot.Snapshot]
	updates chan *snapshot.Snapshot
	cancel  context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	methods []string
}

func (c *collector) Latest() *snapshot.Snapshot { return c.latest.Load() }

// startCollector serves on addr ("" = a free port).
func startCollector(t *testing.T, addr, tok string) *collector {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port of a collector just stopped may take a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{t: t, addr: ln.Addr().String(), updates: make(chan *snapshot.Snapshot), done: make(chan struct{})}
	srv, err := serve.New(serve.Options{Source: c, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go srv.Run(ctx, c.updates)
	h := srv.Handler()
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.methods = append(c.methods, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
	hs := &http.Server{Handler: wrapped}
	go func() {
		defer close(c.done)
		<-ctx.Done()
		_ = hs.Close()
	}()
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(c.stop)
	return c
}

// stop ends the collector: its streams end, its port closes.
func (c *collector) stop() {
	c.cancel()
	<-c.done
}

func (c *collector) publish(s *snapshot.Snapshot) {
	c.t.Helper()
	c.latest.Store(s)
	select {
	case c.updates <- s:
	case <-time.After(30 * time.Second):
		c.t.Fatal("the collector did not take a snapshot")
	}
}

func fresh(seq uint64) *snapshot.Snapshot {
	s := fixture.Snapshot()
	s.Seq = seq
	return s
}

func newSource(t *testing.T, url, tok string) *Source {
	t.Helper()
	s, err := New(Options{URL: url, Token: tok, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Idle: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// next waits for a snapshot that satisfies cond (30 s at most).
func next(t *testing.T, s *Source, what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case snap, ok := <-s.Snapshots():
			if !ok {
				t.Fatalf("%s: the source closed", what)
			}
			if cond(snap) {
				return snap
			}
		case <-deadline:
			t.Fatalf("%s: not within 30 s; banner %q", what, s.Banner())
		}
	}
}

// TestSnapshotsRoundTrip: a snapshot marshalled by serve and decoded here
// is the one the collector's pool published, field for field, with its
// times in this machine's zone (same instants): what the views read of it
// is what they would read locally.
func TestSnapshotsRoundTrip(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	for name, snap := range map[string]*snapshot.Snapshot{"fixture": fixture.Snapshot(), "large": fixture.Large(32), "no decisions": fixture.NoDecisions()} {
		// The collector's clock reads in another zone, with a monotonic
		// reading, as time.Now does on the collector.
		mono := time.Now()
		walkTimes(reflect.ValueOf(snap).Elem(), func(t time.Time) time.Time {
			return mono.Add(t.Sub(fixture.At)).In(tokyo)
		})
		c := startCollector(t, "", "")
		c.latest.Store(snap)
		// Encoding the large fixture under -race on a busy machine can take
		// longer than newSource's 2 s idle: this test is not about idling.
		s, err := New(Options{URL: "http://" + c.addr, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Idle: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Connect(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := <-s.Snapshots()
		want := deepCopy(t, snap)
		walkTimes(reflect.ValueOf(want).Elem(), func(t time.Time) time.Time { return t.Round(0).Local() })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the decoded snapshot differs from the published one:\n%s", name, firstDiff(reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem(), "snapshot"))
		}
		if got.At.Location() != time.Local || !got.At.Equal(snap.At) {
			t.Errorf("%s: at %v (%v), want %v in the local zone", name, got.At, got.At.Location(), snap.At)
		}
		c.stop()
	}
}

// deepCopy copies a snapshot through JSON-free reflection-free means: the
// fixture builders are cheap, but the walk above changed the original, so
// copy it by value where it matters (times are values).
func deepCopy(t *testing.T, s *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	c := reflect.New(reflect.TypeOf(*s)).Elem()
	copyValue(c, reflect.ValueOf(*s))
	out := c.Interface().(snapshot.Snapshot)
	return &out
}

func copyValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyValue(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := 0; i < src.Len(); i++ {
			copyValue(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			e := reflect.New(src.Type().Elem()).Elem()
			copyValue(e, it.Value())
			m.SetMapIndex(it.Key(), e)
		}
		dst.Set(m)
	case reflect.Struct:
		if src.Type() == timeType {
			dst.Set(src)
			return
		}
		for i := 0; i < src.NumField(); i++ {
			if dst.Field(i).CanSet() {
				copyValue(dst.Field(i), src.Field(i))
			}
		}
	default:
		dst.Set(src)
	}
}

// firstDiff names the first field where a and b differ.
func firstDiff(a, b reflect.Value, path string) string {
	if a.Type() == timeType {
		ta, tb := a.Interface().(time.Time), b.Interface().(time.Time)
		return fmt.Sprintf("%s: %v (%v) vs %v (%v)", path, ta, ta.Location(), tb, tb.Location())
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())
		}
		if !a.IsNil() {
			return firstDiff(a.Elem(), b.Elem(), path)
		}
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
				return firstDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)
			}
		}
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return fmt.Sprintf("%s: len %d (nil %v) vs %d (nil %v)", path, a.Len(), a.IsNil(), b.Len(), b.IsNil())
		}
		for i := 0; i < a.Len(); i++ {
			if !reflect.DeepEqual(a.Index(i).Interface(), b.Index(i).Interface()) {
				return firstDiff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	return fmt.Sprintf("%s: %#v vs %#v", path, a.Interface(), b.Interface())
}

// TestStreamLiveThenLostThenBack: the console sees each snapshot; when the
// collector goes, the banner says so and the data's age keeps growing (the
// last snapshot is delivered again); when it is back, the source
// reconnects by itself.
func TestStreamLiveThenLostThenBack(t *testing.T) {
	c := startCollector(t, "", token)
	c.latest.Store(fresh(1))
	s := newSource(t, "http://"+c.addr, token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	next(t, s, "the first snapshot", func(p *snapshot.Snapshot) bool { return p.Seq == 1 })
	for seq := uint64(2); seq <= 4; seq++ {
		c.publish(fresh(seq))
		next(t, s, fmt.Sprintf("snapshot %d", seq), func(p *snapshot.Snapshot) bool { return p.Seq == seq })
	}
	if b := s.Banner(); !strings.HasPrefix(b, "remote "+c.addr+" · live · data ") || !strings.HasSuffix(b, " s old") {
		t.Errorf("live banner %q", b)
	}
	if r := s.RemoteState(); r.Host != c.addr || r.Lost || r.Age < 0 || r.Age > 30*time.Second {
		t.Errorf("live, the header would show %+v", r)
	}

	addr := c.addr
	c.stop()
	var banners []string
	next(t, s, "the loss shown", func(p *snapshot.Snapshot) bool {
		b := s.Banner()
		banners = append(banners, b)
		return p.Seq == 4 && strings.Contains(b, "collector lost") && strings.Contains(b, "reconnecting (") && s.Status().Attempts >= 2
	})
	// Re-delivered while lost: the age moves on the status line.
	first := s.Status().Received
	next(t, s, "the last snapshot again, older", func(p *snapshot.Snapshot) bool {
		return p.Seq == 4 && strings.Contains(s.Banner(), "data ") && time.Since(first) > 1500*time.Millisecond
	})
	if r := s.RemoteState(); !r.Lost || r.Age < 1500*time.Millisecond {
		t.Errorf("lost, the header would show %+v: want LOST and the data's age past 1.5 s", r)
	}

	c2 := startCollector(t, addr, token)
	c2.latest.Store(fresh(1)) // a restarted collector counts from 1 again
	next(t, s, "reconnected to the restarted collector", func(p *snapshot.Snapshot) bool { return p.Seq == 1 })
	if st := s.Status(); st.State != StateLive || st.Attempts != 0 {
		t.Errorf("after reconnecting: %+v", st)
	}
	if r := s.RemoteState(); r.Lost {
		t.Errorf("reconnected, the header still says LOST: %+v", r)
	}
	for _, b := range append(banners, s.Banner()) {
		if strings.Contains(b, token) {
			t.Fatalf("a banner shows the token: %q", b)
		}
	}
	// Read-only: GETs of the stream and nothing else, on both collectors.
	for _, col := range []*collector{c, c2} {
		col.mu.Lock()
		for _, m := range col.methods {
			if m != "GET "+StreamPath {
				t.Errorf("the remote console sent %q", m)
			}
		}
		col.mu.Unlock()
	}
}

// TestConnectErrors: a wrong token, a server that is not kvtop serve, and
// nobody listening each fail Connect with one line that says what to do,
// never quoting the token.
func TestConnectErrors(t *testing.T) {
	c := startCollector(t, "", token)
	c.latest.Store(fresh(1))
	notKvtop := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>hello</html>")
	}))
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		url, tok, want string
	}{
		{"http://" + c.addr, "", "unauthorized"},
		{"http://" + c.addr, "wrong-" + token, "--auth-token-file"},
		{notKvtop, token, "is not a kvtop serve"},
		{"http://" + closed, token, "connection refused"},
	} {
		s := newSource(t, tc.url, tc.tok)
		err := s.Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s (token %v): %v, want one line with %q", tc.url, tc.tok != "", err, tc.want)
		}
		if b := s.Banner(); strings.Contains(b, token) {
			t.Errorf("banner shows the token: %q", b)
		}
	}
	for _, bad := range []string{"bastion:9470", "ftp://bastion", "http://user:pw@bastion:9470"} {
		if _, err := New(Options{URL: bad}); err == nil || strings.Contains(err.Error(), "pw") {
			t.Errorf("New(%q): %v, want a refusal without the password", bad, err)
		}
	}
}

// httptestServer is a plain HTTP server on 127.0.0.1 (its URL).
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

// TestHostileCollector: a stream of garbage, a line without end, a
// silent stream and escape codes in errors: each is shown as one clean
// line and the source keeps trying, within its memory bound.
func TestHostileCollector(t *testing.T) {
	var mode atomic.Value
	mode.Store("garbage")
	good, _ := json.Marshal(fresh(7))
	url := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := mode.Load().(string)
		if m == "escape" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "kvtop: \x1b[2J\x1b]0;pwned\x07busy\nsecond line")
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.(http.Flusher).Flush()
		switch m {
		case "garbage":
			fmt.Fprint(w, "{\"at\": nonsense}\n")
		case "endless":
			chunk := strings.Repeat("x", 64<<10)
			for i := 0; i < 64 && r.Context().Err() == nil; i++ { // 4 MB, past the 1 MB bound
				fmt.Fprint(w, chunk)
			}
		case "silent":
			w.Write(good)
			w.Write([]byte("\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	s, err := New(Options{URL: url, MaxFrame: 1 << 20, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Idle: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ mode, want string }{
		{"garbage", "not a snapshot"},
		{"endless", "longer than 1 MB"},
		{"escape", "collector busy"},
	} {
		mode.Store(tc.mode)
		err := s.Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.mode, err, tc.want)
		}
		b := s.Banner()
		if strings.ContainsAny(b, "\x1b\x07\n") || strings.Contains(b, "second line") {
			t.Errorf("%s: the banner carries control characters or a second line: %q", tc.mode, b)
		}
	}
	// A stream that goes silent is lost after the idle bound, and retried.
	mode.Store("silent")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	next(t, s, "the silent stream counted lost", func(*snapshot.Snapshot) bool {
		return strings.Contains(s.Banner(), "no snapshot for")
	})
}

// TestSetRefreshIsLocal: the collector's refresh is its own: SetRefresh
// sends nothing and changes nothing shown; RemoteState says the
// collector's refresh, which the console's header shows.
func TestSetRefreshIsLocal(t *testing.T) {
	c := startCollector(t, "", "")
	c.latest.Store(fresh(1))
	s := newSource(t, "http://"+c.addr, "")
	if err := s.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.Snapshots()
	s.SetRefresh(500 * time.Millisecond)
	if r := s.RemoteState(); r.Refresh != time.Second {
		t.Errorf("RemoteState().Refresh = %s, want the collector's 1s", r.Refresh)
	}
	if b := s.Banner(); strings.Contains(b, "refresh") {
		t.Errorf("banner %q after SetRefresh", b)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.methods) != 1 {
		t.Errorf("requests %v, want the one stream", c.methods)
	}
}
