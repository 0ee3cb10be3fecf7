package collectors_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// TestTypesListsEveryObservation: every type of this package with an
// ObservedAt method is in Types, once, so the journal's and the pool's
// tests over Types see it (a new source cannot skip its journal coding or
// its place in the pool).
func TestTypesListsEveryObservation(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != "ObservedAt" || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok {
					declared = append(declared, id.Name)
					continue
				}
			}
			t.Errorf("%s: ObservedAt on a receiver that is not a pointer to a named type", fset.Position(fd.Pos()))
		}
	}
	var listed []string
	for _, o := range collectors.Types() {
		listed = append(listed, reflect.TypeOf(o).Elem().Name())
	}
	slices.Sort(declared)
	slices.Sort(listed)
	if len(declared) == 0 || !slices.Equal(declared, listed) {
		t.Fatalf("observation types declared %v, listed in Types %v: add the new one to Types", declared, listed)
	}
}

var timeType = reflect.TypeFor[time.Time]()

// fill sets every exported field reachable from v: non-nil pointers,
// slices and maps, and every time to now (which has a monotonic reading).
func fill(v reflect.Value, now time.Time, depth int) {
	switch v.Kind() {
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), now, depth+1)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(now))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), now, depth+1)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			fill(s.Index(i), now, depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, now, depth+1)
		fill(e, now, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

// times calls f with every time reachable from v.
func times(v reflect.Value, f func(time.Time)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			times(v.Elem(), f)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			f(v.Interface().(time.Time))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				times(v.Field(i), f)
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			times(v.Index(i), f)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			times(it.Key(), f)
			times(it.Value(), f)
		}
	}
}

// TestWallClockDropsEveryMonotonicReading: WallClock of every observation
// type leaves no time with a monotonic reading, keeps the wall times, and
// leaves the collector's value as it was (its times keep theirs).
func TestWallClockDropsEveryMonotonicReading(t *testing.T) {
	now := time.Now()
	if now == now.Round(0) {
		t.Skip("no monotonic clock")
	}
	for _, proto := range collectors.Types() {
		v := reflect.New(reflect.TypeOf(proto).Elem())
		fill(v.Elem(), now, 0)
		o := v.Interface().(collectors.Observation)
		w := o.WallClock()
		if reflect.TypeOf(w) != reflect.TypeOf(o) || w == o {
			t.Errorf("%T: WallClock gave %T, the same pointer: %v", o, w, w == o)
			continue
		}
		n := 0
		times(reflect.ValueOf(w), func(x time.Time) {
			n++
			if x != x.Round(0) || !x.Equal(now) {
				t.Errorf("%T: a time %v after WallClock, want %v without a monotonic reading", o, x, now.Round(0))
			}
		})
		if n == 0 {
			t.Errorf("%T: no time reached", o)
		}
		times(reflect.ValueOf(o), func(x time.Time) {
			if x == x.Round(0) {
				t.Errorf("%T: WallClock changed a time of the value it copied", o)
			}
		})
		var nilp = reflect.Zero(reflect.TypeOf(proto)).Interface().(collectors.Observation)
		if got := nilp.WallClock(); got != nilp {
			t.Errorf("%T: WallClock of nil gave %v", o, got)
		}
	}
}
