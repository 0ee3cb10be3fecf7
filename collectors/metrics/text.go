package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// keptParser reads the prefilter's kept lines (Prometheus text format
// 0.0.4) into the families expfmt's TextParser (UTF-8 names allowed) makes
// of them, so the fold reads the same messages; it only works without the
// byte-at-a-time state machine, the bufio reads and a string per label.
//
// Same semantics where the kept lines can reach them (text_parse.go of
// prometheus/common v0.74.0, the version go.mod names): TYPE and HELP
// lines (a second one, or a TYPE after samples, is an error), untyped
// when no TYPE came first, histograms and summaries grouped into one
// Metric per label set (le / quantile left out, `_bucket`, `_sum` and
// `_count` found through the base name), in order of first appearance,
// samples of one family that are not contiguous, escapes in label values
// (\\ \" \n; any other is an error), quoted label names, values as
// strconv.ParseFloat reads them (NaN, ±Inf; 'p', 'P' and '_' refused),
// integer timestamps, duplicate label names refused, histograms whose
// counts are partly floats made all floats. A bad line is an
// expfmt.ParseError at its line in the input (1-based), as expfmt reports
// it; most messages are expfmt's own.
//
// What it does not do: a line starting with '{' (a quoted metric name in
// the braces, text 1.0) is refused; the prefilter never keeps one. Where
// expfmt leaves half a Metric of the bad line in the families it returns
// with an error, this parser returns the lines before the bad one only.
//
// What is shared: the families, metrics, label pairs, buckets and values
// are carved from slabs the parser reuses, so a later parse overwrites
// them. That is safe because nothing keeps them: the families live from
// parse to fold, and the fold copies numbers and strings out (Page holds
// no dto value; a remembered page shares only its own values). Strings
// (names, label values) are interned per keptParser, which every target's
// Parser borrows from keptParsers for one page, so they are shared across
// parses and targets; they are immutable, and so are the *string and type
// pointers handed out (nothing writes through them).
type keptParser struct {
	fams  map[string]*dto.MetricFamily
	hists map[uint64]*histBox    // histogram metrics by label signature, as expfmt keys them
	sums  map[uint64]*summaryBox // summary metrics, likewise
	strs  map[string]*string     // interned names and label values

	families slab[dto.MetricFamily]
	samples  slab[sampleBox]
	histos   slab[histBox]
	summs    slab[summaryBox]
	buckets  slab[bucketBox]
	pairs    slab[dto.LabelPair]
	labels   slab[*dto.LabelPair] // Metric.Label backing
	members  slab[*dto.Metric]    // MetricFamily.Metric backing
	bounds   slab[*dto.Bucket]    // Histogram.Bucket backing
	types    [6]dto.MetricType    // what Type points to: never written after init
	histed   []*histBox           // histograms to normalise at the end

	// Per line.
	pend   []pendingPair // the line's label pairs, le / quantile left out
	sorted []pendingPair // the same, sorted by name for the signature
	tok    []byte        // an unescaped token
	names  map[string]struct{}
}

// Bounds on the strings a Parser interns: a real target has a few hundred
// short ones. Longer strings are allocated as usual, and a full table is
// emptied before the next parse, so a target whose values change (a
// hostile one) costs at most about 512 kB and the table follows it.
const (
	maxInterned   = 4096
	maxInternedLn = 128
)

// metricBox is a Metric with room for its timestamp; the boxes below add
// room for the values, so that one slab slot holds one Metric.
type metricBox struct {
	m  dto.Metric
	ts int64
}

type sampleBox struct {
	metricBox
	g dto.Gauge
	c dto.Counter
	u dto.Untyped
	v float64
}

type histBox struct {
	metricBox
	h      dto.Histogram
	count  uint64
	countF float64
	sum    float64
}

type summaryBox struct {
	metricBox
	s     dto.Summary
	count uint64
	sum   float64
}

type bucketBox struct {
	b      dto.Bucket
	ub     float64
	count  uint64
	countF float64
}

type pendingPair struct{ name, value *string }

func newKeptParser() *keptParser {
	p := &keptParser{}
	for i := range p.types {
		p.types[i] = dto.MetricType(i)
	}
	return p
}

