package journal

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

func sampleObservations(n int) []collectors.Observation {
	f := filler{rand.New(rand.NewPCG(3, 4))}
	var obs []collectors.Observation
	for i := 0; len(obs) < n; i++ {
		proto := allTypes()[i%len(allTypes())]
		v := reflect.New(reflect.TypeOf(proto).Elem())
		f.fill(v.Elem(), 0)
		obs = append(obs, v.Interface().(collectors.Observation))
	}
	return obs
}

func isPrefix(got, full []Record) bool {
	if len(got) > len(full) {
		return false
	}
	for i := range got {
		if got[i].Kind != full[i].Kind || !reflect.DeepEqual(got[i].Observation, full[i].Observation) || !got[i].At.Equal(full[i].At) {
			return false
		}
	}
	return true
}

// TestTornTailAtEveryByte: a file cut at any byte (a crash while writing)
// reads cleanly up to its last whole frame, and says where it stopped.
func TestTornTailAtEveryByte(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j")
	writeFrames(t, path, sampleObservations(24))
	data, _ := os.ReadFile(path)
	full, st := readAll(t, path)
	if !st.Ended {
		t.Fatal("the whole file should end with its end marker")
	}
	cutPath := filepath.Join(dir, "cut")
	prev := -1
	headerEnd := len(Magic) + 10 // well inside the header frame or after
	// Every byte of the last frames, a sample before them.
	for cut := headerEnd; cut < len(data); cut += step(cut, len(data)) {
		if err := os.WriteFile(cutPath, data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadHeader(cutPath); err != nil {
			if !strings.Contains(err.Error(), "cut short") {
				t.Fatalf("cut at %d: header error %v", cut, err)
			}
			continue
		}
		got, st := readAll(t, cutPath)
		if !isPrefix(got, full) {
			t.Fatalf("cut at %d: %d records are not a prefix of the whole file's", cut, len(got))
		}
		if len(got) < prev {
			t.Fatalf("cut at %d: %d records, fewer than the %d of a shorter cut", cut, len(got), prev)
		}
		prev = len(got)
		if st.Ended {
			t.Fatalf("cut at %d: a cut file cannot have its end marker", cut)
		}
		if st.Stop != "" && !strings.Contains(st.Stop, "torn frame at byte") {
			t.Fatalf("cut at %d: stop %q", cut, st.Stop)
		}
	}
	if prev != len(full) { // the last cut is one byte short of the end marker
		t.Fatalf("cut just before the end marker: %d records of %d", prev, len(full))
	}
}

// TestFlippedByteStopsAtLastGoodFrame: a corrupt byte anywhere past the
// header stops reading at the frame it is in, never before, and says so.
func TestFlippedByteStopsAtLastGoodFrame(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j")
	writeFrames(t, path, sampleObservations(16))
	data, _ := os.ReadFile(path)
	full, _ := readAll(t, path)
	_, hn, err := readHead(bufioReader(data), path)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	stops := map[string]int{}
	for i := int(hn); i < len(data); i += step(i, len(data)) {
		c := append([]byte(nil), data...)
		c[i] ^= 0x20
		_ = os.WriteFile(bad, c, 0o644)
		got, st := readAll(t, bad)
		if !isPrefix(got, full) {
			t.Fatalf("byte %d flipped: the records read are not a prefix of the good file's", i)
		}
		if st.Stop == "" && len(got) == len(full) && st.Ended {
			t.Fatalf("byte %d flipped and nothing noticed", i)
		}
		stops[firstWords(st.Stop)]++
	}
	if stops["checksum mismatch"] == 0 {
		t.Errorf("no flip was caught by a checksum: %v", stops)
	}
}

// step visits every offset in the last 600 bytes and one in 23 before.
func step(at, size int) int {
	if at >= size-600 {
		return 1
	}
	return 23
}

func firstWords(s string) string {
	if i := strings.Index(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	if i := strings.Index(s, " at byte"); i >= 0 {
		s = s[:i]
	}
	return s
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
