package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/journal"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// liveTee records the pool and keeps every snapshot it published while
// recording, so the test compares all of them with the replay's.
type liveTee struct {
	rec    *journal.Recorder
	mu     sync.Mutex
	snaps  []*snapshot.Snapshot
	closed bool
}

func (l *liveTee) Observed(o collectors.Observation) collectors.Observation {
	return l.rec.Observed(o)
}
func (l *liveTee) Refreshed(d time.Duration) { l.rec.Refreshed(d) }
func (l *liveTee) Published(s *snapshot.Snapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.rec.Published(s)
	l.snaps = append(l.snaps, s)
}

// stop ends the recording (the pool goes on) and returns what it kept.
func (l *liveTee) stop(t *testing.T) []*snapshot.Snapshot {
	t.Helper()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	if err := l.rec.Close(); err != nil {
		t.Fatal(err)
	}
	return l.snaps
}

func indented(t testing.TB, s *snapshot.Snapshot) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeSnapshot(&b, s, "json"); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestRecordedTourReplaysToTheSameSnapshots: the demo's whole tour (hot
// prefix, event loss and replay, router and worker restarts, history
// lost, slow scrapes, truncated streams) on a real sim and the real
// collectors, recorded into rotating segments, replays to every snapshot
// the live pool published, each identical in its JSON; and kvtop snapshot
// --journal --at prints the one of that moment.
func TestRecordedTourReplaysToTheSameSnapshots(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the whole tour: three simulated minutes")
	}
	path := filepath.Join(t.TempDir(), "tour.jnl")
	began := time.Now()
	var tee *liveTee
	// 50 recent decisions rather than 500 keep the snapshots small enough
	// to deep-compare all of them quickly under -race.
	fewer := func(c *config.Config) { c.Limits.RecentDecisions = 50 }
	r := startScenarioTap(t, sim.Options{Scenario: "tour"}, fewer, 0, func(c config.Config) pool.Tap {
		rec, err := startRecorder(io.Discard, path, c, recordFlags{maxSize: 512 << 10, keep: 1000})
		if err != nil {
			t.Fatal(err)
		}
		tee = &liveTee{rec: rec}
		return tee
	})
	r.run(10)
	for at := 30 * time.Second; at <= 180*time.Second; at += 30 * time.Second { // each wait bounded
		r.waitFor(fmt.Sprintf("the tour at %s", at), func(*snapshot.Snapshot) bool { return r.s.Now() >= at })
	}
	live := tee.stop(t)
	t.Logf("recorded %d snapshots in %s", len(live), time.Since(began))

	var lost, restarted, gaps bool
	for _, s := range live {
		for _, w := range s.Workers {
			for _, st := range w.Streams {
				lost = lost || st.State == snapshot.StreamHistoryLost
				gaps = gaps || st.Gaps > 0
			}
		}
		for _, rt := range s.Routers {
			restarted = restarted || rt.Restarts > 0
		}
	}
	if !lost || !restarted || !gaps {
		t.Fatalf("the tour did not play (history lost %v, router restart %v, gaps %v)", lost, restarted, gaps)
	}

	chain, err := journal.Chain(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) < 2 {
		t.Errorf("one segment of 512 KiB held the whole tour: rotation untested (%v)", chain)
	}
	p, err := journal.NewPlayer(chain...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Ticks() != len(live) {
		t.Fatalf("the journal holds %d snapshots, the live pool published %d", p.Ticks(), len(live))
	}
	replayed := time.Now()
	var inReplay time.Duration
	for i, want := range live {
		t0 := time.Now()
		got, err := p.Next()
		inReplay += time.Since(t0)
		if err != nil {
			t.Fatalf("snapshot %d: %v", i+1, err)
		}
		// Deep-equal, the strictest (and cheaper than JSON under -race).
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("replayed snapshot #%d differs from the live one:\n%s", want.Seq, lineDiff(indented(t, want), indented(t, got)))
		}
	}
	t.Logf("replayed in %s, compared in %s", inReplay, time.Since(replayed)-inReplay)
	if st := p.IndexStats(); st.Stop != "" || st.Lost > 0 || st.Unencoded > 0 || !st.Ended {
		t.Errorf("journal stats %+v", st)
	}
	t.Logf("%d snapshots in %d segments, all identical (%s)", len(live), len(chain), time.Since(began))

	// The command, at a moment in the middle: the live snapshot then.
	k := len(live) / 2
	out, _, err := simExec(context.Background(), "snapshot", "--journal", path, "--at", live[k].At.Format(time.RFC3339Nano), "--decisions", "-1")
	if err != nil {
		t.Fatal(err)
	}
	if want := indented(t, live[k]); out != want {
		t.Fatalf("snapshot --journal --at %s is not live snapshot #%d:\n%s", live[k].At.Format(time.RFC3339Nano), live[k].Seq, lineDiff(want, out))
	}
}

