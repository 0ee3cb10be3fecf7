package kvevents

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/collectors"
)

const simDir = "../../testdata/peers/llm-d-inference-sim/"

// capLine is one line of the llm-d-inference-sim captures.
type capLine struct {
	Kind      string   `json:"kind"` // replay.jsonl only
	Label     string   `json:"label"`
	FramesHex []string `json:"frames_hex"`
	Decoded   *struct {
		Topic         string `json:"topic"`
		Seq           uint64 `json:"seq"`
		IsEndSentinel bool   `json:"is_end_sentinel"`
		Payload       *struct {
			TS     float64 `json:"ts"`
			Rank   *int    `json:"data_parallel_rank"`
			Events []struct {
				Encoding   string         `json:"encoding"`
				Tag        string         `json:"tag"`
				Named      map[string]any `json:"named"`
				HashesHex  []string       `json:"block_hashes_hex"`
				ParentHex  *string        `json:"parent_block_hash_hex"`
				NumTokenID *int           `json:"n_token_ids"`
			} `json:"events"`
		} `json:"payload"`
	} `json:"decoded"`
}

func readCapture(t testing.TB, name string) []capLine {
	t.Helper()
	f, err := os.Open(simDir + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []capLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var l capLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (l capLine) frames(t testing.TB) [][]byte {
	t.Helper()
	out := make([][]byte, len(l.FramesHex))
	for i, h := range l.FramesHex {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func hexHash(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkAgainstCapture compares a decoded batch with the capture's own
// decoded view (hashes from the exact *_hex strings).
func checkAgainstCapture(t *testing.T, where string, l capLine, got Batch) {
	t.Helper()
	p := l.Decoded.Payload
	if got.TS != p.TS {
		t.Errorf("%s: ts %v, want %v", where, got.TS, p.TS)
	}
	if p.Rank != nil && (!got.HasRank || got.Rank != *p.Rank) {
		t.Errorf("%s: rank %d (has %v), want %d", where, got.Rank, got.HasRank, *p.Rank)
	}
	if !reflect.DeepEqual(got.Stats, Stats{}) {
		t.Errorf("%s: the simulator sends nothing unknown, got %+v", where, got.Stats)
	}
	if len(got.Events) != len(p.Events) {
		t.Fatalf("%s: %d events, want %d", where, len(got.Events), len(p.Events))
	}
	for i, want := range p.Events {
		ev := got.Events[i]
		at := where + " event " + strconv.Itoa(i)
		if ev.Kind.String() != want.Tag {
			t.Errorf("%s: kind %v, want %s", at, ev.Kind, want.Tag)
		}
		if len(ev.Hashes) != len(want.HashesHex) {
			t.Fatalf("%s: %d hashes, want %d", at, len(ev.Hashes), len(want.HashesHex))
		}
		for j, hh := range want.HashesHex {
			if ev.Hashes[j] != hexHash(t, hh) {
				t.Errorf("%s: hash %d = %#x, want %s", at, j, ev.Hashes[j], hh)
			}
		}
		wantParent := uint64(0)
		if want.ParentHex != nil {
			wantParent = hexHash(t, *want.ParentHex)
		}
		if ev.HasParent != (wantParent != 0) || ev.Parent != wantParent {
			t.Errorf("%s: parent %#x (has %v), want %#x (0 = none)", at, ev.Parent, ev.HasParent, wantParent)
		}
		if want.NumTokenID != nil && ev.NumTokens != *want.NumTokenID {
			t.Errorf("%s: %d tokens, want %d", at, ev.NumTokens, *want.NumTokenID)
		}
		if bs, ok := want.Named["block_size"].(float64); ok && ev.BlockSize != int(bs) {
			t.Errorf("%s: block size %d, want %v", at, ev.BlockSize, bs)
		}
		if m, ok := want.Named["medium"].(string); ok && ev.Medium != m {
			t.Errorf("%s: medium %q, want %q", at, ev.Medium, m)
		}
		if ln, _ := want.Named["lora_name"].(string); ev.LoRA != ln {
			t.Errorf("%s: lora %q, want %q", at, ev.LoRA, ln)
		}
	}
}

// Every live frame the simulator sent decodes to what the capture says.
func TestCaptureLiveFrames(t *testing.T) {
	lines := readCapture(t, "kvevents-live.jsonl")
	seqs := map[string][]uint64{}
	var lora, blocks int
	clearedAt := ""
	var d decoder // one for all lines, as a reader has: its scratch is reused
	for n, l := range lines {
		m := parseLive(0, l.frames(t), &d, testNow)
		if m.kind != msgBatch || m.b.err != nil {
			t.Fatalf("line %d: kind %v err %v %s", n+1, m.kind, m.b.err, m.text)
		}
		if m.b.topic != l.Decoded.Topic || m.b.seq != l.Decoded.Seq {
			t.Fatalf("line %d: topic %q seq %d, want %q %d", n+1, m.b.topic, m.b.seq, l.Decoded.Topic, l.Decoded.Seq)
		}
		checkAgainstCapture(t, "line "+strconv.Itoa(n+1), l, m.b.batch)
		id := TopicID(m.b.topic)
		seqs[id] = append(seqs[id], m.b.seq)
		for _, ev := range m.b.batch.Events {
			blocks += len(ev.Hashes)
			if ev.LoRA != "" {
				lora++
			}
			if ev.Kind == collectors.AllBlocksCleared {
				clearedAt = id + " seq " + strconv.FormatUint(m.b.seq, 10)
			}
		}
	}
	if a, b := seqs["127.0.0.1:8001"], seqs["127.0.0.1:8002"]; len(a) != 11 || a[0] != 1 || a[10] != 11 || len(b) != 8 || b[0] != 1 || b[7] != 8 {
		t.Errorf("seqs per instance: A %v, B %v; want A 1–11, B 1–8", a, b)
	}
	if clearedAt != "127.0.0.1:8001 seq 10" {
		t.Errorf("AllBlocksCleared at %q, want instance A seq 10", clearedAt)
	}
	if lora != 2 {
		t.Errorf("%d LoRA events, want 2", lora)
	}
	if blocks == 0 {
		t.Error("no block hashes decoded")
	}
}

// Every replay exchange parses (4-frame layout with the DEALER's empty
// delimiter), each replayed payload is byte-identical to the live one and
// decodes the same, and the end marker is recognised.
func TestCaptureReplay(t *testing.T) {
	live := map[string][]byte{}
	for _, l := range readCapture(t, "kvevents-live.jsonl") {
		live[l.Decoded.Topic+"/"+strconv.FormatUint(l.Decoded.Seq, 10)] = l.frames(t)[2]
	}
	replies := map[string][]uint64{}
	ends := map[string]int{}
	for n, l := range readCapture(t, "replay.jsonl") {
		if l.Kind != "reply" {
			continue
		}
		frames := l.frames(t)
		rr, err := ParseReplayReply(frames)
		if strings.HasSuffix(l.Label, "req-socket-gets-only-first-reply") {
			// A REQ socket strips the delimiter: not a DEALER reply.
			if err == nil {
				t.Errorf("line %d: a REQ-stripped reply was accepted as a DEALER reply", n+1)
			}
			continue
		}
		if err != nil {
			t.Fatalf("line %d (%s): %v", n+1, l.Label, err)
		}
		if rr.Seq != l.Decoded.Seq || rr.End != l.Decoded.IsEndSentinel {
			t.Fatalf("line %d: seq %d end %v, want %d %v", n+1, rr.Seq, rr.End, l.Decoded.Seq, l.Decoded.IsEndSentinel)
		}
		if rr.End {
			ends[l.Label]++
			if rr.Topic != "" || len(rr.Payload) != 0 {
				t.Errorf("line %d: end marker with topic %q and %d payload bytes", n+1, rr.Topic, len(rr.Payload))
			}
			continue
		}
		replies[l.Label] = append(replies[l.Label], rr.Seq)
		if want := live[rr.Topic+"/"+strconv.FormatUint(rr.Seq, 10)]; !bytes.Equal(rr.Payload, want) {
			t.Errorf("line %d: replayed payload of %s seq %d differs from the live one", n+1, rr.Topic, rr.Seq)
		}
		b, err := DecodeBatch(rr.Payload)
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		checkAgainstCapture(t, "replay line "+strconv.Itoa(n+1), l, b)
	}
	if got := replies["A:from-0-final"]; len(got) != 11 || got[0] != 1 || got[10] != 11 {
		t.Errorf("A full replay seqs %v, want 1..11 (the simulator counts from 1)", got)
	}
	if got := replies["B:from-0-final"]; len(got) != 8 {
		t.Errorf("B full replay seqs %v, want 1..8", got)
	}
	if got := replies["A:beyond-latest"]; len(got) != 0 || ends["A:beyond-latest"] != 1 {
		t.Errorf("a request newer than the buffer got %v and %d end markers; want only the end marker", got, ends["A:beyond-latest"])
	}
	if got := replies["A:from-2-after-phase1"]; len(got) != 1 || got[0] != 2 {
		t.Errorf("replay from 2 gave %v, want [2]", got)
	}
}

// llm-d-inference-sim counts from 1. Joined late, its replay from 0 returns
// its whole buffer from seq 1, far fewer batches than a full vLLM ring:
// nothing before seq 1 can exist, so the history is complete. The real
// bytes of instance A (seqs 1..9, before its AllBlocksCleared at 10, which
// would end a joined_late by itself) are served by a test publisher.
func TestCaptureJoinLateCountsFromOne(t *testing.T) {
	var topic string
	var payloads [][]byte // by seq - 1
	var firstHash []uint64
	for _, l := range readCapture(t, "kvevents-live.jsonl") {
		if TopicID(l.Decoded.Topic) != "127.0.0.1:8001" || l.Decoded.Seq > 9 {
			continue
		}
		if l.Decoded.Seq != uint64(len(payloads)+1) {
			t.Fatalf("capture seq %d out of order", l.Decoded.Seq)
		}
		topic = l.Decoded.Topic
		payloads = append(payloads, l.frames(t)[2])
		firstHash = append(firstHash, hexHash(t, l.Decoded.Payload.Events[0].HashesHex[0]))
	}
	p := newTestPub(t, pubOpts{replay: true, topic: topic})
	p.seq = 1
	for _, pl := range payloads[:8] {
		p.drop(pl) // published before kvtop listened
	}
	h := connectOne(t, p, Options{})
	p.publish(payloads[8])
	st := h.waitStatus("w0", 0, "seq 9 applied", func(s *collectors.StreamStatus) bool { return s.LastSeq == 9 && s.State != replayng })
	if st.State != live || st.FirstSeq != 9 || st.Missing != 0 || len(h.incidents("w0", 0, "joined_late")) != 0 {
		t.Errorf("state %s first=%d missing=%d incidents %+v; want live, the history complete", st.State, st.FirstSeq, st.Missing, st.History)
	}
	bs := h.batches("w0", 0)
	if got := seqsOf(bs); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("batches %v, want 1..9", got)
	}
	for i, b := range bs {
		if b.Events[0].Hashes[0] != firstHash[i] || b.Replayed != (i < 8) || b.Topic != topic {
			t.Errorf("seq %d: first hash %#x replayed %v topic %q; want the capture's %#x, replayed %v", b.Seq, b.Events[0].Hashes[0], b.Replayed, b.Topic, firstHash[i], i < 8)
		}
	}
}
