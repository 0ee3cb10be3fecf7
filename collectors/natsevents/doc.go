// Package natsevents collects KV-cache events from Dynamo's event plane on
// NATS (the config's event_plane): Dynamo's workers publish one RouterEvent
// per KV cache event, for every worker and data-parallel rank, on one
// subject (core NATS) or into one JetStream stream (Dynamo's durable KV
// events). docs/PROTOCOLS.md §10 describes the three wire generations, the
// subjects and stream names, and the RouterEvent and envelope shapes.
//
// One connection and one subscription serve every worker: core NATS on
// the configured subject (default namespace.*.component.*.kv-events), or
// with jetstream a consumer of the stream (ordered and ephemeral, or the
// configured durable one without acks) from the configured start (the
// whole stream by default: Dynamo keeps an hour and purges after its
// snapshots). Messages are decoded on the NATS client's goroutine and
// handed to one state goroutine, which waits when the pool is busy:
// nats.go then buffers within its pending limits (PendingMessages,
// PendingBytes), and drops past them, counted and said (the gaps they
// leave follow the rules below); a JetStream consumer simply waits.
//
// Decoding (decode.go, tokens.go): one RouterEvent decoder over two token
// readers, JSON (serde_json) and MessagePack (rmp_serde, named maps or
// positional arrays; a thin layer over the msgpack cursor kvevents reads
// vLLM's batches with, collectors/internal/msgpack), bare or inside the
// event plane's envelope; it steps through every map and array with one
// walk. A msgpack batch of name-keyed RouterEvents, Dynamo's publisher's
// shape, is read first by fast.go straight off the cursor, which declines
// anything else to the general decoder. Bounded:
// messages over MaxMessageBytes are not decoded, nesting stops at 32
// levels, a container cannot claim more items than bytes left, an event
// holds at most 65 536 hashes, a rank at most 255. A decoding failure after
// the worker and event ids keeps them, so the event is accounted for.
//
// Streams: one per (worker, dp_rank), named by Resolve (config aliases,
// worker_<id> otherwise). The rules are Dynamo's router's own for its
// event ids: ids count from 1 (older releases from 0) per (worker_id,
// dp_rank); a first id above 1 is a late join; an id above last+1 is a
// gap; with core NATS the gap is lost (history_lost, until the worker
// clears its cache), with JetStream it is replayed from the stream between
// the last event applied and the one that showed the gap (a replay
// goroutine with an ordered consumer from that stream sequence, at most
// MaxReplays at once, live events held behind it up to HoldBack); ids
// absent from that range were never published. A smaller id with the
// bytes already applied is a duplicate (a redelivery); with other bytes, or
// a different worker id for the same kvtop worker and rank, the worker
// restarted (Dynamo gives each process a new id): StreamReset, then the new
// run. A stream silent for IdleEvict is forgotten.
//
// Why not the kvevents seq machine: it is ZMQ-shaped where it matters
// here. Its replays are addressed by seq against a publisher's ring (with
// "evicted" and "incomplete" read from where the ring starts), a JetStream
// replay by stream position filtered by worker; its restart check after a
// TCP reconnect replays the last batch to compare fingerprints and drops
// the blocks when it cannot, which would be wrong for Dynamo, whose
// restarted workers come back under new ids; and its late join asks the
// publisher for everything from seq 0, where the JetStream consumer has
// already delivered the stream's whole history in order. Sharing it would
// have meant an interface over both replay kinds and flags for each rule
// that differs, in a package that is being reworked for its own bounds
// (issue 8). The rules that are the same are the same words: states,
// incident kinds and counters are those of collectors.StreamStatus, and
// the pool treats both sources alike.
package natsevents
