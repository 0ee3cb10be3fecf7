package metrics

import (
	"bytes"
	"io"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/collectors"
)

func benchParse(b *testing.B, body []byte, ct string, engines int) {
	p := NewParser()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.last = nil // a busy engine's page: never the same twice
		page, err := p.Parse(body, ct, collectors.RoleWorker, "")
		if err != nil || len(page.Engines) != engines {
			b.Fatalf("parse: %v, %d engines", err, len(page.Engines))
		}
	}
}

// BenchmarkParse200KBUnchanged is the same page scraped again unchanged,
// as an idle engine serves it: the prefilter runs, the text parser and
// the fold do not.
func BenchmarkParse200KBUnchanged(b *testing.B) {
	body := load(b, "testdata/vllm-v1-5engines-200k.txt")
	p := NewParser()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if page, err := p.Parse(body, textType, collectors.RoleWorker, ""); err != nil || len(page.Engines) != 5 {
			b.Fatalf("parse: %v", err)
		}
	}
}

// BenchmarkParse200KB parses and folds a 203 KB vLLM V1 page (five DP
// engines, full histograms, _created samples; see testdata/README.md) with
// a reused Parser, as each target's goroutine does. Target: 2 ms/op.
func BenchmarkParse200KB(b *testing.B) {
	benchParse(b, load(b, "testdata/vllm-v1-5engines-200k.txt"), textType, 5)
}

// BenchmarkParse200KBOpenMetrics: the same page as a Python server sends it
// when OpenMetrics is offered.
func BenchmarkParse200KBOpenMetrics(b *testing.B) {
	benchParse(b, omOf(b, load(b, "testdata/vllm-v1-5engines-200k.txt")), omType, 5)
}

// BenchmarkParse256Engines: a page at the engines bound, 256 engines with
// 16 series each (4 096 series). The fold looks each engine up once per
// series; with a linear lookup this grows with the square of the engines.
func BenchmarkParse256Engines(b *testing.B) {
	benchParse(b, enginesPage(DefaultMaxEngines, 16*DefaultMaxEngines, 0), textType, DefaultMaxEngines)
}

// BenchmarkParse20kEngines: 20 000 engines of one series each, with the
// engines bound raised to let them through: the fold stays linear (with
// a linear engine lookup this page took 0.8 s/op, and 350 000 engines
// minutes).
func BenchmarkParse20kEngines(b *testing.B) {
	body := enginesPage(20_000, 20_000, 0)
	p := NewParser()
	bd := budget{maxSeries: DefaultMaxSeries, maxEngines: 20_000}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.last = nil
		page, err := p.parse(body, textType, collectors.RoleWorker, "", &bd)
		if err != nil || len(page.Engines) != 20_000 {
			b.Fatalf("parse: %v", err)
		}
	}
}

// BenchmarkRejectHostilePage: 350 000 series of distinct engines (15 MB),
// rejected as too_large by the prefilter before the text parser runs.
func BenchmarkRejectHostilePage(b *testing.B) {
	body := hostilePage(b)
	p := NewParser()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Parse(body, textType, collectors.RoleWorker, ""); err == nil {
			b.Fatal("hostile page accepted")
		}
	}
}

// BenchmarkParseAtSeriesBound: DefaultMaxSeries series over 4 engines, the largest
// page kvtop folds by default: the cost of one scrape of a target at the
// bound.
func BenchmarkParseAtSeriesBound(b *testing.B) {
	benchParse(b, enginesPage(4, DefaultMaxSeries, 0), textType, 4)
}

// BenchmarkParsePeerPage: a 27 KB llm-d-inference-sim page.
func BenchmarkParsePeerPage(b *testing.B) {
	benchParse(b, load(b, peers+"metrics-8.txt"), textType, 1)
}

// BenchmarkExpfmtOpenMetricsDecoder is the road not taken: expfmt's own
// OpenMetrics decoder on the real 70 KB vLLM page, re-encoded. It is why
// OpenMetrics bodies go through the prefilter and the text parser instead.
func BenchmarkExpfmtOpenMetricsDecoder(b *testing.B) {
	if testing.Short() {
		b.Skip("seconds per op")
	}
	om := omOf(b, load(b, real+"vllm-dynamo-worker-qwen3-0.6b.txt"))
	b.SetBytes(int64(len(om)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		d := expfmt.NewDecoder(bytes.NewReader(om), expfmt.FmtOpenMetrics_1_0_0)
		for {
			var mf dto.MetricFamily
			if err := d.Decode(&mf); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkTextParserWholePage is expfmt's TextParser alone on the whole
// 200 KB page, without the prefilter and without folding: the cost the
// prefilter avoids.
func BenchmarkTextParserWholePage(b *testing.B) {
	body := load(b, "testdata/vllm-v1-5engines-200k.txt")
	tp := expfmt.NewTextParser(model.UTF8Validation)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := tp.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseKept is the text parser alone on the lines the prefilter
// keeps of the 200 KB vLLM page (what parseKept reads every scrape of a
// busy engine); BenchmarkParseKeptExpfmt is expfmt's TextParser on the
// same lines, the parser it replaced.
func BenchmarkParseKept(b *testing.B) {
	kept := keptOf(NewParser(), load(b, "testdata/vllm-v1-5engines-200k.txt"), false)
	kp := newKeptParser()
	bd := defaultBudget()
	b.SetBytes(int64(len(kept)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if fams, err := kp.parse(kept, &bd); err != nil || len(fams) == 0 {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseKeptExpfmt(b *testing.B) {
	kept := keptOf(NewParser(), load(b, "testdata/vllm-v1-5engines-200k.txt"), false)
	tp := expfmt.NewTextParser(model.UTF8Validation)
	b.SetBytes(int64(len(kept)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if fams, err := tp.TextToMetricFamilies(bytes.NewReader(kept)); err != nil || len(fams) == 0 {
			b.Fatal(err)
		}
	}
}
