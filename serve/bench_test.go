package serve

import (
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/kvtop/kvtop/views/fixture"
)

// BenchmarkMetrics256Workers is one scrape of /metrics (gather, sort,
// text encoding) of a 256-worker snapshot, through the real handler.
// Target: at most 10 ms.
func BenchmarkMetrics256Workers(b *testing.B) {
	srv, err := New(Options{Source: sourceOf(fixture.Large(256)), Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	// Prometheus asks for gzip; curl does not.
	for _, enc := range []string{"identity", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept-Encoding", enc)
			b.ReportAllocs()
			var size int
			cpu0 := cpuTime()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
			// CPU the process spent per scrape (GC included): what a core
			// of its own would take, whatever the neighbours' load.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

// BenchmarkSnapshotFrame256Workers encodes one /api/v1/snapshots frame of a
// 256-worker snapshot (done once per refresh, shared by every client).
func BenchmarkSnapshotFrame256Workers(b *testing.B) {
	snap := fixture.Large(256)
	srv, err := New(Options{Source: sourceOf(snap)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		size = len(srv.encode(snap, -1))
	}
	b.ReportMetric(float64(size), "bytes/frame")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
