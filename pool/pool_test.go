package pool

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotIsADeepCopy: the state moving on never changes a snapshot
// already taken, and scribbling on a snapshot never reaches the state.
func TestSnapshotIsADeepCopy(t *testing.T) {
	s := contractState()
	s.Apply(&collectors.Decision{RequestID: "r-2", Chosen: "w0", Prefix: "9f2c", At: at(10)})
	first := s.Snapshot(at(10))
	before := mustJSON(t, first)

	// Move everything: metrics, blocks, stream history, decisions, errors,
	// a router restart.
	for k := 11; k <= 20; k++ {
		x := float64(k)
		s.Apply(scrape("w0", at(x), em{Engine: "0", Waiting: f(9), Running: f(1), KVUsage: f(0.99), PrefixQueries: f(100 * x), PrefixHits: f(x)}))
	}
	s.Apply(routerScrape(at(20), 5000, 0, nil))
	s.Apply(batch("w0", 0, 1, at(20), removed(0x9f2c, 0x9f2d, 0x9f2e), stored(0, false, 1, 2, 3, 4)))
	st := status("w0", 0, snapshot.StreamHistoryLost, at(20), collectors.StreamIncident{Kind: "history_lost", FromSeq: 9, Start: at(20)})
	s.Apply(st)
	st.History[0].FromSeq = 12345 // the collector reusing its slice must not reach the pool either
	s.Apply(outcome("r-2", "1", "w0", 500, ip(0), bp(false)))
	s.Apply(&collectors.SourceError{Source: "w2 metrics", Kind: "timeout", Message: "again", At: at(20)})
	second := s.Snapshot(at(20))

	if after := mustJSON(t, first); !bytes.Equal(before, after) {
		t.Fatalf("first snapshot changed after the state moved on:\nbefore %s\nafter  %s", before, after)
	}
	if got := row(t, second, "w0").Streams[0].History; len(got) != 1 || got[0].FromSeq != 9 {
		t.Fatalf("history = %+v, want the pool's own copy (from seq 9)", got)
	}

	// Scribble on the second snapshot; the third must not see it.
	w := row(t, second, "w0")
	*w.Queue = -1
	// Series are shared with the pool (Snapshot: never write to one),
	// but an append to one is the snapshot's own.
	_ = append(w.Series.Queue, snapshot.Point{V: -1})
	w.Streams[0].History[0].Kind = "scribble"
	*w.Engines[0].KVUsage = -1
	second.Prefixes[0].Workers["w0"] = -1
	// A decision row's own fields are the snapshot's; what they point to
	// (flags, figures, prediction, outcome) is shared with the next
	// snapshots while the record does not change (Snapshot: never write).
	second.Decisions.Recent[0].Chosen = "scribble"
	second.Decisions.Recent[0].Flags = append(second.Decisions.Recent[0].Flags[:0:0], "scribble")
	*second.Routers[0].Recovery.Baseline = -1
	third := s.Snapshot(at(21))
	w3 := row(t, third, "w0")
	if *w3.Queue != 9 || w3.Series.Queue[len(w3.Series.Queue)-1].V == -1 || w3.Streams[0].History[0].Kind != "history_lost" || *w3.Engines[0].KVUsage != 0.99 ||
		third.Prefixes[0].Workers["w0"] == -1 || third.Decisions.Recent[0].Chosen != "w1" || third.Decisions.Recent[0].Flags[0] == "scribble" || *third.Decisions.Recent[0].Matched != 12 ||
		*third.Routers[0].Recovery.Baseline == -1 {
		t.Fatalf("a snapshot write reached the state: %+v", w3)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRunPublishes drives the real goroutine with concurrent readers (run
// it under -race): observations are applied, a snapshot follows within a
// refresh, the refresh rate can change from another goroutine, an unread
// snapshot is replaced by the newest, and Run ends with its context.
func TestRunPublishes(t *testing.T) {
	p := New(Options{Workers: []WorkerSpec{{Name: "w0"}}, Refresh: 10 * time.Millisecond})
	if p.Latest() != nil {
		t.Fatal("Latest before the first publish must be nil")
	}
	in := make(chan collectors.Observation)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, in); close(done) }()

	// Readers: JSON-encode whatever they get, as the TUI and scripts do.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s := p.Latest(); s != nil {
					_, _ = json.Marshal(s)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}

	waitFor(t, "the first snapshot", func() bool { return p.Latest() != nil })
	if got := p.Latest().RefreshS; got != MinRefresh.Seconds() {
		t.Fatalf("refresh = %v s, want the 250 ms floor", got)
	}
	in <- batch("w0", 0, 0, time.Now(), stored(0, false, 1, 2, 3))
	seen := p.Latest().Seq
	var got *snapshot.Snapshot
	waitFor(t, "a snapshot after the batch", func() bool {
		select {
		case s := <-p.Snapshots():
			if s.Seq > seen {
				got = s
				return true
			}
		default:
		}
		return false
	})
	if blocksOf(got.Workers[0].Blocks) != 3 {
		t.Fatalf("the next snapshot holds %d blocks, want 3", blocksOf(got.Workers[0].Blocks))
	}

	p.SetRefresh(time.Second) // from this goroutine, while Run ticks
	waitFor(t, "the new refresh", func() bool { return p.Latest().RefreshS == 1 })
	p.SetRefresh(300 * time.Millisecond)
	waitFor(t, "the faster refresh", func() bool { return p.Latest().RefreshS == 0.3 })

	// Leave the channel unread for several publishes: what is waiting is
	// the newest, not the oldest.
	last := p.Latest().Seq
	waitFor(t, "three more publishes", func() bool { return p.Latest().Seq >= last+3 })
	l := p.Latest().Seq
	if s := <-p.Snapshots(); s.Seq+1 < l {
		t.Fatalf("read snapshot %d while %d was published: an old one was kept", s.Seq, l)
	}

	close(stop)
	wg.Wait()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// When Run stops, Snapshots is closed: a reader (the console) learns that
// nothing more will come instead of waiting forever; the last snapshot
// published is still the one it can read before the close.
func TestRunClosesSnapshotsWhenItStops(t *testing.T) {
	p := New(Options{Refresh: MinRefresh})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, nil); close(done) }()
	waitFor(t, "a publish", func() bool { return p.Latest() != nil })
	cancel()
	<-done
	last := p.Latest()
	var got []*snapshot.Snapshot
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s, ok := <-p.Snapshots():
			if !ok {
				if len(got) > 1 || len(got) == 1 && got[0] != last {
					t.Fatalf("read %d snapshots after stop, want at most the last one (seq %d)", len(got), last.Seq)
				}
				return
			}
			got = append(got, s)
		case <-deadline:
			t.Fatal("Snapshots is not closed after Run returned")
		}
	}
}

// A closed input stops applying but not publishing.
func TestRunSurvivesClosedInput(t *testing.T) {
	p := New(Options{Refresh: MinRefresh})
	in := make(chan collectors.Observation)
	close(in)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx, in)
	waitFor(t, "two publishes after the input closed", func() bool { s := p.Latest(); return s != nil && s.Seq >= 2 })
}

// TestRunReleasesAppliedBatches: the pool says when it applied a batch a
// collector counts as pending (collectors.Pending), so the collector's
// bound on what waits for the pool in bytes moves on.
func TestRunReleasesAppliedBatches(t *testing.T) {
	p := New(Options{Name: "t", Workers: []WorkerSpec{{Name: "w0"}}})
	in := make(chan collectors.Observation, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx, in)
	pend := collectors.NewPending()
	for seq := uint64(0); seq < 4; seq++ {
		b := batch("w0", 0, seq, time.Now(), stored(0, false, 10*seq+1, 10*seq+2))
		pend.Hold(b)
		in <- b
	}
	if pend.Bytes() == 0 {
		t.Fatal("nothing counted as pending")
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if !pend.Room(wctx, 1) {
		t.Fatalf("%d bytes still pending after the pool applied every batch", pend.Bytes())
	}
}
