package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	zmq "github.com/pebbe/zmq4"

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
	seq      [][]uint64 // envelope sequence, per publisher (worker, rank)
	withhold [][]int    // events to drop before publishing (never sent)
	buf, in  []byte
	now      func() time.Time
	// The ZMQ event plane: a PUB per (worker, rank), bound to an
	// ephemeral port, and its publisher id (random below 2^53, new when
	// the worker's process restarts).
	pubs   [][]*zmq.Socket
	pubIDs [][]uint64
	eps    [][]string
	subs   int // subscriptions the publishers heard
	rng    uint64

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

// ParseDynamoEvents parses "jetstream" or "core" (Dynamo on NATS).
func ParseDynamoEvents(s string) (wire.DynamoEncoding, error) {
	switch s {
	case "", "jetstream":
		return wire.DynamoJSON, nil
	case "core":
		return wire.DynamoEnvelope, nil
	}
	return 0, fmt.Errorf("dynamo-events %q is not one of jetstream, core", s)
}

func newDynamoPublisher(url string, zctx *zmq.Context, enc wire.DynamoEncoding, ids *dynamoIDs, workers, ranks int, now func() time.Time) (*dynamoPublisher, error) {
	d := &dynamoPublisher{enc: enc, subject: DynamoSubject, ids: ids, now: now, rng: ids.seed ^ 0x7a7170756273}
	for i := 0; i < workers; i++ {
		d.next = append(d.next, make([]uint64, ranks))
		d.withhold = append(d.withhold, make([]int, ranks))
		d.seq = append(d.seq, make([]uint64, ranks))
		for r := range d.next[i] {
			d.next[i][r] = 1
		}
	}
	if enc == wire.DynamoZMQ {
		for i := 0; i < workers; i++ {
			d.pubs, d.pubIDs, d.eps = append(d.pubs, nil), append(d.pubIDs, nil), append(d.eps, nil)
			for r := 0; r < ranks; r++ {
				// XPUB: a PUB that also hears its subscribers subscribe, so
				// tests can start the clock once kvtop listens.
				sock, err := zctx.NewSocket(zmq.XPUB)
				if err == nil {
					_ = sock.SetLinger(0)
					_ = sock.SetSndhwm(100000)
					err = sock.Bind("tcp://127.0.0.1:*")
				}
				if err != nil {
					d.close()
					return nil, fmt.Errorf("dynamo zmq publisher w%d rank %d: %w", i, r, err)
				}
				ep, _ := sock.GetLastEndpoint()
				d.pubs[i], d.eps[i] = append(d.pubs[i], sock), append(d.eps[i], ep)
				d.pubIDs[i] = append(d.pubIDs[i], d.publisherID())
			}
		}
		return d, nil
	}
	nc, err := nats.Connect(url, nats.Name("kvtop-sim"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("nats %s: %w", url, err)
	}
	d.nc = nc
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
	return d, nil
}

// publisherID is a new publisher's id: random below 2^53 (mod.rs), from
// the sim's seed.
func (d *dynamoPublisher) publisherID() uint64 {
	d.rng += 0x9e3779b97f4a7c15
	z := d.rng
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return (z ^ z>>31) & (1<<53 - 1)
}

// publish sends one engine step's events of worker w, rank: the GPU's
// (storage_tier "device"). The sim's other tiers are vLLM's ZMQ events
// alone: it does not model how Dynamo publishes them.
//
// On the event plane (an envelope, on NATS or ZMQ) the step's events go
// in batches of up to 128 RouterEvents, as Dynamo's publisher sends them;
// Dynamo's durable JetStream events are one RouterEvent a message.
func (d *dynamoPublisher) publish(w, rank int, events []kvcache.Event) error {
	batch := 0
	d.in = d.in[:0]
	flush := func() error {
		if batch == 0 {
			return nil
		}
		payload := append(wire.AppendArrayHeader(d.buf[:0], batch), d.in...)
		err := d.sendEnvelope(w, rank, payload)
		d.buf, batch, d.in = payload[:0], 0, d.in[:0]
		return err
	}
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
		if d.enc == wire.DynamoJSON {
			d.buf = wire.AppendDynamoJSON(d.buf[:0], d.ids.id(w), id, rank, ev)
			if err := d.nc.Publish(d.subject, d.buf); err != nil {
				return err
			}
			d.Published++
			continue
		}
		d.in = wire.AppendDynamoMsgpack(d.in, d.ids.id(w), id, rank, ev)
		batch++
		d.Published++
		if batch == wire.DynamoBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// sendEnvelope sends one batch (its msgpack array) in an envelope: on NATS
// from the worker's one publisher, on ZMQ from the rank's own.
func (d *dynamoPublisher) sendEnvelope(w, rank int, payload []byte) error {
	ms := uint64(d.now().UnixMilli())
	if d.enc == wire.DynamoZMQ {
		pid, seq := d.pubIDs[w][rank], d.seq[w][rank]
		d.seq[w][rank]++
		env := wire.AppendDynamoEnvelope(nil, "kv-events", pid, seq, ms, payload)
		f := wire.DynamoFrames("kv-events", pid, seq, env)
		_, err := d.pubs[w][rank].SendMessage(f[0], f[1], f[2], f[3])
		return err
	}
	seq := d.seq[w][0]
	d.seq[w][0]++
	env := wire.AppendDynamoEnvelope(nil, "kv-events", d.ids.id(w), seq, ms, payload)
	return d.nc.Publish(d.subject, env)
}

// restart is worker w's new process (its new worker id is the sim's to
// give): event ids from 1.
func (d *dynamoPublisher) restart(w int) {
	for r := range d.next[w] {
		d.next[w][r] = 1
		d.withhold[w][r] = 0
		d.seq[w][r] = 0
		if d.pubIDs != nil {
			d.pubIDs[w][r] = d.publisherID() // a new process, a new publisher
		}
	}
}

// subscribed reports whether every ZMQ publisher has heard a subscriber
// (reading what their XPUBs got since): from the sim's goroutine.
func (d *dynamoPublisher) subscribed() bool {
	n := 0
	for _, ps := range d.pubs {
		for _, p := range ps {
			for {
				msg, err := p.RecvBytes(zmq.DONTWAIT)
				if err != nil {
					break
				}
				if len(msg) > 0 && msg[0] == 1 {
					d.subs++
				}
			}
			n++
		}
	}
	return n > 0 && d.subs >= n
}

// endpoints are worker w's ZMQ event plane endpoints, by rank (nil on NATS).
func (d *dynamoPublisher) endpoints(w int) []string {
	if d.eps == nil {
		return nil
	}
	return d.eps[w]
}

func (d *dynamoPublisher) close() {
	if d.nc != nil {
		_ = d.nc.Flush()
		d.nc.Close()
	}
	for _, ps := range d.pubs {
		for _, p := range ps {
			if p != nil {
				p.Close()
			}
		}
	}
}
