package promapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/kvtop/kvtop/figures"
)

// The data query's answer is the one big answer kvtop asks for: every
// series of every worker Prometheus scraped since the last refresh (121
// per vLLM engine). client_golang's v1 decoder builds a label map per
// sample through encoding/json, about 35 µs a sample; at 1 000 workers that
// was 3.5 s of CPU per full read. answer reads the same JSON in one pass
// into reused slices, with label names and values interned: the same
// strings (pod names, le bounds, label names) repeat on every series.

// lpair is one label of a sample.
type lpair struct{ name, value string }

// asample is one sample of a vector answer.
type asample struct {
	labels []lpair // a window of answer.pairs, in the answer's order
	value  float64
	hist   bool // a native histogram sample: no classic value
}

func (a *asample) label(name string) string {
	for _, l := range a.labels {
		if l.name == name {
			return l.value
		}
	}
	return ""
}

// answer is one decoded /api/v1/query answer; its slices are reused.
type answer struct {
	status     string
	errType    string
	errMsg     string
	warnings   []string
	resultType string
	evalSec    float64 // the evaluation time (every sample's), Prometheus' clock
	samples    []asample
	pairs      []lpair
	intern     map[string]string

	b     []byte
	i     int
	depth int
}

// maxNesting bounds how deep an answer may nest: Prometheus' is four.
const maxNesting = 32

// maxIntern bounds the interned strings: an answer naming millions of
// distinct values starts the table again rather than growing it.
const maxIntern = 1 << 20

