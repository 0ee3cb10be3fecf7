package pool

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// rootStore is a BlockStored of a prompt's first blocks whose root content
// has fingerprint content (the decoder's KVEvent.RootContent).
func rootStore(content uint64, hashes ...uint64) collectors.KVEvent {
	ev := stored(0, false, hashes...)
	ev.RootContent = content
	return ev
}

// TestHashMismatchPairs: the same root content stored under different
// block hashes on two workers is a pair, named with the prefixes seen; the
// workers that agree are not; an alert names them with the words.
func TestHashMismatchPairs(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3")
	// Four prompts' roots (contents 1..4). w0, w1 and w3 hash them alike
	// (hash = 0x100 + content); w2 seeds its hashes differently.
	for c := uint64(1); c <= 4; c++ {
		for i, w := range []string{"w0", "w1", "w2", "w3"} {
			h := 0x100 + c
			if w == "w2" {
				h = 0x900 + c
			}
			s.Apply(batch(w, 0, c, at(float64(c)+float64(i)/10), rootStore(c, h, h+0x10000)))
		}
	}
	snap := s.Snapshot(at(10))
	hm := snap.Pool.HashMismatch
	want := map[string]int{"w0/w2": 4, "w1/w2": 4, "w2/w3": 4}
	if len(hm.Pairs) != len(want) {
		t.Fatalf("pairs %+v, want w2 against each of the others", hm.Pairs)
	}
	for _, p := range hm.Pairs {
		if n, ok := want[p.A+"/"+p.B]; !ok || p.Prefixes != n {
			t.Errorf("pair %+v, want one of %v", p, want)
		}
	}
	if hm.Pairs[0].Since != at(1.2) {
		t.Errorf("w0/w2 since %s, want when w2 first stored a prefix w0 holds (%s)", hm.Pairs[0].Since, at(1.2))
	}
	if hm.Agreeing != 4 || hm.Fingerprints != 4 || len(hm.AcrossRestart) != 0 || len(hm.AcrossRanks) != 0 || len(hm.BlockSizes) != 0 {
		t.Errorf("hash_mismatch %+v: want 4 prefixes agreeing elsewhere, 4 fingerprints, nothing else", hm)
	}
	a := alertOf(snap, snapshot.AlertHashMismatch)
	wantText := "w2 and w0, w1, w3 hash identical prefixes differently: an event-fed index cannot match between them — " +
		"check PYTHONHASHSEED, the prefix-cache hash algorithm and the block size (12 prefixes since 14:00:01)"
	if a == nil || a.Text != wantText || a.Severity != snapshot.SeverityCritical || a.Subject != "w2" {
		t.Fatalf("alert %+v\nwant %q", a, wantText)
	}
	if len(snap.Alerts) != 1 {
		t.Errorf("alerts %+v, want only the mismatch", snap.Alerts)
	}
}

// TestHashMismatchTwoWorkers: the issue's own example, two workers.
func TestHashMismatchTwoWorkers(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3", "w4", "w5")
	s.Apply(batch("w2", 0, 0, at(1), rootStore(7, 0xaaa)))
	s.Apply(batch("w5", 0, 0, at(2), rootStore(7, 0xbbb)))
	snap := s.Snapshot(at(3))
	a := alertOf(snap, snapshot.AlertHashMismatch)
	if a == nil || !strings.HasPrefix(a.Text, "w2 and w5 hash identical prefixes differently: an event-fed index cannot match between them — check PYTHONHASHSEED, the prefix-cache hash algorithm and the block size") {
		t.Fatalf("alert %+v", a)
	}
	if p := snap.Pool.HashMismatch.Pairs; len(p) != 1 || p[0].A != "w2" || p[0].B != "w5" || p[0].Prefixes != 1 {
		t.Errorf("pairs %+v", p)
	}
}

