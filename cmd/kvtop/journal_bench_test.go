package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtop/kvtop/journal"
	"github.com/kvtop/kvtop/sim"
)

var (
	busyOnce sync.Once
	busyPath string
	busyErr  error
)

// busyJournal is a journal of a busy 16-worker pool: the simulator at its
// default load (3 requests/s per worker, cache-aware router, decisions
// written) and kvtop's real collectors and pool, recorded for
// KVTOP_BENCH_RECORD seconds of real time (default 20), once per test
// binary. KVTOP_BENCH_JOURNAL names a journal recorded elsewhere instead
// (kvtop record, e.g. on a tour).
func busyJournal(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("KVTOP_BENCH_JOURNAL"); p != "" {
		return p
	}
	busyOnce.Do(func() {
		secs := 20
		if v, err := strconv.Atoi(os.Getenv("KVTOP_BENCH_RECORD")); err == nil && v > 0 {
			secs = v
		}
		dir, err := os.MkdirTemp("", "kvtop-bench-journal-")
		if err != nil {
			busyErr = err
			return
		}
		busyPath = filepath.Join(dir, "busy.jnl")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := sim.Start(ctx, sim.Options{Workers: 16, Listen: "127.0.0.1"})
		if err != nil {
			busyErr = err
			return
		}
		defer s.Close()
		c := s.Config()
		rec, err := startRecorder(io.Discard, busyPath, c, recordFlags{maxSize: 1 << 30, keep: 1})
		if err != nil {
			busyErr = err
			return
		}
		e, err := startEngine(ctx, c, rec)
		if err != nil {
			busyErr = err
			return
		}
		time.Sleep(time.Duration(secs) * time.Second)
		cancel()
		busyErr = stopRecorder(io.Discard, rec, e)
	})
	if busyErr != nil {
		b.Fatal(busyErr)
	}
	return busyPath
}

// cpuTime is the CPU time this process used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplayBusyPool replays a busy 16-worker journal from its first
// record to its last, every snapshot rebuilt, as kvtop replay does when
// it seeks back beyond what it keeps (and kvtop snapshot --journal does).
// x-realtime is journal seconds replayed per second: with -cpu 1, the
// fastest speed one core sustains. B/worker-min is the journal's size
// per worker and minute of recording.
func BenchmarkReplayBusyPool(b *testing.B) {
	paths, err := journal.Chain(busyJournal(b))
	if err != nil {
		b.Fatal(err)
	}
	p, err := journal.NewPlayer(paths...)
	if err != nil {
		b.Fatal(err)
	}
	span := p.End().Sub(p.Start()).Seconds()
	workers := len(p.Header().Pool.Workers)
	var size int64
	for _, path := range paths {
		if fi, err := os.Stat(path); err == nil {
			size += fi.Size()
		}
	}
	p.Close()
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		p, err := journal.NewPlayer(paths...)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := p.Next(); err != nil {
				break
			}
		}
		p.Close()
	}
	cpu := (cpuTime() - cpu0).Seconds() / float64(b.N)
	b.ReportMetric(span/(b.Elapsed().Seconds()/float64(b.N)), "x-realtime")
	// The same per second of CPU the process got: what a core of its own
	// would sustain, whatever the neighbours took (with -cpu 1, the Go
	// code runs on one thread; the GC's share is in it).
	b.ReportMetric(span/cpu, "x-per-cpu-s")
	b.ReportMetric(float64(size)/float64(workers)/(span/60), "B/worker-min")
	b.ReportMetric(span, "journal-s")
}
