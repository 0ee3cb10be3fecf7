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
		{Name: "b", Metrics: "http://Pod-B.ns.svc:8000/metrics", Aliases: []string{"worker_7"}},
	}}
	resolve := topicResolver(c)
	for _, tc := range []struct{ id, worker, replay string }{
		{"127.0.0.1:8001", "a", "tcp://127.0.0.1:5567"},
		{"a", "a", "tcp://127.0.0.1:5567"},
		{"pod-b.ns.svc:8000", "b", ""},
		{"worker_7", "b", ""},
		{"127.0.0.1:8002", "127.0.0.1:8002", ""}, // nobody's: a worker of its own
	} {
		w, rank, replay := resolve(tc.id)
		if w != tc.worker || rank != 0 || replay != tc.replay {
			t.Errorf("resolve(%q) = %q, %d, %q; want %q, 0, %q", tc.id, w, rank, replay, tc.worker, tc.replay)
		}
	}
}