// TestHashMismatchIsolationIsNotAMismatch: prefixes isolated on purpose
// (another cache_salt, another LoRA) are other content (the decoder gives
// them another fingerprint): under other hashes, no mismatch. Non-root
// stores, CPU stores and hash-only stores (no fingerprint) are not compared.
func TestHashMismatchIsolationIsNotAMismatch(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(batch("w0", 0, 0, at(1), rootStore(11, 0xa1)))
	s.Apply(batch("w1", 0, 0, at(1), rootStore(12, 0xb1))) // same tokens, salted: content 12
	cpu := rootStore(13, 0xa2)
	s.Apply(batch("w0", 0, 1, at(2), cpu))
	cpu.Medium, cpu.Hashes = "CPU", []uint64{0xb2}
	s.Apply(batch("w1", 0, 1, at(2), cpu)) // an offload tier keys blocks its own way
	s.Apply(batch("w1", 0, 2, at(2), stored(0xb1, true, 0xb3)))
	snap := s.Snapshot(at(3))
	hm := snap.Pool.HashMismatch
	if len(hm.Pairs) != 0 || alertOf(snap, snapshot.AlertHashMismatch) != nil {
		t.Errorf("isolated content reported as a mismatch: %+v", hm)
	}
	if hm.Fingerprints != 3 || hm.Agreeing != 0 {
		t.Errorf("hash_mismatch %+v: want 3 fingerprints (11, 12, 13 on GPU), none shared", hm)
	}
}

// TestHashMismatchAcrossRestart: one worker stores the same content under
// another hash after a restart (seq back to 0: StreamReset): its seed is not
// fixed. A restart with the same seed is nothing; the finding lasts until
// its next restart.
func TestHashMismatchAcrossRestart(t *testing.T) {
	s := newTestState("w0", "w1")
	s.Apply(batch("w0", 0, 0, at(1), rootStore(1, 0x11), rootStore(2, 0x12)))
	s.Apply(batch("w1", 0, 0, at(1), rootStore(3, 0x13)))
	s.Apply(&collectors.StreamReset{Worker: "w1", Rank: 0, Reason: "restart", At: at(2)})
	s.Apply(batch("w1", 0, 0, at(3), rootStore(3, 0x13))) // same seed: the same hash
	s.Apply(&collectors.StreamReset{Worker: "w0", Rank: 0, Reason: "restart", At: at(4)})
	s.Apply(batch("w0", 0, 0, at(5), rootStore(1, 0x71), rootStore(2, 0x72)))
	snap := s.Snapshot(at(6))
	hm := snap.Pool.HashMismatch
	if len(hm.AcrossRestart) != 1 || hm.AcrossRestart[0] != "w0" || len(hm.Pairs) != 0 {
		t.Fatalf("hash_mismatch %+v, want w0 across its restart and no pair", hm)
	}
	a := alertOf(snap, snapshot.AlertHashRestart)
	if a == nil || a.Severity != snapshot.SeverityWarning || a.Since != at(5) ||
		a.Text != "w0 hashes the same prefixes differently since its restart (2 prefixes): its hash seed changes with each process — pin PYTHONHASHSEED" {
		t.Fatalf("alert %+v", a)
	}
	// Its next restart starts the evidence over.
	s.Apply(&collectors.StreamReset{Worker: "w0", Rank: 0, Reason: "restart", At: at(7)})
	if hm := s.Snapshot(at(8)).Pool.HashMismatch; len(hm.AcrossRestart) != 0 {
		t.Errorf("after its next restart: %+v, want nothing until it is seen again", hm.AcrossRestart)
	}
}

// TestHashMismatchPairEndsAtRestart: a pair's evidence belongs to the
// processes that gave it: when one of them restarts it is dropped, and
// comes back only if the new process disagrees again. A stale ref of a
// restarted worker is no evidence against another.
func TestHashMismatchPairEndsAtRestart(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	s.Apply(batch("w0", 0, 0, at(1), rootStore(1, 0x11)))
	s.Apply(batch("w1", 0, 0, at(2), rootStore(1, 0x99)))
	if p := s.Snapshot(at(3)).Pool.HashMismatch.Pairs; len(p) != 1 {
		t.Fatalf("pairs %+v, want w0/w1", p)
	}
	// w1 restarts with the pool's seed: no pair any more, and w2 storing
	// the pool's hash does not pair with w1's old one.
	s.Apply(&collectors.StreamReset{Worker: "w1", Rank: 0, Reason: "restart", At: at(4)})
	s.Apply(batch("w2", 0, 0, at(5), rootStore(1, 0x11)))
	snap := s.Snapshot(at(6))
	if hm := snap.Pool.HashMismatch; len(hm.Pairs) != 0 || len(hm.AcrossRestart) != 0 || alertOf(snap, snapshot.AlertHashMismatch) != nil {
		t.Fatalf("after w1's restart: %+v, want no pair", hm)
	}
	s.Apply(batch("w1", 0, 0, at(7), rootStore(1, 0x11)))
	if hm := s.Snapshot(at(8)).Pool.HashMismatch; len(hm.Pairs) != 0 || len(hm.AcrossRestart) != 1 || hm.Agreeing != 1 {
		t.Fatalf("w1 back on the pool's seed: %+v, want across_restart w1 (it changed), no pair, the prefix agreeing", hm)
	}
}

