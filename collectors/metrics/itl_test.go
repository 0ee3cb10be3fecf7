package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// TestITLRejectsAndDeprecatedName: an inter-token latency histogram that
// cannot be true is unknown with a note naming it; a series repeated for
// one engine is never summed; the pre-0.11 name is read only from a page
// without the current one (the same observations under both names).
func TestITLRejectsAndDeprecatedName(t *testing.T) {
	page := `# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01"} 5
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025"} 3
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf"} 9
vllm:inter_token_latency_seconds_count{engine="0"} 9
vllm:inter_token_latency_seconds_sum{engine="0"} 0.2
vllm:inter_token_latency_seconds_bucket{engine="1",le="0.01"} 4
vllm:inter_token_latency_seconds_bucket{engine="1",le="+Inf"} 6
vllm:inter_token_latency_seconds_count{engine="1"} 6
vllm:inter_token_latency_seconds_sum{engine="1"} 0.1
vllm:inter_token_latency_seconds_count{engine="1"} 6
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf"} 9
vllm:time_per_output_token_seconds_count{engine="0"} 9
vllm:time_per_output_token_seconds_sum{engine="0"} 0.2
vllm:num_requests_running{engine="0"} 1
vllm:num_requests_running{engine="1"} 1
`
	p := parseBody(t, []byte(page), textType, collectors.RoleWorker, "")
	e0, e1 := engineOf(t, p, "0"), engineOf(t, p, "1")
	if e0.ITL != nil || e1.ITL != nil {
		t.Errorf("itl kept: engine 0 %+v, engine 1 %+v", e0.ITL, e1.ITL)
	}
	notes := map[string]string{}
	for _, iv := range p.Invalid {
		if iv.Field == "itl" {
			notes[iv.Engine] = iv.Note
		}
	}
	if !strings.Contains(notes["0"], `cumulative counts go down (le="0.01" 5, le="0.025" 3)`) || !strings.Contains(notes["1"], "appears twice") {
		t.Errorf("itl notes %q", notes)
	}

	old := parseBody(t, []byte(`# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.05"} 3
vllm:time_per_output_token_seconds_bucket{le="+Inf"} 4
vllm:time_per_output_token_seconds_count 4
vllm:time_per_output_token_seconds_sum 0.3
vllm:num_requests_running 0
`), textType, collectors.RoleWorker, "")
	hist(t, "itl from vllm:time_per_output_token_seconds", oneEngine(t, old).ITL, 4, 0.3)
}

// TestITLNameFollowsThePage: a target's Parser assumes the shape of its
// last page (whether the 0.11 ITL name is there) and filters again when
// the page says otherwise, so an engine upgraded or rolled back reads the
// name its page has from the first scrape on.
func TestITLNameFollowsThePage(t *testing.T) {
	oldOnly := []byte(`# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.05"} 3
vllm:time_per_output_token_seconds_bucket{le="+Inf"} 4
vllm:time_per_output_token_seconds_count 4
vllm:time_per_output_token_seconds_sum 0.3
vllm:num_requests_running 0
`)
	both := []byte(`# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="+Inf"} 7
vllm:time_per_output_token_seconds_count 7
vllm:time_per_output_token_seconds_sum 0.5
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.05"} 8
vllm:inter_token_latency_seconds_bucket{le="+Inf"} 9
vllm:inter_token_latency_seconds_count 9
vllm:inter_token_latency_seconds_sum 0.2
vllm:num_requests_running 0
`)
	p := NewParser()
	for i, c := range []struct {
		body       []byte
		count, sum float64
	}{{oldOnly, 4, 0.3}, {both, 9, 0.2}, {both, 9, 0.2}, {oldOnly, 4, 0.3}, {both, 9, 0.2}} {
		page, err := p.Parse(c.body, textType, collectors.RoleWorker, "")
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		hist(t, fmt.Sprintf("page %d itl", i), oneEngine(t, page).ITL, c.count, c.sum)
	}
}
