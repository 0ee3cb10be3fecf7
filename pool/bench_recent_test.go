package pool

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// recentState is a pool whose decision journal holds n attempts in the
// shape of the simulator's kvtop audit records (a prediction, a load, an
// outcome with its timings and tokens), one every 1/rate s, the last one
// at the returned time.
func recentState(tb testing.TB, n int, rate float64, limits Limits) (*State, time.Time) {
	tb.Helper()
	specs := []WorkerSpec{{Name: "w0"}, {Name: "w1"}, {Name: "w2"}, {Name: "w3"}}
	limits.Decisions = max(limits.Decisions, n)
	s := NewState(Options{Workers: specs, Limits: limits})
	t0 := time.Unix(1_800_000_000, 0)
	var at time.Time
	for i := 0; i < n; i++ {
		at = t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		w, owner := specs[i%4].Name, specs[(i+i/7)%4].Name
		id := fmt.Sprintf("chat-%08d-%04x", i, i*7919%65536)
		s.Apply(&collectors.Decision{RequestID: id, AttemptID: "1", Router: "r0", RouterVersion: "vllm-router 1d10e71",
			Model: "qwen3-8b", Endpoint: "/v1/chat/completions", Chosen: w, Reason: "best-match", Format: "kvtop", Source: "router.jsonl",
			Prediction: &collectors.Prediction{Source: "kv-events", Input: "tokens", Units: "tokens", Matched: collectors.F(1024), Total: collectors.F(3120), Owner: owner, AgeMS: collectors.F(12)},
			Load:       &collectors.Load{Kind: "queue", Value: collectors.F(7), Scope: "router-local"},
			Prefix:     fmt.Sprintf("%016x", mix(uint64(i%500))), TS: at, At: at})
		prompt, cached, out := 3120, 1024*(i%2), 180
		done := i%50 != 0
		s.Apply(&collectors.Outcome{RequestID: id, AttemptID: "1", Worker: w, HTTPStatus: 200, PromptTokens: &prompt, CachedTokens: &cached,
			QueueMS: collectors.F(40), TTFTMS: collectors.F(210), E2EMS: collectors.F(2400), FinishReason: "stop", Done: &done,
			OutputTokens: &out, Format: "kvtop", Source: "router.jsonl", TS: at, At: at})
	}
	return s, at
}

// BenchmarkRecentDecisions measures what each row of
// Snapshot.Decisions.Recent costs, to size limits.recent_decisions: the
// heap (after GC) of a snapshot's own rows and of what the pool keeps for
// a row while it stays unchanged (its values, shared by every snapshot
// that shows it), the rows' JSON (what `kvtop serve` streams to a remote
// console), and the CPU to build a row anew (its record changed) or again
// (unchanged: copied from the last snapshot's).
func BenchmarkRecentDecisions(b *testing.B) {
	const n = 10_000
	var own, shared, jsonPer float64
	for i := 0; i < b.N; i++ {
		s, at := recentState(b, n, 35, Limits{RecentDecisions: n})
		snap := s.Snapshot(at)
		if len(snap.Decisions.Recent) != n {
			b.Fatalf("%d recent rows, want %d", len(snap.Decisions.Recent), n)
		}
		heapNow() // twice: sync.Pools keep what they hold across one GC
		h0 := heapNow()
		snap.Decisions.Recent = nil
		h1 := heapNow()
		for k := 0; k < n; k++ {
			s.journal.ring[k].row = nil
		}
		h2 := heapNow()
		own, shared = (float64(h0)-float64(h1))/n, (float64(h1)-float64(h2))/n
		js, err := json.Marshal(s.Snapshot(at).Decisions.Recent)
		if err != nil {
			b.Fatal(err)
		}
		jsonPer = float64(len(js)) / n
	}
	b.ReportMetric(own, "snapshot-B/row")
	b.ReportMetric(shared, "shared-B/row")
	b.ReportMetric(jsonPer, "json-B/row")

	s, at := recentState(b, n, 35, Limits{RecentDecisions: n})
	const builds = 20
	var fresh, again time.Duration
	for i := 0; i < builds; i++ {
		for k := 0; k < n; k++ {
			s.journal.ring[k].row = nil
		}
		cpu0 := cpuTime()
		s.buildDecisions(at)
		cpu1 := cpuTime()
		s.buildDecisions(at)
		fresh, again = fresh+cpu1-cpu0, again+cpuTime()-cpu1
	}
	b.ReportMetric(float64(fresh.Nanoseconds())/builds/n, "new-cpu-ns/row")
	b.ReportMetric(float64(again.Nanoseconds())/builds/n, "same-cpu-ns/row")
}