// TestHashMismatchAcrossRanks: two DP ranks of one worker (each engine core
// a process of its own) hash the same content differently.
func TestHashMismatchAcrossRanks(t *testing.T) {
	s := newTestState("w0")
	s.Apply(batch("w0", 0, 0, at(1), rootStore(5, 0x51)))
	s.Apply(batch("w0", 1, 0, at(2), rootStore(5, 0x52)))
	snap := s.Snapshot(at(3))
	hm := snap.Pool.HashMismatch
	if len(hm.AcrossRanks) != 1 || hm.AcrossRanks[0] != "w0" || len(hm.Pairs) != 0 || len(hm.AcrossRestart) != 0 {
		t.Fatalf("hash_mismatch %+v, want w0 across its ranks", hm)
	}
	if a := alertOf(snap, snapshot.AlertHashRanks); a == nil || !strings.HasPrefix(a.Text, "w0's DP ranks hash identical prefixes differently (1 prefix)") {
		t.Fatalf("alert %+v", a)
	}
}

// TestHashMismatchBlockSizes: differing block sizes are reported as that,
// never as a seed mismatch (the block size is part of the content).
func TestHashMismatchBlockSizes(t *testing.T) {
	s := newTestState("w0", "w1", "w2")
	for i, w := range []string{"w0", "w1", "w2"} {
		ev := rootStore(uint64(40+i), uint64(0x40+i)) // a different content per block size
		if w == "w2" {
			ev.BlockSize, ev.NumTokens = 32, 32
		}
		s.Apply(batch(w, 0, 0, at(1), ev))
	}
	snap := s.Snapshot(at(2))
	hm := snap.Pool.HashMismatch
	if len(hm.BlockSizes) != 2 || hm.BlockSizes[0].BlockSize != 16 || fmt.Sprint(hm.BlockSizes[0].Workers) != "[w0 w1]" ||
		hm.BlockSizes[1].BlockSize != 32 || fmt.Sprint(hm.BlockSizes[1].Workers) != "[w2]" || len(hm.Pairs) != 0 {
		t.Fatalf("hash_mismatch %+v", hm)
	}
	a := alertOf(snap, snapshot.AlertBlockSizes)
	want := "block sizes differ: w0, w1 store blocks of 16 tokens, w2 of 32 — an event-fed index cannot match blocks between them; the router and every worker need one block size"
	if a == nil || a.Text != want || alertOf(snap, snapshot.AlertHashMismatch) != nil {
		t.Fatalf("alerts %+v\nwant %q", snap.Alerts, want)
	}
	if a := alertOf(s.Snapshot(at(3)), snapshot.AlertBlockSizes); a == nil || a.Since != at(2) {
		t.Errorf("a refresh later: %+v, want it since the first snapshot that had it (%s)", a, at(2))
	}
	// One size everywhere: nothing.
	s2 := newTestState("w0", "w1")
	s2.Apply(batch("w0", 0, 0, at(1), rootStore(1, 0x1)))
	s2.Apply(batch("w1", 0, 0, at(1), rootStore(2, 0x2)))
	if bs := s2.Snapshot(at(2)).Pool.HashMismatch.BlockSizes; len(bs) != 0 {
		t.Errorf("block_sizes %+v with one size", bs)
	}
}

