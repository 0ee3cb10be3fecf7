package decisions

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// BenchmarkParseLine measures ParseLine per format on fixture lines
// (go test -run '^$' -bench ParseLine -benchmem ./collectors/decisions/).
func BenchmarkParseLine(b *testing.B) {
	audit := fixtureLines(b, ourLogs, "kvtop-audit.jsonl")
	sim := fixtureLines(b, "testdata", "sim-decision-16.jsonl")[0] // 16 candidates, as `kvtop sim --workers 16` writes
	cases := []struct {
		name, format string
		line         []byte
	}{
		{"kvtop/decision", FormatKvtop, audit[0]},
		{"kvtop/outcome", FormatKvtop, audit[1]},
		{"kvtop/decision-16", FormatKvtop, sim},
		{"auto/kvtop-decision", FormatAuto, audit[0]},
		{"auto/kvtop-outcome", FormatAuto, audit[1]},
		{"dynamo/jsonl", FormatDynamo, fixtureLines(b, ourLogs, "dynamo-routing.log")[0]},
		{"dynamo/text", FormatDynamo, fixtureLines(b, ourLogs, "dynamo-routing.log")[4]},
		{"llm-d", FormatLLMD, fixtureLines(b, ourLogs, "llm-d-epp-request-handled.log")[0]},
		{"production-stack", FormatProductionStack, fixtureLines(b, realLogs, "production-stack-pr428.log")[1]},
		{"dynamo-trace", FormatDynamoTrace, fixtureLines(b, ourLogs, "dynamo-trace.jsonl")[0]},
		{"auto/dynamo-trace", FormatAuto, fixtureLines(b, ourLogs, "dynamo-trace.jsonl")[0]},
		{"smg/text", FormatSMG, fixtureLines(b, ourLogs, "smg-decisions.log")[0]},
		{"smg/json", FormatSMG, fixtureLines(b, ourLogs, "smg-decisions.log")[6]},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseLine(c.line, c.format); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}

// BenchmarkFollowFile measures the whole path for a file of kvtop audit
// lines: read, split, parse, send (one op = one line).
func BenchmarkFollowFile(b *testing.B) {
	audit := fixtureLines(b, ourLogs, "kvtop-audit.jsonl")
	path := filepath.Join(b.TempDir(), "audit.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := 0; i < b.N; i++ {
		w.Write(audit[i%2]) // a full decision, then its outcome
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(path)
	b.SetBytes(st.Size() / int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()

	c, err := New(Options{Sources: []Source{{Path: path, Format: FormatKvtop}}, Backfill: st.Size() + 1, Poll: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan collectors.Observation, 4096)
	done := make(chan struct{})
	go func() { c.Run(ctx, out); close(done) }()
	for i := 0; i < b.N; i++ {
		<-out
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
	cancel()
	<-done
}
