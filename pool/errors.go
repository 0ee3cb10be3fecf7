package pool

import (
	"sort"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

type errKey struct{ source, kind string }

type errRow struct {
	count int
	last  string
	at    time.Time
	order uint64 // arrival order: ties in time stay in arrival order
}

// errorTable aggregates source errors by (source, kind), bounded: when
// full, the row heard from least recently makes room.
type errorTable struct {
	rows  map[errKey]*errRow
	limit int
	next  uint64
}

func newErrorTable(limit int) *errorTable {
	return &errorTable{rows: map[errKey]*errRow{}, limit: limit}
}

func (t *errorTable) add(source, kind, msg string, at time.Time) {
	k := errKey{source, kind}
	r := t.rows[k]
	if r == nil {
		if len(t.rows) >= t.limit {
			t.evictOldest()
		}
		r = &errRow{}
		t.rows[k] = r
	}
	t.next++
	r.count++
	r.last = message(msg, 300)
	r.at = at
	r.order = t.next
}

func (t *errorTable) evictOldest() {
	var old errKey
	var o uint64 = 1<<64 - 1
	for k, r := range t.rows {
		if r.order < o {
			old, o = k, r.order
		}
	}
	delete(t.rows, old)
}

// list returns the rows, most recent first.
func (t *errorTable) list() []snapshot.ErrorCount {
	type kr struct {
		k errKey
		r *errRow
	}
	all := make([]kr, 0, len(t.rows))
	for k, r := range t.rows {
		all = append(all, kr{k, r})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].r.order > all[j].r.order })
	out := make([]snapshot.ErrorCount, len(all))
	for i, x := range all {
		out[i] = snapshot.ErrorCount{Source: x.k.source, Kind: x.k.kind, Count: x.r.count, Last: x.r.last, At: x.r.at}
	}
	return out
}