// TestFingerprintTableBounded: past limits.fingerprints the half seen least
// recently is forgotten and counted; what was seen lately still pairs.
func TestFingerprintTableBounded(t *testing.T) {
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}, {Name: "w1"}}, Window: time.Minute, Limits: Limits{Fingerprints: 100}})
	for c := uint64(1); c <= 1000; c++ {
		s.Apply(batch("w0", 0, c, at(float64(c)/100), rootStore(c, 0x1000+c)))
	}
	hm := s.Snapshot(at(11)).Pool.HashMismatch
	if hm.Fingerprints > 100 || hm.Fingerprints < 50 || hm.FingerprintsLimit != 100 || hm.FingerprintsDropped != uint64(1000-hm.Fingerprints) {
		t.Fatalf("fingerprints %d (limit %d), dropped %d: want at most the limit, the rest counted", hm.Fingerprints, hm.FingerprintsLimit, hm.FingerprintsDropped)
	}
	s.Apply(batch("w1", 0, 1, at(12), rootStore(1000, 0xdead), rootStore(1, 0xbeef)))
	hm = s.Snapshot(at(13)).Pool.HashMismatch
	if len(hm.Pairs) != 1 || hm.Pairs[0].Prefixes != 1 {
		t.Fatalf("pairs %+v: want the recent prefix (1000) compared, the forgotten one (1) not", hm.Pairs)
	}
	if len(s.fps.ents) > 100 || len(s.fps.idx) != len(s.fps.ents) {
		t.Errorf("table holds %d entries, index %d", len(s.fps.ents), len(s.fps.idx))
	}
}

// TestHashMismatchLeftAndForgottenWorkers: a worker discovered in
// Kubernetes that leaves takes its evidence with it: its pair is not
// reported (a worker that left raises no alert), and once forgotten, a pod
// that joins after it inherits none of it (ids are never reused: a stale
// ref must not pair the newcomer with a worker it never disagreed with).
func TestHashMismatchLeftAndForgottenWorkers(t *testing.T) {
	s := NewState(Options{Window: time.Minute})
	s.Apply(joined("vllm-0", at(0), podInfo("u0", false)))
	s.Apply(joined("vllm-1", at(0), podInfo("u1", false)))
	s.Apply(batch("vllm-0", 0, 0, at(1), rootStore(7, 0xaaa)))
	s.Apply(batch("vllm-1", 0, 0, at(2), rootStore(7, 0xbbb)))
	if p := s.Snapshot(at(3)).Pool.HashMismatch.Pairs; len(p) != 1 || p[0].A != "vllm-0" || p[0].B != "vllm-1" {
		t.Fatalf("pairs %+v, want vllm-0/vllm-1", p)
	}
	s.Apply(&collectors.TargetChange{Name: "vllm-1", Kind: collectors.TargetLeft, Reason: "pod deleted", At: at(4)})
	snap := s.Snapshot(at(5))
	if p := snap.Pool.HashMismatch.Pairs; len(p) != 0 || alertOf(snap, snapshot.AlertHashMismatch) != nil {
		t.Fatalf("a left worker's pair is still reported: %+v", p)
	}
	s.Snapshot(at(70)) // a window later: vllm-1 is forgotten
	s.Apply(joined("vllm-2", at(71), podInfo("u2", true)))
	s.Apply(batch("vllm-0", 0, 1, at(72), rootStore(7, 0xaaa)))
	s.Apply(batch("vllm-2", 0, 0, at(73), rootStore(8, 0xccc)))
	snap = s.Snapshot(at(74))
	if p := snap.Pool.HashMismatch.Pairs; len(p) != 0 || alertOf(snap, snapshot.AlertHashMismatch) != nil {
		t.Fatalf("pairs %+v after vllm-1 was forgotten: vllm-2 stored other content, nothing disagrees", p)
	}
	// The newcomer is compared as any worker: the same content under
	// another hash pairs it with vllm-0.
	s.Apply(batch("vllm-2", 0, 1, at(75), rootStore(7, 0xddd)))
	if p := s.Snapshot(at(76)).Pool.HashMismatch.Pairs; len(p) != 1 || p[0].A != "vllm-0" || p[0].B != "vllm-2" || p[0].Prefixes != 1 {
		t.Fatalf("pairs %+v, want vllm-0/vllm-2 over one prefix", p)
	}
}

