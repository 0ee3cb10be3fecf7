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
//     dropped here; on a vLLM page that is most of the bytes.
//  2. The kept lines go through expfmt's TextParser (UTF-8 names allowed).
//     OpenMetrics bodies take the same path: `# EOF` and `# UNIT` are
//     dropped, and exemplars and timestamps are cut off the kept lines.
//     (expfmt's own OpenMetrics decoder needs seconds per page.)
//  3. The families are folded straight into EngineMetrics / RouterMetrics.
//
// Values are reported as exposed: counters stay cumulative (the pool turns
// them into windowed rates and treats a decrease as a reset). A KV usage
// outside 0..1 (vllm-ascend has shipped a negative one) is kept as exposed
// and reported as a warning, never clamped. Unparsable lines, NaN/Inf
// values and `_created` samples of read families are dropped and counted
// in Skipped; the rest of the page is still read.
//
// Scraping (Collector): one goroutine and one HTTP client per target, so a
// slow or dead target never delays another; a timeout per scrape (body
// included); text preferred over OpenMetrics in Accept; gzip undone here so
// the body limit holds for the decompressed page too; a bearer token from a
// file (read again every scrape) or an environment variable, never in a
// message; a CA file or skip-verify per target. Every scrape sends one
// MetricsScrape (Err set when the target is down); a page read with
// problems also sends a SourceError of kind "parse" with the warnings.
package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

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
	// values out of range), at most maxWarnings.
	Warnings []string

	// What the prefilter learnt from comment lines, for the fold.
	cachedTyped  bool // `# TYPE sglang:cached_tokens_total` is on the page
	prefixBlocks bool // vllm:gpu_prefix_cache_*'s HELP says it counts blocks
}

func (p *Page) warn(format string, args ...any) {
	if len(p.Warnings) < maxWarnings {
		p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
	}
}

// Parser turns scraped bodies into Pages. It keeps its buffers between
// calls; it is not safe for concurrent use (one per target).
type Parser struct {
	kept    []byte  // filtered page
	starts  []int32 // offset of each kept line in kept
	origins []int32 // its line number in the body
	text    expfmt.TextParser
}

// NewParser returns a Parser.
func NewParser() *Parser {
	return &Parser{text: expfmt.NewTextParser(model.UTF8Validation)}
}

// Parse reads one body with the given Content-Type for a target of the
// given role. profile is "" or "auto" to detect, or a profile name to force.
// It fails only when the body holds no metrics at all or the format is one
// kvtop cannot read; a page with some bad lines is read and the lines
// counted.
func Parse(body []byte, contentType string, role collectors.Role, profile string) (*Page, error) {
	return NewParser().Parse(body, contentType, role, profile)
}

// Parse: see the package function Parse.
func (p *Parser) Parse(body []byte, contentType string, role collectors.Role, profile string) (*Page, error) {
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
	st := p.filter(body, om, &det, page)
	if st.samples == 0 && (st.bad > 0 || st.other > 0) {
		ct := contentType
		if ct == "" {
			ct = "none"
		}
		return nil, fmt.Errorf("no metrics in body (content type %s, %d lines not in Prometheus format)", ct, st.bad+st.other)
	}

	g := det.choose(forced, role == collectors.RoleRouter)
	page.Profile = det.profileName(g) // a forced vllm still says whether the names are legacy

	fams := p.parseKept(page)
	fold(fams, g, page)
	return page, nil
}

// scanStats are the prefilter's counts.
type scanStats struct {
	samples int // lines that look like samples
	bad     int // lines that do not
	other   int // lines we cannot judge (quoted UTF-8 names)
}

// filter is the prefilter: one pass over body, keeping the lines kvtop
// reads in p.kept and filling the detection counts.
func (p *Parser) filter(body []byte, om bool, det *detection, page *Page) scanStats {
	p.kept, p.starts, p.origins = p.kept[:0], p.starts[:0], p.origins[:0]
	var st scanStats
	lineNo := 0
	for len(body) > 0 {
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		lineNo++
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
		if g == gVLLM {
			switch {
			case e.old:
				det.oldVLLM = true
			case e.f == fKVUsage || e.f == fPrefixQueries || e.f == fPrefixHits:
				det.newVLLM = true
			}
		}
		if om {
			line = cutAfterValue(line, n)
		}
		p.keepLine(line, lineNo)
	}
	return st
}

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
// itself.
func (p *Parser) parseKept(page *Page) map[string]*dto.MetricFamily {
	for try := 0; ; try++ {
		fams, err := p.text.TextToMetricFamilies(bytes.NewReader(p.kept))
		if err == nil {
			return fams
		}
		page.Skipped++
		page.BadLines++
		var pe expfmt.ParseError
		if !errors.As(err, &pe) || pe.Line < 1 || pe.Line > len(p.starts) || try >= maxReparse {
			page.warn("%s; rest of the page not read", oneLine(err.Error()))
			return fams
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
