package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/kvtop/kvtop/pool"
)

// Magic opens every journal file.
const Magic = "kvtopjnl"

// FormatVersion is the framing's version, in the header. A reader refuses
// a journal of a later version; new observation fields and new frame tags
// do not change it (old readers skip and count what they do not know).
const FormatVersion = 1

// Frame tags. Lower case tags are observations; upper case are the
// journal's own.
const (
	tagHeader  = 'H' // JSON Header; the first frame of every file
	tagSymbol  = 'S' // defines the next symbol id
	tagTick    = 'T' // a snapshot was published at the frame's time
	tagRefresh = 'R' // the refresh changed (before the tick that shows it)
	tagLost    = 'L' // observations the recorder could not write (disk too slow)
	tagEnd     = 'E' // the recorder closed the file (a file without it was cut short)

	tagScrape   = 'm'
	tagBatch    = 'e'
	tagReset    = 'r'
	tagStatus   = 's'
	tagDecision = 'd'
	tagOutcome  = 'o'
	tagError    = 'x'
	tagDecSrc   = 'q'
	tagTarget   = 't' // a target joined, changed or left (discovery, or the config at start)
	tagUnknown  = 'u' // an observation of a type this journal cannot encode: its type name
)

// End reasons, the payload of tagEnd.
const (
	endClosed  = 0
	endRotated = 1
)

// Bounds. A frame is at most maxFrame bytes (the reader never allocates
// more for one); the symbol table holds at most maxSyms strings of at
// most maxSymLen bytes, maxSymBytes in all, per segment (past them a
// string is written in full each time).
const (
	maxFrame    = 256 << 20
	maxSyms     = 1 << 16
	maxSymLen   = 4 << 10
	maxSymBytes = 16 << 20
	maxPubs     = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the first frame of a journal file: what wrote it, for which
// pool, and where it sits in its recording. Pool is what a replay builds
// its pool from; nothing in it is secret (the config's digest stands for
// the rest).
type Header struct {
	Format  int    `json:"format"`
	Kvtop   string `json:"kvtop"`         // kvtop version that recorded it
	Config  string `json:"config_digest"` // sha256 of the effective config, without secrets
	Run     string `json:"run"`           // id shared by the segments of one recording
	Segment int    `json:"segment"`       // 1 for a recording's first file, +1 per rotation
	// Start is when this segment began (kvtop's clock); RunStart when the
	// recording did.
	Start    time.Time `json:"start"`
	RunStart time.Time `json:"run_start"`
	// Seq is the number of snapshots the pool had published before this
	// segment's first observation.
	Seq  uint64       `json:"seq"`
	Pool pool.Options `json:"pool"`
}

// Continues says whether the segment starts mid-recording: a replay of it
// alone starts from an empty pool, so the block index holds only what was
// stored since, and windows fill from its start.
func (h Header) Continues() bool { return h.Segment > 1 }

// appendFrame appends one frame holding body: its length, its checksum,
// the body.
func appendFrame(out, body []byte) []byte {
	out = binary.AppendUvarint(out, uint64(len(body)))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(body, castagnoli))
	return append(out, body...)
}

// ErrFormat is a file that is not a journal, or one of a later format.
var ErrFormat = errors.New("not a kvtop journal")

func formatError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}
