package journal

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
)

// Player rebuilds a recording's snapshots: a fresh pool State, built from
// the header's pool options, applies the journal's observations and
// refresh changes in order and builds a snapshot at each tick's time, as
// the live pool did. So snapshot #N of a replay is snapshot #N of the
// live run (from the first segment; a later segment alone starts from an
// empty pool, see Header.Continues, numbering its snapshots on from the
// recording's).
//
// A Player is not safe for concurrent use. Going back means starting
// again from the first record (a pool's state cannot be rewound), so
// Seek behind the current tick costs a replay from the start.
type Player struct {
	paths []string
	hdr   Header
	ticks []time.Time // every tick's time, from the index pass
	index ReadStats   // what the index pass read

	rd    *Reader
	st    *pool.State
	n     int // ticks applied (the current snapshot is #n, 1-based)
	snap  *snapshot.Snapshot
	stats ReadStats // of the current pass, up to the current tick
	// lastSeq is the live pool's seq of the current tick (in the
	// journal), which the rebuilt snapshot's seq is checked against.
	lastSeq uint64
}

// NewPlayer opens the segments paths (oldest first; see Chain) and reads
// them once to index their ticks. The pool is at the start: no snapshot
// until Next.
func NewPlayer(paths ...string) (*Player, error) {
	rd, err := Open(paths...)
	if err != nil {
		return nil, err
	}
	rd.skipObs = true
	p := &Player{paths: paths, hdr: rd.Header()}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			rd.Close()
			return nil, err
		}
		if rec.Kind == KindTick {
			p.ticks = append(p.ticks, rec.At)
		}
	}
	p.index = rd.Stats()
	rd.Close()
	if len(p.ticks) == 0 {
		why := ""
		if p.index.Stop != "" {
			why = ": " + p.index.Stop
		}
		return nil, fmt.Errorf("%s holds no snapshot%s", paths[0], why)
	}
	if err := p.rewind(); err != nil {
		return nil, err
	}
	return p, nil
}

// rewind starts again from the first record, on an empty pool.
func (p *Player) rewind() error {
	if p.rd != nil {
		p.rd.Close()
	}
	rd, err := Open(p.paths...)
	if err != nil {
		return err
	}
	p.rd, p.st, p.n, p.snap, p.lastSeq = rd, pool.NewState(p.hdr.Pool), 0, nil, 0
	p.st.SetSeq(p.hdr.Seq) // a later segment alone goes on numbering as the recording did
	return nil
}

// Close releases the open file.
func (p *Player) Close() error { return p.rd.Close() }

// Header is the first segment's header.
func (p *Player) Header() Header { return p.hdr }

// Headers are every segment's.
func (p *Player) Headers() []Header { return p.rd.Headers() }

// Paths are the segments, oldest first.
func (p *Player) Paths() []string { return p.paths }

// Ticks is how many snapshots the journal holds.
func (p *Player) Ticks() int { return len(p.ticks) }

// TickTime is the time of snapshot i (0-based).
func (p *Player) TickTime(i int) time.Time { return p.ticks[i] }

// Start and End are the times of the first and last snapshots.
func (p *Player) Start() time.Time { return p.ticks[0] }
func (p *Player) End() time.Time   { return p.ticks[len(p.ticks)-1] }

// Pos is how many snapshots were rebuilt: the current one is index
// Pos()-1; 0 before the first.
func (p *Player) Pos() int { return p.n }

// Snapshot is the current snapshot (nil before the first Next).
func (p *Player) Snapshot() *snapshot.Snapshot { return p.snap }

// IndexStats is what the index pass read: the whole journal, where and
// why it stopped.
func (p *Player) IndexStats() ReadStats { return p.index }

// Stats is what the replay read up to the current snapshot.
func (p *Player) Stats() ReadStats { return p.rd.Stats() }

// Next applies the records up to the next tick and builds its snapshot.
// io.EOF: the journal holds no more.
func (p *Player) Next() (*snapshot.Snapshot, error) {
	if p.n >= len(p.ticks) {
		return nil, io.EOF
	}
	for {
		rec, err := p.rd.Next()
		if err != nil {
			p.ticks = p.ticks[:p.n] // the index saw more than this pass can reach
			return nil, err
		}
		switch rec.Kind {
		case KindObservation:
			p.st.Apply(rec.Observation)
		case KindRefresh:
			p.st.SetRefresh(rec.Refresh)
		case KindTick:
			p.snap = p.st.Snapshot(rec.At)
			p.n++
			p.lastSeq = rec.Seq
			return p.snap, nil
		}
	}
}

// RecordedSeq is the live pool's number of the current snapshot, as the
// journal says; Snapshot().Seq equals it (a later segment alone goes on
// from the number the header gives).
func (p *Player) RecordedSeq() uint64 { return p.lastSeq }

// Seek moves to snapshot i (0-based, clamped to the journal): forward by
// applying what comes between, back by starting again from the first
// record. It returns the snapshot there.
func (p *Player) Seek(i int) (*snapshot.Snapshot, error) {
	i = max(0, min(i, len(p.ticks)-1))
	if i < p.n-1 {
		if err := p.rewind(); err != nil {
			return nil, err
		}
	}
	for p.n <= i {
		if _, err := p.Next(); err != nil {
			if err == io.EOF && p.snap != nil {
				return p.snap, nil
			}
			return nil, err
		}
	}
	return p.snap, nil
}

// TickAt is the index of the last snapshot at or before t, or -1 when t
// is before the first.
func (p *Player) TickAt(t time.Time) int {
	return sort.Search(len(p.ticks), func(i int) bool { return p.ticks[i].After(t) }) - 1
}

// SnapshotAt returns the snapshot as of t: the last one built at or
// before it.
func (p *Player) SnapshotAt(t time.Time) (*snapshot.Snapshot, error) {
	i := p.TickAt(t)
	if i < 0 {
		return nil, fmt.Errorf("%s is before the journal's first snapshot (%s)", t.Format(time.RFC3339), p.Start().Format(time.RFC3339))
	}
	return p.Seek(i)
}
