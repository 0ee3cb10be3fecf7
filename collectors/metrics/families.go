package metrics

import "slices"

// WorkerFamilies lists the base names of the metric families kvtop reads
// from engine pages (vLLM, both generations of names, and SGLang), sorted:
// counters without `_total`, histograms without `_bucket`/`_sum`/`_count`.
// A source that reads worker series from elsewhere (the Prometheus HTTP
// API) asks for exactly these, so it reads what a direct scrape reads.
func WorkerFamilies() []string {
	var out []string
	for _, g := range []group{gVLLM, gSGLang} {
		for name := range tables[g] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
