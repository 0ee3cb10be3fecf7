package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
)

// tee is a tap that records and keeps every snapshot the live pool
// published, so a test can compare all of them with the replay's.
type tee struct {
	rec   *Recorder
	mu    sync.Mutex
	snaps []*snapshot.Snapshot
}

func (t *tee) Observed(o collectors.Observation) collectors.Observation {
	return t.rec.Observed(o)
}
func (t *tee) Refreshed(d time.Duration) { t.rec.Refreshed(d) }
func (t *tee) Published(s *snapshot.Snapshot) {
	t.rec.Published(s)
	t.mu.Lock()
	t.snaps = append(t.snaps, s)
	t.mu.Unlock()
}

// traffic is a small pool's observations, as the collectors send them:
// scrapes with growing counters, event batches storing and evicting
// blocks, stream statuses, decisions and their outcomes.
type traffic struct {
	now     func() time.Time
	r       *rand.Rand
	n       int
	seq     []uint64
	blocks  [][]uint64
	queries []float64
}

func newTraffic(workers int) *traffic {
	return &traffic{now: time.Now, r: rand.New(rand.NewPCG(5, 6)), seq: make([]uint64, workers), blocks: make([][]uint64, workers), queries: make([]float64, workers)}
}

func (g *traffic) next() collectors.Observation {
	g.n++
	w := g.r.IntN(len(g.seq))
	name := fmt.Sprintf("w%d", w)
	now := g.now()
	switch g.n % 7 {
	case 0:
		g.queries[w] += float64(100 + g.r.IntN(900))
		queries, hits := g.queries[w], g.queries[w]*0.6
		q, run, kv, blocks := float64(g.r.IntN(8)), float64(g.r.IntN(4)), g.r.Float64(), 4096.0
		return &collectors.MetricsScrape{Target: name, URL: "http://127.0.0.1:800" + fmt.Sprint(w) + "/metrics", At: now,
			Duration: 3 * time.Millisecond, Profile: "vllm", Engines: []collectors.EngineMetrics{{
				Engine: "0", Model: "m", Waiting: &q, Running: &run, KVUsage: &kv, PrefixQueries: &queries,
				PrefixHits: &hits, NumGPUBlocks: &blocks,
				TTFT: &collectors.Histogram{Count: 10, Sum: 1.5, Buckets: []collectors.Bucket{{UpperBound: 0.1, Count: 4}, {UpperBound: 1, Count: 9}, {UpperBound: 1e308, Count: 10}}},
			}}}
	case 1:
		return &collectors.StreamStatus{Worker: name, Endpoint: "tcp://127.0.0.1:5557", State: snapshot.StreamLive, HasSeq: true,
			LastSeq: g.seq[w], Batches: g.seq[w], At: now}
	case 2:
		id := fmt.Sprintf("req-%d", g.n)
		return &collectors.Decision{TS: now.UTC(), RequestID: id, AttemptID: "1", Router: "r0", Chosen: name, Reason: "best-match",
			Prefix: fmt.Sprintf("%016x", g.r.Uint64()%5), Format: "kvtop", Source: "/tmp/d.jsonl", At: now}
	case 3:
		pt, ct := 512, g.r.IntN(512)
		done := true
		return &collectors.Outcome{TS: now.UTC(), RequestID: fmt.Sprintf("req-%d", g.n-1), AttemptID: "1", Worker: name, HTTPStatus: 200,
			PromptTokens: &pt, CachedTokens: &ct, Done: &done, Format: "kvtop", Source: "/tmp/d.jsonl", At: now}
	}
	b := &collectors.EventBatch{Worker: name, Endpoint: "tcp://127.0.0.1:5557", Seq: g.seq[w], TS: float64(now.UnixNano()) / 1e9, At: now}
	g.seq[w]++
	parent := uint64(0)
	var hs []uint64
	for i := 0; i < 1+g.r.IntN(8); i++ {
		hs = append(hs, g.r.Uint64())
	}
	if len(g.blocks[w]) > 0 {
		parent = g.blocks[w][g.r.IntN(len(g.blocks[w]))]
	}
	b.Events = append(b.Events, collectors.KVEvent{Kind: collectors.BlockStored, Hashes: hs, Parent: parent, HasParent: parent != 0,
		NumTokens: 16 * len(hs), BlockSize: 16, Medium: "GPU"})
	g.blocks[w] = append(g.blocks[w], hs...)
	if len(g.blocks[w]) > 64 {
		b.Events = append(b.Events, collectors.KVEvent{Kind: collectors.BlockRemoved, Hashes: g.blocks[w][:8], Medium: "GPU"})
		g.blocks[w] = g.blocks[w][8:]
	}
	return b
}

