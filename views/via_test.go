package views_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// Workers read through Prometheus say so where the operator looks, with
// Prometheus' scrape interval and the data's age: on the worker's title
// and once on the pool table's title (the widest interval, the oldest
// data); workers kvtop scrapes itself still say "scraped … ago".
func TestMetricsViaPrometheusIsSaid(t *testing.T) {
	th := plain(t)
	s := fixture.Snapshot()
	iv, iv2 := 15.0, 30.0
	for i := range s.Workers {
		w := &s.Workers[i]
		if !w.Up || w.LastScrape == nil {
			continue
		}
		switch w.Name {
		case "w0":
			at := s.At.Add(-7 * time.Second)
			w.MetricsVia, w.MetricsIntervalS, w.LastScrape = "prometheus", &iv, &at
		case "w1":
			at := s.At.Add(-12 * time.Second)
			w.MetricsVia, w.MetricsIntervalS, w.LastScrape = "prometheus", &iv2, &at
		}
	}
	st := state(views.Worker)
	st.Worker = "w0"
	title := lineStarting(views.Render(s, st, 200, 48, th), " WORKER w0")
	if !strings.Contains(title, "via prometheus, 15 s scrape · data 7.0 s old") || strings.Contains(title, "scraped") {
		t.Errorf("w0 title %q", title)
	}
	st.Worker = "w2"
	if title := lineStarting(views.Render(s, st, 200, 48, th), " WORKER w2"); !strings.Contains(title, "scraped") || strings.Contains(title, "via") {
		t.Errorf("w2 (scraped by kvtop) title %q", title)
	}
	pool := lineStarting(views.Render(s, state(views.Pool), 220, 48, th), " WORKERS")
	if !strings.Contains(pool, "metrics via prometheus, 30 s scrape, data ≤ 12 s old") {
		t.Errorf("pool title %q", pool)
	}
}

func lineStarting(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
