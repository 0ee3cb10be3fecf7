package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/kvtop/kvtop/collectors"
)

// agree parses text with the kept-lines parser and with expfmt's
// TextParser and fails unless they agree: the same families (same names,
// proto.Equal each) when expfmt accepts the text, a ParseError at the
// same line when it rejects it. It returns expfmt's error.
//
// Where they differ by design (documented in keptParser): a line starting
// with '{' (a metric name inside the braces) is refused whatever expfmt
// says, and after an error the families are not compared (expfmt keeps
// half a Metric of the bad line).
func agree(t *testing.T, kp *keptParser, text []byte) error {
	t.Helper()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	want, wantErr := tp.TextToMetricFamilies(bytes.NewReader(text))
	b := defaultBudget()
	got, gotErr := kp.parse(text, &b)
	var wpe, gpe expfmt.ParseError
	if wantErr != nil && !errors.As(wantErr, &wpe) {
		t.Fatalf("expfmt: %v", wantErr)
	}
	if gotErr != nil && !errors.As(gotErr, &gpe) {
		t.Fatalf("kept parser: %v (not a ParseError)", gotErr)
	}
	if braced(text, gpe.Line) {
		return wantErr
	}
	switch {
	case wantErr == nil && gotErr != nil:
		t.Fatalf("expfmt reads the text, the kept parser says %v\n%s", gotErr, excerpt(text, gpe.Line))
	case wantErr != nil && gotErr == nil:
		t.Fatalf("expfmt says %v, the kept parser reads the text\n%s", wantErr, excerpt(text, wpe.Line))
	case wantErr != nil:
		if gpe.Line != wpe.Line {
			t.Fatalf("expfmt: %v; kept parser: %v", wantErr, gotErr)
		}
		return wantErr
	}
	if len(got) != len(want) {
		t.Fatalf("%d families, expfmt %d: %v vs %v", len(got), len(want), keys(got), keys(want))
	}
	for name, w := range want {
		if g := got[name]; !proto.Equal(g, w) {
			t.Fatalf("family %q:\n got %v\nwant %v", name, g, w)
		}
	}
	return nil
}

// braced: line n (0: any line) starts with '{' after blanks, the one
// form the kept parser refuses by design (the prefilter never keeps it).
func braced(text []byte, n int) bool {
	for i, l := range bytes.Split(text, []byte("\n")) {
		if (n == 0 || i+1 == n) && bytes.HasPrefix(bytes.TrimLeft(l, " \t"), []byte("{")) {
			return true
		}
	}
	return false
}