// recordLive runs a real pool for about d, fed traffic, recording to
// path, and returns every snapshot it published.
func recordLive(t *testing.T, o Options, d time.Duration) []*snapshot.Snapshot {
	t.Helper()
	po := pool.Options{Name: "test", Refresh: pool.MinRefresh, Window: 2 * time.Second,
		Workers: []pool.WorkerSpec{{Name: "w0"}, {Name: "w1"}, {Name: "w2"}, {Name: "w3"}}}
	o.Pool, o.Kvtop = po, "test"
	rec, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	p := pool.New(po)
	tp := &tee{rec: rec}
	p.SetTap(tp)
	in := make(chan collectors.Observation, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, in); close(done) }()
	g := newTraffic(4)
	end := time.After(d)
	refreshed := false
feed:
	for i := 0; ; i++ {
		select {
		case <-end:
			break feed
		case in <- g.next():
		}
		if i%20 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		if !refreshed && i > 200 {
			p.SetRefresh(300 * time.Millisecond) // the console's +/-: recorded too
			refreshed = true
		}
	}
	cancel()
	<-done
	for range p.Snapshots() {
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return tp.snaps
}

func snapJSON(t testing.TB, s *snapshot.Snapshot) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replayAll rebuilds every snapshot of the journal.
func replayAll(t *testing.T, paths ...string) (*Player, []*snapshot.Snapshot) {
	t.Helper()
	p, err := NewPlayer(paths...)
	if err != nil {
		t.Fatal(err)
	}
	var out []*snapshot.Snapshot
	for {
		s, err := p.Next()
		if err == io.EOF {
			return p, out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
}

// compareAll checks that the replay rebuilt every live snapshot, in
// order, identical in its JSON (the snapshot contract).
func compareAll(t *testing.T, live, replayed []*snapshot.Snapshot) {
	t.Helper()
	if len(replayed) != len(live) {
		t.Fatalf("replay rebuilt %d snapshots, the live pool published %d", len(replayed), len(live))
	}
	for i := range live {
		if a, b := snapJSON(t, live[i]), snapJSON(t, replayed[i]); a != b {
			t.Fatalf("snapshot #%d differs:\n%s", live[i].Seq, firstDiff(a, b))
		}
	}
}

func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-120)
	return fmt.Sprintf("live   …%s\nreplay …%s", a[from:min(len(a), i+120)], b[from:min(len(b), i+120)])
}

// TestReplayRebuildsEverySnapshot: a real pool, fed for a few seconds and
// recorded, replays to the same snapshots, every one of them, refresh
// change included.
func TestReplayRebuildsEverySnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	live := recordLive(t, Options{Path: path}, 2*time.Second)
	if len(live) < 5 {
		t.Fatalf("only %d snapshots published", len(live))
	}
	p, replayed := replayAll(t, path)
	compareAll(t, live, replayed)
	st := p.IndexStats()
	if !st.Ended || st.Stop != "" || st.Lost != 0 {
		t.Errorf("replay stats %+v", st)
	}
	if h := p.Header(); h.Kvtop != "test" || h.Segment != 1 || h.Pool.Name != "test" || h.Continues() {
		t.Errorf("header %+v", h)
	}
	if last := replayed[len(replayed)-1]; last.RefreshS != 0.3 {
		t.Errorf("the refresh change was not replayed: refresh_s %v", last.RefreshS)
	}
}

