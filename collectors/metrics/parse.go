// Package metrics scrapes Prometheus /metrics pages of inference engines
// (vLLM, SGLang) and routers (vllm-router, SGLang router / model gateway,
// Dynamo, llm-d EPP, production-stack) and turns them into the typed
// observations of package collectors.
//
// Reading a page (the adapter, Parser.Parse):
//
//  1. A byte-level prefilter walks the page once. It counts the names of
//     each dialect (auto-detection), checks that every line looks like a
//     sample, and keeps only the families kvtop reads plus their TYPE
//     lines. HELP lines, `_created` samples and everything unread are
//     dropped here; on a vLLM page that is most of the bytes. A sample
//     of a series already seen (same name, same label pairs in any
//     order: a hash per line) is set aside as a repeat.
//  2. The kept lines go through a text parser of our own (text.go) that
//     makes the families expfmt's TextParser would (UTF-8 names allowed)
//     at a fraction of its cost: a busy engine's page changes every
//     scrape, and expfmt's byte-at-a-time parse was most of a scrape.
//     OpenMetrics bodies take the same path: `# EOF` and `# UNIT` are
//     dropped, and exemplars and timestamps are cut off the kept lines.
//     (expfmt's own OpenMetrics decoder needs seconds per page.)
//  3. The families are folded straight into EngineMetrics / RouterMetrics.
//
// Values are reported as exposed: counters stay cumulative (the pool turns
// them into windowed rates and treats a decrease as a reset). A value that
// cannot be true is never shown as true, nor clamped: a series repeated
// for one engine (never summed), a negative queue, running count, block
// geometry or counter, a fraction outside 0..1 (KV usage, SGLang's cache
// hit rate; vllm-ascend has shipped a negative KV usage), a histogram
// whose buckets are not cumulative. The field it feeds is nil for that
// engine and Page.Invalid names the series and why (router pages: the
// figure is dropped and counted the same way). The sums that are right
// stay: over finish reasons, SGLang cache tiers, the models of one engine
// (their label sets differ). Unparsable lines, NaN/Inf values and
// `_created` samples of read families are dropped and counted in Skipped;
// the rest of the page is still read.
//
// Bounded work: the prefilter counts the series kvtop reads and the
// distinct engine (dp_rank) values; a page over Options.MaxSeries or
// Options.MaxEngines fails as too_large before the text parser sees it.
// Every stage is linear in the page, and one deadline (Options.Timeout
// from the scrape's start) covers fetch, prefilter, text parse and fold:
// past it the scrape fails as timeout, saying how far it got.
//
// Scraping (Collector): one goroutine and one HTTP client per target, so a
// slow, dead or hostile target never delays another; text preferred over
// OpenMetrics in Accept; gzip undone here so the body limit holds for the
// decompressed page too; a CA file or skip-verify per target. A bearer
// token comes from a file (read again every scrape; one readable by group
// or others is warned about once, kind config) or an environment
// variable, never goes into a message, and goes only to the configured
// URL: redirects are not followed (kind redirect, naming the Location).
// Every scrape sends one MetricsScrape (Err set when the target is down);
// a page read with problems also sends a SourceError of kind "parse" with
// the warnings, and one of kind "invalid" with the first rejected value.
package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/kvtop/kvtop/collectors"
)

// maxReparse bounds how many bad lines the parser cuts out and retries
// before it settles for what it has.
const maxReparse = 8

// maxWarnings bounds the warnings kept per page.
const maxWarnings = 8