func excerpt(text []byte, n int) string {
	lines := strings.Split(string(text), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return fmt.Sprintf("line %d: %q", n, lines[n-1])
}

func keys(m map[string]*dto.MetricFamily) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// keptOf runs the prefilter over body and returns the kept lines, as
// parseKept gets them.
func keptOf(p *Parser, body []byte, om bool) []byte {
	var det detection
	page := &Page{}
	b := defaultBudget()
	defer p.release()
	if _, err := p.filter(body, om, &det, page, &b); err != nil {
		return nil
	}
	return bytes.Clone(p.kept)
}

// hostileKept are texts on which matching expfmt is subtle; each is
// checked as it is and, through the prefilter, as a page.
var hostileKept = []string{
	// escapes in label values, a value with a newline escape
	"vllm:num_requests_running{engine=\"0\",model_name=\"a\\\\b\\\"c\\nd\"} 1\n",
	"vllm:num_requests_running{engine=\"0\",model_name=\"bad\\t\"} 1\n",
	"vllm:num_requests_running{engine=\"0\",model_name=\"trailing\\\"} 1\n",
	// NaN, ±Inf, and what parseFloat refuses
	"vllm:num_requests_running{engine=\"0\"} NaN\nvllm:num_requests_running{engine=\"1\"} +Inf\nvllm:num_requests_running{engine=\"2\"} -inf\nvllm:num_requests_running{engine=\"3\"} nan\n",
	"vllm:num_requests_running 0x1p3\n",
	"vllm:num_requests_running 1_000\n",
	"vllm:num_requests_running 0x10\n",
	"vllm:num_requests_running 1e400\n",
	"vllm:num_requests_running -0\nvllm:num_requests_waiting .5\nvllm:kv_cache_usage_perc 5.\nvllm:prompt_tokens_total 000123.4500\n",
	"vllm:num_requests_running 123456789012345678\nvllm:num_requests_waiting 0.1234567890123456789\n",
	"vllm:num_requests_running Infinity\nvllm:num_requests_waiting +nan\n",
	// duplicate label names, reserved and odd label names
	"vllm:num_requests_running{engine=\"0\",engine=\"1\"} 1\n",
	"vllm:num_requests_running{__name__=\"x\"} 1\n",
	"vllm:num_requests_running{\"quoted name\"=\"x\",a\"b c\"=\"y\"} 1\n",
	"vllm:num_requests_running{1a=\"x\"} 1\n",
	"vllm:num_requests_running{engine=\"0\",} 1\nvllm:num_requests_waiting{ } 2\nvllm:kv_cache_usage_perc { engine = \"0\" } 0.5\n",
	"vllm:num_requests_running{engine=\"0\" 1\n",
	"vllm:num_requests_running{engine=0} 1\n",
	"vllm:num_requests_running{engine} 1\n",
	"vllm:num_requests_running{engine=\"\xff\"} 1\n",
	// a TYPE after samples, a second TYPE, type spellings
	"vllm:num_requests_running 1\n# TYPE vllm:num_requests_running gauge\n",
	"# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running counter\n",
	"# TYPE vllm:num_requests_running GAUGE\nvllm:num_requests_running 1\n",
	"# TYPE vllm:num_requests_running info\nvllm:num_requests_running 1\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\n# TYPE vllm:e2e_request_latency_seconds_bucket gauge\n",
	"# TYPE vllm:e2e_request_latency_seconds hıstogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 1\n",
	// histograms: grouping, no +Inf, floats, negative counts, le twice,
	// _bucket without le, a sample before the TYPE
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1\"} 1\nvllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"2\"} 3\nvllm:e2e_request_latency_seconds_count{engine=\"0\"} 3\nvllm:e2e_request_latency_seconds_sum{engine=\"0\"} 4.5\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 1.5\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 2\nvllm:e2e_request_latency_seconds_count 2\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} -1\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} -1.5\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_count -2.5\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_count NaN\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} +Inf\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\",le=\"2\"} 1\nvllm:e2e_request_latency_seconds_bucket 1\nvllm:e2e_request_latency_seconds_bucket{le=\"NaN\"} 1\nvllm:e2e_request_latency_seconds_bucket{le=\"x\"} 1\n",
	"vllm:e2e_request_latency_seconds_bucket{le=\"1\"} 1\n# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"2\"} 1\n",
	"# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds{le=\"1\"} 1\nvllm:e2e_request_latency_seconds_count{le=\"9\"} 7\n",
	// interleaved families and series
	"# TYPE vllm:e2e_request_latency_seconds histogram\n# TYPE vllm:num_requests_running gauge\nvllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1\"} 1\nvllm:num_requests_running{engine=\"0\"} 1\nvllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"1\"} 2\nvllm:num_requests_running{engine=\"1\"} 2\nvllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",engine=\"0\"} 1\nvllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"+Inf\"} 2\n",
	// summaries
	"# TYPE vllm:e2e_request_latency_seconds summary\nvllm:e2e_request_latency_seconds{quantile=\"0.5\"} 1\nvllm:e2e_request_latency_seconds{quantile=\"0.9\",engine=\"0\"} 2\nvllm:e2e_request_latency_seconds_count{engine=\"0\"} 3\nvllm:e2e_request_latency_seconds_sum 4\nvllm:e2e_request_latency_seconds{quantile=\"x\"} 1\n",
	"# TYPE vllm:e2e_request_latency_seconds summary\nvllm:e2e_request_latency_seconds_count -1\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 1\n",
	// timestamps
	"vllm:num_requests_running 1 1700000000000\nvllm:num_requests_waiting 2 -5\n",
	"vllm:num_requests_running 1 1.5\n",
	"vllm:num_requests_running 1 17 extra\n",
	"vllm:num_requests_running 1 \n",
	// comments, HELP, blank lines
	"# HELP vllm:num_requests_running a \\\\ b \\n c\n# HELP vllm:num_requests_running again\n",
	"# HELP vllm:num_requests_running bad \\t\n",
	"#TYPE vllm:num_requests_running gauge\n  \n\t# a comment\n#\n# TYPE\n# TYPE vllm:num_requests_running\nvllm:num_requests_running 1\n",
	"# TYPE vllm:num_requests_running! gauge\n",
	"# TYPE \"vllm:num_requests_running\" gauge\n\"vllm:num_requests_running\"{engine=\"0\"} 1\n",
	// names
	"vllm:num_requests_running\n",
	"vllm:num_requests_running-1\n",
	"vllm:num_requests_running{} 1\n",
	"{\"vllm:num_requests_running\"} 1\n",
	"9vllm 1\n",
	// CR LF line ends, a missing last newline, a very long line
	"vllm:num_requests_running 1\r\nvllm:num_requests_waiting 2\r\n",
	"vllm:num_requests_running 1\nvllm:num_requests_waiting 2",
	"vllm:num_requests_running 1\n   ",
	"vllm:num_requests_running{engine=\"0\",model_name=\"" + strings.Repeat("x", 100_000) + "\"} 1\n",
	"vllm:num_requests_running{" + strings.Repeat("a=\"1\",", 40) + "} 1\n",
	"vllm:num_requests_running{" + labelRun(40) + "} 1\n",
}

func labelRun(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "l%d=\"%d\",", i, i)
	}
	return b.String()
}

