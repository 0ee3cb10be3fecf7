package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// Where Dynamo puts KV events for namespace "dynamo", component "backend"
// (its defaults for vLLM workers).
const (
	// DynamoSubject is the event plane's core NATS subject
	// (EventPublisher::for_component(component, "kv-events")).
	DynamoSubject = "namespace.dynamo.component.backend.kv-events"
	// DynamoStream is the durable KV events' JetStream stream (NatsQueue:
	// "namespace.dynamo.component.backend.kv_events" slugified, '_' as
	// '-'); workers publish on DynamoStream + ".queue".
	DynamoStream = "namespace-dynamo-component-backend-kv-events"
)

// dynamoPublisher publishes the simulated pool's KV events the way
// Dynamo's workers do on NATS: one RouterEvent per cache event, event ids
// from 1 per (worker, dp_rank), a new worker id when a worker restarts.
// Used only from the sim's clock goroutine.
type dynamoPublisher struct {
	nc       *nats.Conn
	enc      wire.DynamoEncoding
	subject  string
	ids      *dynamoIDs
	next     [][]uint64 // next event id, per worker and rank
	seq      []uint64   // envelope sequence, per worker (one publisher each)
	withhold [][]int    // events to drop before publishing (never sent)
	buf, in  []byte
	now      func() time.Time

	Published, Withheld uint64
}

// dynamoIDs are the workers' Dynamo worker ids, shared by what the sim
// writes in Dynamo's formats (KV events, request traces): random-looking,
// from the seed, and new at every restart of a worker.
type dynamoIDs struct {
	mu   sync.Mutex // Endpoints and the router read them from other goroutines
	ids  []uint64
	seed uint64
	gen  uint64
}

func newDynamoIDs(workers int, seed uint64) *dynamoIDs {
	d := &dynamoIDs{seed: seed}
	for i := 0; i < workers; i++ {
		d.ids = append(d.ids, d.newID())
	}
	return d
}

// newID is a worker id as Dynamo hands them out: random, kept within the
// integers a float64 holds exactly (its discovery metadata is JSON).
func (d *dynamoIDs) newID() uint64 {
	d.gen++
	x := d.seed + d.gen*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x & (1<<53 - 1)
}

// id is worker w's current Dynamo worker id.
func (d *dynamoIDs) id(w int) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ids[w]
}

// renew gives worker w a new id (its process restarted).
func (d *dynamoIDs) renew(w int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids[w] = d.newID()
}

// ParseDynamoEvents parses "jetstream" or "core".
func ParseDynamoEvents(s string) (wire.DynamoEncoding, error) {
	switch s {
	case "", "jetstream":
		return wire.DynamoJSON, nil
	case "core":
		return wire.DynamoEnvelope, nil
	}
	return 0, fmt.Errorf("dynamo-events %q is not one of jetstream, core", s)
}

func newDynamoPublisher(url string, enc wire.DynamoEncoding, ids *dynamoIDs, workers, ranks int, now func() time.Time) (*dynamoPublisher, error) {
	nc, err := nats.Connect(url, nats.Name("kvtop-sim"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", url, err)
	}
	d := &dynamoPublisher{nc: nc, enc: enc, subject: DynamoSubject, ids: ids, now: now}
	if enc == wire.DynamoJSON {
		// As NatsQueue::connect does: get or create the stream, messages
		// older than an hour purged.
		js, err := jetstream.New(nc)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
				Name: DynamoStream, Subjects: []string{DynamoStream + ".*"}, MaxAge: time.Hour})
			cancel()
		}
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("jetstream stream %s on %s: %w", DynamoStream, url, err)
		}
		d.subject = DynamoStream + ".queue"
	}
	for i := 0; i < workers; i++ {
		d.next = append(d.next, make([]uint64, ranks))
		d.withhold = append(d.withhold, make([]int, ranks))
		d.seq = append(d.seq, 0)
		for r := range d.next[i] {
			d.next[i][r] = 1
		}
	}
	return d, nil
}

// publish sends one engine step's events of worker w, rank: the GPU's
// (storage_tier "device"). The sim's other tiers are vLLM's ZMQ events
// alone: it does not model how Dynamo publishes them.
func (d *dynamoPublisher) publish(w, rank int, events []kvcache.Event) error {
	for i := range events {
		if !events[i].GPU() {
			continue
		}
		id := d.next[w][rank]
		d.next[w][rank]++
		if d.withhold[w][rank] > 0 {
			// Dropped before publishing, as Dynamo's engines_dropped_events:
			// the id is skipped, and no stream holds it.
			d.withhold[w][rank]--
			d.Withheld++
			continue
		}
		ev := &events[i]
		switch d.enc {
		case wire.DynamoJSON:
			d.buf = wire.AppendDynamoJSON(d.buf[:0], d.ids.id(w), id, rank, ev)
		default:
			d.in = wire.AppendDynamoMsgpack(d.in[:0], d.ids.id(w), id, rank, ev)
			d.buf = wire.AppendDynamoEnvelope(d.buf[:0], "kv-events", d.ids.id(w), d.seq[w], uint64(d.now().UnixMilli()), d.in)
			d.seq[w]++
		}
		if err := d.nc.Publish(d.subject, d.buf); err != nil {
			return err
		}
		d.Published++
	}
	return nil
}

// restart is worker w's new process (its new worker id is the sim's to
// give): event ids from 1.
func (d *dynamoPublisher) restart(w int) {
	d.seq[w] = 0
	for r := range d.next[w] {
		d.next[w][r] = 1
		d.withhold[w][r] = 0
	}
}

func (d *dynamoPublisher) close() {
	if d.nc != nil {
		_ = d.nc.Flush()
		d.nc.Close()
	}
}
