package pool

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// t0 is the injected clock's origin; at(s) is s seconds after it.
var t0 = time.Date(2026, 9, 5, 14, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func f(v float64) *float64 { return &v }

func newTestState(workers ...string) *State {
	var specs []WorkerSpec
	for _, w := range workers {
		specs = append(specs, WorkerSpec{Name: w})
	}
	return NewState(Options{Workers: specs, Window: time.Minute})
}

type em = collectors.EngineMetrics

func scrape(target string, t time.Time, engines ...em) *collectors.MetricsScrape {
	return &collectors.MetricsScrape{Target: target, Role: collectors.RoleWorker, At: t, Profile: "vllm", Engines: engines, Duration: 12 * time.Millisecond}
}

func failedScrape(target string, t time.Time, msg string) *collectors.MetricsScrape {
	return &collectors.MetricsScrape{Target: target, At: t, Err: &collectors.SourceError{Source: target + " metrics", Kind: "refused", Message: msg, At: t}}
}

// counters is an engine page with queue, running, KV and prefix counters.
func counters(engine string, waiting, queries, hits float64) em {
	return em{Engine: engine, Waiting: f(waiting), Running: f(1), KVUsage: f(0.5), PrefixQueries: f(queries), PrefixHits: f(hits)}
}

func stored(parent uint64, hasParent bool, hashes ...uint64) collectors.KVEvent {
	return collectors.KVEvent{Kind: collectors.BlockStored, Hashes: hashes, Parent: parent, HasParent: hasParent, BlockSize: 16, NumTokens: 16 * len(hashes)}
}

func removed(hashes ...uint64) collectors.KVEvent {
	return collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: hashes}
}

func batch(worker string, rank int, seq uint64, t time.Time, evs ...collectors.KVEvent) *collectors.EventBatch {
	return &collectors.EventBatch{Worker: worker, Rank: rank, Seq: seq, At: t, Events: evs, Endpoint: "tcp://127.0.0.1:5557"}
}

func status(worker string, rank int, st snapshot.StreamState, t time.Time, hist ...collectors.StreamIncident) *collectors.StreamStatus {
	return &collectors.StreamStatus{Worker: worker, Rank: rank, State: st, At: t, History: hist, Endpoint: "tcp://127.0.0.1:5557"}
}

func row(t *testing.T, s *snapshot.Snapshot, name string) *snapshot.Worker {
	t.Helper()
	for i := range s.Workers {
		if s.Workers[i].Name == name {
			return &s.Workers[i]
		}
	}
	t.Fatalf("no worker %q in snapshot", name)
	return nil
}

// near compares floats written as decimals.
func near(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

func eqp(a *float64, want *float64) bool {
	if a == nil || want == nil {
		return a == nil && want == nil
	}
	return near(*a, *want)
}

func show(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// blocksOf reads a worker's or the pool's block count, nil as -1 (unknown
// must never pass for a count).
func blocksOf(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// tierBlocks is worker w's blocks on medium (-1: no such tier, -2: null).
func tierBlocks(w *snapshot.Worker, medium string) int {
	for _, t := range w.Tiers {
		if t.Medium == medium {
			if t.Blocks == nil {
				return -2
			}
			return *t.Blocks
		}
	}
	return -1
}