// TestKeptParserMatchesExpfmt: on the real pages (as kept by the
// prefilter, text and OpenMetrics, and whole) and on the hostile texts,
// the kept parser reads what expfmt reads and refuses what it refuses,
// at the same line. A reused parser must give the same answer as a new
// one (its slabs and interned strings carry over).
func TestKeptParserMatchesExpfmt(t *testing.T) {
	files, _ := filepath.Glob(real + "*.txt")
	more, _ := filepath.Glob(peers + "metrics-*.txt")
	own, _ := filepath.Glob("testdata/*.txt")
	kp := newKeptParser()
	p := NewParser()
	read := 0
	for _, file := range append(append(files, more...), own...) {
		body := load(t, file)
		t.Run(filepath.Base(file), func(t *testing.T) {
			for _, om := range []bool{false, true} {
				b := body
				if om {
					b = omOf(t, append(bytes.TrimRight(body, "\n"), '\n')) // one page lacks its last '\n'
				}
				kept := keptOf(p, b, om)
				if len(kept) == 0 {
					t.Fatalf("nothing kept of %s", file)
				}
				if err := agree(t, kp, kept); err != nil {
					t.Errorf("kept lines of a real page refused: %v", err)
				}
				read++
			}
			_ = agree(t, kp, body) // whole pages: HELP lines, families kvtop does not keep
		})
	}
	if read < 10 {
		t.Fatalf("only %d real pages", read)
	}
	refused := 0
	for i, text := range hostileKept {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if agree(t, kp, []byte(text)) != nil {
				refused++
			}
			if kept := keptOf(p, []byte(text), false); len(kept) > 0 {
				agree(t, kp, kept)
			}
			agree(t, newKeptParser(), []byte(text))
		})
	}
	if refused < 20 {
		t.Errorf("only %d hostile texts refused: the cases no longer test errors", refused)
	}
}

