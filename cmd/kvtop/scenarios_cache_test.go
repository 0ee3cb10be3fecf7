package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/snapshot"
)

// The cache's own health through the real sim (issue 15): hash seeds that
// differ, a cache too small for its working set, and the tail of the
// requests away from a hot prefix.

// TestScenarioHashMismatch: w1 hashes its blocks with a seed of its own.
// The moment it publishes a prompt's root block another worker published
// under another hash (the sim's own record of it), kvtop's alert names the
// two within two refreshes. Then w2 restarts with yet another seed: its
// hashes changed across the restart, and it pairs with the others too.
func TestScenarioHashMismatch(t *testing.T) {
	t.Parallel()
	const refresh = time.Second // the default: the rule is two of them
	r := startScenario(t, sim.Options{Scenario: "hash-mismatch"}, func(c *config.Config) { c.Refresh = refresh })
	r.run(2)
	var stored time.Time
	var a, b string
	for end := time.Now().Add(scnDeadline); stored.IsZero(); {
		if at, x, y, ok := r.s.FirstHashMismatch(); ok {
			stored, a, b = at, r.c.Workers[x].Name, r.c.Workers[y].Name
		} else if time.Now().After(end) {
			t.Fatalf("the sim never published one root under two hashes (sim time %s)", r.s.Now())
		}
		time.Sleep(time.Millisecond)
	}
	if a != "w1" && b != "w1" {
		t.Errorf("the first mismatch is between %s and %s: want w1 (the odd seed) in it", a, b)
	}
	names := func(s *snapshot.Snapshot) bool {
		for _, x := range s.Alerts {
			if x.Kind == snapshot.AlertHashMismatch && strings.Contains(x.Text, a) && strings.Contains(x.Text, b) {
				return true
			}
		}
		return false
	}
	s := r.waitFor("the hash-mismatch alert naming "+a+" and "+b, names)
	// The first snapshot that has it was built within two refreshes of the
	// store (the one before it, if any, did not have it yet).
	if lag := s.At.Sub(stored); lag > 2*refresh {
		t.Errorf("the alert came %s after %s stored the prefix, want within two refreshes (%s)\n%s", lag, b, 2*refresh, dump(s))
	}
	t.Logf("%s stored a root %s had under another hash; the alert was in snapshot #%d %s later", b, a, s.Seq, s.At.Sub(stored).Round(time.Millisecond))
	hm := s.Pool.HashMismatch
	if len(hm.Pairs) == 0 || len(hm.BlockSizes) != 0 || len(hm.AcrossRestart) != 0 {
		t.Errorf("hash_mismatch %+v: want pairs with w1, one block size, no restart yet", hm)
	}
	for _, p := range hm.Pairs {
		if p.A != "w1" && p.B != "w1" {
			t.Errorf("pair %s/%s: only w1 hashes differently before the restart", p.A, p.B)
		}
	}
	// Once w1 disagrees with more than one worker, the alert is about it
	// (its subject is the worker in most pairs: the odd one out).
	s = r.waitFor("the alert about w1", func(s *snapshot.Snapshot) bool { return alertOf(s, snapshot.AlertHashMismatch, "w1") != nil })
	if x := alertOf(s, snapshot.AlertHashMismatch, "w1"); x.Severity != snapshot.SeverityCritical ||
		!strings.HasPrefix(x.Text, "w1 and ") ||
		!strings.Contains(x.Text, "hash identical prefixes differently: an event-fed index cannot match between them — check PYTHONHASHSEED") {
		t.Errorf("alert %+v: want a critical one naming w1 first", x)
	}

	// w2 restarts at 30 s with another seed.
	r.jumpTo(30*time.Second + sim.Quantum)
	r.run(2)
	s = r.waitFor("w2's hashes changed across its restart", func(s *snapshot.Snapshot) bool {
		return alertOf(s, snapshot.AlertHashRestart, "w2") != nil
	})
	found := false
	for _, p := range s.Pool.HashMismatch.Pairs {
		found = found || p.A == "w2" || p.B == "w2"
	}
	if !found || len(s.Pool.HashMismatch.AcrossRestart) != 1 || s.Pool.HashMismatch.AcrossRestart[0] != "w2" {
		t.Errorf("after w2's restart with its own seed: %+v, want it across its restart and in a pair", s.Pool.HashMismatch)
	}
}