// Page is what one scraped body yields.
type Page struct {
	Profile      string
	ProcessStart *float64
	Engines      []collectors.EngineMetrics // worker profiles, sorted by Engine
	// WorkerTotals are the unlabelled series of a page whose other series
	// carry the engine label (SGLang's tokenizer counters next to per
	// dp_rank scheduler gauges): figures of the whole worker, not an engine.
	WorkerTotals *collectors.EngineMetrics
	Router       *collectors.RouterMetrics // router profiles
	// Skipped counts samples dropped as unusable: unparsable lines, NaN or
	// Inf values, `_created` samples of the families kvtop reads.
	Skipped int
	// BadLines counts lines that are not Prometheus text (part of Skipped).
	BadLines int
	// Warnings are short, one-line notes for the operator (bad lines,
	// figures that cannot be read), at most maxWarnings.
	Warnings []string
	// Invalid lists the values of a worker page that cannot be true (see
	// collectors.InvalidValue), sorted by engine: each named field is nil.
	Invalid []collectors.InvalidValue

	// Values of a router page rejected as impossible: how many, and the
	// first one's note.
	rejected   int
	rejectNote string

	// What the prefilter learnt from comment lines, for the fold.
	cachedTyped  bool // `# TYPE sglang:cached_tokens_total` is on the page
	prefixBlocks bool // vllm:gpu_prefix_cache_*'s HELP says it counts blocks
}

func (p *Page) reject(note string) {
	if p.rejected == 0 {
		p.rejectNote = note
	}
	p.rejected++
}

// invalidSummary is the first note of the values rejected as impossible
// and how many there are (0: none).
func (p *Page) invalidSummary() (string, int) {
	if len(p.Invalid) > 0 {
		return p.Invalid[0].Note, len(p.Invalid)
	}
	return p.rejectNote, p.rejected
}

func (p *Page) warn(format string, args ...any) {
	if len(p.Warnings) < maxWarnings {
		p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
	}
}

// Parser turns scraped bodies into Pages. It keeps its buffers between
// calls; it is not safe for concurrent use (one per target).
type Parser struct {
	kept    []byte      // filtered page
	starts  []int32     // offset of each kept line in kept
	origins []int32     // its line number in the body
	text    *keptParser // reads kept (text.go), from keptParsers while a page is read

	// newITL: the target's last page had vLLM's new inter-token latency
	// name (filter's assumption); sawNewITL: the page being filtered has.
	newITL, sawNewITL bool

	seed   maphash.Seed
	ids    [2]idCount       // distinct engine (vLLM lines) and dp_rank (SGLang lines) values
	series map[uint64]int32 // series (name and label pairs) -> line of its first sample
	dups   []dupLine        // later samples of a series already on the page

	// The last clean page and the kept lines it came from: an engine with
	// nothing to do serves the same lines scrape after scrape, and a page
	// is a pure function of them, so the text parser and the fold (nearly
	// all of a scrape's CPU) are skipped when they repeat.
	lastKept    []byte
	lastG       group
	lastSkipped int // the prefilter's count of samples skipped (`_created`, NaN)
	last        *Page
}

// dupLine is a sample of a series the page already had: it is not kept,
// and the fold rejects the field the series feeds (a repeated series is
// never summed).
type dupLine struct {
	series      []byte // name and labels as on the page (a slice of the body, valid during Parse)
	first, line int32
}

// NewParser returns a Parser.
func NewParser() *Parser {
	return &Parser{seed: maphash.MakeSeed()}
}

// idLabels are the engine labels the prefilter counts, by dialect.
var idLabels = [2]string{"engine", "dp_rank"}

// idIndex is the index in idLabels of group g's engine label, -1 if g has
// no engines.
func idIndex(g group) int {
	switch g {
	case gVLLM:
		return 0
	case gSGLang:
		return 1
	}
	return -1
}

// Parse reads one body with the given Content-Type for a target of the
// given role. profile is "" or "auto" to detect, or a profile name to force.
// It fails when the body holds no metrics at all, the format is one kvtop
// cannot read, or the page is over DefaultMaxSeries or DefaultMaxEngines;
// a page with some bad lines is read and the lines counted.
func Parse(body []byte, contentType string, role collectors.Role, profile string) (*Page, error) {
	return NewParser().Parse(body, contentType, role, profile)
}

// Parse: see the package function Parse.
func (p *Parser) Parse(body []byte, contentType string, role collectors.Role, profile string) (*Page, error) {
	b := defaultBudget()
	return p.parse(body, contentType, role, profile, &b)
}

