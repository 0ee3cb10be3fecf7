package metrics

import (
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// TestDynamoRouterPage: Dynamo's current router and frontend names, with
// workers named as Dynamo's router logs name them (worker_<id>, /dp<r> for
// rank r > 0): roles as registered, the frontend's load per worker, the
// predicted and shared-cache hit rates, the transfer estimate.
func TestDynamoRouterPage(t *testing.T) {
	p := parseBody(t, load(t, "testdata/router-dynamo-1.4-fragment.txt"), textType, collectors.RoleRouter, "auto")
	if p.Profile != ProfileDynamo || p.Router == nil {
		t.Fatalf("profile %q router %v", p.Profile, p.Router)
	}
	r := p.Router
	want := map[string]string{"worker_7587889": "prefill", "worker_7587890": "decode", "worker_7587890/dp1": "decode"}
	if !reflect.DeepEqual(r.Roles, want) {
		t.Fatalf("roles %v, want %v", r.Roles, want)
	}
	if !reflect.DeepEqual(r.ActivePrefillTokens, map[string]float64{"worker_7587889": 4096}) ||
		!reflect.DeepEqual(r.ActiveDecodeBlocks, map[string]float64{"worker_7587890": 210, "worker_7587890/dp1": 190}) {
		t.Fatalf("active prefill %v decode %v", r.ActivePrefillTokens, r.ActiveDecodeBlocks)
	}
	val(t, "predicted hit", r.PredictedHit, 0.62)
	val(t, "shared cache hit", r.SharedCacheHit, 0.2)
	if h := r.KVTransferEstimate; h == nil || h.Count != 100 || len(h.Buckets) != 4 {
		t.Fatalf("transfer estimate %+v", h)
	}
	val(t, "requests", r.Requests, 123)
	val(t, "errors", r.Errors, 3)
}
