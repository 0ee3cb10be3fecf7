package wirecheck

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The real captures of llm-d-inference-sim (an independent vLLM simulator),
// copied from the shared testdata: held to the same checks as our sim.
var peerDir = filepath.Join("..", "..", "testdata", "peers", "llm-d-inference-sim")

type capture struct {
	Kind      string   `json:"kind"`
	Label     string   `json:"label"`
	Socket    string   `json:"socket"`
	FramesHex []string `json:"frames_hex"`
}

func readCaptures(t *testing.T, name string) []capture {
	t.Helper()
	f, err := os.Open(filepath.Join(peerDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []capture
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var c capture
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func frames(t *testing.T, hexes []string) [][]byte {
	t.Helper()
	out := make([][]byte, len(hexes))
	for i, h := range hexes {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

var peerOpts = Options{PeerQuirks: true}

// TestPeerLiveCaptures decodes every live frame the peer published: 3
// frames, seq contiguous from 1 per topic (its quirk), array events on A and
// map events on B, token count = block size x hashes, and residency
// (stored minus removed) never above its 64-block cache.
func TestPeerLiveCaptures(t *testing.T) {
	caps := readCaptures(t, "kvevents-live.jsonl")
	if len(caps) != 19 {
		t.Fatalf("%d live messages, want 19", len(caps))
	}
	next := map[string]uint64{}
	resident := map[string]map[uint64]int{}
	encodings := map[string]string{}
	var kinds = map[string]int{}
	for _, c := range caps {
		topic, seq, b, err := Live(frames(t, c.FramesHex), peerOpts)
		if err != nil {
			t.Fatalf("live message %s: %v", c.FramesHex[1], err)
		}
		if _, ok := next[topic]; !ok {
			next[topic] = 1
			resident[topic] = map[uint64]int{}
		}
		if seq != next[topic] {
			t.Fatalf("%s: seq %d, want %d", topic, seq, next[topic])
		}
		next[topic]++
		if b.Len != 3 || b.Rank == nil || *b.Rank != 0 {
			t.Errorf("%s seq %d: batch of %d elements, rank %v; want [ts, events, 0]", topic, seq, b.Len, b.Rank)
		}
		for _, e := range b.Events {
			kinds[e.Kind]++
			if prev := encodings[topic]; prev != "" && prev != e.Encoding {
				t.Errorf("%s mixes %s and %s events", topic, prev, e.Encoding)
			}
			encodings[topic] = e.Encoding
			if e.HashKind != "" && e.HashKind != "uint64" {
				t.Errorf("%s: hash kind %s, want uint64", topic, e.HashKind)
			}
			switch e.Kind {
			case "BlockStored":
				for _, k := range e.Keys {
					resident[topic][k]++
				}
			case "BlockRemoved":
				for _, k := range e.Keys {
					if resident[topic][k] == 0 {
						t.Errorf("%s seq %d: removed %x which is not resident", topic, seq, k)
					}
					resident[topic][k]--
				}
			case "AllBlocksCleared":
				resident[topic] = map[uint64]int{}
			}
			if n := residentCount(resident[topic]); n > 64 {
				t.Fatalf("%s seq %d: %d blocks resident, cache holds 64", topic, seq, n)
			}
		}
	}
	if next["kv@127.0.0.1:8001@sim-org/sim-model-1b"] != 12 || next["kv@127.0.0.1:8002@sim-org/sim-model-1b"] != 9 {
		t.Errorf("seq ends %v, want A 1..11 and B 1..8", next)
	}
	if encodings["kv@127.0.0.1:8001@sim-org/sim-model-1b"] != "array" || encodings["kv@127.0.0.1:8002@sim-org/sim-model-1b"] != "map" {
		t.Errorf("encodings %v, want A array and B map", encodings)
	}
	if kinds["BlockStored"] == 0 || kinds["BlockRemoved"] == 0 || kinds["AllBlocksCleared"] != 1 {
		t.Errorf("event kinds %v, want stores, removals and one AllBlocksCleared", kinds)
	}
}

func residentCount(m map[uint64]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestPeerReplayCaptures checks every DEALER reply in the v26 layout, that
// each replayed payload is byte-identical to the live one with the same seq,
// and that every DEALER request ends with the end marker.
func TestPeerReplayCaptures(t *testing.T) {
	live := map[string][]byte{} // topic/seq -> payload
	for _, c := range readCaptures(t, "kvevents-live.jsonl") {
		f := frames(t, c.FramesHex)
		live[string(f[0])+"/"+hex.EncodeToString(f[1])] = f[2]
	}
	ends := map[string]int{}
	replies := map[string]int{}
	dealer := map[string]bool{}
	for _, c := range readCaptures(t, "replay.jsonl") {
		if c.Kind == "request" {
			dealer[c.Label] = c.Socket == "DEALER" && len(c.FramesHex) == 2
			continue
		}
		if c.Kind != "reply" || !dealer[c.Label] {
			continue // a REQ socket strips the delimiter; the malformed request timed out
		}
		f := frames(t, c.FramesHex)
		r, err := ReplyFrames(f, "v26", peerOpts)
		if err != nil {
			t.Fatalf("%s: %v", c.Label, err)
		}
		if r.End {
			ends[c.Label]++
			continue
		}
		replies[c.Label]++
		if want := live[r.Topic+"/"+hex.EncodeToString(f[2])]; string(want) != string(f[3]) {
			t.Errorf("%s seq %d: replayed payload differs from the live one", c.Label, r.Seq)
		}
	}
	for label, ok := range dealer {
		if ok && ends[label] != 1 {
			t.Errorf("%s: %d end markers, want 1", label, ends[label])
		}
	}
	want := map[string]int{"A:from-0-final": 11, "B:from-0-final": 8, "A:beyond-latest": 0, "A:from-2-after-phase1": 1}
	for label, n := range want {
		if replies[label] != n {
			t.Errorf("%s: %d replies, want %d", label, replies[label], n)
		}
	}
}