// TestKeptParserLineOfError: the line of a ParseError is the line of the
// kept text (1-based), which parseKept maps back to the page's line, and
// a bad line of a page loses only itself.
func TestKeptParserLineOfError(t *testing.T) {
	page := "# HELP vllm:num_requests_running help\n" +
		"# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1\n" +
		"vllm:unread_family 5\n" +
		"vllm:num_requests_running{engine=\"1\",engine=\"2\"} 1\n" +
		"vllm:num_requests_running{engine=\"3\",model_name=\"m\"} 3 12 x\n" +
		"vllm:num_requests_running{engine=\"4\",model_name=\"m\"} 4\n"
	kp := newKeptParser()
	b := defaultBudget()
	_, err := kp.parse([]byte(page), &b)
	var pe expfmt.ParseError
	if !errors.As(err, &pe) || pe.Line != 5 || !strings.Contains(pe.Msg, "duplicate label names") {
		t.Fatalf("error %v, want line 5: duplicate label names", err)
	}
	p := parseBody(t, []byte(page), textType, collectors.RoleWorker, "")
	if p.BadLines != 2 || len(p.Engines) != 2 {
		t.Fatalf("bad lines %d, engines %s", p.BadLines, show(p.Engines))
	}
	joined := strings.Join(p.Warnings, "; ")
	for _, want := range []string{"line 5: duplicate label names", "line 6: spurious string after timestamp"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings %q lack %q", joined, want)
		}
	}
	val(t, "engine 4 running", p.Engines[1].Running, 4)
}

// FuzzTextParser: for any body, the kept parser and expfmt agree (see
// agree) on the lines the prefilter keeps of it (raw=false, the text
// parseKept gets) and on the body itself (raw=true: comments, HELP
// lines, any family). Seeds: the real pages and the hostile texts, and
// testdata/fuzz/FuzzTextParser.
func FuzzTextParser(f *testing.F) {
	files, _ := filepath.Glob(real + "*.txt")
	own, _ := filepath.Glob("testdata/*.txt")
	for _, file := range append(files, own...) {
		b := load(f, file)
		f.Add(b, false, false)
		f.Add(omOf(f, append(bytes.TrimRight(b, "\n"), '\n')), true, false)
	}
	for _, text := range hostileKept {
		f.Add([]byte(text), false, false)
		f.Add([]byte(text), false, true)
	}
	kp := newKeptParser()
	p := NewParser()
	f.Fuzz(func(t *testing.T, body []byte, om, raw bool) {
		if raw {
			agree(t, kp, body)
			return
		}
		if kept := keptOf(p, body, om); len(kept) > 0 {
			agree(t, kp, kept)
		}
	})
}

// TestPagesOutliveTheParser: a Parser reuses its families' memory from
// one page to the next, so a Page must hold nothing of it: the pages a
// collector has sent (and the one the Parser remembers) read the same
// after the Parser has read other pages, as a fresh parse of their body.
func TestPagesOutliveTheParser(t *testing.T) {
	bodies := [][]byte{load(t, "testdata/vllm-v1-5engines-200k.txt"), load(t, "testdata/sglang-dp2-dynamo-worker.txt"),
		load(t, real+"vllm-dynamo-worker-qwen3-0.6b.txt")}
	p := NewParser()
	var pages []*Page
	for _, body := range bodies {
		pg, err := p.Parse(body, textType, collectors.RoleWorker, "")
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, pg)
	}
	// Then the pages again, in the other order, with other engines,
	// models and values: the slabs and buffers are overwritten.
	for i := range bodies {
		changed := bodies[len(bodies)-1-i]
		for _, r := range [][2]string{{`engine="`, `engine="x`}, {`dp_rank="`, `dp_rank="y`}, {`model_name="`, `model_name="z`}, {"} 1", "} 7"}} {
			changed = bytes.ReplaceAll(changed, []byte(r[0]), []byte(r[1]))
		}
		if _, err := p.Parse(changed, textType, collectors.RoleWorker, ""); err != nil {
			t.Fatal(err)
		}
	}
	for i, body := range bodies {
		fresh := parseBody(t, body, textType, collectors.RoleWorker, "")
		if got, want := show(pages[i].Engines), show(fresh.Engines); got != want || len(fresh.Engines) == 0 {
			t.Errorf("page %d changed after later parses:\n got %s\nwant %s", i, got, want)
		}
		if !slices.Equal(pages[i].Invalid, fresh.Invalid) {
			t.Errorf("page %d invalid values changed: %v vs %v", i, pages[i].Invalid, fresh.Invalid)
		}
	}
}
