package promtext

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestFloat(t *testing.T) {
	for v, want := range map[float64]string{
		66: "66.0", 0: "0.0", 0.4143967628479004: "0.4143967628479004", 1.883227378129959e-05: "1.883227378129959e-05",
		1.7682643398898673e+09: "1.7682643398898673e+09", 5943: "5943.0", 2560: "2560.0", 1234567: "1.234567e+06", 1e7: "1e+07",
	} {
		if got := Float(v); got != want {
			t.Errorf("Float(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestPageParses(t *testing.T) {
	var w Writer
	w.Family("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge")
	w.Sample("vllm:num_requests_waiting", []string{"model_name", `a"b`, "engine", "0"}, 3)
	w.Family("process_start_time_seconds", "Start time.", "gauge")
	w.Sample("process_start_time_seconds", nil, 1.7e9)
	page := string(w.Bytes())
	if !strings.Contains(page, `vllm:num_requests_waiting{engine="0",model_name="a\"b"} 3.0`) {
		t.Fatalf("labels not sorted or escaped:\n%s", page)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if got := fams["vllm:num_requests_waiting"].GetMetric()[0].GetGauge().GetValue(); got != 3 {
		t.Fatalf("parsed %v", got)
	}
}
