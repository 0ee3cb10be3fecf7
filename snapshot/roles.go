package snapshot

import (
	"sort"
	"strings"
)

// Worker roles in a disaggregated pool (issue 27): prefill workers
// compute prompts and hand their KV to decode workers, aggregated ones do
// both. Queues, hit rates and KV use mean different things per role, so
// the rules compare workers of one role only.
const (
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
	RoleAggregated = "aggregated"
)

// Where a worker's role came from, the first that answers.
const (
	RoleFromConfig     = "config"     // workers[].role
	RoleFromKubernetes = "kubernetes" // the pod's llm-d or Dynamo role label
	RoleFromRouter     = "router"     // Dynamo's router_worker_registered{worker_type}
	RoleFromDefault    = "default"    // nothing says: aggregated
)

// Roles in the order they are shown.
var Roles = []string{RolePrefill, RoleDecode, RoleAggregated}

// ParseRole reads a role as configs, pod labels and metrics name it:
// prefill, decode, aggregated; llm-d's "both" and "prefill-decode" and
// SGLang's "unified" are aggregated. ok false for anything else.
func ParseRole(s string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "prefill":
		return RolePrefill, true
	case "decode":
		return RoleDecode, true
	case "aggregated", "both", "prefill-decode", "unified":
		return RoleAggregated, true
	}
	return "", false
}

// RoleFigures sums the workers of one role.
type RoleFigures struct {
	Role    string   `json:"role"`
	Workers int      `json:"workers"`
	Up      int      `json:"up"`
	Queue   *float64 `json:"queue"`    // waiting requests, summed over up workers
	Running *float64 `json:"running"`  // running requests, summed
	KVUsage *float64 `json:"kv_usage"` // weighted by num_gpu_blocks, as the pool's
	// QueueMedian is the median waiting queue of its up workers: the
	// overheating rule's yardstick for a worker of this role.
	QueueMedian *float64 `json:"queue_median"`
	// LoadSkew is max/mean and Gini of its up workers' queues (no
	// verdicts: the pool's LoadSkew holds the worst role's).
	LoadSkew Skew `json:"load_skew"`
}

// Mixed reports whether the pool's workers have more than one role.
func (p *PoolSummary) Mixed() bool { return len(p.Roles) > 1 }

// QueueMedianOf is QueueMedian over the workers of one role ("" for all).
func QueueMedianOf(ws []Worker, role string) *float64 {
	var x []float64
	for i := range ws {
		if ws[i].Up && ws[i].Queue != nil && (role == "" || ws[i].Role == role) {
			x = append(x, *ws[i].Queue)
		}
	}
	if len(x) == 0 {
		return nil
	}
	sort.Float64s(x)
	m := x[len(x)/2]
	if len(x)%2 == 0 {
		m = x[len(x)/2-1]/2 + x[len(x)/2]/2
	}
	return &m
}

// ModelFigures sums the workers that serve one model.
type ModelFigures struct {
	Model     string   `json:"model"`
	Workers   int      `json:"workers"`
	Up        int      `json:"up"`
	Queue     *float64 `json:"queue"`
	Running   *float64 `json:"running"`
	KVUsage   *float64 `json:"kv_usage"`
	HitTokens *float64 `json:"hit_tokens"` // token hit rate over the window, its up workers
}

// MultiModel reports whether the pool serves more than one model.
func (p *PoolSummary) MultiModel() bool { return len(p.Models) > 1 }
