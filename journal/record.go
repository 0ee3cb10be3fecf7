package journal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
)

// Defaults of Options.
const (
	DefaultMaxSize    = 1 << 30
	DefaultMaxAge     = 24 * time.Hour
	DefaultKeep       = 7
	DefaultMaxPending = 64 << 20
)

// chunkSize is how much the recorder encodes before handing it to the
// disk between snapshots (it also hands over at every snapshot).
const chunkSize = 256 << 10

// Options configure a Recorder.
type Options struct {
	Path         string // the live segment; rotated ones are Path.1 (newest), Path.2, …
	Kvtop        string // kvtop's version, for the header
	ConfigDigest string // the effective config's digest (config.Digest), for the header
	Pool         pool.Options
	// MaxSize and MaxAge bound one segment: past either, at the next
	// snapshot, the segment is closed and rotated. Zero means the default;
	// MaxAge < 0 never rotates by age.
	MaxSize int64
	MaxAge  time.Duration
	// Keep is how many rotated segments are kept besides the live one
	// (the oldest is removed); 0 means DefaultKeep, < 0 none.
	Keep int
	// MaxPending bounds the bytes waiting for the disk: past it,
	// observations are dropped and counted (the journal says how many, and
	// where) rather than the pool being slowed. 0 means the default.
	MaxPending int64
	// Logf reports rotations and write errors; nil: silent.
	Logf func(format string, args ...any)
	// Now is the clock of the header's start (nil: time.Now).
	Now func() time.Time
}

// Recorder writes the journal of a pool: it is the pool's Tap (SetTap),
// so it sees every observation just before the pool applies it, every
// refresh change and every snapshot published. It encodes on the pool
// goroutine (cheap: see docs/PERFORMANCE.md "Journal") and a goroutine of
// its own writes to the disk, so a slow disk never slows the pool: past
// MaxPending bytes waiting, observations are dropped, counted and marked
// in the journal.
type Recorder struct {
	o Options

	mu      sync.Mutex // the Tap methods and Close (the pool calls from one goroutine)
	enc     *encoder
	hdr     Header
	segAt   time.Time // the segment's start, on the journal's clock
	segSize int64     // bytes encoded into the segment
	dropped uint64    // observations dropped since the last lost frame
	closed  bool

	// The queue to the writer: unbounded, so the pool never blocks, and
	// bounded in fact by MaxPending (past it observations are dropped;
	// what is still written then, ticks, is a few bytes a snapshot).
	qmu     sync.Mutex
	queue   []chunk
	free    [][]byte // written chunks' buffers, for the next ones
	qclosed bool
	wake    chan struct{}
	pending atomic.Int64
	done    chan struct{}

	st struct {
		bytes, observations, ticks, lost, unencoded, rotations atomic.Int64
		// catch-up: what kvtop read of the past (see RecordStats).
		catchUpBytes, replayed, backfill atomic.Int64
	}
	errMu   sync.Mutex
	lastErr error
	// failures counts the writer's failures; the pool side rotates when
	// it sees one it has not handled (handled), and drops observations
	// meanwhile (the segment is cut: they could not be read back).
	failures atomic.Int64
	handled  int64
}

// chunk is encoded frames for the writer; rotate closes the file after
// them and opens the next segment.
type chunk struct {
	data   []byte
	rotate bool
}

// RecordStats is what a Recorder wrote so far.
type RecordStats struct {
	Path         string
	Bytes        int64 // written to disk, all segments
	Observations int64
	Snapshots    int64
	Lost         int64 // observations dropped: the disk fell behind
	Unencoded    int64 // observations of a type the journal cannot encode
	Rotations    int64
	Segment      int   // the live segment's number
	Err          error // the last write error, nil if none

	// The catch-up: what kvtop read of the past rather than saw happen,
	// most of it at start-up, and most of a short journal of a pool that
	// had been running: each publisher's replay buffer (event batches
	// Replayed to fill a late join or a gap; vLLM keeps 10 000 a
	// publisher) and what the decision logs held at start (Backfill, up
	// to decisions.DefaultBackfill bytes of each log). CatchUpBytes is
	// their encoded size, within Bytes.
	CatchUpBytes    int64
	CatchUpReplayed int64 // event batches replayed
	CatchUpBackfill int64 // decision-log records (decisions, outcomes, bad lines) from before start
}