// lineDiff shows the first line where a and b differ.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n  live:   %s\n  replay: %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

// TestRecordCommand: kvtop record on a simulated pool says where it
// writes and, at the end, how much; the journal it wrote prints as a
// snapshot, at its start, an offset and its end; replay without a
// terminal says what to run instead.
func TestRecordCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 2, Listen: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sim.yaml")
	if err := config.Write(cfg, s.Config(), ""); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pool.jnl")
	_, stderr, err := simExec(ctx, "record", "-c", cfg, "--out", path, "--for", "5s")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	for _, want := range []string{"recording the pool to " + path, "recorded " + path + ": ", " snapshots and ", " observations"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	h, err := journal.ReadHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kvtop != version || len(h.Config) != 32 || h.Segment != 1 || len(h.Pool.Workers) != 2 {
		t.Errorf("header %+v", h)
	}

	var first, last snapshot.Snapshot
	for at, dst := range map[string]*snapshot.Snapshot{"start": &first, "end": &last} {
		out, stderr, err := simExec(ctx, "snapshot", "--journal", path, "--at", at)
		if err != nil {
			t.Fatalf("snapshot --journal --at %s: %v\n%s", at, err, stderr)
		}
		if !strings.Contains(stderr, "journal "+path+": pool ") {
			t.Errorf("snapshot --journal does not say what it read:\n%s", stderr)
		}
		if err := json.Unmarshal([]byte(out), dst); err != nil {
			t.Fatal(err)
		}
	}
	if first.Seq != 1 || last.Seq < 3 || len(last.Workers) != 2 || !last.At.After(first.At) {
		t.Errorf("start #%d at %s, end #%d at %s with %d workers", first.Seq, first.At, last.Seq, last.At, len(last.Workers))
	}
	out, _, err := simExec(ctx, "snapshot", "--journal", path, "--at", "+1s", "--format", "text")
	if err != nil || !strings.Contains(out, "w0") || !strings.Contains(out, "w1") {
		t.Errorf("snapshot --journal --at +1s --format text: %v\n%s", err, out)
	}
	_, _, err = simExec(ctx, "replay", path)
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != exitUsage || !strings.Contains(err.Error(), "snapshot --journal "+path) {
		t.Errorf("replay without a terminal: %v", err)
	}
}

// TestServeRecords: kvtop serve --record journals while it serves, and
// closes the journal when it stops.
func TestServeRecords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 2, Listen: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sim.yaml")
	if err := config.Write(cfg, s.Config(), ""); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "serve.jnl")
	sctx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	_, stderr, err := simExec(sctx, "serve", "-c", cfg, "--listen", "127.0.0.1:0", "--record", path)
	if err != nil {
		t.Fatalf("serve --record: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "serving http://127.0.0.1:") || !strings.Contains(stderr, "recorded "+path) {
		t.Errorf("stderr:\n%s", stderr)
	}
	p, err := journal.NewPlayer(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st := p.IndexStats(); !st.Ended || st.Stop != "" || p.Ticks() < 2 {
		t.Errorf("the served pool's journal: %d snapshots, stats %+v", p.Ticks(), st)
	}
}

// TestJournalUsageErrors: what cannot work is exit 2 before anything
// starts, with the reason.
func TestJournalUsageErrors(t *testing.T) {
	dir := t.TempDir()
	notJournal := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notJournal, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"record"}, "record needs --out FILE"},
		{[]string{"record", "--out", "x", "--max-size", "1k"}, "--max-size 1.0 KiB: want at least 64KiB"},
		{[]string{"record", "--out", "x", "--max-size", "lots"}, "want a size like 1GiB"},
		{[]string{"serve", "--record", "x", "--record-keep", "-1"}, "--record-max-age and --record-keep must not be negative"},
		{[]string{"snapshot", "--at", "+5s"}, "--at goes with --journal"},
		{[]string{"snapshot", "--journal", notJournal}, `does not start with "kvtopjnl"`},
		{[]string{"snapshot", "--journal", notJournal, "--for", "2s"}, "--for does not apply with --journal"},
		{[]string{"snapshot", "--journal", notJournal, "--fail-on", "down"}, "--fail-on does not apply with --journal"},
		{[]string{"replay", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"replay", notJournal, "--speed", "0"}, "--speed 0: want"},
	} {
		_, _, err := simExec(context.Background(), c.args...)
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want exit 2 with %q", c.args, err, c.want)
		}
	}
}

