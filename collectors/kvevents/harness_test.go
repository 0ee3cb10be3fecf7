package kvevents

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// resets counts the StreamResets sent for worker.
func (h *harness) resets(worker string) int {
	n := 0
	for _, o := range h.all() {
		if r, ok := o.(*collectors.StreamReset); ok && r.Worker == worker {
			n++
		}
	}
	return n
}

// harness runs a real Collector and records every observation it sends.
type harness struct {
	t   *testing.T
	mu  sync.Mutex
	obs []collectors.Observation
	// While holding, received batches are not applied (as a pool that
	// is behind): their bytes stay pending until release.
	holding bool
	held    []*collectors.EventBatch
}

// hold makes the harness a pool that stops applying batches.
func (h *harness) hold() {
	h.mu.Lock()
	h.holding = true
	h.mu.Unlock()
}

// release applies what was held and goes back to applying at once.
func (h *harness) release() {
	h.mu.Lock()
	held := h.held
	h.holding, h.held = false, nil
	h.mu.Unlock()
	for _, b := range held {
		b.Applied()
	}
}

// heldBatches is how many batches and bytes the harness holds.
func (h *harness) heldBatches() (n int, bytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.held {
		bytes += b.Cost()
	}
	return len(h.held), bytes
}

func runCollector(t *testing.T, o Options) *harness {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan collectors.Observation, 64)
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(ctx, out) }()
	go func() {
		for {
			select {
			case o := <-out:
				h.mu.Lock()
				if b, ok := o.(*collectors.EventBatch); ok && h.holding {
					h.held = append(h.held, b)
				} else {
					taken(o)
				}
				h.obs = append(h.obs, o)
				h.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-runDone:
			if err != nil {
				t.Errorf("Run returned %v on cancellation", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancellation")
		}
	})
	return h
}

func (h *harness) all() []collectors.Observation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]collectors.Observation(nil), h.obs...)
}

// waitFor polls cond for up to 10s (generous: the machine is shared).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s\n%s", what, h.dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) status(worker string, rank int) *collectors.StreamStatus {
	var last *collectors.StreamStatus
	for _, o := range h.all() {
		if s, ok := o.(*collectors.StreamStatus); ok && s.Worker == worker && s.Rank == rank {
			last = s
		}
	}
	return last
}

// waitStatus waits until the latest status of (worker, rank) satisfies cond.
func (h *harness) waitStatus(worker string, rank int, what string, cond func(*collectors.StreamStatus) bool) *collectors.StreamStatus {
	h.t.Helper()
	var st *collectors.StreamStatus
	h.waitFor(fmt.Sprintf("%s rank %d: %s", worker, rank, what), func() bool {
		st = h.status(worker, rank)
		return st != nil && cond(st)
	})
	return st
}

func (h *harness) waitState(worker string, rank int, state snapshot.StreamState) *collectors.StreamStatus {
	h.t.Helper()
	return h.waitStatus(worker, rank, "state "+string(state), func(s *collectors.StreamStatus) bool { return s.State == state })
}

// states lists the distinct consecutive states reported for (worker, rank).
func (h *harness) states(worker string, rank int) []snapshot.StreamState {
	var out []snapshot.StreamState
	for _, o := range h.all() {
		if s, ok := o.(*collectors.StreamStatus); ok && s.Worker == worker && s.Rank == rank {
			if len(out) == 0 || out[len(out)-1] != s.State {
				out = append(out, s.State)
			}
		}
	}
	return out
}

func (h *harness) batches(worker string, rank int) []*collectors.EventBatch {
	var out []*collectors.EventBatch
	for _, o := range h.all() {
		if b, ok := o.(*collectors.EventBatch); ok && b.Worker == worker && b.Rank == rank {
			out = append(out, b)
		}
	}
	return out
}

func seqsOf(bs []*collectors.EventBatch) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b.Seq
	}
	return out
}

func replayedOf(bs []*collectors.EventBatch) []uint64 {
	var out []uint64
	for _, b := range bs {
		if b.Replayed {
			out = append(out, b.Seq)
		}
	}
	return out
}

func (h *harness) sourceErrors(kind string) []*collectors.SourceError {
	var out []*collectors.SourceError
	for _, o := range h.all() {
		if e, ok := o.(*collectors.SourceError); ok && (kind == "" || e.Kind == kind) {
			out = append(out, e)
		}
	}
	return out
}

func (h *harness) incidents(worker string, rank int, kind string) []collectors.StreamIncident {
	var out []collectors.StreamIncident
	if st := h.status(worker, rank); st != nil {
		for _, inc := range st.History {
			if inc.Kind == kind {
				out = append(out, inc)
			}
		}
	}
	return out
}

// dump describes what was observed, for failure messages.
func (h *harness) dump() string {
	var b strings.Builder
	all := h.all()
	if len(all) > 300 { // keep failure output readable
		fmt.Fprintf(&b, "  … %d earlier observations …\n", len(all)-300)
		all = all[len(all)-300:]
	}
	for _, o := range all {
		switch o := o.(type) {
		case *collectors.EventBatch:
			fmt.Fprintf(&b, "  batch %s/%d seq %d replayed=%v events=%d\n", o.Worker, o.Rank, o.Seq, o.Replayed, len(o.Events))
		case *collectors.StreamStatus:
			fmt.Fprintf(&b, "  status %s/%d %s last=%d gaps=%d missing=%d replayed=%d lost=%d restarts=%d dups=%d unknown=%d/%d malformed=%d\n",
				o.Worker, o.Rank, o.State, o.LastSeq, o.Gaps, o.Missing, o.Replayed, o.Lost, o.Restarts, o.Duplicates, o.UnknownEvents, o.UnknownFields, o.Malformed)
		case *collectors.StreamReset:
			fmt.Fprintf(&b, "  reset %s/%d %s\n", o.Worker, o.Rank, o.Reason)
		case *collectors.SourceError:
			fmt.Fprintf(&b, "  error %s\n", o.Error())
		}
	}
	return b.String()
}

// freeTCP returns a loopback endpoint nobody listens on right now.
func freeTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// batchSeq builds a distinct payload per (run, seq): the ts differs, as a
// real publisher's wall clock would.
func batchSeq(run, seq int, events ...any) []byte {
	if len(events) == 0 {
		events = []any{storedMap(nil, uint64(run)<<40|uint64(seq)|1<<63)}
	}
	return batchOf(1.8e9+float64(run)*1000+float64(seq)*0.001, events...)
}

// taken is what the pool does once it applied a batch: its bytes are no
// longer pending (collectors.Pending), so the collector may send more.
func taken(o collectors.Observation) {
	if b, ok := o.(*collectors.EventBatch); ok {
		b.Applied()
	}
}
