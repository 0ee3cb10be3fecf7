package views

import (
	"strconv"

	"github.com/kvtop/kvtop/snapshot"
)

// viaText says where a worker's metrics come from when kvtop does not
// scrape them itself, with the interval behind them: "via prometheus,
// 15 s scrape". "" for kvtop's own scrape.
func viaText(w *snapshot.Worker) string {
	if w.MetricsVia == "" {
		return ""
	}
	t := "via " + Clean(w.MetricsVia)
	if w.MetricsIntervalS != nil {
		t += ", " + strconv.FormatFloat(*w.MetricsIntervalS, 'g', 3, 64) + " s scrape"
	}
	return t
}

// poolVia is the pool title's note when workers' metrics come through
// another source: the source and scrape interval (the widest, when they
// differ) and the age of the oldest such data, so the screen never claims
// a freshness or a window finer than the source allows. "" when kvtop
// scrapes every worker itself.
func poolVia(s *snapshot.Snapshot) string {
	var (
		via    string
		iv     float64
		oldest float64
		n      int
	)
	for i := range s.Workers {
		w := &s.Workers[i]
		if w.MetricsVia == "" || !w.Up {
			continue
		}
		n++
		via = w.MetricsVia
		if w.MetricsIntervalS != nil {
			iv = max(iv, *w.MetricsIntervalS)
		}
		if w.LastScrape != nil {
			oldest = max(oldest, s.At.Sub(*w.LastScrape).Seconds())
		}
	}
	if n == 0 {
		return ""
	}
	t := "metrics via " + Clean(via)
	if iv > 0 {
		t += ", " + strconv.FormatFloat(iv, 'g', 3, 64) + " s scrape"
	}
	return t + ", data ≤ " + secs(oldest) + " old"
}