// release drops what a large page left (slabs, maps); a real page's stay
// for the next scrape.
func (p *keptParser) release() {
	const keep = 8 * slabChunk
	for _, r := range []interface{ release(int) }{&p.families, &p.samples, &p.histos, &p.summs,
		&p.buckets, &p.pairs, &p.labels, &p.members, &p.bounds} {
		r.release(keep)
	}
	clear(p.hists)
	clear(p.sums)
	if len(p.fams) > checkEvery {
		p.fams = nil
	}
	clear(p.fams)
	if cap(p.histed) > keep {
		p.histed = nil
	}
	clear(p.histed)
	p.histed = p.histed[:0]
	// A hostile line's scratch (a huge label value, thousands of labels).
	if cap(p.tok) > 64<<10 {
		p.tok = nil
	}
	if cap(p.pend) > 256 {
		p.pend, p.sorted, p.names = nil, nil, map[string]struct{}{}
	}
	clear(p.pend)
	clear(p.sorted)
}

func (p *keptParser) reset() {
	if p.fams == nil {
		p.fams = map[string]*dto.MetricFamily{}
		p.hists = map[uint64]*histBox{}
		p.sums = map[uint64]*summaryBox{}
		p.names = map[string]struct{}{}
	}
	if p.strs == nil || len(p.strs) >= maxInterned {
		p.strs = map[string]*string{}
	}
	clear(p.fams)
	clear(p.hists)
	clear(p.sums)
	for _, r := range []interface{ reset() }{&p.families, &p.samples, &p.histos, &p.summs,
		&p.buckets, &p.pairs, &p.labels, &p.members, &p.bounds} {
		r.reset()
	}
	clear(p.histed)
	p.histed = p.histed[:0]
}

// parse reads text (lines ending in '\n') into families. The families are
// valid until the next parse (see keptParser). On a bad line it returns
// the families of the lines before it and an expfmt.ParseError; past b's
// deadline, nil and the timeout error.
func (p *keptParser) parse(text []byte, b *budget) (map[string]*dto.MetricFamily, error) {
	p.reset()
	n := 0
	var err error
	for len(text) > 0 {
		n++
		if n%checkEvery == 0 && b.over() {
			return nil, b.late(n - 1)
		}
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
			if len(trimBlank(line)) > 0 {
				// expfmt wants the '\n' that ends a line; at the end of the
				// input it says so.
				err = expfmt.ParseError{Line: n, Msg: "unexpected end of input stream"}
				break
			}
		}
		if msg := p.line(line); msg != "" {
			err = expfmt.ParseError{Line: n, Msg: msg}
			break
		}
	}
	p.finish()
	return p.fams, err
}

// finish does what expfmt does after its last line: drops families
// without samples, and makes each histogram's counts all floats when one
// of them is a float.
func (p *keptParser) finish() {
	for k, mf := range p.fams {
		if len(mf.Metric) == 0 {
			delete(p.fams, k)
		}
	}
	for _, box := range p.histed {
		normalize(box)
	}
}

// normalize is expfmt's normalizeHistogram (the floats of the count in
// the box).
func normalize(box *histBox) {
	h := &box.h
	anyFloats := h.GetSampleCountFloat() != 0
	for _, b := range h.Bucket {
		if anyFloats {
			break
		}
		anyFloats = b.GetCumulativeCountFloat() != 0
	}
	if !anyFloats {
		return
	}
	if h.GetSampleCountFloat() == 0 {
		box.countF = float64(h.GetSampleCount())
		h.SampleCountFloat, h.SampleCount = &box.countF, nil
	}
	for _, b := range h.Bucket {
		if b.GetCumulativeCountFloat() == 0 {
			b.CumulativeCountFloat, b.CumulativeCount = new(float64(b.GetCumulativeCount())), nil
		}
	}
}

// line reads one line (without its '\n'); it returns "" or why the line
// is bad.
func (p *keptParser) line(l []byte) string {
	i := skipBlank(l, 0)
	if i == len(l) {
		return ""
	}
	switch l[i] {
	case '#':
		return p.comment(l, i+1)
	case '{':
		return "a metric name inside the braces is not read (kvtop keeps no such line)"
	}
	return p.sample(l, i)
}

