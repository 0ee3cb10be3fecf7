package journal

import (
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// A source's error, tag 'x' (a failed scrape carries one too).
func init() {
	register(tagError, (*encoder).sourceError, (*decoder).sourceError).catchUp =
		backfill(func(v *collectors.SourceError) bool { return v.Backfill })
}

func (e *encoder) sourceError(v *collectors.SourceError) {
	w := e.beginAt(tagError, v.At)
	w.sourceError(v)
	e.end()
}

func (d *decoder) sourceError(at time.Time) *collectors.SourceError {
	v := d.r.sourceError()
	v.At = at
	return v
}

func (w *wbuf) sourceError(v *collectors.SourceError) {
	w.sym(v.Source)
	w.sym(v.Kind)
	w.sym(v.Message)
	w.flag(v.Backfill)
}

func (r *rbuf) sourceError() *collectors.SourceError {
	return &collectors.SourceError{Source: r.sym(), Kind: r.sym(), Message: r.sym(), Backfill: r.flag()}
}
