package wirecheck

import (
	"encoding/binary"
	"fmt"
)

// EndSeq is the replay end marker's seq.
const EndSeq = ^uint64(0)

// Live checks one live message: exactly [topic, seq (8 bytes big-endian),
// payload].
func Live(frames [][]byte, o Options) (topic string, seq uint64, b *Batch, err error) {
	if len(frames) != 3 {
		return "", 0, nil, fmt.Errorf("live message has %d frames, want 3", len(frames))
	}
	if len(frames[1]) != 8 {
		return "", 0, nil, fmt.Errorf("seq frame has %d bytes, want 8", len(frames[1]))
	}
	seq = binary.BigEndian.Uint64(frames[1])
	b, err = Payload(frames[2], o)
	return string(frames[0]), seq, b, err
}

// Reply is one replay reply as a DEALER receives it.
type Reply struct {
	Layout string // "v26" (["", topic, seq8, payload]) or "legacy" (["", seq8, payload])
	Topic  string
	Seq    uint64
	End    bool // the end marker
	Batch  *Batch
}

// ReplyFrames checks one replay reply in either layout. want is "v26",
// "legacy" or "" for either.
func ReplyFrames(frames [][]byte, want string, o Options) (*Reply, error) {
	r := &Reply{}
	var seq8, payload []byte
	switch {
	case len(frames) == 4 && len(frames[0]) == 0:
		r.Layout, r.Topic, seq8, payload = "v26", string(frames[1]), frames[2], frames[3]
	case len(frames) == 3 && len(frames[0]) == 0:
		r.Layout, seq8, payload = "legacy", frames[1], frames[2]
	default:
		return nil, fmt.Errorf("replay reply has %d frames (first %d bytes), want [\"\", topic, seq8, payload] or [\"\", seq8, payload]", len(frames), len(frames[0]))
	}
	if want != "" && r.Layout != want {
		return nil, fmt.Errorf("replay reply layout is %s, want %s", r.Layout, want)
	}
	if len(seq8) != 8 {
		return nil, fmt.Errorf("replay seq frame has %d bytes, want 8", len(seq8))
	}
	r.Seq = binary.BigEndian.Uint64(seq8)
	if r.Seq == EndSeq {
		if len(payload) != 0 || r.Topic != "" {
			return nil, fmt.Errorf("end marker has topic %q and %d payload bytes, want both empty", r.Topic, len(payload))
		}
		r.End = true
		return r, nil
	}
	b, err := Payload(payload, o)
	if err != nil {
		return nil, err
	}
	r.Batch = b
	return r, nil
}
