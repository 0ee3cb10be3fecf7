package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// decoder is the reading side of encoder: the same symbol table, frame
// time and publisher state, rebuilt from the frames in order.
type decoder struct {
	last, at int64
	syms     []string
	symBytes int
	pubs     pubTable
	r        rbuf
}

func newDecoder() *decoder {
	d := &decoder{pubs: newPubTable()}
	d.r.dec = d
	return d
}

func (d *decoder) sym(r *rbuf) string {
	v := r.uv()
	if r.err != nil {
		return ""
	}
	if v == 0 {
		return r.str()
	}
	if v-1 >= uint64(len(d.syms)) {
		r.fail(fmt.Errorf("symbol %d not defined (%d are)", v-1, len(d.syms)))
		return ""
	}
	return d.syms[v-1]
}

// Record is one frame of a journal, as a replay applies it.
type Record struct {
	Kind RecordKind
	At   time.Time // the observation's or the tick's time; the last frame's for the others
	// Observation is set for KindObservation.
	Observation collectors.Observation
	// Refresh is set for KindRefresh.
	Refresh time.Duration
	// Seq is the snapshot number the pool gave a KindTick.
	Seq uint64
	// Lost counts the observations a KindLost stands for.
	Lost uint64
	// Type names the observation type of a KindUnencoded.
	Type string
}

// RecordKind says what a Record is.
type RecordKind uint8

const (
	KindObservation RecordKind = iota + 1
	KindTick                   // a snapshot was published at At
	KindRefresh                // the refresh changed to Refresh
	KindLost                   // Lost observations were not recorded here (the disk fell behind)
	KindUnencoded              // an observation of a type the recorder could not encode
)

// errSkip is a frame decoded to nothing a replay applies (a symbol, an
// unknown tag).
var errSkip = errors.New("skip")

// frame decodes one frame's body. It returns errSkip for frames that only
// change the decoder (symbols) or that it does not know (counted by the
// caller through unknown).
func (d *decoder) frame(body []byte) (rec Record, unknown bool, err error) {
	r := &d.r
	*r = rbuf{b: body, dec: d}
	tag := r.byte1()
	dt := r.iv()
	if r.err != nil {
		return rec, false, r.err
	}
	d.at = d.last + dt
	d.last = d.at
	switch tag {
	case tagSymbol:
		s := string(r.b)
		if len(s) > maxSymLen || len(d.syms) >= maxSyms || d.symBytes+len(s) > maxSymBytes {
			return rec, false, errors.New("symbol table over its bounds")
		}
		d.syms = append(d.syms, s)
		d.symBytes += len(s)
		return rec, false, errSkip
	case tagHeader:
		return rec, false, errors.New("a second header")
	case tagTick:
		rec.Kind, rec.At = KindTick, r.tmFrame()
		rec.Seq = r.uv()
	case tagRefresh:
		rec.Kind, rec.Refresh = KindRefresh, r.dur()
		if rec.Refresh <= 0 {
			return rec, false, errors.New("refresh not positive")
		}
	case tagLost:
		rec.Kind, rec.Lost = KindLost, r.uv()
	case tagUnknown:
		rec.Kind, rec.Type = KindUnencoded, r.sym()
	case tagEnd:
		return rec, false, errEnd{reason: r.uv()}
	default:
		c := codings.byTag[tag]
		if c == nil {
			return rec, true, errSkip
		}
		rec.Kind = KindObservation
		rec.At = r.tmFrame()
		rec.Observation = c.decode(d, rec.At)
	}
	if r.err != nil {
		return Record{}, false, r.err
	}
	if rec.Kind != KindTick && rec.Kind != KindObservation {
		rec.At = time.Unix(0, d.at)
	}
	return rec, false, nil
}

// errEnd is the recorder's end marker.
type errEnd struct{ reason uint64 }

func (e errEnd) Error() string { return "end of segment" }
