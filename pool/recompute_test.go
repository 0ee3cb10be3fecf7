package pool

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// upPool is a pool of workers w0..w{n-1}, each scraped once (up).
func upPool(n int) *State {
	var names []string
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprint("w", i))
	}
	s := newTestState(names...)
	for _, name := range names {
		s.Apply(scrape(name, at(0), counters("", 1, 0, 0)))
	}
	return s
}

func served(req, worker string, prompt, cached int) *collectors.Outcome {
	return &collectors.Outcome{RequestID: req, AttemptID: "1", Worker: worker, HTTPStatus: 200, PromptTokens: ip(prompt),
		CachedTokens: ip(cached), Done: bp(true), Format: "kvtop", At: at(2), TS: at(2)}
}

func predicted(req, chosen, units string, matched float64, owner string, cands ...collectors.Candidate) *collectors.Decision {
	return &collectors.Decision{RequestID: req, AttemptID: "1", Chosen: chosen, Format: "kvtop", At: at(1), TS: at(1),
		Prediction: &collectors.Prediction{Source: "kv-events", Input: "tokens", Units: units, Matched: f(matched), Total: f(20), Owner: owner, BlockSize: 16},
		Candidates: cands}
}

func recordOf(t *testing.T, s *snapshot.Snapshot, req string) *snapshot.DecisionRow {
	t.Helper()
	for i := range s.Decisions.Recent {
		if s.Decisions.Recent[i].RequestID == req {
			return &s.Decisions.Recent[i]
		}
	}
	t.Fatalf("no record %s", req)
	return nil
}

// wantRecompute checks one record's measurement: recomputed tokens (-1:
// nil), the prefix elsewhere (-1: nil), the other worker, the source, and
// whether the row is flagged.
func wantRecompute(t *testing.T, r *snapshot.DecisionRow, tokens, elsewhere int, other, source string) {
	t.Helper()
	rc := r.Recompute
	if rc == nil {
		t.Fatalf("%s: no recompute info", r.RequestID)
	}
	got := func(p *int) int {
		if p == nil {
			return -1
		}
		return *p
	}
	flagged := slices.Contains(r.Flags, "recompute")
	if got(rc.Tokens) != tokens || got(rc.ElsewhereTokens) != elsewhere || rc.Worker != other || rc.Source != source || flagged != (tokens > 0) {
		t.Errorf("%s: tokens %d elsewhere %d on %q from %q (not measurable %q), flags %v; want %d %d on %q from %q",
			r.RequestID, got(rc.Tokens), got(rc.ElsewhereTokens), rc.Worker, rc.Source, rc.NotMeasurable, r.Flags, tokens, elsewhere, other, source)
	}
}

// TestRecomputeFromPredictions: hand-built decision/outcome pairs in each
// unit the router may predict in.
func TestRecomputeFromPredictions(t *testing.T) {
	s := upPool(4)
	// Blocks: w2 held 12 blocks of 16 tokens; the request went to w1,
	// which had 32 cached: 192 − 32 = 160 tokens recomputed.
	s.Apply(predicted("blocks", "w1", "blocks", 12, "w2"))
	s.Apply(served("blocks", "w1", 320, 32))
	// Tokens: the owner w3 held 100 tokens, w0 got it with 40 cached.
	s.Apply(predicted("tokens", "w0", "tokens", 100, "w3"))
	s.Apply(served("tokens", "w0", 400, 40))
	// The owner is the chosen worker; a candidate elsewhere held less
	// than what the chosen one really reused: nothing recomputed.
	s.Apply(predicted("owner", "w1", "blocks", 8, "w1",
		collectors.Candidate{Worker: "w1", Matched: f(8)}, collectors.Candidate{Worker: "w0", Matched: f(5)}))
	s.Apply(served("owner", "w1", 200, 128))
	// The owner is the chosen worker but it had evicted meanwhile: the
	// candidate w3's 5 blocks were cached elsewhere, 80 − 16 recomputed.
	s.Apply(predicted("evicted", "w1", "blocks", 8, "w1", collectors.Candidate{Worker: "w3", Matched: f(5)}))
	s.Apply(served("evicted", "w1", 200, 16))
	// The prefix elsewhere is longer than the prompt: capped at it.
	s.Apply(predicted("capped", "w0", "tokens", 500, "w2"))
	s.Apply(served("capped", "w0", 300, 100))
	// A character match says nothing about KV blocks; a record without a
	// prediction or prefix says nothing at all: counted apart.
	chars := predicted("chars", "w1", "chars", 120, "w2")
	s.Apply(chars)
	s.Apply(served("chars", "w1", 300, 0))
	s.Apply(&collectors.Decision{RequestID: "none", AttemptID: "1", Chosen: "w1", Format: "kvtop", At: at(1), TS: at(1)})
	s.Apply(served("none", "w1", 300, 0))
	// A failed request computed nothing worth counting.
	s.Apply(predicted("failed", "w1", "blocks", 12, "w2"))
	s.Apply(&collectors.Outcome{RequestID: "failed", AttemptID: "1", Worker: "w1", HTTPStatus: 503, Error: "queue full", At: at(2)})

	snap := s.Snapshot(at(2))
	wantRecompute(t, recordOf(t, snap, "blocks"), 160, 192, "w2", "prediction")
	wantRecompute(t, recordOf(t, snap, "tokens"), 60, 100, "w3", "prediction")
	wantRecompute(t, recordOf(t, snap, "owner"), 0, 80, "w0", "prediction")
	wantRecompute(t, recordOf(t, snap, "evicted"), 64, 80, "w3", "prediction")
	wantRecompute(t, recordOf(t, snap, "capped"), 200, 500, "w2", "prediction")
	for req, why := range map[string]string{
		"chars": "the router matched characters, not tokens or blocks",
		"none":  "no prediction and no prefix in the record",
	} {
		if rc := recordOf(t, snap, req).Recompute; rc == nil || rc.Tokens != nil || rc.ElsewhereTokens != nil || rc.NotMeasurable != why {
			t.Errorf("%s: %+v; want not measurable: %s", req, rc, why)
		}
	}
	// The pool over the window (1 s since the first decision): 160 + 60 + 0 + 64 + 200 =
	// 484 tokens from 5 measured requests, 4 of them recomputing, of
	// 320 + 400 + 200 + 200 + 300 = 1 420 prompt tokens.
	p := snap.Pool.Recompute
	if !eqp(p.TokensPerS, f(484)) || !eqp(p.Share, f(484.0/1420)) || p.Requests != 4 || p.NotMeasurable != 2 || p.Measured != 5 {
		t.Errorf("pool recompute %+v (tokens/s %v share %v)", p, show(p.TokensPerS), show(p.Share))
	}
	// Per worker, as the chosen one: w1 recomputed 160 + 0 + 64 of 720.
	if w := row(t, snap, "w1").Recompute; !eqp(w.TokensPerS, f(224)) || !eqp(w.Share, f(224.0/720)) || w.Requests != 2 || w.NotMeasurable != 2 {
		t.Errorf("w1 recompute %+v (tokens/s %v share %v)", w, show(w.TokensPerS), show(w.Share))
	}
	if w := row(t, snap, "w2").Recompute; w.TokensPerS != nil || w.Share != nil || w.Requests != 0 {
		t.Errorf("w2 chose nothing: %+v", w)
	}
}