// TestScenarioThrash: w3 comes back with 640 KV blocks (a sixth of its cache) under more load
// than it can hold: it evicts blocks and stores them again seconds later.
// Its cache figures say so (capacity from its cache geometry, thrash share,
// residency far below the others'), and a warning names it.
func TestScenarioThrash(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "thrash"}, nil)
	r.jumpTo(15*time.Second + sim.Quantum)
	r.run(3)
	s := r.waitFor("w3 thrashing", func(s *snapshot.Snapshot) bool { return alertOf(s, snapshot.AlertThrash, "w3") != nil })
	w3 := workerOf(s, "w3")
	c := w3.Cache
	t.Logf("w3: KV %s, capacity %d tokens, stored %s/s, removed %s/s, thrash %s/s = %s of stores, residency p50 %s s (%d samples, rate %s)",
		fv(w3.KVUsage), jsonInt(c, "capacity_tokens"), fv(c.StoredPerS), fv(c.RemovedPerS), fv(c.ThrashPerS), fv(c.ThrashShare),
		fv(c.ResidencyS.P50), c.ResidencyS.Samples, fv(c.SampleRate))
	if jsonInt(c, "capacity_tokens") != scenario.ThrashBlocks*16 {
		t.Errorf("w3 capacity %d tokens, want %d blocks × 16", jsonInt(c, "capacity_tokens"), scenario.ThrashBlocks)
	}
	if c.ThrashShare == nil || *c.ThrashShare < s.Thresholds.ThrashShare || w3.KVUsage == nil || *w3.KVUsage < s.Thresholds.KVUsageHigh && w3.State != snapshot.WorkerSaturated {
		t.Errorf("w3 thrash %s at KV %s: want at least the thresholds\n%s", fv(c.ThrashShare), fv(w3.KVUsage), dump(s))
	}
	for _, o := range s.Workers {
		if o.Name == "w3" {
			continue
		}
		if alertOf(s, snapshot.AlertThrash, o.Name) != nil {
			t.Errorf("%s thrashes too: only w3's cache is too small", o.Name)
		}
		if o.Cache.ResidencyS.P50 != nil && c.ResidencyS.P50 != nil && *c.ResidencyS.P50 >= *o.Cache.ResidencyS.P50 {
			t.Errorf("w3's blocks live %s s (p50), %s's %s s: the small cache should evict sooner", fv(c.ResidencyS.P50), o.Name, fv(o.Cache.ResidencyS.P50))
		}
	}
	if p := s.Pool.Cache; p.StoredPerS == nil || p.ThrashPerS == nil || *p.ThrashPerS < *c.ThrashPerS-1e-9 {
		t.Errorf("pool cache %+v: the sums hold w3's", p)
	}
}

// TestScenarioHotPrefixStarvesTheRest: while a hot document's owner
// overheats, the requests on it wait — the hot stream's and the others
// that land there — while the other workers answer at once. kvtop measures
// each class apart: the rest's tail beside its median, the overheating
// worker's requests against the others', and says it in the alert.
func TestScenarioHotPrefixStarvesTheRest(t *testing.T) {
	t.Parallel()
	r := startScenario(t, sim.Options{Scenario: "hot-prefix"}, nil)
	r.jumpTo(19 * time.Second)
	// The jump's requests all land in kvtop's window at once: measure once
	// they left it (a window of wall time at 3× is 45 s of the hot phase).
	clean := time.Now().Add(r.c.Window)
	r.run(3)
	var hot *snapshot.Prefix
	s := r.waitFor("an overheating worker and every class measured", func(s *snapshot.Snapshot) bool {
		if s.At.Before(clean) {
			return false
		}
		hot = nil
		for i := range s.Prefixes {
			if p := &s.Prefixes[i]; p.Overheating != nil && p.TTFTMS.P95 != nil {
				hot = p
			}
		}
		p := s.Pool
		return hot != nil && p.Rest.TTFTMS.P95 != nil && p.OverheatingWorkers.TTFTMS.P95 != nil && p.OtherWorkers.TTFTMS.P95 != nil
	})
	p := s.Pool
	rest, over, other := p.Rest.TTFTMS, p.OverheatingWorkers.TTFTMS, p.OtherWorkers.TTFTMS
	t.Logf("TTFT p50/p95/p99 ms: hot %s/%s/%s (n %d) · rest %s/%s/%s (n %d) · on %s %s/%s/%s (n %d) · others %s/%s/%s (n %d)",
		fv(hot.TTFTMS.P50), fv(hot.TTFTMS.P95), fv(hot.TTFTMS.P99), hot.TTFTMS.N, fv(rest.P50), fv(rest.P95), fv(rest.P99), rest.N,
		*hot.Overheating, fv(over.P50), fv(over.P95), fv(over.P99), over.N, fv(other.P50), fv(other.P95), fv(other.P99), other.N)
	if *over.P95 < 3**other.P95 {
		t.Errorf("TTFT p95 %s ms on the overheating worker vs %s ms on the others: want it far above", fv(over.P95), fv(other.P95))
	}
	if *rest.P95 < 3**rest.P50 {
		t.Errorf("the rest's TTFT p50 %s ms, p95 %s ms: want a tail (those behind the hot stream)", fv(rest.P50), fv(rest.P95))
	}
	found := false
	for _, a := range s.Alerts {
		found = found || a.Kind == snapshot.AlertOverheating && a.Subject == *hot.Overheating &&
			strings.Contains(a.Text, "; requests away from "+hot.ID[:4]+"…: TTFT p95 ") && strings.Contains(a.Text, " on the hot stream")
	}
	if !found {
		t.Errorf("no overheating alert compares the rest with the hot stream:\n%s", dump(s))
	}
	for _, q := range []snapshot.RequestQuantiles{rest, over, other, hot.TTFTMS} {
		if q.N < 20 || *q.P50 > *q.P95 || *q.P95 > *q.P99 {
			t.Errorf("quantiles %+v: want n ≥ 20 and ordered", q)
		}
	}
}
