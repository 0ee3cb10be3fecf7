package kvevents

import (
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// countWakes counts the SUB readers' wakes (each drain) while the test runs.
func countWakes(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	testHookDrain = func() { n.Add(1) }
	t.Cleanup(func() { testHookDrain = nil })
	return &n
}

// TestReaderWakesAreSpaced: a publisher sending a batch every 5 ms wakes a
// paced reader at most once per WakeEvery (what a busy pool's CPU is
// made of), and every batch still arrives, in order. Unpaced, the same
// stream wakes it for nearly every batch.
func TestReaderWakesAreSpaced(t *testing.T) {
	const n = 150
	run := func(every time.Duration) (wakes int64, took time.Duration) {
		wk := countWakes(t)
		p := newTestPub(t, pubOpts{})
		h := connectOne(t, p, Options{WakeEvery: every})
		p.publish(batchSeq(0, 0))
		h.waitStatus("w0", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 0 })
		w0, start := wk.Load(), time.Now()
		for seq := 1; seq <= n; seq++ {
			p.publish(batchSeq(0, seq))
			time.Sleep(5 * time.Millisecond)
		}
		h.waitStatus("w0", 0, "the last seq applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == n })
		wakes, took = wk.Load()-w0, time.Since(start)
		want := make([]uint64, n+1)
		for i := range want {
			want[i] = uint64(i)
		}
		if got := seqsOf(h.batches("w0", 0)); !reflect.DeepEqual(got, want) {
			t.Errorf("WakeEvery %v: batches %v, want 0..%d in order", every, got, n)
		}
		return wakes, took
	}
	every := 100 * time.Millisecond
	paced, took := run(every)
	bound := int64(took/every) + 2
	unpaced, utook := run(-1)
	t.Logf("%d batches: paced %d wakes in %v, unpaced %d in %v", n, paced, took.Round(time.Millisecond), unpaced, utook.Round(time.Millisecond))
	if paced > bound {
		t.Errorf("paced reader woke %d times in %v, want at most %d (one per %v)", paced, took, bound, every)
	}
	if unpaced <= int64(utook/every)+2 {
		t.Errorf("unpaced reader woke only %d times in %v: the stream does not tell pacing apart", unpaced, utook)
	}
}

// TestReaderWakesShareAGrid: a paced reader wakes on the process's grid of
// WakeEvery (its multiples since the zero time), whatever the phase of its
// stream, so that the readers of a busy pool wake together instead of each
// waking the process on its own clock. The stream here starts half-way
// between two grid points, where a reader spaced from its own last wake
// would stay.
func TestReaderWakesShareAGrid(t *testing.T) {
	const every = 100 * time.Millisecond
	var mu sync.Mutex
	var wakes []time.Time
	testHookDrain = func() { mu.Lock(); wakes = append(wakes, time.Now()); mu.Unlock() }
	t.Cleanup(func() { testHookDrain = nil })
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{WakeEvery: every})
	p.publish(batchSeq(0, 0))
	h.waitStatus("w0", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 0 })
	time.Sleep(time.Until(time.Now().Truncate(every).Add(every + every/2)))
	mu.Lock()
	from := len(wakes)
	mu.Unlock()
	const n = 120
	for seq := 1; seq <= n; seq++ {
		p.publish(batchSeq(0, seq))
		time.Sleep(5 * time.Millisecond)
	}
	h.waitStatus("w0", 0, "the last seq applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == n })
	mu.Lock()
	var phases []time.Duration
	for _, w := range wakes[from+1:] { // the first wake after a quiet spell does not pause
		phases = append(phases, w.Sub(w.Truncate(every)))
	}
	mu.Unlock()
	if len(phases) < 3 {
		t.Fatalf("%d paced wakes, want several", len(phases))
	}
	slices.Sort(phases)
	if med := phases[len(phases)/2]; med > every/4 {
		t.Errorf("wakes fall %v after the grid's points (median of %d), want within %v: %v", med, len(phases), every/4, phases)
	}
}

// TestPauseEndsOnDisconnect: a reader pausing between wakes (here for an
// hour) still says at once that its publisher went away.
func TestPauseEndsOnDisconnect(t *testing.T) {
	wk := countWakes(t)
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{WakeEvery: time.Hour})
	p.publish(batchSeq(0, 0))
	h.waitStatus("w0", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 0 })
	w := wk.Load()
	p.publish(batchSeq(0, 1)) // a second wake: the reader then pauses
	h.waitStatus("w0", 0, "seq 1 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 1 })
	h.waitFor("the reader pausing", func() bool { return wk.Load() > w })
	start := time.Now()
	p.close()
	h.waitState("w0", 0, collectors.StreamDisconnected)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("disconnect said after %v", took)
	}
}

// TestIdleTicksSlow: a state goroutine with nothing owed ticks once per
// idleTick, not every 100 ms (ten wake-ups a second of an idle pool); an
// input that leaves a status held back by StatusEvery brings the fast tick
// back, and that status arrives.
func TestIdleTicksSlow(t *testing.T) {
	var ticks, fast atomic.Int64
	testHookTick = func(busy bool) {
		ticks.Add(1)
		if busy {
			fast.Add(1)
		}
	}
	t.Cleanup(func() { testHookTick = nil })
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{StatusEvery: time.Second}) // the fast tick: 100 ms
	p.publish(batchSeq(0, 0))
	h.waitStatus("w0", 0, "seq 0 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 0 })
	time.Sleep(1500 * time.Millisecond) // seq 0's status owed nothing more: slow by now
	t0 := ticks.Load()
	time.Sleep(3 * time.Second)
	if n := ticks.Load() - t0; n > 5 {
		t.Errorf("idle: %d ticks in 3s, want at most 5 (one per %v; 100 ms ticks make 30)", n, idleTick)
	}
	f0 := fast.Load()
	p.publish(batchSeq(0, 1)) // its status goes out at once
	p.publish(batchSeq(0, 2)) // held back for StatusEvery
	h.waitStatus("w0", 0, "seq 2 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 2 })
	if fast.Load() == f0 {
		t.Errorf("the held-back status came without a fast tick")
	}
}