// parse is Parse within budget b. Its errors over a bound are
// *limitError; the bounds are checked in the prefilter, so a page over
// one never reaches the text parser.
func (p *Parser) parse(body []byte, contentType string, role collectors.Role, profile string, b *budget) (*Page, error) {
	forced, ok := groupOf(profile)
	if !ok {
		return nil, fmt.Errorf("unknown profile %q", profile)
	}
	om := false
	switch ft := expfmt.ResponseFormat(httpHeader(contentType)); ft.FormatType() {
	case expfmt.TypeOpenMetrics:
		om = true
	case expfmt.TypeProtoDelim, expfmt.TypeProtoText, expfmt.TypeProtoCompact:
		return nil, fmt.Errorf("content type %q is protobuf; kvtop asks for text", contentType)
	}
	// Anything else (text, missing or odd Content-Type) is tried as text:
	// the line checks tell a metrics page from an HTML error page.

	page := &Page{}
	var det detection
	defer p.release()
	st, err := p.filter(body, om, &det, page, b)
	if err == nil && p.sawNewITL != p.newITL {
		// The page is not shaped as the last one (a first page, an
		// upgraded engine): filter it again under what it has.
		p.newITL = p.sawNewITL
		page, det = &Page{}, detection{}
		st, err = p.filter(body, om, &det, page, b)
	}
	if err != nil {
		return nil, err
	}
	if st.samples == 0 && (st.bad > 0 || st.other > 0) {
		ct := contentType
		if ct == "" {
			ct = "none"
		}
		return nil, fmt.Errorf("no metrics in body (content type %s, %d lines not in Prometheus format)", ct, st.bad+st.other)
	}
	if st.series > b.maxSeries {
		return nil, tooMany(st.series, b.maxSeries, "series kvtop reads", "series")
	}

	g := det.choose(forced, role == collectors.RoleRouter)
	page.Profile = det.profileName(g) // a forced vllm still says whether the names are legacy
	i := idIndex(g)
	if g == gProdStack {
		i = 0 // it reads vllm:* lines, which the prefilter stopped keeping
	}
	if i >= 0 && p.ids[i].over(b) {
		return nil, p.ids[i].tooMany(idLabels[i], b)
	}

	skipped := page.Skipped
	clean := len(p.dups) == 0 && page.BadLines == 0 && len(page.Warnings) == 0
	if clean && p.last != nil && g == p.lastG && skipped == p.lastSkipped && page.cachedTyped == p.last.cachedTyped &&
		page.prefixBlocks == p.last.prefixBlocks && bytes.Equal(p.kept, p.lastKept) {
		again := *p.last // its values are shared: nothing downstream writes them
		return &again, nil
	}
	p.last = nil
	fams, err := p.parseKept(page, b)
	if err != nil {
		return nil, err
	}
	if err := fold(fams, g, page, p.dups, b); err != nil {
		return nil, err
	}
	if clean && page.BadLines == 0 && len(page.Warnings) == 0 && page.rejected == 0 && len(p.kept) <= maxRemembered {
		p.last, p.lastG, p.lastSkipped = page, g, skipped
		p.lastKept = append(p.lastKept[:0], p.kept...)
		again := *page
		return &again, nil
	}
	return page, nil
}

// newITLPrefix starts the sample lines of vLLM's inter-token latency
// under its 0.11 name.
var newITLPrefix = []byte("vllm:inter_token_latency_seconds_")

// maxRemembered bounds the kept lines a Parser remembers to recognise a
// repeated page (a real engine's are tens of kB).
const maxRemembered = 4 << 20

// scanStats are the prefilter's counts.
type scanStats struct {
	samples int // lines that look like samples
	bad     int // lines that do not
	other   int // lines we cannot judge (quoted UTF-8 names)
	series  int // sample lines of the families kvtop reads (kept while within the budget)
}

