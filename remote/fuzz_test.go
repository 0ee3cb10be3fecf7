package remote

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/kvtop/kvtop/views/fixture"
)

// FuzzFrames: whatever a collector (or something posing as one) sends,
// the frame reader returns snapshots or an error, never panics, and never
// holds more than its bound for one line.
func FuzzFrames(f *testing.F) {
	good, _ := json.Marshal(fixture.Snapshot())
	f.Add(append(good, '\n'))
	f.Add([]byte("{}\n{\"at\":\"2025-06-01T14:02:11+09:00\",\"seq\":3}\n"))
	f.Add([]byte("{\"at\": nonsense}\n"))
	f.Add([]byte("\n\n  \n{\"workers\":[{\"name\":\"w\\u001b0\",\"streams\":null}]}"))
	f.Add([]byte("{\"at\":\"0000-01-01T00:00:00Z\",\"pool\":{\"queue\":1e308}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 64 << 10
		r := newFrames(bytes.NewReader(data), limit)
		for i := 0; i < 1000; i++ {
			s, err := r.next()
			if len(r.buf) > limit+64<<10 {
				t.Fatalf("frame buffer grew to %d bytes past its %d bound", len(r.buf), limit)
			}
			if err != nil {
				return
			}
			if s == nil {
				t.Fatal("no snapshot and no error")
			}
		}
	})
}
