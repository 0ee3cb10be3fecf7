package kvevents

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
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
	h.waitState("w0", 0, snapshot.StreamDisconnected)
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

// TestBehindReaderDoesNotPause: a reader that finds itself behind a fast
// stream reads on: while its publisher still sends, it takes no pause for
// the grid, however long the grid (10 h here: such a pause would leave the
// rest of the stream unread for hours), and every batch arrives, in order,
// none missing or dropped. The publisher sends 12 000 batches at about
// 8 000 a second, 30 000 a grid tick, where a drain takes 256; the reader
// is made late by holding its first wake for 200 ms (a reader starved of
// CPU, or one that paused while its stream sped up). Before issue 23 it
// caught up, found a drain short, and paused for the grid with the stream
// still running.
func TestBehindReaderDoesNotPause(t *testing.T) {
	const every = 10 * time.Hour
	const n = 12000
	var armed atomic.Bool
	woke, gate := make(chan struct{}, 1), make(chan struct{})
	testHookDrain = func() {
		if armed.Load() {
			select {
			case woke <- struct{}{}:
			default:
			}
			<-gate
		}
	}
	var mu sync.Mutex
	var pauses, grid []string
	testHookPause = func(d time.Duration, isGrid bool, received uint64) {
		mu.Lock()
		defer mu.Unlock()
		p := fmt.Sprintf("%v after %d batches", d.Round(time.Microsecond), received)
		if isGrid && received < n {
			grid = append(grid, p)
		}
		pauses = append(pauses, p)
	}
	t.Cleanup(func() { testHookDrain, testHookPause = nil, nil })
	p := newTestPub(t, pubOpts{})
	h := connectOne(t, p, Options{WakeEvery: every})
	mu.Lock()
	if len(pauses) > 0 {
		t.Fatalf("setup: the reader paused before the stream began: %v", pauses)
	}
	mu.Unlock()
	armed.Store(true)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for seq := 0; seq < n; seq++ {
			p.publish(batchSeq(0, seq))
			if seq%16 == 15 {
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { <-sent }) // before the publisher closes
	select {
	case <-woke:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never woke for the stream")
	}
	time.Sleep(200 * time.Millisecond)
	armed.Store(false)
	close(gate)

	// Liveness only: the reader has up to a minute (the stream lasts 1.5
	// s); a pause for the grid fails at once.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		g := grid
		mu.Unlock()
		if len(g) > 0 {
			t.Fatalf("the reader paused for the grid while its stream ran (%v); %d of %d batches applied", g, len(h.batches("w0", 0)), n)
		}
		if st := h.status("w0", 0); st != nil && st.HasSeq && st.LastSeq == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches not all applied within a minute; pauses %v\n%s", n, pauses, h.dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := h.waitStatus("w0", 0, "every batch counted", func(s *collectors.StreamStatus) bool { return s.Batches == n })
	if st.Missing != 0 || st.Dropped != 0 || st.Gaps != 0 {
		t.Errorf("missing %d, dropped %d, gaps %d, want none", st.Missing, st.Dropped, st.Gaps)
	}
	got := seqsOf(h.batches("w0", 0))
	if len(got) != n {
		t.Fatalf("%d batches, want %d", len(got), n)
	}
	for i, s := range got {
		if s != uint64(i) {
			t.Fatalf("batch %d is seq %d: not in order", i, s)
		}
	}
	mu.Lock()
	t.Logf("%d pauses: %v", len(pauses), pauses)
	mu.Unlock()
}

// TestPacerKeepsUpWithItsStream: the pause a paced reader plans from what
// it took, on a clock of the test's (200 ms grid, 1 024 messages a pause
// may let pile up: the default SUB queue). A stream of a few batches a
// tick is paused on the grid, as before; a reader that took twice the
// SUB's queue since its last pause is behind and does not pause, nor after
// a lone message within the next tick; a stream of 20 000 batches/s is
// then paused only as long as it takes to bring 1 024 (or to the grid's
// point if that comes sooner), a stall of its publisher does not lengthen
// that, and when it slows down its reader is back on the grid.
func TestPacerKeepsUpWithItsStream(t *testing.T) {
	const every, fill = 200 * time.Millisecond, 1024
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC) // on the grid
	p := newPacer(every, fill)
	now := t0
	// cycle: the reader, woken at now (after idle of waiting for input,
	// if woken), takes msgs over busy, then plans; it wakes after the pause.
	cycle := func(idle time.Duration, woken bool, msgs int, busy time.Duration) (time.Duration, bool) {
		p.waited(idle, woken)
		now = now.Add(idle)
		for msgs > 0 {
			k := min(msgs, drainMax)
			p.took(k)
			msgs -= k
		}
		now = now.Add(busy)
		d, grid := p.plan(now)
		now = now.Add(d)
		p.last = now
		return d, grid
	}
	if d, _ := cycle(time.Hour, true, 1, time.Millisecond); d != 0 {
		t.Errorf("first wake paused %v", d)
	}
	// A busy vLLM engine: 7 batches a tick, one at a time at first.
	for i := 0; i < 20; i++ {
		idle, woken, msgs := time.Duration(0), false, 7
		if i == 0 {
			idle, woken, msgs = 30*time.Millisecond, true, 1
		}
		d, grid := cycle(idle, woken, msgs, time.Millisecond)
		if !grid || d < every-40*time.Millisecond {
			t.Fatalf("7 batches a tick: cycle %d paused %v (grid %v), want the grid's %v", i, d, grid, every)
		}
	}
	// After a quiet spell the first wake does not pause, and a lone
	// message says nothing of the rate: the grid.
	if d, _ := cycle(3*time.Second, true, 1, 100*time.Microsecond); d != 0 {
		t.Errorf("the first wake after a quiet spell paused %v", d)
	}
	if d, grid := cycle(50*time.Millisecond, true, 1, 100*time.Microsecond); !grid || d <= 0 {
		t.Errorf("a lone message: paused %v (grid %v), want the grid", d, grid)
	}
	// 20 000 batches/s arrive; the reader takes 10 µs a batch. The grid
	// pause let 4 000 pile up: behind.
	const rate = 20000
	d, grid := cycle(0, false, int(float64(rate)*every.Seconds()), 40*time.Millisecond)
	if d != 0 {
		t.Fatalf("after 4 000 batches: paused %v (grid %v), want none", d, grid)
	}
	// Caught up, it waits for input, woken by one batch; then by a few.
	if d, grid := cycle(20*time.Microsecond, true, 1, 10*time.Microsecond); d != 0 {
		t.Errorf("a lone batch within a tick of being behind: paused %v (grid %v), want none", d, grid)
	}
	// What arrived during the last pause and while it took them (10 µs each).
	const each = 10 * time.Microsecond
	var last time.Duration
	for i := 0; i < 50; i++ {
		msgs := 3
		if last > 0 {
			msgs = int(float64(rate) * last.Seconds() / (1 - rate*each.Seconds()))
		}
		d, _ := cycle(0, last == 0, msgs, time.Duration(msgs)*each)
		if piled := float64(rate) * d.Seconds(); piled > fill*1.05 {
			t.Fatalf("20 000 batches/s, cycle %d (%d batches taken): a pause of %v lets %.0f batches pile up, want at most %d",
				i, msgs, d, piled, fill)
		}
		last = d
	}
	t.Logf("20 000 batches/s: pauses of %v", last)
	if last == 0 {
		t.Errorf("20 000 batches/s: the reader never paused, want about %v", time.Duration(fill*float64(time.Second)/rate))
	}
	// A stall of the publisher: a lone batch, then three over 150 ms, are
	// a lull in a fast stream, not a slow one: no pause is longer.
	for _, c := range []struct {
		idle  time.Duration
		woken bool
		msgs  int
		busy  time.Duration
	}{{30 * time.Millisecond, true, 1, 10 * time.Microsecond}, {0, false, 3, 150 * time.Millisecond}} {
		if d, grid := cycle(c.idle, c.woken, c.msgs, c.busy); grid || d > last+last/10 {
			t.Errorf("a lull of %d batches in a fast stream: paused %v (grid %v), want at most %v", c.msgs, d, grid, last)
		}
	}
	// The stream slows to 7 batches a tick again: back on the grid.
	for i := 0; ; i++ {
		if _, grid := cycle(0, false, 7, time.Millisecond); grid {
			break
		}
		if i == 5 {
			t.Fatal("7 batches a tick after a fast spell: never back on the grid")
		}
	}
}
