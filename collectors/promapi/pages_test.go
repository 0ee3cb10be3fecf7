package promapi_test

import (
	"os"
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/metrics"
	"github.com/kvtop/kvtop/collectors/promapi"
)

// Real engine pages, stored by a Prometheus and read back by kvtop, fold
// into the same figures as kvtop's direct scrape of the page: vLLM with
// five data-parallel engines, SGLang with two dp ranks and worker-level
// token counters, a Dynamo-run SGLang worker.
func TestRealPagesReadBackAsScraped(t *testing.T) {
	for _, file := range []string{
		"../../testdata/real/metrics/vllm-dynamo-worker-qwen3-0.6b.txt",
		"../../testdata/real/metrics/sglang-dynamo-worker-qwen3-0.6b.txt",
		"../metrics/testdata/sglang-dp2-dynamo-worker.txt",
		"../metrics/testdata/vllm-v1-5engines-200k.txt",
	} {
		t.Run(file, func(t *testing.T) {
			page, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			direct, err := metrics.Parse(page, "text/plain; version=0.0.4", collectors.RoleWorker, "")
			if err != nil {
				t.Fatal(err)
			}
			ss, err := pageSeries(page)
			if err != nil {
				t.Fatal(err)
			}
			f := newFakeProm(t)
			f.set("w0", &fakeWorker{up: 1, ts: f.eval - 1, series: ss})
			in, _ := run(t, promapi.Options{URL: f.srv.URL})
			m := next(t, in, "w0", func(*collectors.MetricsScrape) bool { return true })
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if m.Profile != direct.Profile || !reflect.DeepEqual(m.Engines, direct.Engines) || !reflect.DeepEqual(m.WorkerTotals, direct.WorkerTotals) ||
				!reflect.DeepEqual(m.ProcessStart, direct.ProcessStart) || !reflect.DeepEqual(m.Invalid, direct.Invalid) {
				t.Errorf("through Prometheus:\n%s %+v\ndirect:\n%s %+v", m.Profile, m.Engines, direct.Profile, direct.Engines)
			}
			if len(m.Engines) == 0 {
				t.Error("no engines")
			}
		})
	}
}
