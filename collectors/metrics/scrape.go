package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/kvtop/kvtop/collectors"
)

// acceptHeader asks for the classic text format first and OpenMetrics 1.0
// second. (Python servers answer OpenMetrics whenever it is listed at all;
// both are read through the same fast path.)
var acceptHeader = fmt.Sprintf("text/plain;version=%s;q=0.9,%s;version=%s;q=0.5,*/*;q=0.1",
	expfmt.TextVersion, expfmt.OpenMetricsType, expfmt.OpenMetricsVersion_1_0_0)

// errTooLarge stops a body at the limit.
var errTooLarge = errors.New("body over the limit")

// target is one configured endpoint with its own client, parser and
// buffers: nothing is shared between targets, so one slow target cannot
// hold up another.
type target struct {
	Target
	shown   string // URL without credentials or query, for messages
	source  string // "<name> metrics"
	client  *http.Client
	timeout time.Duration
	limit   int64
	budget  budget // ctx set per scrape
	parser  *Parser
	// tokenWarning is TokenFileWarning at start, sent once with the first
	// scrape so it shows on screen too.
	tokenWarning string
	buf          bytes.Buffer
	gz           *gzip.Reader
}

// scrape fetches and parses the page once. It returns the scrape and
// the problems to show beside it: a token file others can read (kind
// config, first scrape only), the page was read with bad lines (kind
// parse), it holds values that cannot be true (kind invalid).
//
// One deadline, Timeout from the start, holds for the whole scrape: a page
// that is slow to send and one that is slow to read are the same to the
// operator, and neither may hold the target past it. At and Duration are
// taken when the page has arrived, or when the scrape failed.
func (t *target) scrape(ctx context.Context) (*collectors.MetricsScrape, []*collectors.SourceError) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	s := &collectors.MetricsScrape{Target: t.Name, Role: t.Role, URL: t.shown}
	var notes []*collectors.SourceError
	stamp := func() {
		s.At = time.Now()
		s.Duration = s.At.Sub(start)
	}
	done := func() *collectors.MetricsScrape {
		if s.Err != nil {
			stamp()
			s.Err.At = s.At
		}
		for _, n := range notes {
			n.At = s.At
		}
		return s
	}

	if t.tokenWarning != "" {
		notes = append(notes, t.fail("config", "%s", t.tokenWarning))
		t.tokenWarning = ""
	}

	body, ctype, serr := t.fetch(ctx)
	if serr != nil {
		s.Err = serr
		return done(), notes
	}
	stamp()
	b := t.budget
	b.ctx = ctx
	page, err := t.parser.parse(body, ctype, t.Role, t.Profile, &b)
	if err != nil {
		kind := "parse"
		var le *limitError
		if errors.As(err, &le) {
			kind = le.kind
		}
		s.Err = t.fail(kind, "GET %s: %s", t.shown, oneLine(err.Error()))
		return done(), notes
	}
	s.Profile, s.ProcessStart, s.Engines, s.WorkerTotals, s.Router, s.Skipped, s.Invalid =
		page.Profile, page.ProcessStart, page.Engines, page.WorkerTotals, page.Router, page.Skipped, page.Invalid
	if len(page.Warnings) > 0 {
		notes = append(notes, t.fail("parse", "%s", andMore(page.Warnings[0], len(page.Warnings)-1)))
	}
	if note, n := page.invalidSummary(); n > 0 {
		notes = append(notes, t.fail("invalid", "%s", andMore(note, n-1)))
	}
	return done(), notes
}

// andMore is the first note of several, and how many others there are.
func andMore(first string, more int) string {
	if more > 0 {
		return fmt.Sprintf("%s (and %d more)", first, more)
	}
	return first
}

