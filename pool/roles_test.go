package pool

import (
	"fmt"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// A worker's role comes from the first source that answers: the config,
// then the pod's labels, then Dynamo's router; else it is aggregated.
func TestRoleSources(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{
		{Name: "p0", Role: "prefill"},
		{Name: "d0", Aliases: []string{"worker_12"}},
		{Name: "d1", Aliases: []string{"worker_13"}},
		{Name: "a0"},
	}})
	kube := func(name, role string) *collectors.TargetChange {
		return &collectors.TargetChange{Name: name, Role: collectors.RoleWorker, Kind: collectors.TargetJoined, At: at(0),
			Kube: &collectors.KubeInfo{Pod: name, Namespace: "llm", Phase: "Running", Ready: true, Role: role}}
	}
	s.Apply(kube("p0", snapshot.RoleDecode)) // the config wins
	s.Apply(kube("d0", snapshot.RoleDecode))
	s.Apply(&collectors.MetricsScrape{Target: "r0", Role: collectors.RoleRouter, At: at(0), Profile: "dynamo",
		Router: &collectors.RouterMetrics{Requests: f(1), Roles: map[string]string{"worker_12": "prefill", "worker_13/dp1": "decode"}}})
	snap := s.Snapshot(at(1))
	for _, c := range []struct{ w, role, source string }{
		{"p0", snapshot.RolePrefill, snapshot.RoleFromConfig},
		{"d0", snapshot.RoleDecode, snapshot.RoleFromKubernetes}, // the labels before the router
		{"d1", snapshot.RoleDecode, snapshot.RoleFromRouter},     // rank folded onto its worker
		{"a0", snapshot.RoleAggregated, snapshot.RoleFromDefault},
	} {
		if r := row(t, snap, c.w); r.Role != c.role || r.RoleSource != c.source {
			t.Errorf("%s: role %q from %q, want %q from %q", c.w, r.Role, r.RoleSource, c.role, c.source)
		}
	}
	var roles []string
	for _, f := range snap.Pool.Roles {
		roles = append(roles, fmt.Sprintf("%s %d", f.Role, f.Workers))
	}
	if fmt.Sprint(roles) != "[prefill 1 decode 2 aggregated 1]" {
		t.Errorf("pool roles %v", roles)
	}
}

// In a disaggregated pool the rules compare workers of one role: a decode
// worker whose queue is ordinary among decode workers is not overheating
// beside idle prefill workers, and the skew is the worst role's.
func TestRolesRulesCompareOneRole(t *testing.T) {
	specs := []WorkerSpec{{Name: "p0", Role: "prefill"}, {Name: "p1", Role: "prefill"}, {Name: "p2", Role: "prefill"},
		{Name: "d0", Role: "decode"}, {Name: "d1", Role: "decode"}, {Name: "d2", Role: "decode"}}
	run := func(specs []WorkerSpec) *snapshot.Snapshot {
		s := NewState(Options{Workers: specs, Window: 60e9})
		queues := map[string]float64{"p0": 0, "p1": 0, "p2": 1, "d0": 12, "d1": 10, "d2": 2}
		for _, sp := range specs {
			s.Apply(scrape(sp.Name, at(0), counters("", queues[sp.Name], 0, 0)))
		}
		// d0 takes most of a hot prefix.
		s.Apply(batch("d0", 0, 0, at(0), stored(0, false, 0x9f, 0xa0)))
		for i := 0; i < 40; i++ {
			w := "d0"
			if i%5 == 4 {
				w = "d1"
			}
			s.Apply(decide(fmt.Sprint("r", i), w, "00000000000000a0", at(0)))
		}
		return s.Snapshot(at(0))
	}
	// One role (the same pool, roles unsaid): d0's 12 is 2× the pool
	// median (1.5) and more: overheating.
	plain := make([]WorkerSpec, len(specs))
	for i, sp := range specs {
		plain[i] = WorkerSpec{Name: sp.Name}
	}
	if one := run(plain); !row(t, one, "d0").Overheating || one.Pool.Mixed() {
		t.Fatalf("one role: d0 overheating %v (pool median %v), roles %+v", row(t, one, "d0").Overheating, show(snapshot.QueueMedian(one.Workers)), one.Pool.Roles)
	}
	snap := run(specs)
	if row(t, snap, "d0").Overheating {
		t.Errorf("d0 overheats against prefill queues: decode median %v", show(snap.Pool.Roles[1].QueueMedian))
	}
	if !snap.Pool.Mixed() || snap.Pool.Roles[0].Role != "prefill" || !eqp(snap.Pool.Roles[1].QueueMedian, f(10)) {
		t.Fatalf("roles %+v", snap.Pool.Roles)
	}
	// Skew: prefill 1/(1/3) = 3, decode 12/8 = 1.5: the pool's is prefill's.
	if sk := snap.Pool.LoadSkew; sk.Role != "prefill" || !eqp(sk.MaxOverMean, f(3)) {
		t.Errorf("pool skew %s %v, want prefill's 3", sk.Role, show(sk.MaxOverMean))
	}
	if q := snap.Pool.Roles[1].Queue; !eqp(q, f(24)) {
		t.Errorf("decode queue %v, want 24", show(q))
	}
}