// at is l[i], or '\n' past the line's end (expfmt reads the '\n').
func at(l []byte, i int) byte {
	if i < len(l) {
		return l[i]
	}
	return '\n'
}

func skipBlank(l []byte, i int) int {
	for i < len(l) && (l[i] == ' ' || l[i] == '\t') {
		i++
	}
	return i
}

func untilBlank(l []byte, i int) int {
	for i < len(l) && l[i] != ' ' && l[i] != '\t' {
		i++
	}
	return i
}

// comment reads a comment from l[i:] (after the '#'): HELP and TYPE lines
// set the family's help and type; any other comment is ignored.
func (p *keptParser) comment(l []byte, i int) string {
	i = skipBlank(l, i)
	if i == len(l) {
		return ""
	}
	start := i
	i = untilBlank(l, i)
	if i == len(l) {
		return "" // a keyword alone: not an error for expfmt
	}
	keyword := l[start:i]
	help := string(keyword) == "HELP"
	if !help && string(keyword) != "TYPE" {
		return ""
	}
	i = skipBlank(l, i)
	name, i, msg := p.name(l, i, true)
	if msg != "" {
		return msg
	}
	if i >= len(l) {
		return ""
	}
	if c := l[i]; c != ' ' && c != '\t' {
		return "invalid metric name in comment"
	}
	mf, _, msg := p.family(name)
	if msg != "" {
		return msg
	}
	i = skipBlank(l, i)
	if i == len(l) {
		return ""
	}
	if help {
		if mf.Help != nil {
			return fmt.Sprintf("second HELP line for metric name %q", mf.GetName())
		}
		text, msg := p.unescape(l[i:], false)
		if msg != "" {
			return msg
		}
		mf.Help = new(string(text))
		return ""
	}
	if mf.Type != nil {
		return fmt.Sprintf("second TYPE line for metric name %q, or TYPE reported after samples", mf.GetName())
	}
	t, ok := typeOf(l[i:])
	if !ok {
		return fmt.Sprintf("unknown metric type %q", l[i:])
	}
	mf.Type = &p.types[t]
	return ""
}

// typeOf reads a TYPE line's type as expfmt does: any case (Unicode's
// upper case, so "ſummary" is a summary), gaugehistogram too.
func typeOf(word []byte) (dto.MetricType, bool) {
	var up string
	var buf [32]byte
	ascii := len(word) <= len(buf)
	for _, c := range word {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		for i, c := range word {
			if c >= 'a' && c <= 'z' {
				c -= 'a' - 'A'
			}
			buf[i] = c
		}
		up = string(buf[:len(word)])
	} else {
		up = strings.ToUpper(string(word))
	}
	if t, ok := dto.MetricType_value[up]; ok {
		return dto.MetricType(t), true
	}
	if up == "GAUGEHISTOGRAM" {
		return dto.MetricType_GAUGE_HISTOGRAM, true
	}
	return 0, false
}

// unescape reads a HELP text (label=false: escapes \\ \n \") or a label
// value up to its closing quote (label=true). It returns the text and, for
// a label value, how many bytes it took with the quote; "" or an error.
func (p *keptParser) unescape(s []byte, label bool) ([]byte, string) {
	v, _, msg := p.unescapeN(s, label)
	return v, msg
}

func (p *keptParser) unescapeN(s []byte, label bool) (out []byte, n int, msg string) {
	// The common case: no escape, a slice of the line.
	for i, c := range s {
		switch {
		case c == '\\':
			return p.unescapeSlow(s, i, label)
		case c == '"' && label:
			return s[:i], i + 1, ""
		}
	}
	if label {
		return nil, 0, fmt.Sprintf("label value %q contains unescaped new-line", s)
	}
	return s, len(s), ""
}

