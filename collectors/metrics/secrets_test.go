package metrics

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// authLog records, per request path, the Authorization header it came
// with.
type authLog struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (a *authLog) record(r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string][]string{}
	}
	a.seen[r.URL.Path] = append(a.seen[r.URL.Path], r.Header.Get("Authorization"))
}

func (a *authLog) get(path string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen[path]...)
}

func tokenFile(t *testing.T, mode os.FileMode) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("tok-s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, mode); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestRedirectsNotFollowed: a metrics target that answers with a redirect
// (https to http on the same host, another port, another path prefix)
// fails as kind redirect naming where it points, without user info or
// query, and the place it points to never sees the bearer token: it is
// never asked at all.
func TestRedirectsNotFollowed(t *testing.T) {
	var elsewhere authLog // the redirects' targets
	sink := serve(t, func(w http.ResponseWriter, r *http.Request) {
		elsewhere.record(r)
		page([]byte("vllm:num_requests_waiting 1\n"), textType)(w, r)
	})
	var asked authLog // the configured servers
	redirectTo := func(loc string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/admin/") {
				elsewhere.record(r)
				page([]byte("vllm:num_requests_waiting 1\n"), textType)(w, r)
				return
			}
			asked.record(r)
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusFound)
		}
	}
	tlsSrv := httptest.NewUnstartedServer(redirectTo(sink.URL + "/metrics"))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	port := serve(t, redirectTo("http://scraper:pw-s3cr3t@"+strings.TrimPrefix(sink.URL, "http://")+"/other?token=q-s3cr3t"))
	path := serve(t, redirectTo("/admin/metrics"))
	if !strings.HasPrefix(sink.URL, "http://127.0.0.1:") || !strings.HasPrefix(tlsSrv.URL, "https://127.0.0.1:") {
		t.Fatalf("servers %s and %s are not on one host", sink.URL, tlsSrv.URL)
	}

	file := tokenFile(t, 0o600)
	out := run(t, Options{Interval: 50 * time.Millisecond, Targets: []Target{
		{Name: "https-to-http", URL: tlsSrv.URL + "/metrics", BearerTokenFile: file, InsecureSkipVerify: true},
		{Name: "other-port", URL: port.URL + "/metrics", BearerTokenFile: file},
		{Name: "other-path", URL: path.URL + "/metrics", BearerTokenFile: file},
	}})
	tests := []struct{ target, want string }{
		{"https-to-http", "GET " + tlsSrv.URL + "/metrics: 302 Found to " + sink.URL + "/metrics: redirects are not followed (configure the final URL)"},
		{"other-port", "GET " + port.URL + "/metrics: 302 Found to " + sink.URL + "/other: redirects are not followed (configure the final URL)"},
		{"other-path", "GET " + path.URL + "/metrics: 302 Found to " + path.URL + "/admin/metrics: redirects are not followed (configure the final URL)"},
	}
	for _, tc := range tests {
		for range 2 { // and again: no scrape follows it
			s := waitFor(t, out, scrapeOf(tc.target))
			if s.Err == nil || s.Err.Kind != "redirect" || s.Err.Message != tc.want {
				t.Fatalf("%s: %v, want redirect %q", tc.target, s.Err, tc.want)
			}
			if strings.Contains(s.Err.Error(), "s3cr3t") {
				t.Errorf("%s: a secret in %q", tc.target, s.Err.Error())
			}
		}
	}
	if got := asked.get("/metrics"); len(got) < 6 || got[0] != "Bearer tok-s3cr3t" {
		t.Errorf("the configured URLs were asked %d times (%q), want 6 with the token", len(got), got)
	}
	for _, p := range []string{"/metrics", "/other", "/admin/metrics"} {
		if got := elsewhere.get(p); len(got) > 0 {
			t.Errorf("the redirect target %s was asked %d times (Authorization %q)", p, len(got), got)
		}
	}
}

func TestTokenFileWarning(t *testing.T) {
	tests := []struct {
		mode os.FileMode
		want string // "" for no warning
	}{
		{0o600, ""},
		{0o400, ""},
		{0o644, "is readable by group or others (mode 0644): chmod 600 it"},
		{0o640, "is readable by group or others (mode 0640): chmod 600 it"},
		{0o604, "is readable by group or others (mode 0604): chmod 600 it"},
		{0o620, "is writable or executable by group or others (mode 0620): chmod 600 it"},
	}
	for _, tc := range tests {
		file := tokenFile(t, tc.mode)
		got := TokenFileWarning(file)
		if tc.want == "" && got != "" || tc.want != "" && got != "bearer_token_file "+file+" "+tc.want {
			t.Errorf("mode %04o: %q, want %q", tc.mode, got, tc.want)
		}
		if strings.Contains(got, "s3cr3t") || strings.Contains(got, "\n") {
			t.Errorf("mode %04o: %q is not one clean line", tc.mode, got)
		}
	}
	if got := TokenFileWarning(filepath.Join(t.TempDir(), "missing")); got != "" {
		t.Errorf("missing file: %q (every scrape reports it)", got)
	}
	if got := TokenFileWarning(""); got != "" {
		t.Errorf("no file: %q", got)
	}
}

// TestTokenFileWarningOnScreen: the collector sends the warning once per
// target, at its first scrape, as a config SourceError; the scrapes go on
// with the token.
func TestTokenFileWarningOnScreen(t *testing.T) {
	var asked authLog
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		asked.record(r)
		page([]byte("vllm:num_requests_waiting 7\n"), textType)(w, r)
	})
	open, closed := tokenFile(t, 0o644), tokenFile(t, 0o600)
	out := run(t, Options{Interval: 20 * time.Millisecond, Targets: []Target{
		{Name: "open", URL: srv.URL + "/metrics", BearerTokenFile: open},
		{Name: "closed", URL: srv.URL + "/metrics", BearerTokenFile: closed},
	}})
	for range 5 {
		for _, name := range []string{"open", "closed"} {
			if s := waitFor(t, out, scrapeOf(name)); s.Err != nil || *s.Engines[0].Waiting != 7 {
				t.Fatalf("%s: %v", name, s.Err)
			}
		}
	}
	var warnings []*collectors.SourceError
	for _, o := range out.held {
		if e, ok := o.(*collectors.SourceError); ok {
			warnings = append(warnings, e)
		}
	}
	want := "bearer_token_file " + open + " is readable by group or others (mode 0644): chmod 600 it"
	if len(warnings) != 1 || warnings[0].Source != "open metrics" || warnings[0].Kind != "config" ||
		warnings[0].Message != want || warnings[0].At.IsZero() {
		t.Fatalf("warnings %+v, want one config warning from open metrics: %q", warnings, want)
	}
	if got := asked.get("/metrics"); len(got) < 10 || got[0] != "Bearer tok-s3cr3t" {
		t.Errorf("%d scrapes (%q), want 10 with the token", len(got), got)
	}
}