// A decode worker's prompt tokens that arrived by KV transfer are shown
// as transferred and kept out of its hit rate: its cache served 3 000 of
// the 4 000 tokens it looked up itself, not 3 000 of 10 000.
func TestDecodeTransferredTokensOutOfHitRate(t *testing.T) {
	page := func(queries, hits, external float64) em {
		e := counters("0", 0, queries, hits)
		e.Offload = &collectors.Offload{PromptExternal: f(external), PromptLocalHit: f(hits), PromptComputed: f(queries - hits - external)}
		return e
	}
	for _, c := range []struct {
		role        string
		rate        float64
		transferred *float64
	}{{"decode", 0.75, f(6000)}, {"aggregated", 0.3, nil}} {
		s := NewState(Options{Workers: []WorkerSpec{{Name: "w0", Role: c.role}}, Window: 60e9})
		s.Apply(scrape("w0", at(0), page(0, 0, 0)))
		s.Apply(scrape("w0", at(10), page(10000, 3000, 6000)))
		snap := s.Snapshot(at(10))
		h := row(t, snap, "w0").PrefixHitRate
		if !eqp(h.Tokens, f(c.rate)) || !eqp(h.TransferredTokens, c.transferred) {
			t.Errorf("%s: hit rate %v, transferred %v; want %v and %v", c.role, show(h.Tokens), show(h.TransferredTokens), c.rate, show(c.transferred))
		}
		if p := snap.Pool.PrefixHitRate; !eqp(p.Tokens, f(c.rate)) || !eqp(p.TransferredTokens, c.transferred) {
			t.Errorf("%s: pool hit rate %v, transferred %v", c.role, show(p.Tokens), show(p.TransferredTokens))
		}
	}
}

// A decode worker's transferred prompt tokens are a transfer in the pool's
// hits by tier, never an offload tier's hits.
func TestDecodeTransferIsNoOffloadTier(t *testing.T) {
	page := func(queries, hits, external float64) em {
		e := counters("0", 0, queries, hits)
		e.PromptTokens = f(queries)
		e.Offload = &collectors.Offload{PromptExternal: f(external), PromptLocalHit: f(hits), PromptComputed: f(queries - hits - external)}
		return e
	}
	s := NewState(Options{Workers: []WorkerSpec{{Name: "d0", Role: "decode"}}, Window: 60e9})
	s.Apply(scrape("d0", at(0), page(0, 0, 0)))
	s.Apply(scrape("d0", at(10), page(10000, 3000, 6000)))
	c := s.Snapshot(at(10)).Pool.CacheTiers
	if c == nil {
		t.Fatal("no cache tiers")
	}
	for _, h := range c.Hits {
		if h.Tier != "GPU" && h.Tier != TransferTier {
			t.Errorf("tier %q (%v): a decode worker's transfer read as a cache tier", h.Tier, show(h.Share))
		}
	}
	if h := hitOf(t, c, TransferTier); !eqp(h.Share, f(0.6)) {
		t.Errorf("transfer share %v, want 0.6", show(h.Share))
	}
}