// filter is the prefilter: one pass over body, keeping the lines kvtop
// reads in p.kept and filling the detection counts. Past b's series bound
// it only counts, so an over-large page costs one cheap pass and no
// memory; it stops at b's deadline.
func (p *Parser) filter(body []byte, om bool, det *detection, page *Page, b *budget) (scanStats, error) {
	p.kept, p.starts, p.origins = p.kept[:0], p.starts[:0], p.origins[:0]
	for i := range p.ids {
		p.ids[i].reset()
	}
	if p.series == nil {
		p.series = map[uint64]int32{}
	}
	var st scanStats
	// vLLM 0.11 pages carry the inter-token latency under both names,
	// the same observations twice; the fold reads the old name only from
	// a page without the new one, so there its lines are not even parsed
	// (a histogram per engine: most of what ITL costs a page). Whether
	// this page has the new name is known at the end of the pass, so the
	// pass assumes what the target's last page had (parse filters again
	// when that was wrong): a search of the whole body for it was a tenth
	// of an idle console's CPU.
	oldITLShadowed := p.newITL
	p.sawNewITL = false
	clear(p.series) // a second pass over the same page
	clear(p.dups)
	p.dups = p.dups[:0]
	lineNo := 0
	for len(body) > 0 {
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		lineNo++
		if lineNo%checkEvery == 0 && b.over() {
			return st, b.late(st.series)
		}
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		line = trimBlank(line)
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			if p.keepType(line, lineNo) == "sglang:cached_tokens" {
				page.cachedTyped = true
			}
			if blockHelp(line) {
				page.prefixBlocks = true
			}
			continue
		}
		if line[0] == '{' {
			// A quoted UTF-8 name (text 1.0): no family kvtop reads needs one.
			st.other++
			continue
		}
		n := nameLen(line)
		name, rest := line[:n], line[n:]
		if n == 0 || !looksLikeSample(rest) {
			st.bad++
			page.Skipped++
			page.BadLines++
			page.warn("line %d: not a Prometheus sample", lineNo)
			continue
		}
		st.samples++

		g := prefixGroup(name)
		e, created, ok := lookupWanted(name)
		if g == gVLLM && !p.sawNewITL && bytes.HasPrefix(name, newITLPrefix) {
			p.sawNewITL = true
		}
		if g != gNone {
			det.lines[g]++
			if g == gVLLM && !det.server && rest[0] == '{' &&
				bytes.Contains(rest, []byte(`server=`)) && hasLabel(rest, "server") {
				det.server = true
			}
		}
		if !ok {
			continue
		}
		if created {
			page.Skipped++ // a creation time, never a value
			continue
		}
		if e.old && e.f == fITL && oldITLShadowed {
			st.other++
			continue
		}
		if g == gVLLM {
			switch {
			case e.old:
				det.oldVLLM = true
			case e.f == fKVUsage || e.f == fPrefixQueries || e.f == fPrefixHits:
				det.newVLLM = true
			}
		}
		if st.series++; st.series > b.maxSeries {
			continue // counted for the message, never parsed
		}
		id := ""
		i := idIndex(g)
		if i >= 0 {
			id = idLabels[i]
			if p.ids[i].over(b) {
				// Too many engines to fold: the dialect's lines are only
				// counted, up to a point, for the message.
				if !p.ids[i].full(b) {
					if _, idVal, ok := scanLabels(rest, p.seed, id); ok {
						p.ids[i].add(p.seed, idVal)
					}
				}
				continue
			}
		}
		if sum, idVal, ok := scanLabels(rest, p.seed, id); ok {
			key := maphash.Bytes(p.seed, name)*0x9e3779b97f4a7c15 + sum
			if first, dup := p.series[key]; dup {
				series := name
				if e := labelsEnd(rest, 0); rest[0] == '{' && e > 0 {
					series = line[:n+e]
				}
				p.dups = append(p.dups, dupLine{series: series, first: first, line: int32(lineNo)})
				continue // the fold sees the first sample only, and rejects what it feeds
			}
			p.series[key] = int32(lineNo)
			if i >= 0 {
				p.ids[i].add(p.seed, idVal)
			}
		}
		if om {
			line = cutAfterValue(line, n)
		}
		p.keepLine(line, lineNo)
	}
	return st, nil
}

// release keeps what a page leaves behind small: no reference to the
// body, and the maps of a large page go (a hostile one's are megabytes).
func (p *Parser) release() {
	clear(p.dups)
	p.dups = p.dups[:0]
	if len(p.series) > checkEvery {
		p.series = nil
	}
	clear(p.series)
	for i := range p.ids {
		p.ids[i].release()
	}
	if p.text != nil {
		p.text.release()
		keptParsers.Put(p.text)
		p.text = nil
	}
}