func (p *keptParser) unescapeSlow(s []byte, i int, label bool) ([]byte, int, string) {
	p.tok = append(p.tok[:0], s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && label:
			return p.tok, i + 1, ""
		case c != '\\':
			p.tok = append(p.tok, c)
			continue
		}
		i++
		switch c = at(s, i); c {
		case '\\', '"':
		case 'n':
			c = '\n'
		default:
			return nil, 0, fmt.Sprintf("invalid escape sequence '\\%c'", c)
		}
		p.tok = append(p.tok, c)
	}
	if label {
		return nil, 0, fmt.Sprintf("label value %q contains unescaped new-line", p.tok)
	}
	return p.tok, len(s), ""
}

// name reads a metric name (metric=true: ':' allowed) or a label name at
// l[i], as expfmt's readTokenAsMetricName / readTokenAsLabelName do: a
// run of name bytes in which a '"' opens (and the next closes) a quoted
// part that may hold anything with escapes. It returns the name (empty
// when l[i] cannot start one), where it stopped, and "" or an error.
func (p *keptParser) name(l []byte, i int, metric bool) ([]byte, int, string) {
	start := i
	for i < len(l) && nameByte(l[i], metric, i > start) {
		if l[i] == '"' {
			return p.quotedName(l, start, metric)
		}
		i++
	}
	return l[start:i], i, ""
}

func nameByte(c byte, metric, cont bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == '"':
		return true
	case c == ':':
		return metric
	case c >= '0' && c <= '9':
		return cont
	}
	return false
}

func (p *keptParser) quotedName(l []byte, i int, metric bool) ([]byte, int, string) {
	what := "label"
	if metric {
		what = "metric"
	}
	p.tok = p.tok[:0]
	quoted, escaped := false, false
	for {
		c := at(l, i)
		if escaped {
			switch c {
			case '\\', '"':
			case 'n':
				c = '\n'
			default:
				return nil, i, fmt.Sprintf("invalid escape sequence '\\%c'", c)
			}
			p.tok = append(p.tok, c)
			escaped = false
		} else {
			switch c {
			case '"':
				quoted = !quoted
				if !quoted {
					return p.tok, i + 1, ""
				}
			case '\n':
				return nil, i, fmt.Sprintf("%s name %q contains unescaped new-line", what, p.tok)
			case '\\':
				escaped = true
			default:
				p.tok = append(p.tok, c)
			}
		}
		i++
		// Quoted, any byte goes on (expfmt's utf8.ValidString(string(b))
		// holds for every byte); the end of the line is its '\n'.
		if i > len(l) || !quoted && (i == len(l) || !nameByte(l[i], metric, true)) {
			return p.tok, i, ""
		}
	}
}

// Suffix flags of a sample name found through its family's base name.
const (
	plainSample = iota
	countSample
	sumSample
)

// family is expfmt's setOrCreateCurrentMF: the family of a sample or
// comment name, and whether the name is its _count or _sum.
func (p *keptParser) family(name []byte) (*dto.MetricFamily, int, string) {
	if len(name) == 0 || !utf8.Valid(name) {
		return nil, 0, fmt.Sprintf("invalid metric name %q", name)
	}
	if mf := p.fams[string(name)]; mf != nil {
		return mf, plainSample, ""
	}
	suffix, base := plainSample, name
	switch n := len(name); {
	case n > 6 && string(name[n-6:]) == "_count":
		suffix, base = countSample, name[:n-6]
	case n > 4 && string(name[n-4:]) == "_sum":
		suffix, base = sumSample, name[:n-4]
	}
	if suffix != plainSample {
		if mf := p.fams[string(base)]; mf != nil && mf.GetType() == dto.MetricType_SUMMARY {
			return mf, suffix, ""
		}
	}
	if n := len(name); suffix == plainSample && n > 7 && string(name[n-7:]) == "_bucket" {
		base = name[:n-7]
	}
	if mf := p.fams[string(base)]; mf != nil && len(base) < len(name) && isHistogram(mf.GetType()) {
		return mf, suffix, ""
	}
	mf := p.families.next()
	mf.Name = p.intern(name)
	p.fams[*mf.Name] = mf
	return mf, plainSample, ""
}

func isHistogram(t dto.MetricType) bool {
	return t == dto.MetricType_HISTOGRAM || t == dto.MetricType_GAUGE_HISTOGRAM
}