// Create starts a journal at o.Path. An existing file there is rotated
// first (it becomes Path.1), so a restarted recorder keeps what the last
// one wrote.
func Create(o Options) (*Recorder, error) {
	if o.Path == "" {
		return nil, errors.New("journal: no path")
	}
	if o.MaxSize <= 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if fi, err := os.Stat(o.Path); err == nil && fi.Size() > 0 {
		if err := rotateFiles(o.Path, o.Keep); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(o.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	now := o.Now()
	r := &Recorder{o: o, enc: newEncoder(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	r.hdr = Header{Format: FormatVersion, Kvtop: o.Kvtop, Config: o.ConfigDigest, Run: hex.EncodeToString(id[:]),
		Segment: 1, Start: now, RunStart: now, Pool: o.Pool}
	if err := r.startSegment(now); err != nil {
		f.Close()
		return nil, err
	}
	go r.write(f)
	r.flush(false)
	return r, nil
}

// startSegment encodes the magic and header of a new segment.
func (r *Recorder) startSegment(at time.Time) error {
	r.enc.reset()
	r.hdr.Start = at
	r.enc.out = append(r.enc.out, Magic...)
	if err := r.enc.header(r.hdr); err != nil {
		return err
	}
	r.segAt, r.segSize = at, 0
	return nil
}

// Observed implements pool.Tap: it writes o and returns it on the wall
// clock alone, as a replay will read it (see pool.Tap).
func (r *Recorder) Observed(o collectors.Observation) collectors.Observation {
	o = wallClock(o)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return o
	}
	if r.pending.Load() > r.o.MaxPending || r.failures.Load() != r.handled {
		r.dropped++
		r.st.lost.Add(1)
		return o
	}
	before := len(r.enc.out)
	if !r.enc.observation(o) {
		r.st.unencoded.Add(1)
	} else if replayed, backfill := catchUp(o); replayed || backfill {
		r.st.catchUpBytes.Add(int64(len(r.enc.out) - before))
		if replayed {
			r.st.replayed.Add(1)
		} else {
			r.st.backfill.Add(1)
		}
	}
	r.st.observations.Add(1)
	if len(r.enc.out) >= chunkSize {
		r.flush(false)
	}
	return o
}

// Refreshed implements pool.Tap.
func (r *Recorder) Refreshed(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.enc.refresh(d)
	r.hdr.Pool.Refresh = d // a later segment starts at the refresh in force
}

// Published implements pool.Tap: the snapshot's time is the tick's, and
// the segment rotates here (a segment ends on a snapshot).
func (r *Recorder) Published(s *snapshot.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || s == nil {
		return
	}
	if r.dropped > 0 {
		r.enc.lost(r.dropped)
		r.dropped = 0
	}
	r.enc.tick(s.At, s.Seq)
	r.st.ticks.Add(1)
	age := s.At.Sub(r.segAt)
	cut := r.failures.Load() != r.handled
	if cut || r.segSize+int64(len(r.enc.out)) >= r.o.MaxSize || r.o.MaxAge > 0 && age >= r.o.MaxAge {
		if cut {
			r.handled = r.failures.Load()
		} else {
			r.enc.endFrame(endRotated)
		}
		r.flush(true)
		r.hdr.Segment++
		r.hdr.Seq = s.Seq
		if err := r.startSegment(s.At); err != nil {
			r.fail(err)
		}
	}
	r.flush(false)
}

// flush hands the encoded frames to the writer; it never blocks.
func (r *Recorder) flush(rotate bool) {
	if len(r.enc.out) == 0 && !rotate {
		return
	}
	data := r.enc.out
	r.segSize += int64(len(data))
	r.pending.Add(int64(len(data)))
	r.qmu.Lock()
	if n := len(r.free); n > 0 {
		r.enc.out, r.free = r.free[n-1], r.free[:n-1]
	} else { // about what the last chunk needed: a snapshot's worth, or a full one
		r.enc.out = make([]byte, 0, min(max(4<<10, 2*len(data)), chunkSize+chunkSize/4))
	}
	r.queue = append(r.queue, chunk{data: data, rotate: rotate})
	r.qmu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next waits for the writer's next chunk; false once closed and drained.
func (r *Recorder) next() (chunk, bool) {
	for {
		r.qmu.Lock()
		if len(r.queue) > 0 {
			c := r.queue[0]
			r.queue[0] = chunk{}
			r.queue = r.queue[1:]
			r.qmu.Unlock()
			return c, true
		}
		closed := r.qclosed
		r.qmu.Unlock()
		if closed {
			return chunk{}, false
		}
		<-r.wake
	}
}

// write is the writer goroutine: it owns the file. After a failed write
// the segment is cut: what follows is dropped until the pool side
// rotates to a new one.
func (r *Recorder) write(f *os.File) {
	defer close(r.done)
	cut := false
	for {
		c, ok := r.next()
		if !ok {
			break
		}
		if f != nil && !cut {
			n, err := f.Write(c.data)
			r.st.bytes.Add(int64(n))
			if err != nil {
				cut = true
				r.fail(err)
			}
		}
		r.pending.Add(-int64(len(c.data)))
		r.qmu.Lock()
		if len(r.free) < 4 && cap(c.data) <= 2*chunkSize {
			r.free = append(r.free, c.data[:0])
		}
		r.qmu.Unlock()
		if !c.rotate {
			continue
		}
		if f != nil {
			if err := closeFile(f); err != nil && !cut {
				r.fail(err)
			}
			f = nil
		}
		cut = false
		if err := rotateFiles(r.o.Path, r.o.Keep); err != nil {
			cut = true
			r.fail(err)
			continue
		}
		nf, err := os.OpenFile(r.o.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o640)
		if err != nil {
			cut = true
			r.fail(err)
			continue
		}
		f = nf
		r.st.rotations.Add(1)
		r.logf("journal: rotated %s to %s.1", r.o.Path, r.o.Path)
	}
	if f != nil {
		if err := closeFile(f); err != nil && !cut {
			r.fail(err)
		}
	}
}

func closeFile(f *os.File) error {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rotateFiles makes room for a new path: path.k moves to path.k+1, path
// to path.1, and what would pass keep is removed (keep < 1: path is).
func rotateFiles(path string, keep int) error {
	remove := func(p string) error {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	if keep < 1 {
		return remove(path)
	}
	name := func(k int) string { return path + "." + strconv.Itoa(k) }
	if err := remove(name(keep)); err != nil {
		return err
	}
	for k := keep - 1; k >= 1; k-- {
		if err := os.Rename(name(k), name(k+1)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Rename(path, name(1)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func (r *Recorder) fail(err error) {
	r.errMu.Lock()
	first := r.lastErr == nil || r.lastErr.Error() != err.Error()
	r.lastErr = err
	r.errMu.Unlock()
	r.failures.Add(1)
	if first {
		r.logf("journal: %s: %v (this segment is cut here; recording goes on in a new one)", r.o.Path, err)
	}
}

func (r *Recorder) logf(format string, args ...any) {
	if r.o.Logf != nil {
		r.o.Logf(format, args...)
	}
}

// Close ends the journal: the end marker, everything flushed and synced.
// Call it once the pool has stopped; later Tap calls are ignored.
func (r *Recorder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	if r.dropped > 0 {
		r.enc.lost(r.dropped)
	}
	r.enc.endFrame(endClosed)
	r.flush(false)
	r.qmu.Lock()
	r.qclosed = true
	r.qmu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	r.mu.Unlock()
	<-r.done
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.lastErr
}

// Stats is what the recorder wrote so far; safe from any goroutine.
func (r *Recorder) Stats() RecordStats {
	r.errMu.Lock()
	err := r.lastErr
	r.errMu.Unlock()
	r.mu.Lock()
	seg := r.hdr.Segment
	r.mu.Unlock()
	return RecordStats{
		Path: r.o.Path, Bytes: r.st.bytes.Load(), Observations: r.st.observations.Load(),
		Snapshots: r.st.ticks.Load(), Lost: r.st.lost.Load(), Unencoded: r.st.unencoded.Load(),
		Rotations: r.st.rotations.Load(), Segment: seg, Err: err,
		CatchUpBytes: r.st.catchUpBytes.Load(), CatchUpReplayed: r.st.replayed.Load(), CatchUpBackfill: r.st.backfill.Load(),
	}
}

// String says what was written, for the operator.
func (s RecordStats) String() string {
	out := fmt.Sprintf("%s: %s in %d snapshots and %d observations", s.Path, Bytes(s.Bytes), s.Snapshots, s.Observations)
	if s.CatchUpBytes > 0 {
		out += fmt.Sprintf(" (%s of it catch-up: %d event batches replayed from the publishers' buffers, %d records the decision logs held at start)",
			Bytes(s.CatchUpBytes), s.CatchUpReplayed, s.CatchUpBackfill)
	}
	if s.Rotations > 0 {
		out += fmt.Sprintf(", %d rotations", s.Rotations)
	}
	if s.Lost > 0 {
		out += fmt.Sprintf(", %d observations lost (the disk fell behind)", s.Lost)
	}
	if s.Unencoded > 0 {
		out += fmt.Sprintf(", %d observations of a type the journal cannot encode", s.Unencoded)
	}
	return out
}

// Bytes prints a size in binary units: 512 B, 3.4 MiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