// keptParsers are shared by every target's Parser: a page's families live
// only from its parse to the end of its fold, and a keptParser's reused
// slabs are ~200 kB for a vLLM page, which a thousand targets each keeping
// their own made 220 MB; a few are in use at once.
var keptParsers = sync.Pool{New: func() any { return newKeptParser() }}

// keepType keeps a `# TYPE` line of a family kvtop reads and returns the
// family's table key ("" when not kept). HELP, UNIT, EOF and free comments
// are dropped; so are types the classic text parser does not know
// (OpenMetrics info, stateset, gaugehistogram, unknown): their samples then
// parse as untyped.
func (p *Parser) keepType(line []byte, lineNo int) string {
	rest, ok := bytes.CutPrefix(line[1:], []byte(" TYPE "))
	if !ok {
		return ""
	}
	rest = trimBlank(rest)
	sp := bytes.IndexAny(rest, " \t")
	if sp <= 0 {
		return ""
	}
	name, typ := rest[:sp], trimBlank(rest[sp:])
	key := familyKey(string(name))
	if _, ok := wanted[key]; !ok {
		return ""
	}
	switch string(typ) {
	case "counter", "gauge", "histogram", "summary", "untyped":
		p.keepLine(line, lineNo)
		return key
	}
	return ""
}

// blockHelp reports a HELP line of vllm:gpu_prefix_cache_queries or _hits
// that says the counter is in blocks, as the first V1 releases did
// ("in terms of number of queried blocks"); later ones say tokens.
func blockHelp(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("# HELP vllm:gpu_prefix_cache_"))
	if !ok {
		return false
	}
	return (bytes.HasPrefix(rest, []byte("queries")) || bytes.HasPrefix(rest, []byte("hits"))) &&
		bytes.Contains(rest, []byte(" blocks"))
}

func (p *Parser) keepLine(line []byte, lineNo int) {
	p.starts = append(p.starts, int32(len(p.kept)))
	p.origins = append(p.origins, int32(lineNo))
	p.kept = append(p.kept, line...)
	p.kept = append(p.kept, '\n')
}

// dropKept removes kept line i (0-based) after the text parser rejected it.
func (p *Parser) dropKept(i int) {
	start := p.starts[i]
	end := int32(len(p.kept))
	if i+1 < len(p.starts) {
		end = p.starts[i+1]
	}
	p.kept = append(p.kept[:start], p.kept[end:]...)
	for j := i + 1; j < len(p.starts); j++ {
		p.starts[j] -= end - start
	}
	p.starts = append(p.starts[:i], p.starts[i+1:]...)
	p.origins = append(p.origins[:i], p.origins[i+1:]...)
}

// parseKept runs the text parser over the kept lines. A line it rejects is
// counted, cut out and the rest parsed again, so one bad line loses only
// itself. It stops at b's deadline, between tries and within one. The
// families are valid until the next parse (see keptParser).
func (p *Parser) parseKept(page *Page, b *budget) (map[string]*dto.MetricFamily, error) {
	for try := 0; ; try++ {
		if try > 0 && b.over() {
			return nil, b.late(len(p.starts))
		}
		if p.text == nil {
			p.text = keptParsers.Get().(*keptParser)
		}
		fams, err := p.text.parse(p.kept, b)
		if err == nil {
			return fams, nil
		}
		var pe expfmt.ParseError
		if !errors.As(err, &pe) {
			return nil, err // the deadline
		}
		page.Skipped++
		page.BadLines++
		if pe.Line < 1 || pe.Line > len(p.starts) || try >= maxReparse {
			page.warn("%s; rest of the page not read", oneLine(err.Error()))
			return fams, nil
		}
		page.warn("line %d: %s", p.origins[pe.Line-1], oneLine(pe.Msg))
		p.dropKept(pe.Line - 1)
	}
}

// oneLine keeps messages to one short line.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
