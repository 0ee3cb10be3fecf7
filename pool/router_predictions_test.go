package pool

import (
	"math"
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// TestDynamoRouterRoles: what a Dynamo router believes reaches its row,
// per worker as the pool names it (a worker's alias, ranks folded): roles,
// the frontend's load, the predicted and shared-cache hit rates, and its
// transfer estimate over the window in ms.
func TestDynamoRouterRoles(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "prefill-0", Aliases: []string{"worker_11"}}, {Name: "decode-0", Aliases: []string{"worker_12"}}}})
	est := func(n1, n2 float64) *collectors.Histogram {
		return &collectors.Histogram{Count: n1 + n2, Sum: n1*0.004 + n2*0.04, Buckets: []collectors.Bucket{{UpperBound: 0.01, Count: n1}, {UpperBound: 0.1, Count: n1 + n2}, {UpperBound: math.Inf(1), Count: n1 + n2}}}
	}
	scrape := func(sec float64, h *collectors.Histogram) *collectors.MetricsScrape {
		return &collectors.MetricsScrape{Target: "r0", Role: collectors.RoleRouter, At: at(sec), Profile: "dynamo",
			Router: &collectors.RouterMetrics{Requests: f(100 + sec),
				Roles:               map[string]string{"worker_11": "prefill", "worker_12": "decode", "worker_12/dp1": "decode"},
				ActivePrefillTokens: map[string]float64{"worker_11": 4096},
				ActiveDecodeBlocks:  map[string]float64{"worker_12": 210, "worker_12/dp1": 190},
				PredictedHit:        f(0.62), SharedCacheHit: f(0.2), KVTransferEstimate: h}}
	}
	s.Apply(scrape(0, est(10, 0)))
	s.Apply(scrape(10, est(10, 100)))
	r := s.Snapshot(at(10)).Routers[0]
	if !reflect.DeepEqual(r.Roles, map[string]string{"prefill-0": "prefill", "decode-0": "decode"}) {
		t.Fatalf("roles %v", r.Roles)
	}
	if r.ActiveDecodeBlocks["decode-0"] != 400 || r.ActivePrefillTokens["prefill-0"] != 4096 {
		t.Fatalf("load %v %v: the decode worker's two ranks summed", r.ActiveDecodeBlocks, r.ActivePrefillTokens)
	}
	if !near(*r.PredictedHitRate, 0.62) || !near(*r.SharedCacheHitRate, 0.2) {
		t.Fatalf("hit rates %v %v", *r.PredictedHitRate, *r.SharedCacheHitRate)
	}
	// The window saw 100 estimates, all between 10 and 100 ms.
	if l := r.KVTransferEstimatedMS; l.P50 == nil || *l.P50 <= 10 || *l.P50 > 100 || l.Observations == nil || *l.Observations != 100 {
		t.Fatalf("transfer estimate %+v", l)
	}
}