// The ladder in a P/D pool: a decode worker's stores are KV it received,
// not computed (no class); a block only a decode worker holds is no
// routing loss for a prefill worker that computes it again (no router
// sends prompts to decode workers).
func TestLadderDecodeWorkers(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "p0", Role: "prefill"}, {Name: "p1", Role: "prefill"}, {Name: "d0", Role: "decode"}}, Window: 60e9})
	for _, w := range []string{"p0", "p1", "d0"} {
		s.Apply(scrape(w, at(0), counters("0", 0, 0, 0)))
	}
	s.Apply(batch("p0", 0, 1, at(1), root(1, 0xa1, 0xa2)))
	s.Apply(batch("d0", 0, 1, at(2), root(1, 0xa1, 0xa2))) // received from p0
	s.Apply(batch("p0", 0, 2, at(3), removed(0xa1, 0xa2)))
	s.Apply(batch("p1", 0, 1, at(4), root(1, 0xa1, 0xa2))) // held only by d0
	for _, w := range []string{"p0", "p1", "d0"} {
		s.Apply(scrape(w, at(5), counters("0", 0, 100, 0)))
	}
	snap := s.Snapshot(at(5))
	if l := row(t, snap, "d0").Ladder; l.Routing+l.Capacity+l.PoolCapacity+l.Configuration+l.NewBlocks != 0 {
		t.Errorf("d0 received its blocks: ladder %+v, want no class", l)
	}
	if l := row(t, snap, "p1").Ladder; l.Routing != 0 || l.PoolCapacity != 32 {
		t.Errorf("p1: routing %v, pool capacity %v; want 0 and 32 (p0 evicted them; d0 is no routing target)", l.Routing, l.PoolCapacity)
	}
}

// The pool sums its workers per model their pages name, with each
// model's token hit rate over its up workers.
func TestModelsFromPages(t *testing.T) {
	s := newTestState("a0", "a1", "b0")
	page := func(model string, waiting, q, h float64) em {
		e := counters("0", waiting, q, h)
		e.Model = model
		return e
	}
	for _, c := range []struct {
		w, model string
	}{{"a0", "org/model-a"}, {"a1", "org/model-a"}, {"b0", "org/model-b"}} {
		s.Apply(scrape(c.w, at(0), page(c.model, 0, 0, 0)))
	}
	s.Apply(scrape("a0", at(10), page("org/model-a", 3, 1000, 800)))
	s.Apply(scrape("a1", at(10), page("org/model-a", 1, 1000, 400)))
	s.Apply(scrape("b0", at(10), page("org/model-b", 5, 1000, 100)))
	snap := s.Snapshot(at(10))
	if !snap.Pool.MultiModel() || len(snap.Pool.Models) != 2 {
		t.Fatalf("models %+v", snap.Pool.Models)
	}
	a, b := snap.Pool.Models[0], snap.Pool.Models[1]
	if a.Model != "org/model-a" || a.Workers != 2 || !eqp(a.Queue, f(4)) || !eqp(a.HitTokens, f(0.6)) {
		t.Errorf("model a %+v (hit %v)", a, show(a.HitTokens))
	}
	if b.Model != "org/model-b" || b.Workers != 1 || !eqp(b.HitTokens, f(0.1)) {
		t.Errorf("model b %+v (hit %v)", b, show(b.HitTokens))
	}
	if row(t, snap, "b0").Model != "org/model-b" {
		t.Errorf("b0's model %q", row(t, snap, "b0").Model)
	}
}