// queryRaw runs one instant query through the api client, decoding the
// answer with answer. Errors are v1's, so one classification serves both
// paths.
func (s *Source) queryRaw(ctx context.Context, q string, a *answer) (v1.Warnings, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	u := s.client.URL("/api/v1/query", nil)
	form := url.Values{"query": {q}, "timeout": {s.o.Timeout.String()}}
	req, err := http.NewRequest(http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body, err := s.client.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	code := resp.StatusCode
	derr := a.decode(body)
	switch {
	case code/100 == 2 && derr == nil && a.status == "success":
		if a.resultType != "vector" {
			return a.warnings, &v1.Error{Type: v1.ErrBadResponse, Msg: fmt.Sprintf("answer is %s, want a vector", figures.A(a.resultType))}
		}
		return a.warnings, nil
	case derr == nil && a.status == "error":
		return a.warnings, &v1.Error{Type: v1.ErrorType(a.errType), Msg: a.errMsg}
	case code/100 == 5:
		return nil, &v1.Error{Type: v1.ErrServer, Msg: fmt.Sprintf("server error: %d", code)}
	case code/100 != 2:
		return nil, &v1.Error{Type: v1.ErrClient, Msg: fmt.Sprintf("client error: %d", code)}
	case derr != nil:
		return nil, &v1.Error{Type: v1.ErrBadResponse, Msg: derr.Error()}
	}
	return nil, &v1.Error{Type: v1.ErrBadResponse, Msg: fmt.Sprintf("status %q", a.status)}
}

// decode reads an API answer: {"status", "data": {"resultType",
// "result": [{"metric": {...}, "value": [t, "v"]}]}, "errorType",
// "error", "warnings"}. Unknown keys are skipped.
func (a *answer) decode(b []byte) error {
	a.b, a.i, a.depth = b, 0, 0
	a.status, a.errType, a.errMsg, a.resultType, a.evalSec = "", "", "", "", 0
	a.warnings, a.samples, a.pairs = a.warnings[:0], a.samples[:0], a.pairs[:0]
	if a.intern == nil || len(a.intern) > maxIntern {
		a.intern = map[string]string{}
	}
	err := a.object(func(key []byte) error {
		switch string(key) {
		case "status":
			return a.str(&a.status)
		case "errorType":
			return a.str(&a.errType)
		case "error":
			return a.str(&a.errMsg)
		case "warnings":
			return a.array(func() error {
				var w string
				if err := a.str(&w); err != nil {
					return err
				}
				if len(a.warnings) < 16 {
					a.warnings = append(a.warnings, w)
				}
				return nil
			})
		case "data":
			return a.object(func(key []byte) error {
				switch string(key) {
				case "resultType":
					return a.str(&a.resultType)
				case "result":
					return a.array(a.sample)
				}
				return a.skip()
			})
		}
		return a.skip()
	})
	if err != nil {
		return fmt.Errorf("answer at byte %d: %w", a.i, err)
	}
	return nil
}

// sample reads one {"metric": {...}, "value": [t, "v"]} (or "histogram").
func (a *answer) sample() error {
	s := asample{}
	start := len(a.pairs)
	err := a.object(func(key []byte) error {
		switch string(key) {
		case "metric":
			return a.object(func(name []byte) error {
				n := a.internBytes(name)
				v, err := a.rawStr()
				if err != nil {
					return err
				}
				a.pairs = append(a.pairs, lpair{n, a.internBytes(v)})
				return nil
			})
		case "value":
			n := 0
			return a.array(func() error {
				n++
				switch n {
				case 1:
					t, err := a.number()
					a.evalSec = t
					return err
				case 2:
					v, err := a.rawStr()
					if err != nil {
						return err
					}
					s.value, err = parseValue(v)
					return err
				}
				return a.skip()
			})
		case "histogram":
			s.hist = true
		}
		return a.skip()
	})
	if err != nil {
		return err
	}
	s.labels = a.pairs[start:len(a.pairs):len(a.pairs)]
	a.samples = append(a.samples, s)
	return nil
}

func parseValue(v []byte) (float64, error) {
	switch string(v) {
	case "NaN":
		return math.NaN(), nil
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q is not a number", truncate(string(v), 40))
	}
	return f, nil
}

func (a *answer) internBytes(b []byte) string {
	if s, ok := a.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	a.intern[s] = s
	return s
}

// ---------------------------------------------------------------------------
// A minimal JSON reader for the answer's shape.

var errAnswerShort = errors.New("truncated")

func (a *answer) ws() {
	for a.i < len(a.b) {
		switch a.b[a.i] {
		case ' ', '\t', '\n', '\r':
			a.i++
		default:
			return
		}
	}
}

func (a *answer) expect(c byte) error {
	a.ws()
	if a.i >= len(a.b) {
		return errAnswerShort
	}
	if a.b[a.i] != c {
		return fmt.Errorf("want %q, found %q", c, a.b[a.i])
	}
	a.i++
	return nil
}

// object reads {"k": v, ...}, calling f after each key with the value next.
func (a *answer) object(f func(key []byte) error) error {
	if err := a.expect('{'); err != nil {
		return err
	}
	if a.depth++; a.depth > maxNesting {
		return errors.New("nested too deep")
	}
	defer func() { a.depth-- }()
	a.ws()
	if a.i < len(a.b) && a.b[a.i] == '}' {
		a.i++
		return nil
	}
	for {
		k, err := a.rawStr()
		if err != nil {
			return err
		}
		if err := a.expect(':'); err != nil {
			return err
		}
		if err := f(k); err != nil {
			return err
		}
		a.ws()
		if a.i >= len(a.b) {
			return errAnswerShort
		}
		switch a.b[a.i] {
		case ',':
			a.i++
		case '}':
			a.i++
			return nil
		default:
			return fmt.Errorf("want ',' or '}', found %q", a.b[a.i])
		}
	}
}

// array reads [v, ...], calling f with each value next.
func (a *answer) array(f func() error) error {
	if err := a.expect('['); err != nil {
		return err
	}
	if a.depth++; a.depth > maxNesting {
		return errors.New("nested too deep")
	}
	defer func() { a.depth-- }()
	a.ws()
	if a.i < len(a.b) && a.b[a.i] == ']' {
		a.i++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		a.ws()
		if a.i >= len(a.b) {
			return errAnswerShort
		}
		switch a.b[a.i] {
		case ',':
			a.i++
		case ']':
			a.i++
			return nil
		default:
			return fmt.Errorf("want ',' or ']', found %q", a.b[a.i])
		}
	}
}

// rawStr returns a string's bytes: a slice of the answer, or when it has
// escapes (rare: label values may hold quotes) an unescaped copy.
func (a *answer) rawStr() ([]byte, error) {
	a.ws()
	if a.i >= len(a.b) || a.b[a.i] != '"' {
		return nil, errors.New("want a string")
	}
	j := a.i + 1
	for j < len(a.b) && a.b[j] != '"' && a.b[j] != '\\' {
		j++
	}
	if j < len(a.b) && a.b[j] == '"' {
		s := a.b[a.i+1 : j]
		a.i = j + 1
		return s, nil
	}
	for j < len(a.b) && a.b[j] != '"' {
		if a.b[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(a.b) {
		return nil, errAnswerShort
	}
	u, err := strconv.Unquote(strings.ReplaceAll(string(a.b[a.i:j+1]), `\/`, `/`))
	if err != nil {
		return nil, fmt.Errorf("bad string: %w", err)
	}
	a.i = j + 1
	return []byte(u), nil
}

func (a *answer) str(dst *string) error {
	b, err := a.rawStr()
	if err == nil {
		*dst = string(b)
	}
	return err
}

func (a *answer) number() (float64, error) {
	a.ws()
	j := a.i
	for j < len(a.b) && strings.IndexByte("+-.0123456789eE", a.b[j]) >= 0 {
		j++
	}
	f, err := strconv.ParseFloat(string(a.b[a.i:j]), 64)
	if err != nil {
		return 0, errors.New("want a number")
	}
	a.i = j
	return f, nil
}

// skip steps over one value of any kind.
func (a *answer) skip() error {
	a.ws()
	if a.i >= len(a.b) {
		return errAnswerShort
	}
	switch c := a.b[a.i]; {
	case c == '{':
		return a.object(func([]byte) error { return a.skip() })
	case c == '[':
		return a.array(a.skip)
	case c == '"':
		_, err := a.rawStr()
		return err
	default:
		j := a.i
		for j < len(a.b) && strings.IndexByte(",}] \t\r\n", a.b[j]) < 0 {
			j++
		}
		if j == a.i {
			return fmt.Errorf("unexpected %q", c)
		}
		a.i = j
		return nil
	}
}
