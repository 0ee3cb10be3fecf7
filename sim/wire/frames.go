package wire

import (
	"encoding/binary"
	"fmt"
)

// EndSeq is the seq of the replay end marker (ff ff ff ff ff ff ff ff).
const EndSeq = ^uint64(0)

// Seq8 is seq as 8 bytes, unsigned big-endian.
func Seq8(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Live is one live message: exactly 3 frames [topic, seq8, payload].
func Live(topic string, seq uint64, payload []byte) [][]byte {
	return [][]byte{[]byte(topic), Seq8(seq), payload}
}

// Layout is the replay reply layout.
type Layout uint8

const (
	// V26 is vLLM >= 0.26: ["", topic, seq8, payload], end ["", "", ff*8, ""].
	V26 Layout = iota
	// Legacy is vLLM < 0.26 and SGLang: ["", seq8, payload], end ["", ff*8, ""].
	Legacy
)

// ParseLayout parses "v26" or "legacy".
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "v26":
		return V26, nil
	case "legacy":
		return Legacy, nil
	}
	return 0, fmt.Errorf("replay layout %q is not one of v26, legacy", s)
}

func (l Layout) String() string { return [...]string{"v26", "legacy"}[l] }

// Reply is one replayed batch as the DEALER receives it (the ROUTER sends
// the client identity first).
func (l Layout) Reply(topic string, seq uint64, payload []byte) [][]byte {
	if l == Legacy {
		return [][]byte{{}, Seq8(seq), payload}
	}
	return [][]byte{{}, []byte(topic), Seq8(seq), payload}
}

// End is the end marker as the DEALER receives it.
func (l Layout) End() [][]byte {
	if l == Legacy {
		return [][]byte{{}, Seq8(EndSeq), {}}
	}
	return [][]byte{{}, {}, Seq8(EndSeq), {}}
}

// ParseRequest reads a replay request as the ROUTER receives it:
// [identity, "", seq8]. Anything else is not a request.
func ParseRequest(frames [][]byte) (identity []byte, seq uint64, err error) {
	if len(frames) != 3 {
		return nil, 0, fmt.Errorf("replay request has %d frames, want 3 (identity, empty, seq8)", len(frames))
	}
	if len(frames[1]) != 0 {
		return nil, 0, fmt.Errorf("replay request has no empty delimiter frame")
	}
	if len(frames[2]) != 8 {
		return nil, 0, fmt.Errorf("replay request seq is %d bytes, want 8", len(frames[2]))
	}
	return frames[0], binary.BigEndian.Uint64(frames[2]), nil
}
