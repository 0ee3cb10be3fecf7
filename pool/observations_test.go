package pool

import (
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// TestApplyTakesEveryObservationType: State.Apply has a place for every
// observation type collectors declares (collectors.Types): none is
// counted as an unknown type. A new source's type fails here until the
// pool applies it (docs/ADD-A-SOURCE.md).
func TestApplyTakesEveryObservationType(t *testing.T) {
	at := time.Unix(1_790_000_000, 0)
	for _, o := range collectors.Types() {
		s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}})
		s.Apply(o)
		if unknownType(s.Snapshot(at)) {
			t.Errorf("%T: the pool ignored it as an unknown type: add it to State.Apply", o)
		}
	}
	type future struct{ collectors.SourceError }
	s := NewState(Options{})
	if s.Apply(&future{}); !unknownType(s.Snapshot(at)) {
		t.Error("a type Apply does not know was not counted")
	}
}

func unknownType(snap *snapshot.Snapshot) bool {
	for _, e := range snap.Errors {
		if e.Source == "pool" && e.Kind == "ignored" && e.Last == "unknown observation type" {
			return true
		}
	}
	return false
}
