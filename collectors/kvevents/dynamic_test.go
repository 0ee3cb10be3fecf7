package kvevents

import (
	"context"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Dynamic mode, as the targets layer drives it while pods come and go:
// streams added to a running collector connect and deliver; a removed
// worker's streams say nothing more once Remove returns, whatever its
// publisher still sends; the same worker added again starts a new run
// of the seq machine; the others are not disturbed.
func TestDynamicAddAndRemove(t *testing.T) {
	c, err := New(Options{Dynamic: true})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan collectors.Observation, 64)
	gate := make(chan chan struct{}) // a marker through the same channel order
	go func() { _ = c.Run(ctx, out) }()
	go func() {
		for {
			select {
			case o := <-out:
				taken(o)
				h.mu.Lock()
				h.obs = append(h.obs, o)
				h.mu.Unlock()
			case g := <-gate:
				close(g)
			case <-ctx.Done():
				return
			}
		}
	}()
	a := newTestPub(t, pubOpts{})
	b := newTestPub(t, pubOpts{})
	if err := c.Add(Endpoint{Worker: "a", Events: a.Events}); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(Endpoint{Worker: "b", Events: b.Events}); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(Endpoint{Worker: "b", Events: b.Events}); err == nil {
		t.Error("a (worker, rank) streamed twice must be refused")
	}
	a.waitSubscribed()
	b.waitSubscribed()
	a.publish(batchSeq(1, 0))
	b.publish(batchSeq(1, 0))
	h.waitFor("both deliver", func() bool { return len(h.batches("a", 0)) == 1 && len(h.batches("b", 0)) == 1 })

	c.Remove("a")
	// Every observation sent before Remove returned is in h once the
	// marker passes the same reader.
	g := make(chan struct{})
	gate <- g
	<-g
	n := len(h.all())
	for i := 1; i <= 5; i++ {
		a.publish(batchSeq(1, i))
	}
	b.publish(batchSeq(1, 1))
	h.waitFor("b still delivers", func() bool { return len(h.batches("b", 0)) == 2 })
	time.Sleep(300 * time.Millisecond) // a status tick or two
	for _, o := range h.all()[n:] {
		switch v := o.(type) {
		case *collectors.EventBatch:
			if v.Worker == "a" {
				t.Fatalf("a batch of a removed worker: seq %d", v.Seq)
			}
		case *collectors.StreamStatus:
			if v.Worker == "a" {
				t.Fatalf("a status of a removed worker: %+v", v)
			}
		}
	}

	// Back under the same name (a pod replaced): a new run from its
	// first batch, no gap, no restart carried over.
	a2 := newTestPub(t, pubOpts{})
	if err := c.Add(Endpoint{Worker: "a", Events: a2.Events}); err != nil {
		t.Fatal(err)
	}
	a2.waitSubscribed()
	a2.publish(batchSeq(2, 0))
	st := h.waitStatus("a", 0, "the new stream live", func(s *collectors.StreamStatus) bool {
		return s.Endpoint == a2.Events && s.State == snapshot.StreamLive && s.Batches == 1
	})
	if st.Gaps != 0 || st.Restarts != 0 || st.FirstSeq != 0 {
		t.Fatalf("the re-added stream carried the old one over: %+v", st)
	}
}
