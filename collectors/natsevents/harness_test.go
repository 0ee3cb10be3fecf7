package natsevents

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvtop/kvtop/collectors"
)

// The subject and stream Dynamo uses for namespace "dynamo", component
// "backend": the event plane's core subject, and the durable KV events'
// stream (NatsQueue: slugified "namespace.dynamo.component.backend.kv_events"
// with '_' turned into '-'; published on "<stream>.queue").
const (
	testSubject = "namespace.dynamo.component.backend.kv-events"
	testStream  = "namespace-dynamo-component-backend-kv-events"
)

// startNATS runs an embedded nats-server (JetStream on) on 127.0.0.1.
func startNATS(t *testing.T, maxPayload int32) *server.Server {
	t.Helper()
	return startNATSWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, MaxPayload: maxPayload})
}

// startNATSAt runs one on a given port (a server coming back).
func startNATSAt(t *testing.T, port string) *server.Server {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return startNATSWith(t, &server.Options{Host: "127.0.0.1", Port: p, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
}

func startNATSWith(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func dial(t *testing.T, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// dynamoStream creates the stream as Dynamo's NatsQueue does (subjects
// "<stream>.*", max_age one hour).
func dynamoStream(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{
		Name: testStream, Subjects: []string{testStream + ".*"}, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// stored, removed and cleared are RouterEvents as serde_json writes them.
func stored(worker, id uint64, rank int, parent string, hashes ...uint64) []byte {
	var b strings.Builder
	for i, h := range hashes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"block_hash":%d,"tokens_hash":%d,"mm_extra_info":null}`, h, h^0xff)
	}
	return []byte(fmt.Sprintf(`{"worker_id":%d,"storage_tier":"device","event":{"event_id":%d,"data":{"stored":{"parent_hash":%s,"blocks":[%s]}},"dp_rank":%d}}`,
		worker, id, parent, b.String(), rank))
}

func removed(worker, id uint64, rank int, hashes ...uint64) []byte {
	s := make([]string, len(hashes))
	for i, h := range hashes {
		s[i] = fmt.Sprint(h)
	}
	return []byte(fmt.Sprintf(`{"worker_id":%d,"event":{"event_id":%d,"data":{"removed":{"block_hashes":[%s]}},"dp_rank":%d}}`,
		worker, id, strings.Join(s, ","), rank))
}

func cleared(worker, id uint64, rank int) []byte {
	return []byte(fmt.Sprintf(`{"worker_id":%d,"event":{"event_id":%d,"data":"cleared","dp_rank":%d}}`, worker, id, rank))
}

// recorder keeps what a collector sends, for assertions.
type recorder struct {
	mu     sync.Mutex
	obs    []collectors.Observation
	status map[pubKey]*collectors.StreamStatus
	wake   chan struct{}
	// While holding, batches are not applied (a pool that is behind):
	// their bytes stay pending until release.
	holding bool
	held    []*collectors.EventBatch
}

// hold makes the recorder a pool that stops applying batches.
func (r *recorder) hold() {
	r.mu.Lock()
	r.holding = true
	r.mu.Unlock()
}

// release applies what was held and goes back to applying at once.
func (r *recorder) release() {
	r.mu.Lock()
	held := r.held
	r.holding, r.held = false, nil
	r.mu.Unlock()
	for _, b := range held {
		b.Applied()
	}
}

// heldBatches is how many batches and bytes the recorder holds.
func (r *recorder) heldBatches() (n int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.held {
		bytes += b.Cost()
	}
	return len(r.held), bytes
}

// record runs a collector; the returned func stops it and waits until it
// has (the test's cleanup does too).
func record(t *testing.T, o Options) (*recorder, func()) {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan collectors.Observation, 1024)
	rec := &recorder{status: map[pubKey]*collectors.StreamStatus{}, wake: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, out)
	}()
	go func() {
		for {
			select {
			case o := <-out:
				rec.mu.Lock()
				if b, ok := o.(*collectors.EventBatch); ok {
					if rec.holding {
						rec.held = append(rec.held, b)
					} else {
						b.Applied() // as the pool does: the collector may send more
					}
				}
				rec.obs = append(rec.obs, o)
				if s, ok := o.(*collectors.StreamStatus); ok {
					rec.status[pubKey{s.Worker, s.Rank}] = s
				}
				rec.mu.Unlock()
				select {
				case rec.wake <- struct{}{}:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("collector did not stop within 10 s")
		}
	}
	t.Cleanup(stop)
	return rec, stop
}

// wait until ok holds over the recorded observations.
func (r *recorder) wait(t *testing.T, what string, ok func(obs []collectors.Observation) bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		r.mu.Lock()
		obs := append([]collectors.Observation(nil), r.obs...)
		r.mu.Unlock()
		if ok(obs) {
			return
		}
		select {
		case <-r.wake:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out waiting for %s; got:\n%s", what, dumpObs(r.obs))
		}
	}
}

func (r *recorder) stat(k pubKey) *collectors.StreamStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status[k]
}

func batches(obs []collectors.Observation, worker string) []*collectors.EventBatch {
	var out []*collectors.EventBatch
	for _, o := range obs {
		if b, ok := o.(*collectors.EventBatch); ok && b.Worker == worker {
			out = append(out, b)
		}
	}
	return out
}

func seqs(bs []*collectors.EventBatch) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b.Seq
	}
	return out
}

func dumpObs(obs []collectors.Observation) string {
	var b strings.Builder
	for _, o := range obs {
		switch v := o.(type) {
		case *collectors.EventBatch:
			fmt.Fprintf(&b, "  batch %s/%d seq %d replayed=%v events=%d\n", v.Worker, v.Rank, v.Seq, v.Replayed, len(v.Events))
		case *collectors.StreamStatus:
			fmt.Fprintf(&b, "  status %s/%d %s last=%d gaps=%d missing=%d replayed=%d lost=%d dup=%d restarts=%d\n",
				v.Worker, v.Rank, v.State, v.LastSeq, v.Gaps, v.Missing, v.Replayed, v.Lost, v.Duplicates, v.Restarts)
		case *collectors.StreamReset:
			fmt.Fprintf(&b, "  reset %s/%d %s\n", v.Worker, v.Rank, v.Reason)
		case *collectors.SourceError:
			fmt.Fprintf(&b, "  error %s %s: %s\n", v.Source, v.Kind, v.Message)
		}
	}
	return b.String()
}
