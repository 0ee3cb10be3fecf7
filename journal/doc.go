// Package journal records what a pool consumes and replays it: `kvtop
// record`, `kvtop serve --record`, `kvtop replay` and `kvtop snapshot
// --journal`.
//
// The pool reads time only from its inputs (observation timestamps and
// the snapshot times of its ticks), so a journal of those inputs, in the
// order the pool applied them, rebuilds the same snapshots: snapshot #N
// of a replay is snapshot #N of the live run, field for field. The
// Recorder is the pool's Tap (pool.Tap); the Player feeds a fresh
// pool.State; Replay paces a Player for the console.
//
// Two things make it exact rather than nearly so. Go's times carry a
// monotonic clock reading that a file cannot: two times are subtracted on
// the monotonic clock when both have one, on the wall clock otherwise, and
// the two clocks drift apart by nanoseconds. So while it records, the live
// pool applies each observation with its times on the wall clock alone
// (Recorder.Observed returns that copy), and the pool's own clock drops its
// monotonic reading too. And float sums over Go maps depend on their order,
// which changes from run to run: the pool sums in a fixed order.
//
// # File format
//
// A journal file is the 8 bytes "kvtopjnl" and then frames. A frame is its
// body's length (uvarint), the CRC-32C (Castagnoli) of the body (4 bytes,
// little endian) and the body: a tag byte, the frame's time as a zigzag
// varint of nanoseconds since the previous frame's, and a payload. The
// first frame is the header (tag 'H', time from the Unix epoch, payload
// JSON: Header, with the format version, kvtop's version, the config's
// digest, the pool options a replay builds its pool from, the recording's
// id, the segment's number and start, and the snapshots published before
// it). Then, in the order the pool consumed them: observations (lower
// case tags, one per type: 'm' scrape, 'e' event batch, 'r' stream reset,
// 's' stream status, 'd' decision, 'o' outcome, 'x' source error, 'q'
// decision source, 't' target change; 'u' names a type this journal
// cannot encode; each type registers its tag and payload in its own
// obs_*.go file, codec.go), 'T' a
// snapshot was published at the frame's time (payload: its number), 'R'
// the refresh changed, 'L' observations dropped because the disk fell
// behind, 'S' the definition of the next symbol, 'E' the end of a segment
// (closed, or rotated: the next file continues it).
//
// Payloads have no field names: integers are varints (zigzag when signed),
// a float holding an integer is one too and any other its 8 raw bytes, a
// time is its zone and its distance from the frame's time, a slice or map
// is its length+1 (0: nil). Strings that recur (names, endpoints, kinds,
// messages, a histogram's bucket bounds) are symbols: defined once per
// segment in an 'S' frame, then one or two bytes. An event batch names its
// publisher by number once known, writes its seq and producer ts as the
// difference from that publisher's last, each block hash as its 8 raw
// bytes (they are random) and a parent the publisher stored among its last
// 256 hashes as how far back (pubs.go); root content fingerprints
// (KVEvent.RootContent, the hash-boundary check) follow the events, only in
// a batch that has one: their count, then each event's index and 8 bytes.
//
// A reader stops at the first frame that is torn (a crash while writing:
// the length promises more than the file holds) or corrupt (its checksum
// fails, or its payload cannot be decoded), and says where; every frame
// before it is good. Frames of a tag it does not know (a newer kvtop) are
// skipped and counted: a newer kvtop adds tags, or fields at the end of a
// payload, and keeps FormatVersion; it changes it only when an older
// reader could no longer read what it knows.
//
// # Rotation
//
// A segment rotates at a snapshot once it passed Options.MaxSize or
// MaxAge: it ends with 'E' (rotated), the file becomes Path.1 (Path.1
// becomes Path.2 …, the oldest past Keep is removed), and a new Path
// starts with its own header (segment +1, same recording id) and an empty
// symbol table. A segment replays on its own from an empty pool (the index
// holds only blocks stored since it began; windows fill from there; its
// snapshots keep the recording's numbers), and the replay says so; Chain
// finds the older segments of the same recording still on disk, and a
// Player given all of them replays the whole recording exactly. Keeping a
// checkpoint of the pool's state in each segment was the alternative: it
// would have meant serializing every structure of the pool, for a saving
// only when the older segments are gone.
package journal
