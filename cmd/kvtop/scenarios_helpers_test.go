package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// scnRun is one scenario end to end: a real sim on 127.0.0.1 and the real
// collectors and pool started on s.Config(), as `kvtop demo` runs them.
// The sim's clock is manual and moved by the test, so what the pool does
// is a function of the seed alone; only kvtop's sampling of it follows the
// wall clock.
type scnRun struct {
	t   *testing.T
	s   *sim.Sim
	e   *engine
	c   config.Config
	ctx context.Context

	mu      sync.Mutex
	speed   float64 // simulated seconds per wall second; 0 = clock stopped
	stopped chan struct{}
}

// scnDeadline bounds every wait: generous, for a loaded 2-core machine
// running the race detector.
const scnDeadline = 30 * time.Second

// startScenario starts a sim (4 workers unless o says otherwise) and the
// engine on its config, and waits until every event stream is connected.
// The clock stands still until run or jumpTo moves it. tweak may change
// the config before the engine starts.
func startScenario(t *testing.T, o sim.Options, tweak func(*config.Config)) *scnRun {
	t.Helper()
	return startScenarioLate(t, o, tweak, 0)
}

// startScenarioLate runs the sim for prerun of simulated time before kvtop
// starts: kvtop joins a pool that has been publishing for a while.
func startScenarioLate(t *testing.T, o sim.Options, tweak func(*config.Config), prerun time.Duration) *scnRun {
	t.Helper()
	return startScenarioTap(t, o, tweak, prerun, nil)
}

// startScenarioTap is startScenarioLate with a tap on the pool (nil for
// none), installed before the pool's first snapshot.
func startScenarioTap(t *testing.T, o sim.Options, tweak func(*config.Config), prerun time.Duration, tap func(config.Config) pool.Tap) *scnRun {
	t.Helper()
	return startScenarioPool(t, o, tweak, prerun, tap, nil)
}

// startScenarioPool is startScenarioTap with pool options no config sets
// (po, nil for none), applied after the config's.
func startScenarioPool(t *testing.T, o sim.Options, tweak func(*config.Config), prerun time.Duration, tap func(config.Config) pool.Tap,
	po func(*pool.Options)) *scnRun {
	t.Helper()
	o.Manual = true
	o.Listen = "127.0.0.1"
	if o.Workers == 0 && o.PD == "" {
		o.Workers = 4
	}
	o.Logf = func(f string, a ...any) { t.Logf("sim: "+f, a...) }
	s, err := sim.Start(nil, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &scnRun{t: t, s: s, ctx: ctx, stopped: make(chan struct{})}
	if prerun > 0 {
		r.jumpTo(prerun)
	}
	t.Cleanup(func() {
		cancel()
		<-r.stopped
		if err := s.Close(); err != nil {
			t.Errorf("sim close: %v", err)
		}
	})
	// Faster than the defaults so each scenario takes seconds: four
	// snapshots and scrapes a second, and a window short enough that what
	// happened before a fault leaves it while the test watches.
	// RecoveryHoldS and LeaveAfterS (how long a verdict outlives its
	// figure) are shortened for the same reason (the rules are the same).
	r.c = s.Config()
	r.c.Refresh = 250 * time.Millisecond
	r.c.ScrapeInterval = 250 * time.Millisecond
	r.c.Window = 15 * time.Second
	r.c.Thresholds.RecoveryHoldS = 2
	r.c.Thresholds.LeaveAfterS = 2
	if tweak != nil {
		tweak(&r.c)
	}
	if errs := r.c.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	var taps []pool.Tap
	if tap != nil {
		taps = append(taps, tap(r.c))
	}
	cs, err := buildCollectors(r.c)
	if err != nil {
		t.Fatal(err)
	}
	opts := r.c.PoolOptions()
	if po != nil {
		po(&opts)
	}
	r.e = runPool(ctx, opts, cs, taps...)
	go r.pump()
	r.waitFor("every stream connected", func(s *snapshot.Snapshot) bool {
		for _, w := range s.Workers {
			if len(w.Streams) != max(1, o.DPRanks) {
				return false
			}
			for _, st := range w.Streams {
				if st.State != "live" {
					return false
				}
			}
		}
		return len(s.Workers) == len(r.c.Workers)
	})
	return r
}

// pump moves the manual clock at the current speed: each step advances
// the simulated time the wall clock moved since the last one (times the
// speed), at most maxStep, so a loaded machine slows the simulation down
// instead of making it jump.
func (r *scnRun) pump() {
	defer close(r.stopped)
	const tick, maxStep = 20 * time.Millisecond, 250 * time.Millisecond
	last := time.Now()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(tick):
		}
		now := time.Now()
		r.mu.Lock()
		sp := r.speed
		r.mu.Unlock()
		step := min(time.Duration(float64(now.Sub(last))*sp), maxStep).Round(sim.Quantum)
		last = now
		if step > 0 {
			_ = r.s.Advance(step)
		}
	}
}

