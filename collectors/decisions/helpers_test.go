package decisions

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const (
	realLogs = "../../testdata/real/logs"
	ourLogs  = "../../testdata/decisions"
)

// fixtureLines reads a fixture and splits it into lines (without newlines).
func fixtureLines(t testing.TB, dir, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	return bytes.Split(data, []byte("\n"))
}

// summary is a compact description of a parse result for table tests:
// "D <format> <request id> <chosen>", "O <format> <request id>",
// "S <reason>" or "B <error>".
func summary(r Result, err error) string {
	switch {
	case err != nil:
		return "B " + err.Error()
	case r.Decision != nil:
		return fmt.Sprintf("D %s %s %s", r.Decision.Format, r.Decision.RequestID, r.Decision.Chosen)
	case r.Outcome != nil:
		return fmt.Sprintf("O %s %s", r.Outcome.Format, r.Outcome.RequestID)
	case r.Skip:
		return "S " + r.Reason
	}
	return "empty result"
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func ptr(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

func iptr(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