// TestReplayEndToEnd runs `kvtop replay` in a real terminal (tmux) on a
// journal kvtop record wrote: the header says REPLAY with the journal's
// date, space pauses, G goes to the end, g back to the start, q quits.
func TestReplayEndToEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	bin := buildKvtop(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 2, Listen: "127.0.0.1", Speed: 4})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sim.yaml")
	c := s.Config()
	c.Refresh = 250 * time.Millisecond
	if err := config.Write(cfg, c, ""); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pool.jnl")
	if _, stderr, code := runKvtop(t, nil, "record", "-c", cfg, "--out", path, "--for", "4s"); code != 0 {
		t.Fatalf("record: exit %d\n%s", code, stderr)
	}
	s.Close()
	p, err := journal.NewPlayer(path)
	if err != nil {
		t.Fatal(err)
	}
	day, end := p.Start().Format("2006-01-02"), p.End().Format("15:04:05")
	p.Close()

	tm := startTmux(t, 120, 44, []string{"NO_COLOR=1"}, bin+" replay "+path+" --speed 0.25")
	scr := tm.waitFor("replay console", 30*time.Second, "REPLAY ×¼ "+day, "w0", "w1", "replay pool.jnl")
	if strings.Contains(scr, "cannot hold") {
		t.Errorf("the journal lacks observations the pool applied (every type must be recorded):\n%s", scr)
	}
	tm.keys("Space")
	tm.waitFor("paused", 15*time.Second, "REPLAY paused", "space play")
	tm.keys("G")
	tm.waitFor("the end", 15*time.Second, "REPLAY end", end, "end of journal")
	tm.keys("g")
	tm.waitFor("the start", 15*time.Second, "REPLAY paused", "+0s of")
	tm.keys("?")
	tm.waitFor("help lists the replay keys", 15*time.Second, "KEYS", "REPLAY", "resume the replay", "back 10 s")
	tm.keys("q")
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && strings.Contains(tm.screen(), "REPLAY") {
		time.Sleep(200 * time.Millisecond)
	}
	if scr := tm.screen(); strings.Contains(scr, "REPLAY") {
		t.Errorf("q did not quit the replay:\n%s", scr)
	}
}

// TestRecordSaysItsCatchUp: a 15 s and a 30 s journal of a 4-worker sim
// that had run for minutes were both about 1.2 MiB. Not the decision log
// alone: most of it was the publishers' replay buffers, which kvtop reads
// when it joins a running publisher (to fill its index from seq 0), and
// the log's last MiB. That start is bounded by those buffers and that
// MiB; record says how much of the journal it is, exactly what the file
// holds of it, and the rest is what the minutes add.
func TestRecordSaysItsCatchUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const workers, ring = 2, 400
	s, err := sim.Start(ctx, sim.Options{Workers: workers, Listen: "127.0.0.1", ReplayBuffer: ring})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A pool that has been running: every replay buffer full.
	if err := s.Advance(3 * time.Minute); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < workers; w++ {
		if seq, _ := s.LastSeq(w, 0); seq < 2*ring {
			t.Fatalf("w%d published %d batches in 3 simulated minutes; the test wants its replay buffer of %d full", w, seq, ring)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sim.yaml")
	if err := config.Write(cfg, s.Config(), ""); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pool.jnl")
	_, stderr, err := simExec(ctx, "record", "-c", cfg, "--out", path, "--for", "3s")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}

	r, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var replayed, backfill, catchUp, last int64
	for {
		x, err := r.Next()
		if err == io.EOF {
			break
		}
		late := false
		switch o := x.Observation.(type) {
		case *collectors.EventBatch:
			if late = o.Replayed; late {
				replayed++
			}
		case *collectors.Decision:
			if late = o.Backfill; late {
				backfill++
			}
		case *collectors.Outcome:
			if late = o.Backfill; late {
				backfill++
			}
		}
		if late {
			catchUp += r.Stats().Bytes - last
		}
		last = r.Stats().Bytes
	}
	t.Logf("%s", stderr)
	// Bounded by the buffers: at most one ring a publisher.
	if replayed < ring || replayed > workers*ring {
		t.Errorf("%d batches replayed at start, want between one buffer (%d) and all of them (%d)", replayed, ring, workers*ring)
	}
	if backfill == 0 {
		t.Errorf("no decision-log backfill recorded; the log held 3 minutes")
	}
	want := fmt.Sprintf("(%s of it catch-up: %d event batches replayed from the publishers' buffers, %d records the decision logs held at start)",
		journal.Bytes(catchUp), replayed, backfill)
	if !strings.Contains(stderr, want) {
		t.Errorf("record's last line lacks %q:\n%s", want, stderr)
	}
}
