package remote

import (
	"reflect"
	"sync"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// Localize puts every time in a decoded snapshot in this machine's zone.
// JSON carries the collector's offset ("14:02:11+09:00"), and the views
// print times as they are: without this a console in Paris attached to a
// collector in Tokyo would show Tokyo's wall clock beside its own. The
// instants are unchanged; zero times stay zero (they mean "unknown").
//
// It walks the snapshot by reflection, so a time field the pool adds
// later is covered without a change here.
func Localize(s *snapshot.Snapshot) {
	if s != nil {
		walkTimes(reflect.ValueOf(s).Elem(), func(t time.Time) time.Time { return t.Local() })
	}
}

var timeType = reflect.TypeFor[time.Time]()

// holdsTime caches, per type, whether a value of it can hold a time.Time.
var holdsTime sync.Map // reflect.Type -> bool

// The snapshot's types are examined once, up front: a type being examined
// reads as "no time" to a concurrent walker for a moment.
func init() { hasTime(reflect.TypeFor[snapshot.Snapshot]()) }

func hasTime(t reflect.Type) bool {
	if v, ok := holdsTime.Load(t); ok {
		return v.(bool)
	}
	holdsTime.Store(t, false) // a recursive type meets itself as "no" while it is examined
	var has bool
	switch t.Kind() {
	case reflect.Struct:
		if t == timeType {
			has = true
			break
		}
		for i := 0; i < t.NumField(); i++ {
			if f := t.Field(i); f.IsExported() && hasTime(f.Type) {
				has = true
				break
			}
		}
	case reflect.Pointer, reflect.Slice, reflect.Array:
		has = hasTime(t.Elem())
	case reflect.Map:
		has = hasTime(t.Elem())
	}
	holdsTime.Store(t, has)
	return has
}

// walkTimes replaces every non-zero time.Time reachable from v (exported
// fields, pointers, slices, arrays, map values) by fn of it.
func walkTimes(v reflect.Value, fn func(time.Time) time.Time) {
	if !hasTime(v.Type()) {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == timeType {
			if t := v.Interface().(time.Time); !t.IsZero() && v.CanSet() {
				v.Set(reflect.ValueOf(fn(t)))
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				walkTimes(f, fn)
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			walkTimes(v.Elem(), fn)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			walkTimes(v.Index(i), fn)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			walkTimes(e, fn)
			v.SetMapIndex(it.Key(), e)
		}
	}
}