// TestRecomputeFromIndex: a cache-blind router predicts nothing, but its
// record names the request's prefix: kvtop's own index says who held it.
func TestRecomputeFromIndex(t *testing.T) {
	s := upPool(3)
	// w2 holds the chain a→b→c→d (4 blocks of 16); w1 holds a; w0 holds
	// a→b→c.
	s.Apply(batch("w2", 0, 0, at(0), stored(0, false, 0xa), stored(0xa, true, 0xb, 0xc, 0xd)))
	s.Apply(batch("w1", 0, 0, at(0), stored(0, false, 0xa)))
	s.Apply(batch("w0", 0, 0, at(0), stored(0, false, 0xa, 0xb, 0xc)))
	blind := func(req, chosen, prefix string) *collectors.Decision {
		return &collectors.Decision{RequestID: req, AttemptID: "1", Chosen: chosen, Prefix: prefix, Format: "kvtop", At: at(1), TS: at(1),
			Prediction: &collectors.Prediction{Source: "none", Input: "none"}}
	}
	// To w1 (16 cached): w2 had 64 → 48 recomputed.
	s.Apply(blind("r1", "w1", "000000000000000d"))
	s.Apply(served("r1", "w1", 100, 16))
	// To w2 itself: the deepest block anyone else holds is c, on w0: 48;
	// w2 reused 64: nothing recomputed.
	s.Apply(blind("r2", "w2", "0x000000000000000D"))
	s.Apply(served("r2", "w2", 100, 64))
	// A prefix nobody holds: nothing was cached elsewhere.
	s.Apply(blind("r3", "w1", "00000000000000ee"))
	s.Apply(served("r3", "w1", 100, 0))
	// The holder went down before the decision: not resident on an up worker.
	s.Apply(failedScrape("w2", at(1), "timeout"))
	s.Apply(blind("r4", "w1", "000000000000000d"))
	s.Apply(served("r4", "w1", 100, 16))
	// The outcome first, then the decision: the same join.
	s.Apply(served("r5", "w1", 100, 0))
	s.Apply(blind("r5", "w1", "000000000000000c"))

	snap := s.Snapshot(at(2))
	wantRecompute(t, recordOf(t, snap, "r1"), 48, 64, "w2", "index")
	wantRecompute(t, recordOf(t, snap, "r2"), 0, 48, "w0", "index")
	wantRecompute(t, recordOf(t, snap, "r3"), 0, 0, "", "index")
	wantRecompute(t, recordOf(t, snap, "r4"), 32, 48, "w0", "index") // w0's a→b→c, w2 down
	wantRecompute(t, recordOf(t, snap, "r5"), 48, 48, "w0", "index")
	if p := snap.Pool.Recompute; p.Requests != 3 || p.Measured != 5 || p.NotMeasurable != 0 || !eqp(p.TokensPerS, f(128)) {
		t.Errorf("pool %+v (tokens/s %v)", p, show(p.TokensPerS))
	}
}

// TestRecomputeWindow: requests leave the windowed figures with time, and
// history read at start never enters them; the record keeps its flag.
func TestRecomputeWindow(t *testing.T) {
	s := upPool(3)
	s.Apply(predicted("r1", "w1", "blocks", 12, "w2"))
	s.Apply(served("r1", "w1", 320, 32))
	old := predicted("old", "w1", "blocks", 12, "w2")
	old.Backfill = true
	s.Apply(old)
	o := served("old", "w1", 320, 0)
	o.Backfill = true
	s.Apply(o)
	snap := s.Snapshot(at(2))
	if p := snap.Pool.Recompute; p.Requests != 1 || p.Measured != 1 {
		t.Errorf("backfill counted: %+v", p)
	}
	wantRecompute(t, recordOf(t, snap, "old"), 192, 192, "w2", "prediction")
	snap = s.Snapshot(at(120))
	if p := snap.Pool.Recompute; p.Requests != 0 || p.Measured != 0 || p.TokensPerS != nil || p.Share != nil {
		t.Errorf("after the window: %+v", p)
	}
	wantRecompute(t, recordOf(t, snap, "r1"), 160, 192, "w2", "prediction")
}