// run lets the clock go at speed simulated seconds per wall second (0
// stops it).
func (r *scnRun) run(speed float64) {
	r.mu.Lock()
	r.speed = speed
	r.mu.Unlock()
}

// jumpTo stops the clock and moves it to simulated time at (no later than
// a quantum past it) as fast as the sim can go. A step of a simulated second
// is about a hundred batches per publisher: far below what the subscribers
// queue, so nothing is dropped on the way.
func (r *scnRun) jumpTo(at time.Duration) {
	r.t.Helper()
	r.run(0)
	for now := r.s.Now(); now < at; {
		step := min(at-now, time.Second)
		if err := r.s.Advance(step); err != nil {
			r.t.Fatal(err)
		}
		now += step
	}
}

func (r *scnRun) inject(a sim.Action) {
	r.t.Helper()
	if err := r.s.Inject(a); err != nil {
		r.t.Fatal(err)
	}
}

// quiesce stops new requests, lets every engine finish what it holds (no
// more KV events after that), and waits until kvtop has applied the last
// batch of every publisher. It returns that snapshot: from then on kvtop's
// index and the engines' caches must agree.
func (r *scnRun) quiesce() *snapshot.Snapshot {
	r.t.Helper()
	r.run(0)
	r.inject(sim.SetRate{Factor: 0})
	r.jumpTo(r.s.Now() + 20*time.Second)
	seqs := r.lastSeqs()
	return r.waitFor("kvtop caught up with every publisher's last batch", func(s *snapshot.Snapshot) bool {
		return r.reached(s, seqs, func(st *snapshot.Stream) bool { return st.State == "live" || st.State == "history_lost" })
	})
}

// pubSeq is a publisher's last published seq.
type pubSeq struct {
	w, rank int
	seq     uint64
}

// lastSeqs is every publisher's last published seq, now.
func (r *scnRun) lastSeqs() []pubSeq {
	var out []pubSeq
	for w := range r.c.Workers {
		for rank := 0; rank < max(1, r.c.Workers[w].DPRanks); rank++ {
			if seq, ok := r.s.LastSeq(w, rank); ok {
				out = append(out, pubSeq{w, rank, seq})
			}
		}
	}
	return out
}

// reached: in s, every publisher's stream has applied its seq of seqs
// and, when ok is given, is as ok wants it.
func (r *scnRun) reached(s *snapshot.Snapshot, seqs []pubSeq, ok func(*snapshot.Stream) bool) bool {
	for _, x := range seqs {
		st := streamOf(s, r.c.Workers[x.w].Name, x.rank)
		if st == nil || st.LastSeq == nil || *st.LastSeq != x.seq || ok != nil && !ok(st) {
			return false
		}
	}
	return true
}

