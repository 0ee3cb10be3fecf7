package promapi

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kvtop/kvtop/collectors/metrics"
)

// qLabel marks the series kvtop adds to an answer with label_replace: "ts"
// for a target's last scrape time (timestamp(up)). A label no scraped
// series carries, so `or` keeps both sides.
const qLabel = "kvtop_q"

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// parseSelector checks the configured selector and returns its label
// matchers without the braces ("" for none). It must be label matchers in
// braces: the metric names are kvtop's to choose. Prometheus checks the
// matchers themselves and answers bad_data, which kvtop shows.
func parseSelector(sel string) (string, error) {
	s := strings.TrimSpace(sel)
	if s == "" {
		return "", nil
	}
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return "", fmt.Errorf("selector %q must be label matchers in braces, e.g. {namespace=\"llm\",pod=~\"vllm-.*\"}", sel)
	}
	inner := strings.TrimSpace(s[1 : len(s)-1])
	if strings.ContainsAny(inner, "{}") {
		return "", fmt.Errorf("selector %q has nested braces", sel)
	}
	if strings.Contains(inner, "__name__") {
		return "", fmt.Errorf("selector %q names metrics (__name__): kvtop chooses the families it reads", sel)
	}
	inner = strings.TrimSuffix(inner, ",")
	return inner, nil
}

// queries builds kvtop's PromQL for one selector and worker label.
type queries struct {
	inner  string // selector matchers, no braces
	label  string // worker label
	names  string // regex of the series names kvtop reads
	status string // the per-refresh targets query
}

// suffixes are what Prometheus appends to a family's base name: counters
// are stored as `_total`, classic histograms as `_bucket`/`_sum`/`_count`.
var suffixes = []string{"", "_total", "_bucket", "_sum", "_count"}

func newQueries(inner, label string) *queries {
	fams := metrics.WorkerFamilies()
	alts := make([]string, 0, len(fams)*len(suffixes)+2)
	for _, f := range fams {
		for _, s := range suffixes {
			alts = append(alts, regexp.QuoteMeta(f+s))
		}
	}
	// Prometheus' own measurement of each scrape, and the target's health
	// (it carries the target labels, which the page does not).
	alts = append(alts, "scrape_duration_seconds", "up")
	q := &queries{inner: inner, label: label, names: strings.Join(alts, "|")}
	up := q.sel("up", "")
	// One series per worker for each: whether it is up (the best of its
	// targets) and when Prometheus last scraped it. The timestamp gets a
	// label of its own so that `or` keeps it beside the up series.
	q.status = fmt.Sprintf(`max by (%s) (%s) or label_replace(max by (%s) (timestamp(%s)), %q, "ts", "", "")`,
		label, up, label, up, qLabel)
	return q
}

// sel is a vector selector for name ("" for none) with the configured
// matchers and extra ones.
func (q *queries) sel(name, extra string) string {
	var ms []string
	if q.inner != "" {
		ms = append(ms, q.inner)
	}
	if extra != "" {
		ms = append(ms, extra)
	}
	if len(ms) == 0 {
		return name
	}
	return name + "{" + strings.Join(ms, ", ") + "}"
}

// data is the query for every series kvtop reads of the given workers
// (nil: all workers the selector matches), with each target's scrape time
// beside them: both from one evaluation, so values and time agree.
func (q *queries) data(workers []string) string {
	extra := ""
	if workers != nil {
		alts := make([]string, len(workers))
		for i, w := range workers {
			alts[i] = regexp.QuoteMeta(w)
		}
		extra = q.label + "=~" + strconv.Quote(strings.Join(alts, "|"))
	}
	names := "__name__=~" + strconv.Quote(q.names)
	all := names
	if extra != "" {
		all += ", " + extra
	}
	return fmt.Sprintf(`%s or label_replace(timestamp(%s), %q, "ts", "", "")`,
		q.sel("", all), q.sel("up", extra), qLabel)
}
