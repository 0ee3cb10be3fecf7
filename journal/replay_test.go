package journal

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// replayOn starts a Replay of a synthetic journal of n snapshots a
// second apart.
func replayOn(t *testing.T, n int, speed float64) (*Replay, []*snapshot.Snapshot) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j")
	live := synthJournal(t, path, n, time.Date(2026, 11, 30, 3, 0, 0, 0, time.Local))
	p, err := NewPlayer(path)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReplay(p, speed)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	return r, live
}

// next waits for the next snapshot the replay shows.
func next(t *testing.T, r *Replay) *snapshot.Snapshot {
	t.Helper()
	select {
	case s := <-r.Snapshots():
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot in 10 s")
	}
	return nil
}

// until waits for the snapshot numbered seq.
func until(t *testing.T, r *Replay, seq uint64) *snapshot.Snapshot {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-r.Snapshots():
			if s.Seq == seq {
				return s
			}
		case <-deadline:
			t.Fatalf("snapshot #%d never shown (status %+v)", seq, r.Status())
		}
	}
}

// TestReplayControls: the time controls move the replay as the keys say:
// pause stops it, → and ← move 10 s of journal time, g and G go to the
// ends, [ and ] halve and double the speed; what is shown is always the
// live snapshot of that moment.
func TestReplayControls(t *testing.T) {
	r, live := replayOn(t, 60, 8)
	if s := next(t, r); s.Seq != 1 {
		t.Fatalf("first snapshot shown #%d", s.Seq)
	}
	until(t, r, 3) // playing: 8 journal seconds a second
	r.Control(Pause)
	time.Sleep(50 * time.Millisecond)
	drain(r)
	st := r.Status()
	time.Sleep(400 * time.Millisecond) // three snapshots' time at ×8
	if got := r.Status(); !got.Paused || got.Pos != st.Pos {
		t.Fatalf("paused at %d, now %+v", st.Pos, got)
	}
	pos := uint64(st.Pos)
	r.Control(Forward)
	s := until(t, r, pos+10)
	if snapJSON(t, s) != snapJSON(t, live[pos+9]) {
		t.Fatal("after → the snapshot is not the live one of that moment")
	}
	r.Control(Back)
	if s := until(t, r, pos); snapJSON(t, s) != snapJSON(t, live[pos-1]) {
		t.Fatal("after ← the snapshot is not the live one of that moment")
	}
	r.Control(ToEnd)
	if s := until(t, r, 60); !r.Status().AtEnd || snapJSON(t, s) != snapJSON(t, live[59]) {
		t.Fatalf("G: status %+v", r.Status())
	}
	r.Control(ToStart) // from the start again: rebuilt, not kept
	if s := until(t, r, 1); snapJSON(t, s) != snapJSON(t, live[0]) {
		t.Fatal("g: not the first live snapshot")
	}
	r.Control(Slower)
	r.Control(Slower)
	r.Control(Faster)
	if got := r.Status().Speed; got != 4 {
		t.Fatalf("speed %v after ×½ ×½ ×2 from ×8", got)
	}
	if b := r.Banner(); b == "" {
		t.Fatal("no banner")
	}
}

func drain(r *Replay) {
	for {
		select {
		case <-r.Snapshots():
		default:
			return
		}
	}
}

// TestReplayKeepsPace: at ×8, eight journal seconds take a wall second,
// not less: the snapshots are paced, not flushed.
func TestReplayKeepsPace(t *testing.T) {
	r, _ := replayOn(t, 30, 8)
	next(t, r)
	start := time.Now()
	until(t, r, 9)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("8 journal seconds at ×8 took %s", d)
	}
}
