package remote

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/kvtop/kvtop/views/fixture"
)

// BenchmarkDecodeFrame256Workers decodes one stream line of a 256-worker
// snapshot into a snapshot.Snapshot, times localized: the remote console's
// cost per refresh.
func BenchmarkDecodeFrame256Workers(b *testing.B) {
	line, err := json.Marshal(fixture.Large(256))
	if err != nil {
		b.Fatal(err)
	}
	line = append(line, '\n')
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		r := newFrames(bytes.NewReader(line), DefaultMaxFrame)
		if _, err := r.next(); err != nil {
			b.Fatal(err)
		}
	}
}
