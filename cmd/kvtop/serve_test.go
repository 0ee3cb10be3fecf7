package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/remote"
	"github.com/kvtop/kvtop/serve"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// TestServeCommand runs `kvtop serve` as the operator would, on a
// simulated pool: it says where it serves, /healthz answers without the
// token, the rest only with it, and SIGINT (the context) stops it cleanly.
func TestServeCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 2, Listen: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sim.yaml")
	if err := config.Write(cfg, s.Config(), ""); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("serve-cmd-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	pr, pw := io.Pipe()
	root := newRootCmd()
	root.SetOut(io.Discard)
	root.SetErr(pw)
	root.SetArgs([]string{"serve", "-c", cfg, "--listen", "127.0.0.1:0", "--auth-token-file", tok})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()

	lines := bufio.NewScanner(pr)
	base := ""
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "kvtop: serving "); ok {
			base = strings.TrimSuffix(strings.Fields(rest)[0], ":")
			break
		}
		t.Logf("stderr: %s", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("no 'serving http://127.0.0.1:…' line (got %q)", base)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not 200 within 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for token, want := range map[string]int{"": http.StatusUnauthorized, "serve-cmd-token": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/metrics with token %q: %s, want %d", token, resp.Status, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve returned %v after the interrupt, want a clean stop", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30 s of the interrupt")
	}
}

// TestServeUsageErrors: flags that cannot work are exit 2 before anything
// starts, and the token file's problems never quote it.
func TestServeUsageErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--listen", "9470"}, "--listen"},
		{[]string{"serve", "--auth-token-file", empty}, "is empty"},
		{[]string{"serve", "--auth-token-file", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"serve", "--max-streams", "0"}, "--max-streams"},
		{[]string{"--auth-token-file", empty}, "--auth-token-file goes with --remote"},
		{[]string{"--remote", "bastion:9470"}, "want http://host:port"},
		{[]string{"--remote", "http://bastion:9470", "--refresh", "2s"}, "--refresh does not apply with --remote"},
		{[]string{"serve", "--tls-cert", filepath.Join(dir, "missing.pem"), "--tls-key", empty}, "--tls-cert/--tls-key"},
	} {
		_, _, err := simExec(context.Background(), c.args...)
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want exit 2 with %q", c.args, err, c.want)
		}
	}
}

// TestServeWarnings: serving beyond loopback without a token, or with a
// token file others can read, is said at start.
func TestServeWarnings(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := serveWarnings(serveFlags{listen: "0.0.0.0:9470"}); len(w) != 1 || !strings.Contains(w[0], "no --auth-token-file") {
		t.Errorf("0.0.0.0 without a token: %q", w)
	}
	if w := serveWarnings(serveFlags{listen: ":9470", tokenFile: open}); len(w) != 1 || !strings.Contains(w[0], "chmod 600") {
		t.Errorf("a world-readable token file: %q", w)
	}
	if w := serveWarnings(serveFlags{listen: serve.DefaultListen}); len(w) != 0 {
		t.Errorf("loopback: %q", w)
	}
}

// TestRemoteRoundTripOfASimSnapshot: a snapshot of the real pool on the
// simulator, marshalled by kvtop serve and decoded by the remote console,
// is the pool's own, field for field, its times in the local zone.
func TestRemoteRoundTripOfASimSnapshot(t *testing.T) {
	// A slow refresh, so that the pool holds still while one connection
	// reads its first frame (which snapshot was sent must be known).
	r := startScenario(t, sim.Options{Scenario: "event-loss", DPRanks: 2}, func(c *config.Config) { c.Refresh = 3 * time.Second })
	r.jumpTo(20 * time.Second) // a gap and its replay are in the streams' history
	r.run(1)
	sv := startServing(t, r, serve.Options{})
	r.waitFor("decisions and a gap in a stream's history", func(s *snapshot.Snapshot) bool {
		st := streamOf(s, "w0", 0)
		return len(s.Decisions.Recent) > 0 && st != nil && len(st.History) > 0
	})
	for try := 0; ; try++ {
		src, err := remote.New(remote.Options{URL: "http://" + sv.addr})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		before := r.e.Pool.Latest()
		err = src.Connect(ctx)
		after := r.e.Pool.Latest()
		if err != nil {
			t.Fatal(err)
		}
		got := <-src.Snapshots()
		cancel()
		if before != after || got.Seq != before.Seq {
			if try > 20 {
				t.Fatal("the pool never held still for one connection")
			}
			continue // the pool published meanwhile: which one was sent is unknown
		}
		want := normalized(before)
		if !reflect.DeepEqual(got, want) {
			for _, f := range []string{"Pool", "Workers", "Prefixes", "Routers", "Decisions", "Errors", "Alerts", "Thresholds"} {
				if !reflect.DeepEqual(reflect.ValueOf(*got).FieldByName(f).Interface(), reflect.ValueOf(*want).FieldByName(f).Interface()) {
					t.Errorf("field %s differs after the round trip", f)
				}
			}
			t.Fatalf("the decoded snapshot %d is not the pool's", got.Seq)
		}
		return
	}
}

// normalized is a deep copy of s with every non-zero time as the views
// read it after the trip: no monotonic reading, in the local zone.
func normalized(s *snapshot.Snapshot) *snapshot.Snapshot {
	v := reflect.New(reflect.TypeOf(*s)).Elem()
	copyNormalized(v, reflect.ValueOf(*s))
	out := v.Interface().(snapshot.Snapshot)
	return &out
}

var timeT = reflect.TypeOf(time.Time{})

func copyNormalized(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if !src.IsNil() {
			p := reflect.New(src.Type().Elem())
			copyNormalized(p.Elem(), src.Elem())
			dst.Set(p)
		}
	case reflect.Slice:
		if !src.IsNil() {
			sl := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
			for i := 0; i < src.Len(); i++ {
				copyNormalized(sl.Index(i), src.Index(i))
			}
			dst.Set(sl)
		}
	case reflect.Map:
		if !src.IsNil() {
			m := reflect.MakeMapWithSize(src.Type(), src.Len())
			for it := src.MapRange(); it.Next(); {
				e := reflect.New(src.Type().Elem()).Elem()
				copyNormalized(e, it.Value())
				m.SetMapIndex(it.Key(), e)
			}
			dst.Set(m)
		}
	case reflect.Struct:
		if src.Type() == timeT {
			tm := src.Interface().(time.Time)
			if !tm.IsZero() {
				tm = tm.Round(0).Local()
			}
			dst.Set(reflect.ValueOf(tm))
			return
		}
		for i := 0; i < src.NumField(); i++ {
			if dst.Field(i).CanSet() {
				copyNormalized(dst.Field(i), src.Field(i))
			}
		}
	default:
		dst.Set(src)
	}
}
