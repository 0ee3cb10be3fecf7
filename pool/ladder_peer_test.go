package pool

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/kvevents"
)

// The ladder on a stream we did not write: the live KV events of two
// llm-d-inference-sim instances (testdata/peers, README there). A sent a
// document (18 blocks), B the same document after it, both then evicted
// under four and three new documents, A the document again, then slept
// (AllBlocksCleared). Every computed block's class is checked against a
// model that replays the same events by the ladder's rules with plain
// sets, and the capture must exercise routing and eviction at all.
func TestLadderOnPeerCapture(t *testing.T) {
	f, err := os.Open(peerPages + "kvevents-live.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := NewState(Options{Workers: []WorkerSpec{{Name: "a"}, {Name: "b"}}, Window: time.Hour})
	// The model: what each worker holds, who held a hash and who evicted it.
	held := map[string]map[uint64]bool{"a": {}, "b": {}}
	ever := map[uint64]bool{}
	evicted := map[string]map[uint64]bool{"a": {}, "b": {}}
	want := map[string]*[ladderSlots]float64{"a": {}, "b": {}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var last time.Time
	for sc.Scan() {
		var l struct {
			At     float64  `json:"recv_unix_ts"`
			Frames []string `json:"frames_hex"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		topic, _ := hex.DecodeString(l.Frames[0])
		seq, _ := hex.DecodeString(l.Frames[1])
		payload, _ := hex.DecodeString(l.Frames[2])
		w := "a"
		if strings.Contains(string(topic), ":8002@") {
			w = "b"
		}
		dec, err := kvevents.DecodeBatch(payload)
		if err != nil {
			t.Fatalf("%s seq %x: %v", topic, seq, err)
		}
		sec, frac := math.Modf(l.At)
		last = time.Unix(int64(sec), int64(frac*1e9))
		other := map[string]string{"a": "b", "b": "a"}[w]
		for _, ev := range dec.Events {
			switch ev.Kind {
			case collectors.BlockStored:
				for _, h := range ev.Hashes {
					if held[w][h] {
						continue // a copy of a block it holds: not a miss
					}
					tok := float64(16)
					switch {
					case held[other][h]:
						want[w][lossRouting] += tok
					case evicted[w][h]:
						want[w][lossCapacity] += tok
					case ever[h]:
						want[w][lossPoolCapacity] += tok
					default:
						want[w][ladderNew] += tok
					}
					held[w][h], ever[h] = true, true
				}
			case collectors.BlockRemoved:
				for _, h := range ev.Hashes {
					if held[w][h] {
						delete(held[w], h)
						evicted[w][h] = true
					}
				}
			case collectors.AllBlocksCleared:
				held[w] = map[uint64]bool{} // not an eviction: a restart's loss reads as pool capacity
			}
		}
		var n uint64
		for _, b := range seq {
			n = n<<8 | uint64(b)
		}
		s.Apply(&collectors.EventBatch{Worker: w, Seq: n, TS: dec.TS, Events: dec.Events, At: last})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot(last)
	names := []string{"routing", "capacity", "pool_capacity", "configuration", "new_blocks"}
	for _, w := range []string{"a", "b"} {
		l := row(t, snap, w).Ladder
		got := []float64{l.Routing, l.Capacity, l.PoolCapacity, l.Configuration, l.NewBlocks}
		exp := []float64{want[w][lossRouting], want[w][lossCapacity], want[w][lossPoolCapacity], 0, want[w][ladderNew]}
		for i := range got {
			if got[i] != exp[i] {
				t.Errorf("%s %s = %v tokens, the model says %v", w, names[i], got[i], exp[i])
			}
		}
		t.Logf("%s: routing %v, capacity %v, pool capacity %v, new %v tokens", w, got[0], got[1], got[2], got[4])
	}
	if want["b"][lossRouting] < 18*16 {
		t.Errorf("the capture should have B compute the 18 blocks of the document A held: routing %v tokens", want["b"][lossRouting])
	}
	if want["a"][lossCapacity]+want["a"][lossPoolCapacity]+want["b"][lossCapacity]+want["b"][lossPoolCapacity] == 0 {
		t.Errorf("the capture's evictions and re-sends give no capacity loss in the model")
	}
}