// intern returns the string b as a shared, never written *string.
func (p *keptParser) intern(b []byte) *string {
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	s := new(string(b))
	if len(p.strs) < maxInterned && len(b) <= maxInternedLn {
		p.strs[*s] = s
	}
	return s
}

// sample reads a sample line whose name starts at l[i].
func (p *keptParser) sample(l []byte, i int) string {
	name, i, msg := p.name(l, i, true)
	if msg != "" {
		return msg
	}
	if len(name) == 0 {
		return "invalid metric name"
	}
	mf, suffix, msg := p.family(name)
	if msg != "" {
		return msg
	}
	if mf.Type == nil {
		mf.Type = &p.types[dto.MetricType_UNTYPED]
	}
	typ := mf.GetType()
	i = skipBlank(l, i)

	// Labels. For a histogram or summary, le or quantile is the bucket or
	// quantile (its last value wins, as in expfmt), not a label.
	p.pend = p.pend[:0]
	bucket, quantile := math.NaN(), math.NaN()
	var err error
	if at(l, i) == '{' {
		for {
			i = skipBlank(l, i+1)
			if at(l, i) == '}' {
				break
			}
			var ln []byte
			if ln, i, msg = p.name(l, i, false); msg != "" {
				return msg
			}
			if len(ln) == 0 {
				return fmt.Sprintf("invalid label name for metric %q", mf.GetName())
			}
			i = skipBlank(l, i)
			if c := at(l, i); c != '=' {
				return fmt.Sprintf("expected '=' after label name, found %q", c)
			}
			if string(ln) == nameLabel {
				return `label name "__name__" is reserved`
			}
			if !utf8.Valid(ln) {
				return fmt.Sprintf("invalid label name %q", ln)
			}
			special := typ == dto.MetricType_SUMMARY && string(ln) == "quantile" ||
				isHistogram(typ) && string(ln) == "le"
			var lname *string
			if !special {
				if lname = p.intern(ln); p.dupName(*lname) {
					return fmt.Sprintf("duplicate label names for metric %q", mf.GetName())
				}
			}
			i = skipBlank(l, i+1)
			if c := at(l, i); c != '"' {
				return fmt.Sprintf("expected '\"' at start of label value, found %q", c)
			}
			v, n, msg := p.unescapeN(l[i+1:], true)
			if msg != "" {
				return msg
			}
			if !utf8.Valid(v) {
				return fmt.Sprintf("invalid label value %q", v)
			}
			i += 1 + n
			switch {
			case !special:
				p.pend = append(p.pend, pendingPair{name: lname, value: p.intern(v)})
			case isHistogram(typ):
				if bucket, err = parseFloat(v); err != nil {
					return fmt.Sprintf("expected float as value for 'le' label, got %q", v)
				}
			default:
				if quantile, err = parseFloat(v); err != nil {
					return fmt.Sprintf("expected float as value for 'quantile' label, got %q", v)
				}
			}
			i = skipBlank(l, i)
			if c := at(l, i); c == ',' {
				continue
			} else if c != '}' {
				return fmt.Sprintf("unexpected end of label value %q", v)
			}
			break
		}
		i = skipBlank(l, i+1)
	}

	// Value and timestamp.
	end := untilBlank(l, i)
	v, err := parseFloat(l[i:end])
	if err != nil {
		return fmt.Sprintf("expected float as value, got %q", l[i:end])
	}
	var ts *int64
	if end < len(l) {
		i = skipBlank(l, end)
		end = untilBlank(l, i)
		t, err := strconv.ParseInt(string(l[i:end]), 10, 64)
		if err != nil {
			return fmt.Sprintf("expected integer as timestamp, got %q", l[i:end])
		}
		if end < len(l) {
			return fmt.Sprintf("spurious string after timestamp: %q", l[end:])
		}
		ts = &t
	}

	// The line is good: into its family.
	switch {
	case typ == dto.MetricType_SUMMARY:
		box := p.summary(mf)
		s := &box.s
		switch {
		case suffix == countSample:
			box.count = uint64(v)
			s.SampleCount = &box.count
		case suffix == sumSample:
			box.sum = v
			s.SampleSum = &box.sum
		case !math.IsNaN(quantile):
			s.Quantile = append(s.Quantile, &dto.Quantile{Quantile: new(quantile), Value: new(v)})
		}
		box.stamp(ts)
	case isHistogram(typ):
		// expfmt's checks, made before the metric is found so that a bad
		// line adds nothing.
		counts := suffix == countSample || suffix == plainSample && !math.IsNaN(bucket)
		if counts && !whole(v) && v < 0 {
			if suffix == countSample {
				return fmt.Sprintf("negative count for histogram %q", mf.GetName())
			}
			return fmt.Sprintf("negative bucket population for histogram %q", mf.GetName())
		}
		box := p.histogram(mf)
		h := &box.h
		switch {
		case suffix == countSample:
			if whole(v) {
				box.count = uint64(v)
				h.SampleCount = &box.count
			} else {
				box.countF = v
				h.SampleCountFloat = &box.countF
			}
		case suffix == sumSample:
			box.sum = v
			h.SampleSum = &box.sum
		case !math.IsNaN(bucket):
			bb := p.buckets.next()
			bb.ub = bucket
			bb.b.UpperBound = &bb.ub
			if whole(v) {
				bb.count = uint64(v)
				bb.b.CumulativeCount = &bb.count
			} else {
				bb.countF = v
				bb.b.CumulativeCountFloat = &bb.countF
			}
			h.Bucket = p.bounds.grow(h.Bucket, &bb.b)
		}
		box.stamp(ts)
	default:
		box := p.samples.next()
		box.v = v
		switch typ {
		case dto.MetricType_COUNTER:
			box.c.Value = &box.v
			box.m.Counter = &box.c
		case dto.MetricType_GAUGE:
			box.g.Value = &box.v
			box.m.Gauge = &box.g
		default:
			box.u.Value = &box.v
			box.m.Untyped = &box.u
		}
		box.stamp(ts)
		box.m.Label = p.labelPairs()
		mf.Metric = p.members.grow(mf.Metric, &box.m)
	}
	return ""
}