// waitFor polls the latest snapshot until cond holds, or fails with the
// parts of the last one an operator would look at.
func (r *scnRun) waitFor(what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	r.t.Helper()
	end := time.Now().Add(scnDeadline)
	var s *snapshot.Snapshot
	for time.Now().Before(end) {
		if s = r.e.Pool.Latest(); s != nil && cond(s) {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("%s: not seen within %s (sim time %s, phase %q)\n%s", what, scnDeadline, r.s.Now(), r.s.Phase(), dump(s))
	return nil
}

// watch collects every snapshot published during d of wall time.
func (r *scnRun) watch(d time.Duration) []*snapshot.Snapshot {
	var out []*snapshot.Snapshot
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if s := r.e.Pool.Latest(); s != nil && (len(out) == 0 || s.Seq != out[len(out)-1].Seq) {
			out = append(out, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out
}

func workerOf(s *snapshot.Snapshot, name string) *snapshot.Worker {
	for i := range s.Workers {
		if s.Workers[i].Name == name {
			return &s.Workers[i]
		}
	}
	return nil
}

func streamOf(s *snapshot.Snapshot, worker string, rank int) *snapshot.Stream {
	w := workerOf(s, worker)
	if w == nil {
		return nil
	}
	for i := range w.Streams {
		if w.Streams[i].Rank == rank {
			return &w.Streams[i]
		}
	}
	return nil
}

func alertOf(s *snapshot.Snapshot, kind snapshot.AlertKind, subject string) *snapshot.Alert {
	for i := range s.Alerts {
		if s.Alerts[i].Kind == kind && s.Alerts[i].Subject == subject {
			return &s.Alerts[i]
		}
	}
	return nil
}

func errorOf(s *snapshot.Snapshot, source, kind string) *snapshot.ErrorCount {
	for i := range s.Errors {
		if s.Errors[i].Source == source && s.Errors[i].Kind == kind {
			return &s.Errors[i]
		}
	}
	return nil
}

// upQueueMedian is the median queue of the up workers that report one.
func upQueueMedian(s *snapshot.Snapshot) float64 {
	var q []float64
	for _, w := range s.Workers {
		if w.Up && w.Queue != nil {
			q = append(q, *w.Queue)
		}
	}
	if len(q) == 0 {
		return 0
	}
	sort.Float64s(q)
	if len(q)%2 == 1 {
		return q[len(q)/2]
	}
	return (q[len(q)/2-1] + q[len(q)/2]) / 2
}

// healthy says what keeps a worker from looking healthy ("" if nothing):
// up, hit rates known, blocks indexed, every stream live without gaps.
func healthy(w *snapshot.Worker, ranks int) string {
	switch {
	case !w.Up:
		return "down"
	case w.State != "ok":
		return "state " + string(w.State)
	case w.PrefixHitRate.Tokens == nil || *w.PrefixHitRate.Tokens <= 0:
		return "no token hit rate"
	case w.PrefixHitRate.Requests == nil:
		return "no request hit rate"
	case blocksOf(w) <= 0:
		return "no blocks"
	case len(w.Streams) != ranks:
		return fmt.Sprintf("%d streams", len(w.Streams))
	}
	for _, st := range w.Streams {
		if st.State != "live" || st.Gaps != 0 || st.Blocks == 0 {
			return fmt.Sprintf("stream rank %d %s, %d gaps, %d blocks", st.Rank, st.State, st.Gaps, st.Blocks)
		}
	}
	return ""
}

// blocksOf is a worker's BLOCKS figure as scripts read it from the
// snapshot JSON (-1 when null: unknown). Going through the JSON contract
// also keeps these tests independent of the Go field's type.
func blocksOf(w *snapshot.Worker) int { return jsonInt(w, "blocks") }

// jsonInt reads an integer field of v's JSON form; -1 when null or absent.
func jsonInt(v any, key string) int {
	b, err := json.Marshal(v)
	if err != nil {
		return -1
	}
	var fields map[string]json.RawMessage
	var n *int
	if json.Unmarshal(b, &fields) != nil || json.Unmarshal(fields[key], &n) != nil || n == nil {
		return -1
	}
	return *n
}

func fv(p *float64) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprintf("%.3g", *p)
}

// dump is the part of a snapshot an operator would look at, as text.
func dump(s *snapshot.Snapshot) string {
	if s == nil {
		return "(no snapshot)"
	}
	var b strings.Builder
	p := s.Pool
	fmt.Fprintf(&b, "snapshot #%d: %d/%d up, hit tok %s req %s (covered %.1fs), queue %s, blocks %d, index complete %v\n",
		s.Seq, p.Up, p.Workers, fv(p.PrefixHitRate.Tokens), fv(p.PrefixHitRate.Requests), p.PrefixHitRate.CoveredS, fv(p.Queue), jsonInt(p, "blocks"), p.IndexComplete)
	for _, w := range s.Workers {
		err := ""
		if w.Error != nil {
			err = " error=" + *w.Error
		}
		fmt.Fprintf(&b, "  %s %-11s %s up=%v q=%s run=%s kv=%s hit=%s/%s blocks=%d restarts=%d engines=%d hot=%s%s reason=%q\n",
			w.Name, w.State, w.Engine, w.Up, fv(w.Queue), fv(w.Running), fv(w.KVUsage), fv(w.PrefixHitRate.Tokens), fv(w.PrefixHitRate.Requests),
			blocksOf(&w), w.Restarts, len(w.Engines), fv(w.HotShare), err, w.Reason)
		for _, st := range w.Streams {
			seq := "–"
			if st.LastSeq != nil {
				seq = fmt.Sprint(*st.LastSeq)
			}
			fmt.Fprintf(&b, "    rank %d %-12s seq=%s batches=%d gaps=%d missing=%d replayed=%d lost=%d restarts=%d dup=%d unknown=%d blocks=%d\n",
				st.Rank, st.State, seq, st.Batches, st.Gaps, st.Missing, st.Replayed, st.Lost, st.Restarts, st.Duplicates, st.UnknownEvents, st.Blocks)
			for _, in := range st.History {
				fmt.Fprintf(&b, "      %s %d-%d missing=%d replayed=%d lost=%d open=%v %s\n",
					in.Kind, in.FromSeq, in.ToSeq, in.Missing, in.Replayed, in.Lost, in.End == nil, in.Note)
			}
		}
	}
	for i, pf := range s.Prefixes {
		if i == 4 {
			break
		}
		oh := "–"
		if pf.Overheating != nil {
			oh = *pf.Overheating
		}
		fmt.Fprintf(&b, "  prefix %s share=%.2f replicas=%d tokens=%d src=%s overheating=%s workers=%v\n",
			pf.ID, pf.Share, pf.Replicas, jsonInt(pf, "tokens"), pf.Source, oh, pf.Workers)
	}
	for _, rt := range s.Routers {
		fmt.Fprintf(&b, "  router %s up=%v restarts=%d recovery=%s secs=%s baseline=%s current=%s\n", rt.Name, rt.Up, rt.Restarts,
			rt.Recovery.State, fv(rt.Recovery.Seconds), fv(rt.Recovery.Baseline), fv(rt.Recovery.Current))
	}
	d := s.Decisions
	fmt.Fprintf(&b, "  decisions records=%d with_outcome=%d orphans=%d owner_mismatch=%d prediction_errors=%d truncated=%d bad=%d\n",
		d.Records, d.WithOutcome, d.OrphanOutcomes, d.OwnerMismatch, d.PredictionErrors, d.Truncated, d.BadLines)
	for _, e := range s.Errors {
		fmt.Fprintf(&b, "  error %s/%s x%d: %s\n", e.Source, e.Kind, e.Count, e.Last)
	}
	for _, a := range s.Alerts {
		fmt.Fprintf(&b, "  alert %s %s %s: %s\n", a.Severity, a.Kind, a.Subject, a.Text)
	}
	return b.String()
}
