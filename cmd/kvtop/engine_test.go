package main

import (
	"testing"

	"github.com/kvtop/kvtop/config"
)

// TestTopicResolver: in the centralized layout the worker comes from the
// topic kv@<id>@<model>; ids name workers by host:port of their metrics
// URL (as llm-d-inference-sim does), by name or by alias.
func TestTopicResolver(t *testing.T) {
	c := config.Config{Workers: []config.Worker{
		{Name: "a", Metrics: "http://127.0.0.1:8001/metrics", Replay: "tcp://127.0.0.1:5567"},
		{Name: "b", Metrics: "http://Pod-B.ns.svc:8000/metrics", Aliases: []string{"worker_7"}, FirstSeq: 1},
	}}
	resolve := topicResolver(c)
	for _, tc := range []struct {
		id, worker, replay string
		firstSeq           uint64
	}{
		{"127.0.0.1:8001", "a", "tcp://127.0.0.1:5567", 0},
		{"a", "a", "tcp://127.0.0.1:5567", 0},
		{"pod-b.ns.svc:8000", "b", "", 1},
		{"worker_7", "b", "", 1},
		{"127.0.0.1:8002", "127.0.0.1:8002", "", 0}, // nobody's: a worker of its own
	} {
		ep := resolve(tc.id)
		if ep.Worker != tc.worker || ep.Rank != 0 || ep.Replay != tc.replay || ep.FirstSeq != tc.firstSeq {
			t.Errorf("resolve(%q) = %+v; want worker %q, rank 0, replay %q, first seq %d", tc.id, ep, tc.worker, tc.replay, tc.firstSeq)
		}
	}
}