// whole is expfmt's test for an integer count: v == float64(uint64(v))
// (the same conversion, so the same answer for NaN, ±Inf and negatives).
func whole(v float64) bool { return v == float64(uint64(v)) }

func (b *metricBox) stamp(ts *int64) {
	if ts != nil {
		b.ts = *ts
		b.m.TimestampMs = &b.ts
	}
}

// dupName reports whether a label of the line is already called name.
func (p *keptParser) dupName(name string) bool {
	if len(p.pend) < 16 {
		for _, q := range p.pend {
			if *q.name == name {
				return true
			}
		}
		return false
	}
	// A long label set: a set, so a hostile line stays linear.
	if len(p.pend) == 16 {
		clear(p.names)
		for _, q := range p.pend {
			p.names[*q.name] = struct{}{}
		}
	}
	_, dup := p.names[name]
	if !dup {
		p.names[name] = struct{}{}
	}
	return dup
}

// labelPairs turns the line's pairs into a Metric's labels.
func (p *keptParser) labelPairs() []*dto.LabelPair {
	if len(p.pend) == 0 {
		return nil
	}
	out := p.labels.take(len(p.pend))
	for i, q := range p.pend {
		lp := p.pairs.next()
		lp.Name, lp.Value = q.name, q.value
		out[i] = lp
	}
	return out
}

// nameLabel is the label expfmt adds, with the family's name, to a
// histogram's or summary's labels when it keys them.
const nameLabel = "__name__"

// signature is model.LabelsToSignature of the line's labels and __name__
// (FNV-1a over the pairs sorted by name, 0xff after each string), so that
// histograms and summaries group as in expfmt, collisions included.
func (p *keptParser) signature(family string) uint64 {
	p.sorted = append(p.sorted[:0], p.pend...)
	slices.SortFunc(p.sorted, func(a, b pendingPair) int { return strings.Compare(*a.name, *b.name) })
	h := uint64(14695981039346656037)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
		h ^= 0xff
		h *= 1099511628211
	}
	named := false
	for _, q := range p.sorted {
		if !named && *q.name > nameLabel {
			add(nameLabel)
			add(family)
			named = true
		}
		add(*q.name)
		add(*q.value)
	}
	if !named {
		add(nameLabel)
		add(family)
	}
	return h
}

