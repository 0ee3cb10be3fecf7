package journal

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/pool"
)

// allTypes is one of every observation type the journal encodes. A new
// collectors type must be added here and to encoder.observation.
func allTypes() []collectors.Observation {
	return []collectors.Observation{
		&collectors.MetricsScrape{}, &collectors.EventBatch{}, &collectors.StreamReset{},
		&collectors.StreamStatus{}, &collectors.Decision{}, &collectors.Outcome{},
		&collectors.SourceError{}, &collectors.DecisionSource{}, &collectors.TargetChange{},
	}
}

// filler sets every field of a value at random: nil and empty slices and
// maps, nil pointers, zero, local, UTC, fixed-zone and far-off times,
// whole and fractional floats, ±Inf and -0.
type filler struct{ r *rand.Rand }

var (
	timeType   = reflect.TypeOf(time.Time{})
	words      = []string{"", "w0", "w1", "GPU", "CPU", "tcp://127.0.0.1:5557", "live", "é ✓", "a\x00b"}
	floatPicks = []float64{0, 1, 3, 0.25, 1e15, 123456789, -7, math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 1.5e300, 0.1}
)

func (f filler) fill(v reflect.Value, depth int) {
	r := f.r
	switch v.Kind() {
	case reflect.Pointer:
		if r.IntN(4) == 0 || depth > 4 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(f.time()))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if !v.Type().Field(i).IsExported() {
				continue // the collector's own bookkeeping, never journaled
			}
			f.fill(v.Field(i), depth+1)
		}
	case reflect.Slice:
		switch r.IntN(5) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		n := 1 + r.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		switch r.IntN(4) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
			return
		}
		m := reflect.MakeMap(v.Type())
		for i := 0; i < 1+r.IntN(3); i++ {
			k := reflect.New(v.Type().Key()).Elem()
			f.fill(k, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		v.SetString(words[r.IntN(len(words))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt([]int64{0, 1, -1, 16, 1 << 40, math.MinInt64, math.MaxInt64}[r.IntN(7)])
	case reflect.Int32:
		v.SetInt([]int64{0, 1, -1, 16, 1024, math.MinInt32, math.MaxInt32}[r.IntN(7)])
	case reflect.Uint8:
		v.SetUint(uint64(r.IntN(256)))
	case reflect.Uint64:
		v.SetUint([]uint64{0, 1, 2, 1 << 63, math.MaxUint64, r.Uint64()}[r.IntN(6)])
	case reflect.Float64:
		if r.IntN(2) == 0 {
			v.SetFloat(floatPicks[r.IntN(len(floatPicks))])
		} else {
			v.SetFloat(r.Float64() * 1e9)
		}
	default:
		panic("filler: no rule for " + v.Type().String())
	}
}

func (f filler) time() time.Time {
	r := f.r
	base := time.Unix(1_790_000_000+r.Int64N(1000), r.Int64N(1e9))
	switch r.IntN(7) {
	case 0:
		return time.Time{}
	case 1:
		return base.UTC()
	case 2:
		return base.In(time.FixedZone("", 3600*(r.IntN(27)-12)))
	case 3:
		return time.Date(9999, 12, 31, 23, 59, 59, 999, time.UTC)
	case 4:
		return time.Date(1, 1, 1, 0, 0, 0, 1, time.Local)
	}
	return base.In(time.Local)
}

// writeFrames writes a journal file of the observations, straight from an
// encoder (no recorder), with a tick after each.
func writeFrames(t testing.TB, path string, obs []collectors.Observation) {
	t.Helper()
	e := newEncoder()
	e.out = append(e.out, Magic...)
	start := time.Unix(1_790_000_000, 0)
	if err := e.header(Header{Format: FormatVersion, Kvtop: "test", Run: "r", Segment: 1, Start: start, RunStart: start}); err != nil {
		t.Fatal(err)
	}
	for i, o := range obs {
		if !e.observation(o) {
			t.Fatalf("%T not encoded", o)
		}
		e.tick(start.Add(time.Duration(i)*time.Second), uint64(i+1))
	}
	e.endFrame(endClosed)
	if err := os.WriteFile(path, e.out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, paths ...string) ([]Record, ReadStats) {
	t.Helper()
	rd, err := Open(paths...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, rd.Stats()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
}

// TestEveryFieldRoundTrips: every field of every observation type, at
// random, comes back exactly as recorded: what the live pool applied is
// what the replay applies.
func TestEveryFieldRoundTrips(t *testing.T) {
	f := filler{rand.New(rand.NewPCG(1, 2))}
	var obs []collectors.Observation
	for i := 0; i < 400; i++ {
		for _, proto := range allTypes() {
			v := reflect.New(reflect.TypeOf(proto).Elem())
			f.fill(v.Elem(), 0)
			obs = append(obs, v.Interface().(collectors.Observation))
		}
	}
	path := filepath.Join(t.TempDir(), "j")
	writeFrames(t, path, obs)
	recs, st := readAll(t, path)
	var got []collectors.Observation
	for _, r := range recs {
		if r.Kind == KindObservation {
			got = append(got, r.Observation)
		}
	}
	if len(got) != len(obs) {
		t.Fatalf("read %d observations of %d (stop: %q)", len(got), len(obs), st.Stop)
	}
	for i := range obs {
		if !reflect.DeepEqual(got[i], obs[i]) {
			t.Fatalf("observation %d (%T) differs:\nwrote %+v\nread  %+v", i, obs[i], obs[i], got[i])
		}
	}
	if !st.Ended || st.Stop != "" || st.Ticks != uint64(len(obs)) {
		t.Errorf("stats %+v: want ended, no stop, %d ticks", st, len(obs))
	}
}

// TestNaNKeepsItsBits: a NaN gauge is recorded bit for bit.
func TestNaNKeepsItsBits(t *testing.T) {
	nan := math.Float64frombits(0x7ff8000000000001)
	path := filepath.Join(t.TempDir(), "j")
	writeFrames(t, path, []collectors.Observation{&collectors.MetricsScrape{Target: "w0", Engines: []collectors.EngineMetrics{{KVUsage: &nan}}}})
	recs, _ := readAll(t, path)
	got := recs[0].Observation.(*collectors.MetricsScrape).Engines[0].KVUsage
	if got == nil || math.Float64bits(*got) != math.Float64bits(nan) {
		t.Fatalf("NaN came back as %v", got)
	}
}

// TestUnknownTypeIsNamed: an observation type the journal cannot encode
// is named in the journal and counted, so the replay can say what it
// lacks; nil observations leave no trace.
func TestUnknownTypeIsNamed(t *testing.T) {
	type future struct{ collectors.SourceError }
	path := filepath.Join(t.TempDir(), "j")
	e := newEncoder()
	e.out = append(e.out, Magic...)
	_ = e.header(Header{Format: FormatVersion, Segment: 1, Start: time.Unix(1, 0)})
	if e.observation(&future{}) {
		t.Fatal("an unknown type was taken as encoded")
	}
	if !e.observation(nil) || !e.observation((*collectors.EventBatch)(nil)) {
		t.Fatal("nil observations must be accepted (the pool ignores them)")
	}
	_ = os.WriteFile(path, e.out, 0o644)
	recs, st := readAll(t, path)
	if len(recs) != 1 || recs[0].Kind != KindUnencoded || recs[0].Type != "*journal.future" || st.Unencoded != 1 {
		t.Fatalf("records %+v stats %+v", recs, st)
	}
}

var _ pool.Tap = (*Recorder)(nil)

// TestOlderDecisionAndOutcomePayloads: a journal recorded before decisions
// named a decode worker and outcomes carried output tokens, prefill, ITL
// and KV transfer ends each payload before those fields; it still replays,
// with them unknown, and the rest of each record as recorded.
func TestOlderDecisionAndOutcomePayloads(t *testing.T) {
	// The outcome's last fields, added with kvtop tap: two symbols already
	// defined (""), two nil floats, two nil ints and a flag, a byte each.
	const tapFields = 7
	for name, outcomeCut := range map[string]int{"before traces": 4 + tapFields, "before tap": tapFields} {
		t.Run(name, func(t *testing.T) { olderPayloads(t, outcomeCut, outcomeCut > tapFields) })
	}
}

func olderPayloads(t *testing.T, outcomeCut int, beforeTraces bool) {
	d := &collectors.Decision{RequestID: "r-1", Chosen: "w1", DecodeWorker: "w1", Format: "dynamo-trace", At: time.Unix(1_790_000_000, 0)}
	ot := 7
	o := &collectors.Outcome{RequestID: "r-1", Worker: "w1", HTTPStatus: 200, Format: "kvtop", At: time.Unix(1_790_000_001, 0)}
	if !beforeTraces {
		o.OutputTokens = &ot
	}
	e := newEncoder()
	for _, x := range []collectors.Observation{d, o} {
		if !e.observation(x) {
			t.Fatalf("%T not encoded", x)
		}
	}
	// Split the encoder's output into frame bodies.
	var bodies [][]byte
	for b := e.out; len(b) > 0; {
		n, k := binary.Uvarint(b)
		b = b[k+4:]
		bodies = append(bodies, b[:n])
		b = b[n:]
	}
	// The decision frame's last field is its DecodeWorker, a symbol already
	// defined (the chosen worker's): one byte. The outcome's are a nil int
	// and three nil floats: one byte each.
	cut := map[byte]int{tagDecision: 1, tagOutcome: outcomeCut}
	dec := newDecoder()
	var got []collectors.Observation
	for _, body := range bodies {
		if n := cut[body[0]]; n > 0 {
			body = body[:len(body)-n]
		}
		rec, _, err := dec.frame(body)
		if errors.Is(err, errSkip) {
			continue
		}
		if err != nil {
			t.Fatalf("frame %q: %v", body[0], err)
		}
		got = append(got, rec.Observation)
	}
	if len(got) != 2 {
		t.Fatalf("%d observations", len(got))
	}
	gd, god := got[0].(*collectors.Decision), got[1].(*collectors.Outcome)
	if gd.DecodeWorker != "" || gd.Chosen != "w1" || gd.Format != "dynamo-trace" || gd.RequestID != "r-1" {
		t.Errorf("older decision %+v", gd)
	}
	if (god.OutputTokens != nil) == beforeTraces || god.ITLMS != nil || god.Observer != "" || god.Breaks != nil ||
		god.Worker != "w1" || god.HTTPStatus != 200 || god.Format != "kvtop" {
		t.Errorf("older outcome %+v", god)
	}
}
