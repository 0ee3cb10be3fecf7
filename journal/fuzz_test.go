package journal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// seedJournal is a small journal of every observation type, as bytes.
func seedJournal(t testing.TB, n int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seed")
	writeFrames(t, path, sampleObservations(n))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzReader: any file is read without a panic and within bounds; what
// it yields is what the same bytes yield again, and reading stops cleanly
// (io.EOF) with a reason whenever it stops before the file's end.
func FuzzReader(f *testing.F) {
	whole := seedJournal(f, 8)
	f.Add(whole)
	f.Add(whole[:len(whole)-3])     // torn tail
	f.Add([]byte(Magic))            // a magic and nothing else
	f.Add(append([]byte(Magic), 0)) // an empty frame
	flipped := append([]byte(nil), whole...)
	flipped[len(flipped)/2] ^= 1
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, data []byte) {
		first, st1, err := readBytes(data)
		if err != nil {
			return // not a journal: said at Open
		}
		again, st2, _ := readBytes(data)
		if len(first) != len(again) || st1 != st2 {
			t.Fatalf("the same bytes read twice: %d then %d records, %+v then %+v", len(first), len(again), st1, st2)
		}
		if uint64(len(first)) > uint64(len(data)) {
			t.Fatalf("%d records from %d bytes", len(first), len(data))
		}
		if st1.Bytes > int64(len(data)) {
			t.Fatalf("read %d bytes of %d", st1.Bytes, len(data))
		}
		if st1.Bytes < int64(len(data)) && st1.Stop == "" {
			t.Fatalf("stopped at byte %d of %d without saying why", st1.Bytes, len(data))
		}
	})
}

// readBytes reads data as a journal file (in memory: the same Reader).
func readBytes(data []byte) ([]Record, ReadStats, error) {
	open := func(string) (io.ReadCloser, int64, error) {
		return io.NopCloser(bytes.NewReader(data)), int64(len(data)), nil
	}
	rd, err := openWith(open, "fuzz")
	if err != nil {
		return nil, ReadStats{}, err
	}
	defer rd.Close()
	var out []Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, rd.Stats(), nil
		}
		if err != nil {
			return out, rd.Stats(), err
		}
		out = append(out, rec)
	}
}

// FuzzFrame: any frame body (its checksum passed: a buggy or forged
// writer) decodes without a panic, allocating no more than its size
// allows, to a record or an error.
func FuzzFrame(f *testing.F) {
	for _, body := range seedBodies(f) {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d := newDecoder()
		d.syms = []string{"w0", "GPU", "tcp://127.0.0.1:5557", string(make([]byte, 24))}
		rec, _, err := d.frame(body)
		if err == nil && rec.Kind == 0 {
			t.Fatalf("a frame decoded to no record and no error")
		}
	})
}

// seedBodies are the frame bodies of a small journal, one of each kind.
func seedBodies(t testing.TB) [][]byte {
	data := seedJournal(t, 16)
	br := bufioReader(data)
	if _, _, err := readHead(br, "seed"); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	seen := map[byte]bool{}
	for {
		body, _, err := readFrame(br, nil, int64(len(data)))
		if err != nil {
			break
		}
		if !seen[body[0]] {
			seen[body[0]] = true
			out = append(out, append([]byte(nil), body...))
		}
	}
	return out
}

// TestWriteFuzzSeeds rewrites the committed seed corpus (testdata/fuzz)
// from the current format: KVTOP_FUZZ_SEEDS=1 go test -run WriteFuzzSeeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("KVTOP_FUZZ_SEEDS") == "" {
		t.Skip("set KVTOP_FUZZ_SEEDS=1 to rewrite testdata/fuzz")
	}
	whole := seedJournal(t, 8)
	write := func(target, name string, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("FuzzReader", "whole", whole)
	write("FuzzReader", "torn-tail", whole[:len(whole)-5])
	flipped := bytes.Clone(whole)
	flipped[len(flipped)*2/3] ^= 0x10
	write("FuzzReader", "flipped-byte", flipped)
	long := bytes.Clone(whole[:len(Magic)])
	long = append(long, 0xff, 0xff, 0xff, 0xff, 0x7f) // a frame claiming far more than the file
	write("FuzzReader", "claims-too-much", long)
	names := map[byte]string{tagSymbol: "symbol", tagTick: "tick", tagRefresh: "refresh", tagLost: "lost", tagEnd: "end",
		tagScrape: "scrape", tagBatch: "batch", tagReset: "reset", tagStatus: "status", tagDecision: "decision",
		tagOutcome: "outcome", tagError: "error", tagDecSrc: "decision-source", tagUnknown: "unknown-type"}
	for _, body := range seedBodies(t) {
		name := names[body[0]]
		if name == "" {
			name = fmt.Sprintf("tag-%02x", body[0])
		}
		write("FuzzFrame", name, body)
	}
}