// histogram finds (or adds to mf) the histogram Metric of the line.
func (p *keptParser) histogram(mf *dto.MetricFamily) *histBox {
	sig := p.signature(mf.GetName())
	if box := p.hists[sig]; box != nil {
		return box
	}
	box := p.histos.next()
	box.m.Histogram = &box.h
	box.m.Label = p.labelPairs()
	p.hists[sig] = box
	p.histed = append(p.histed, box)
	mf.Metric = p.members.grow(mf.Metric, &box.m)
	return box
}

// summary finds (or adds to mf) the summary Metric of the line.
func (p *keptParser) summary(mf *dto.MetricFamily) *summaryBox {
	sig := p.signature(mf.GetName())
	if box := p.sums[sig]; box != nil {
		return box
	}
	box := p.summs.next()
	box.m.Summary = &box.s
	box.m.Label = p.labelPairs()
	p.sums[sig] = box
	mf.Metric = p.members.grow(mf.Metric, &box.m)
	return box
}

// parseFloat is expfmt's parseFloat ('p', 'P' and '_' refused, then
// strconv.ParseFloat) with a fast path for plain decimals.
func parseFloat(b []byte) (float64, error) {
	if f, ok := plainDecimal(b); ok {
		return f, nil
	}
	if bytes.ContainsAny(b, "pP_") {
		return 0, errFloatChar
	}
	return strconv.ParseFloat(string(b), 64)
}

var errFloatChar = errors.New("unsupported character in float")

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// plainDecimal reads [+-]digits[.digits] of at most 15 digits: the
// mantissa and the power of ten are exact floats, so one division is the
// correctly rounded value, as strconv.ParseFloat returns it.
func plainDecimal(b []byte) (float64, bool) {
	i, neg := 0, false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg, i = b[0] == '-', 1
	}
	var m uint64
	digits, frac, dot := 0, 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			m = m*10 + uint64(c-'0')
			if digits++; dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 15 {
		return 0, false
	}
	f := float64(m) / pow10[frac]
	if neg {
		f = -f
	}
	return f, true
}

// slabChunk is how many values a slab allocates at a time.
const slabChunk = 512

// slab hands out values of T from chunks it keeps from one parse to the
// next (reset zeroes what was handed out).
type slab[T any] struct {
	chunks [][]T
	c, i   int // the next free value: chunks[c][i]
}

func (s *slab[T]) reset() {
	for j := 0; j < s.c && j < len(s.chunks); j++ {
		clear(s.chunks[j])
	}
	if s.c < len(s.chunks) {
		clear(s.chunks[s.c][:s.i])
	}
	s.c, s.i = 0, 0
}

// release forgets the chunks when there are more than keep values.
func (s *slab[T]) release(keep int) {
	if len(s.chunks)*slabChunk > keep {
		s.chunks, s.c, s.i = nil, 0, 0
	}
}

// take returns k values, contiguous, with no room to append.
func (s *slab[T]) take(k int) []T {
	if k > slabChunk {
		return make([]T, k)
	}
	if s.c < len(s.chunks) && s.i+k > slabChunk {
		s.c, s.i = s.c+1, 0
	}
	if s.c == len(s.chunks) {
		s.chunks = append(s.chunks, make([]T, slabChunk))
		s.i = 0
	}
	out := s.chunks[s.c][s.i : s.i+k : s.i+k]
	s.i += k
	return out
}

func (s *slab[T]) next() *T { return &s.take(1)[0] }

// grow appends x to list: in place when list is the last thing taken
// (a family's samples, a histogram's buckets: contiguous on a page),
// else by a copy (short lists) or append.
func (s *slab[T]) grow(list []T, x T) []T {
	n := len(list)
	if n > 0 && s.c < len(s.chunks) && s.i >= n && s.i < slabChunk && &s.chunks[s.c][s.i-n] == &list[0] {
		ch := s.chunks[s.c]
		ch[s.i] = x
		s.i++
		return ch[s.i-n-1 : s.i : s.i]
	}
	if n >= 64 {
		return append(list, x)
	}
	out := s.take(n + 1)
	copy(out, list)
	out[n] = x
	return out
}