// TestRotationKeepsARecordingWhole: a journal rotated into segments
// replays, all segments chained, to every snapshot of the live run; the
// newest segment alone replays too, from an empty pool, and says so;
// only Keep rotated segments stay on disk.
func TestRotationKeepsARecordingWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j")
	var logs []string
	var mu sync.Mutex
	live := recordLive(t, Options{Path: path, MaxSize: 24 << 10, Keep: 50, Logf: func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(f, a...))
		mu.Unlock()
	}}, 2*time.Second)
	chain, err := Chain(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) < 3 {
		t.Fatalf("chain %v: want several segments of 24 KiB", chain)
	}
	if chain[len(chain)-1] != path || chain[0] != fmt.Sprintf("%s.%d", path, len(chain)-1) {
		t.Fatalf("chain %v: want oldest (highest number) first, the live file last", chain)
	}
	p, replayed := replayAll(t, chain...)
	compareAll(t, live, replayed)
	if !strings.Contains(strings.Join(logs, "\n"), "rotated "+path+" to "+path+".1") {
		t.Errorf("rotations not reported: %q", logs)
	}
	hs := p.Headers()
	for i, h := range hs {
		if h.Segment != i+1 || h.Run != hs[0].Run {
			t.Errorf("segment %d header %+v", i, h)
		}
		if i > 0 && h.Seq == 0 {
			t.Errorf("segment %d does not say how many snapshots came before it", h.Segment)
		}
	}

	// A later segment alone: a pool from its start, numbered as live.
	seg := chain[len(chain)-2] // the live file may hold no snapshot yet
	alone, snaps := replayAll(t, seg)
	if !alone.Header().Continues() || len(snaps) == 0 {
		t.Fatalf("%s alone: continues %v, %d snapshots", seg, alone.Header().Continues(), len(snaps))
	}
	if got, want := alone.RecordedSeq(), alone.Header().Seq+uint64(len(snaps)); got != want {
		t.Errorf("%s's last tick is live snapshot #%d, want #%d", seg, got, want)
	}
	if got := snaps[len(snaps)-1].Seq; got != alone.RecordedSeq() {
		t.Errorf("%s alone numbers its last snapshot #%d, the live one was #%d", seg, got, alone.RecordedSeq())
	}

	// A chain that skips a segment is refused.
	if _, err := Open(chain[0], chain[2]); err == nil || !strings.Contains(err.Error(), "does not follow") {
		t.Errorf("a chain with a hole: %v", err)
	}
}

// TestKeepBoundsTheDisk: rotation keeps at most Keep old segments, and a
// recorder started on an existing journal rotates it out of the way.
func TestKeepBoundsTheDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j")
	if err := os.WriteFile(path, []byte("an older journal"), 0o644); err != nil {
		t.Fatal(err)
	}
	recordLive(t, Options{Path: path, MaxSize: 8 << 10, Keep: 2}, time.Second)
	names, _ := filepath.Glob(path + "*")
	if len(names) != 3 {
		t.Fatalf("files %v: want the live one and 2 rotated", names)
	}
	chain, err := Chain(path)
	if err != nil || len(chain) != 3 {
		t.Fatalf("chain %v %v", chain, err)
	}
	if _, err := Open(chain...); err != nil {
		t.Fatal(err)
	}
}

// TestSlowDiskDropsAndSays: past MaxPending bytes waiting for the disk,
// observations are dropped and counted, the journal says where, and the
// pool never waits.
func TestSlowDiskDropsAndSays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	rec, err := Create(Options{Path: path, MaxPending: 1, Pool: pool.Options{Name: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	// The header must be on disk first: a writer still in its Write
	// would take its bytes off pending after the Store below (seen on a
	// loaded machine: nothing dropped).
	for deadline := time.Now().Add(10 * time.Second); rec.pending.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the header was never written")
		}
	}
	// Hold the writer: it waits on the queue lock.
	rec.qmu.Lock()
	g := newTraffic(2)
	rec.pending.Store(2) // as if 2 bytes were waiting
	for i := 0; i < 100; i++ {
		rec.Observed(g.next())
	}
	rec.qmu.Unlock()
	rec.pending.Store(0)
	rec.Published(&snapshot.Snapshot{At: time.Now(), Seq: 1})
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Lost != 100 || !strings.Contains(st.String(), "100 observations lost (the disk fell behind)") {
		t.Fatalf("stats %+v", st)
	}
	recs, st := readAll(t, path)
	if st.Lost != 100 || len(recs) != 2 || recs[0].Kind != KindLost || recs[1].Kind != KindTick {
		t.Fatalf("records %+v, stats %+v", recs, st)
	}
}

