package journal

import (
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

// TestEveryObservationHasACoding: every observation type collectors
// declares (collectors.Types, which collectors' own test keeps complete)
// has a journal coding, and comes back from a journal field for field; no
// coding is left for a type collectors no longer has. A new source's type
// fails here until it registers its coding (an obs_*.go file).
func TestEveryObservationHasACoding(t *testing.T) {
	types := map[reflect.Type]bool{}
	f := filler{rand.New(rand.NewPCG(3, 4))}
	var obs []collectors.Observation
	for _, proto := range collectors.Types() {
		typ := reflect.TypeOf(proto)
		types[typ] = true
		c := codingOf(proto)
		if c == nil {
			t.Errorf("%v has no journal coding: register one (journal/obs_*.go, docs/ADD-A-SOURCE.md)", typ)
			continue
		}
		if !isObservation(c.tag) {
			t.Errorf("%v: tag %q is not an observation's", typ, c.tag)
		}
		for range 50 {
			v := reflect.New(typ.Elem())
			f.fill(v.Elem(), 0)
			obs = append(obs, v.Interface().(collectors.Observation))
		}
	}
	for typ, c := range codings.byType {
		if !types[typ] {
			t.Errorf("a coding (tag %q) for %v, which is not in collectors.Types", c.tag, typ)
		}
	}
	if t.Failed() {
		return
	}
	path := filepath.Join(t.TempDir(), "j")
	writeFrames(t, path, obs)
	recs, st := readAll(t, path)
	i := 0
	for _, r := range recs {
		if r.Kind != KindObservation {
			continue
		}
		if i < len(obs) && !reflect.DeepEqual(r.Observation, obs[i]) {
			t.Fatalf("%T came back otherwise:\nwrote %+v\nread  %+v", obs[i], obs[i], r.Observation)
		}
		i++
	}
	if i != len(obs) {
		t.Fatalf("read %d observations of %d (stop: %q)", i, len(obs), st.Stop)
	}
}
