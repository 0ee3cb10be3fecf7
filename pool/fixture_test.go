package pool

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// simLine is the part of a captured llm-d-inference-sim frame the pool
// tests need (its `decoded` view; hashes as hex strings keep full width).
type simLine struct {
	Recv    float64 `json:"recv_unix_ts"`
	Decoded struct {
		Topic   string `json:"topic"`
		Seq     uint64 `json:"seq"`
		Payload struct {
			TS     float64 `json:"ts"`
			Events []struct {
				Tag      string   `json:"tag"`
				Hashes   []string `json:"block_hashes_hex"`
				Parent   *string  `json:"parent_block_hash_hex"`
				NTokens  int      `json:"n_token_ids"`
				Named    map[string]json.RawMessage
				Encoding string `json:"encoding"`
			} `json:"events"`
		} `json:"payload"`
	} `json:"decoded"`
}

func hex64(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad hash %q: %v", s, err)
	}
	return v
}

// simBatches turns the capture into the EventBatches the KV event
// collector sends: worker = the id inside the topic kv@<id>@<model>, and
// array mode's parent 0 means "no parent".
func simBatches(t *testing.T) []*collectors.EventBatch {
	fh, err := os.Open("testdata/llm-d-inference-sim-kvevents-live.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []*collectors.EventBatch
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l simLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		d := l.Decoded
		b := &collectors.EventBatch{
			Worker: strings.Split(d.Topic, "@")[1], Topic: d.Topic, Seq: d.Seq, TS: d.Payload.TS,
			Endpoint: "tcp://127.0.0.1:5557",
			At:       time.Unix(0, int64(l.Recv*1e9)).UTC(),
		}
		for _, e := range d.Payload.Events {
			ev := collectors.KVEvent{NumTokens: e.NTokens, Medium: "GPU"}
			switch e.Tag {
			case "BlockStored":
				ev.Kind = collectors.BlockStored
			case "BlockRemoved":
				ev.Kind = collectors.BlockRemoved
			case "AllBlocksCleared":
				ev.Kind = collectors.AllBlocksCleared
			}
			for _, h := range e.Hashes {
				ev.Hashes = append(ev.Hashes, hex64(t, h))
			}
			if e.Parent != nil {
				if p := hex64(t, *e.Parent); p != 0 || e.Encoding != "array" {
					ev.Parent, ev.HasParent = p, true
				}
			}
			if bs, ok := e.Named["block_size"]; ok {
				ev.BlockSize, _ = strconv.Atoi(string(bs))
			}
			b.Events = append(b.Events, ev)
		}
		out = append(out, b)
	}
	return out
}

// TestRealSimulatorStream replays the real capture of two simulators
// through the pool, checking resident blocks per worker and pool-wide
// after every batch (expected values counted independently from the
// capture), the hot prefix estimated from the events, and its depth.
func TestRealSimulatorStream(t *testing.T) {
	s := NewState(Options{Window: time.Hour, Workers: []WorkerSpec{
		{Name: "A", Aliases: []string{"http://127.0.0.1:8001"}},
		{Name: "B", Aliases: []string{"http://127.0.0.1:8002"}},
	}})
	want := [][3]int{ // A, B, pool-distinct after each batch; -1: B has no stream yet (unknown, not 0)
		{18, -1, 18}, {58, -1, 58}, {58, 18, 58}, {58, 34, 72}, {64, 34, 91}, {48, 34, 82}, {53, 34, 87},
		{58, 34, 92}, {58, 62, 120}, {58, 46, 104}, {58, 52, 110}, {64, 52, 116}, {64, 64, 128},
		{48, 64, 112}, {64, 64, 128}, {0, 64, 64}, {0, 48, 48}, {18, 48, 66}, {18, 64, 82},
	}
	batches := simBatches(t)
	if len(batches) != len(want) {
		t.Fatalf("%d batches in the capture, want %d", len(batches), len(want))
	}
	const doc1 = "d1b46c644854acaf" // the deepest full block of the shared document DOC1
	var snap *snapshot.Snapshot
	for i, b := range batches {
		s.Apply(b)
		snap = s.Snapshot(b.At)
		a, bb := row(t, snap, "A"), row(t, snap, "B")
		if got := [3]int{blocksOf(a.Blocks), blocksOf(bb.Blocks), blocksOf(snap.Pool.Blocks)}; got != want[i] {
			t.Fatalf("after batch %d (%s seq %d): blocks %v, want %v", i+1, b.Worker, b.Seq, got, want[i])
		}
		if i == 3 {
			// DOC1 + 3 questions on A and 2 on B continue DOC1's last full
			// block (5 requests); B's first DOC1 request re-stored it while
			// it was already hot (1 more): 6 of 11 BlockStored events.
			p := snap.Prefixes[0]
			if p.ID != doc1 || p.Source != "events" || p.Replicas != 2 || blocksOf(p.Tokens) != 17*16 || p.Orphan ||
				math.Abs(p.Requests-6) > 0.06 || math.Abs(p.Share-6.0/11) > 0.01 ||
				math.Abs(p.Workers["A"]-0.5) > 0.01 || math.Abs(p.Workers["B"]-0.5) > 0.01 {
				t.Fatalf("hot prefix after 4 batches = %+v", p)
			}
		}
	}
	a, bb := row(t, snap, "A"), row(t, snap, "B")
	if a.Streams[0].LastSeq == nil || *a.Streams[0].LastSeq != 11 || a.Streams[0].Batches != 11 ||
		bb.Streams[0].LastSeq == nil || *bb.Streams[0].LastSeq != 8 || a.Streams[0].UnknownRemovals != 0 {
		t.Fatalf("streams A %+v B %+v", a.Streams[0], bb.Streams[0])
	}
	// DOC1 came back to A twice after eviction (requests 30-31 and after
	// the wake-up): both re-stores count for the hot prefix. B evicted it.
	p := snap.Prefixes[0]
	if p.ID != doc1 || p.Replicas != 1 || blocksOf(p.Tokens) != 272 || math.Abs(p.Requests-9) > 0.1 || math.Abs(p.Share-9.0/23) > 0.01 {
		t.Fatalf("hot prefix at the end = %+v", p)
	}
	if len(a.TopPrefixes) == 0 || a.TopPrefixes[0].ID != doc1 || len(bb.TopPrefixes) != 0 && bb.TopPrefixes[0].ID == doc1 {
		t.Fatalf("top prefixes held: A %+v B %+v", a.TopPrefixes, bb.TopPrefixes)
	}
}
