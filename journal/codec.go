package journal

import (
	"fmt"
	"reflect"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// A coding is how the journal writes and reads one observation type: its
// frame tag and its payload both ways. Each type registers its own, in
// the obs_*.go file that holds its payload (a new source adds a file;
// nothing here changes). TestEveryObservationHasACoding fails for a type
// of collectors.Types without one.
type coding struct {
	tag byte
	// encode writes o's frame; false for a nil pointer (nothing to write).
	encode func(e *encoder, o collectors.Observation) bool
	// decode reads the payload after the frame's time, of an observation
	// made at at.
	decode func(d *decoder, at time.Time) collectors.Observation
	// catchUp says whether a value is history read late: a replayed event
	// batch, a decision log's backfill (the recorder counts their bytes
	// apart). nil: never.
	catchUp func(o collectors.Observation) (replayed, backfill bool)
}

// codings holds every registered coding by tag and by type. Written only
// by init functions, read without locks after.
var codings struct {
	byTag  [256]*coding
	byType map[reflect.Type]*coding
}

// register adds the coding of the observation type *T under tag, its
// payload written by enc and read by dec. A tag or a type registered
// twice, or a tag of the journal's own frames, panics at start.
func register[T any, P interface {
	*T
	collectors.Observation
}](tag byte, enc func(*encoder, P), dec func(*decoder, time.Time) P) *coding {
	typ := reflect.TypeFor[P]()
	if tag < 'a' || tag > 'z' || tag == tagUnknown || codings.byTag[tag] != nil || codings.byType[typ] != nil {
		panic(fmt.Sprintf("journal: coding of %v under tag %q: tag or type taken, or not an observation tag", typ, tag))
	}
	c := &coding{
		tag: tag,
		encode: func(e *encoder, o collectors.Observation) bool {
			v := o.(P)
			if v == nil {
				return false
			}
			enc(e, v)
			return true
		},
		decode: func(d *decoder, at time.Time) collectors.Observation { return dec(d, at) },
	}
	if codings.byType == nil {
		codings.byType = map[reflect.Type]*coding{}
	}
	codings.byTag[tag] = c
	codings.byType[typ] = c
	return c
}

// codingOf is the coding of o's type, nil for a type without one.
func codingOf(o collectors.Observation) *coding {
	return codings.byType[reflect.TypeOf(o)]
}

// isObservation says whether tag is an observation's frame.
func isObservation(tag byte) bool { return codings.byTag[tag] != nil }

// backfill is the catch-up test of a type a decision log reads from what
// it held at start, when f says so of a value.
func backfill[T any, P interface {
	*T
	collectors.Observation
}](f func(P) bool) func(collectors.Observation) (bool, bool) {
	return func(o collectors.Observation) (bool, bool) {
		v := o.(P)
		return false, v != nil && f(v)
	}
}

// catchUp says whether o is history read late: a replayed event batch, or
// a decision log's backfill.
func catchUp(o collectors.Observation) (replayed, backfill bool) {
	if c := codingOf(o); c != nil && c.catchUp != nil {
		return c.catchUp(o)
	}
	return false, false
}
