package promapi

import (
	"math"
	"strings"
	"testing"
)

func TestAnswerDecode(t *testing.T) {
	var a answer
	err := a.decode([]byte(`{"status":"success","warnings":["w1"],"data":{"resultType":"vector","result":[
		{"metric":{"__name__":"up","pod":"w\"0"},"value":[1700000000.5,"1"]},
		{"metric":{},"value":[1700000000.5,"NaN"]},
		{"metric":{"pod":"w1"},"histogram":[1700000000.5,{"count":"3","sum":"1","buckets":[[0,"0.1","0.2","3"]]}]}]},"infos":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if a.status != "success" || a.resultType != "vector" || len(a.warnings) != 1 || a.evalSec != 1700000000.5 || len(a.samples) != 3 {
		t.Fatalf("%+v", a)
	}
	if a.samples[0].label("pod") != `w"0` || a.samples[0].value != 1 || !math.IsNaN(a.samples[1].value) || !a.samples[2].hist {
		t.Errorf("samples: %+v", a.samples)
	}
	for _, bad := range []string{``, `{"status":`, `[1]`, `{"data":{"result":[{"value":[1,"x"]}]}}`, strings.Repeat("[", 100)} {
		if err := a.decode([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzAnswer: whatever a server sends, decode returns; nothing it keeps
// outgrows the input.
func FuzzAnswer(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"w0","kvtop_q":"ts"},"value":[1700000000,"1700000000.25"]}]}}`))
	f.Add([]byte(`{"status":"error","errorType":"bad_data","error":"1:2: parse error"}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]]}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a answer
		if a.decode(b) != nil {
			return
		}
		pairs := 0
		for _, s := range a.samples {
			pairs += len(s.labels)
		}
		if pairs > len(b) || len(a.samples) > len(b) {
			t.Fatalf("%d samples, %d labels from %d bytes", len(a.samples), pairs, len(b))
		}
	})
}