// TestHashMismatchAcrossRestartInABusyPool: between a worker's restart and
// its next store of a prefix, the other workers of a big pool store it too,
// w1 under hashes of its own; w2's past process's hash must survive them (a
// past process's ref is replaced last), or its changed seed goes unseen.
func TestHashMismatchAcrossRestartInABusyPool(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3", "w4", "w5")
	s.Apply(batch("w2", 0, 0, at(1), rootStore(1, 0x11)))
	s.Apply(&collectors.StreamReset{Worker: "w2", Rank: 0, Reason: "restart", At: at(2)})
	for i, w := range []string{"w0", "w1", "w3", "w1", "w4", "w5", "w1"} {
		h := uint64(0x11)
		if w == "w1" {
			h = 0x99
		}
		s.Apply(batch(w, 0, uint64(i), at(3+float64(i)/10), rootStore(1, h)))
	}
	s.Apply(batch("w2", 0, 0, at(4), rootStore(1, 0x77)))
	snap := s.Snapshot(at(5))
	hm := snap.Pool.HashMismatch
	if len(hm.AcrossRestart) != 1 || hm.AcrossRestart[0] != "w2" || alertOf(snap, snapshot.AlertHashRestart) == nil {
		t.Fatalf("hash_mismatch %+v: want w2 across its restart", hm)
	}
	// Each store was compared with the one before: w1 against w0, w3, w4
	// and w5, and w2's new hash against w1's.
	want := map[string]bool{"w0/w1": true, "w1/w3": true, "w1/w4": true, "w1/w5": true, "w1/w2": true}
	if len(hm.Pairs) != len(want) {
		t.Errorf("pairs %+v, want %v", hm.Pairs, want)
	}
	for _, p := range hm.Pairs {
		if !want[p.A+"/"+p.B] {
			t.Errorf("pair %s/%s not expected (want %v)", p.A, p.B, want)
		}
	}
}

// TestHashMismatchAcrossRestartRemembersItsOwnRoots: w2 stored a system
// prompt's root long before its restart, and five workers stored it after
// w2 (the table keeps the last two storers). After its restart, w2 stores
// it under another hash: its own memory of its past process finds it.
func TestHashMismatchAcrossRestartRemembersItsOwnRoots(t *testing.T) {
	s := newTestState("w0", "w1", "w2", "w3", "w4", "w5")
	s.Apply(batch("w2", 0, 0, at(1), rootStore(1, 0x11)))
	for i, w := range []string{"w0", "w1", "w3", "w4", "w5"} {
		s.Apply(batch(w, 0, uint64(i), at(2+float64(i)/10), rootStore(1, 0x11)))
	}
	s.Apply(&collectors.StreamReset{Worker: "w2", Rank: 0, Reason: "restart", At: at(3)})
	s.Apply(batch("w2", 0, 0, at(4), rootStore(1, 0x77)))
	snap := s.Snapshot(at(5))
	if hm := snap.Pool.HashMismatch; len(hm.AcrossRestart) != 1 || hm.AcrossRestart[0] != "w2" {
		t.Fatalf("hash_mismatch %+v: want w2 across its restart", hm)
	}
	if a := alertOf(snap, snapshot.AlertHashRestart); a == nil || !strings.HasPrefix(a.Text, "w2 hashes the same prefixes differently since its restart (1 prefix)") {
		t.Fatalf("alert %+v: want one prefix counted once", a)
	}
	// A restart that keeps the seed is nothing.
	s2 := newTestState("w0", "w1")
	s2.Apply(batch("w1", 0, 0, at(1), rootStore(1, 0x11)))
	s2.Apply(batch("w0", 0, 0, at(2), rootStore(1, 0x11)))
	s2.Apply(&collectors.StreamReset{Worker: "w1", Rank: 0, Reason: "restart", At: at(3)})
	s2.Apply(batch("w1", 0, 0, at(4), rootStore(1, 0x11)))
	if hm := s2.Snapshot(at(5)).Pool.HashMismatch; len(hm.AcrossRestart) != 0 || len(hm.Pairs) != 0 {
		t.Errorf("same seed after the restart: %+v, want nothing", hm)
	}
}
