package promapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/kvtop/kvtop/internal/secret"
	"github.com/kvtop/kvtop/internal/tlsca"
)

// errTooLarge stops an answer at the body limit.
var errTooLarge = errors.New("answer over the body limit")

// redirectError is a 3xx answer: not followed, the token goes only to the
// configured URL.
type redirectError struct{ status, location string }

func (e *redirectError) Error() string {
	if e.location == "" {
		return fmt.Sprintf("answered %s without a Location: redirects are not followed", e.status)
	}
	return fmt.Sprintf("answered %s to %s: redirects are not followed (the token goes only to the configured URL)", e.status, e.location)
}

// tokenError is a bearer token that cannot be read; its text names the
// file or variable, never the token.
type tokenError struct{ msg string }

func (e *tokenError) Error() string { return e.msg }

// transport adds the bearer token to every request (read anew each time,
// so a rotated file is picked up), refuses redirects and bounds each
// answer's body.
type transport struct {
	base                http.RoundTripper
	tokenFile, tokenEnv string
	limit               int64
}

func newTransport(o *Options) (*transport, error) {
	if o.BearerTokenFile != "" && o.BearerTokenEnv != "" {
		return nil, errors.New("both bearer_token_file and bearer_token_env are set")
	}
	tlsConf := &tls.Config{InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // the operator asked for it
	if o.CAFile != "" {
		pool, err := tlsca.Roots(o.CAFile, false)
		if err != nil {
			return nil, tlsca.Setting("ca_file", err)
		}
		tlsConf.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	// One Prometheus, few queries: a couple of kept connections serve
	// them all, whatever the number of workers.
	tr.MaxIdleConnsPerHost = 2
	return &transport{base: tr, tokenFile: o.BearerTokenFile, tokenEnv: o.BearerTokenEnv, limit: o.BodyLimit}, nil
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.token()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("User-Agent", "kvtop")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		_, _ = io.CopyN(io.Discard, resp.Body, 4096)
		resp.Body.Close()
		return nil, &redirectError{status: resp.Status, location: shownLocation(resp.Header.Get("Location"))}
	}
	resp.Body = &capBody{r: resp.Body, left: t.limit}
	return resp, nil
}

func (t *transport) token() (string, error) {
	switch {
	case t.tokenFile != "":
		b, err := os.ReadFile(t.tokenFile)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", &tokenError{fmt.Sprintf("bearer_token_file %s: %v", t.tokenFile, err)}
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", &tokenError{fmt.Sprintf("bearer_token_file %s is empty", t.tokenFile)}
		}
		return tok, nil
	case t.tokenEnv != "":
		tok := strings.TrimSpace(os.Getenv(t.tokenEnv))
		if tok == "" {
			return "", &tokenError{fmt.Sprintf("bearer_token_env %s is not set", t.tokenEnv)}
		}
		return tok, nil
	}
	return "", nil
}

func (t *transport) closeIdle() {
	if tr, ok := t.base.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
}

// capBody fails a read past the limit rather than truncating silently.
type capBody struct {
	r    io.ReadCloser
	left int64
}

func (c *capBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, errTooLarge
		}
		return c.r.Read(p)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *capBody) Close() error { return c.r.Close() }

// shownURL is a URL without credentials, query or fragment, for messages.
func shownURL(u *url.URL) string {
	v := *u
	v.User, v.RawQuery, v.Fragment = nil, "", ""
	return v.String()
}

func shownLocation(loc string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return "an unparsable Location"
	}
	return shownURL(u)
}

// TokenFileWarning is the metrics collector's rule: a bearer_token_file
// group or others may read is warned about once.
func TokenFileWarning(path string) string { return secret.FileWarning("bearer_token_file", path) }