func (t *target) fail(kind, format string, args ...any) *collectors.SourceError {
	return &collectors.SourceError{Source: t.source, Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// fetch GETs the page into t.buf. The returned slice is valid until the
// next fetch.
func (t *target) fetch(ctx context.Context) ([]byte, string, *collectors.SourceError) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, "", t.fail("config", "bad URL %s", t.shown)
	}
	req.Header.Set("Accept", acceptHeader)
	req.Header.Set("Accept-Encoding", "gzip") // set by hand, so decompressed (and limited) here
	req.Header.Set("User-Agent", "kvtop")
	tok, serr := t.token()
	if serr != nil {
		return nil, "", serr
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, "", t.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.CopyN(io.Discard, resp.Body, 4096) // lets the connection be reused
		if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
			return nil, "", t.redirect(resp)
		}
		return nil, "", t.fail("http_status", "GET %s: %s", t.shown, oneLine(resp.Status))
	}

	// The limit holds for the bytes on the wire and, with gzip, for the
	// decompressed page too.
	var r io.Reader = &capReader{r: resp.Body, left: t.limit + 1}
	gz := strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip")
	if gz {
		if t.gz == nil {
			t.gz, err = gzip.NewReader(r)
		} else {
			err = t.gz.Reset(r)
		}
		if err != nil {
			return nil, "", t.readError(err, true)
		}
		r = &capReader{r: t.gz, left: t.limit + 1}
	}
	t.buf.Reset()
	if _, err := t.buf.ReadFrom(r); err != nil {
		return nil, "", t.readError(err, gz)
	}
	return t.buf.Bytes(), resp.Header.Get("Content-Type"), nil
}

// token reads the bearer token anew for every scrape, so a rotated file is
// picked up. The token itself never goes into a message.
func (t *target) token() (string, *collectors.SourceError) {
	var tok, from string
	switch {
	case t.BearerTokenFile != "":
		from = "bearer_token_file " + t.BearerTokenFile
		b, err := os.ReadFile(t.BearerTokenFile)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", t.fail("config", "%s: %v", from, err)
		}
		tok = strings.TrimSpace(string(b))
	case t.BearerTokenEnv != "":
		from = "bearer_token_env " + t.BearerTokenEnv
		tok = strings.TrimSpace(os.Getenv(t.BearerTokenEnv))
	default:
		return "", nil
	}
	if tok == "" {
		return "", t.fail("config", "%s: empty or unset", from)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x20 || c == 0x7f {
			return "", t.fail("config", "%s: token has control characters", from)
		}
	}
	return tok, nil
}

// redirect reports a 3xx answer, which is never followed: the token is
// sent only to the configured scheme, host, port and path. The Location
// is shown as shownURL shows URLs.
func (t *target) redirect(resp *http.Response) *collectors.SourceError {
	to := "no Location"
	if loc, err := resp.Location(); err == nil {
		to = shownURL(loc)
	} else if resp.Header.Get("Location") != "" {
		to = "an unreadable Location"
	}
	return t.fail("redirect", "GET %s: %s to %s: redirects are not followed (configure the final URL)",
		t.shown, oneLine(resp.Status), oneLine(to))
}

// transportError turns a failed request into a SourceError kind:
// timeout, tls or refused (any failure to get an answer).
func (t *target) transportError(err error) *collectors.SourceError {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // url.Error repeats the full URL; t.shown is enough
	}
	if isTimeout(err) {
		return t.fail("timeout", "GET %s: no answer within %s", t.shown, t.timeout)
	}
	var (
		unknownCA   x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		invalid     x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
		recordErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		echRejected *tls.ECHRejectionError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalid) ||
		errors.As(err, &verifyErr) || errors.As(err, &recordErr) || errors.As(err, &alertErr) ||
		errors.As(err, &echRejected) {
		return t.fail("tls", "GET %s: %s", t.shown, oneLine(err.Error()))
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return t.fail("refused", "GET %s: connection refused", t.shown)
	}
	return t.fail("refused", "GET %s: %s", t.shown, oneLine(err.Error()))
}

// readError classifies a failure while reading the body; gz says the
// body was being decompressed.
func (t *target) readError(err error, gz bool) *collectors.SourceError {
	switch {
	case errors.Is(err, errTooLarge):
		return t.fail("too_large", "GET %s: body larger than %s", t.shown, byteSize(t.limit))
	case isTimeout(err):
		return t.fail("timeout", "GET %s: body not complete within %s", t.shown, t.timeout)
	case gz:
		return t.fail("parse", "GET %s: body is not valid gzip: %s", t.shown, oneLine(err.Error()))
	}
	return t.fail("refused", "GET %s: reading body: %s", t.shown, oneLine(err.Error()))
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// capReader returns errTooLarge once more than left-1 bytes have passed.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// shownURL is the URL as kvtop prints it: no user info, no query (either
// may carry a secret).
func shownURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func httpHeader(contentType string) http.Header {
	return http.Header{"Content-Type": []string{contentType}}
}