// synthJournal writes a journal of n snapshots a second apart (journal
// time, from t0), with a few observations before each, built on a State
// the way the live pool builds them; it returns the snapshots.
func synthJournal(t testing.TB, path string, n int, t0 time.Time) []*snapshot.Snapshot {
	t.Helper()
	po := pool.Options{Name: "synth", Refresh: time.Second, Window: 10 * time.Second,
		Workers: []pool.WorkerSpec{{Name: "w0"}, {Name: "w1"}}}
	rec, err := Create(Options{Path: path, Pool: po, Kvtop: "test", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	st := pool.NewState(po)
	clock := t0
	g := newTraffic(2)
	g.now = func() time.Time { return clock }
	var out []*snapshot.Snapshot
	for i := 0; i < n; i++ {
		for k := 0; k < 20; k++ {
			clock = t0.Add(time.Duration(i)*time.Second + time.Duration(k)*10*time.Millisecond)
			st.Apply(rec.Observed(g.next()))
		}
		s := st.Snapshot(t0.Add(time.Duration(i+1) * time.Second))
		rec.Published(s)
		out = append(out, s)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStatsSayTheCatchUp: most of a short journal of a pool that had been
// running is what kvtop read of the past at start — each publisher's
// replay buffer and what the decision logs held — not what the minutes
// added. The recorder says how much, exactly what the file holds of it.
func TestStatsSayTheCatchUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	rec, err := Create(Options{Path: path, Pool: pool.Options{Name: "x"}, Kvtop: "test"})
	if err != nil {
		t.Fatal(err)
	}
	g := newTraffic(4)
	var replayed, backfill int64
	for i := 0; i < 3000; i++ {
		o := g.next()
		if i < 2000 { // the start: history read late
			switch v := o.(type) {
			case *collectors.EventBatch:
				v.Replayed = true
				replayed++
			case *collectors.Decision:
				v.Backfill = true
				backfill++
			case *collectors.Outcome:
				v.Backfill = true
				backfill++
			}
		}
		rec.Observed(o)
		if i%100 == 99 {
			rec.Published(&snapshot.Snapshot{At: time.Now(), Seq: uint64(i / 100)})
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	st := rec.Stats()
	if st.CatchUpReplayed != replayed || st.CatchUpBackfill != backfill {
		t.Errorf("catch-up: %d replayed, %d backfill; want %d, %d", st.CatchUpReplayed, st.CatchUpBackfill, replayed, backfill)
	}

	// What the file holds: the bytes of each catch-up frame (with the
	// symbols defined just before it), as the reader counts them.
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var inFile, last int64
	for {
		x, err := r.Next()
		if err == io.EOF {
			break
		}
		if rp, bf := catchUp(x.Observation); x.Kind == KindObservation && (rp || bf) {
			inFile += r.Stats().Bytes - last
		}
		last = r.Stats().Bytes
	}
	if st.CatchUpBytes != inFile || inFile == 0 || inFile >= st.Bytes {
		t.Errorf("catch-up %d bytes, the file holds %d of them in %d", st.CatchUpBytes, inFile, st.Bytes)
	}
	want := fmt.Sprintf("(%s of it catch-up: %d event batches replayed from the publishers' buffers, %d records the decision logs held at start)",
		Bytes(inFile), replayed, backfill)
	if !strings.Contains(st.String(), want) {
		t.Errorf("stats %q lack %q", st.String(), want)
	}
}
