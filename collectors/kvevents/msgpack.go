package kvevents

import (
	"encoding/binary"
	"fmt"

	"github.com/kvtop/kvtop/collectors/internal/msgpack"
)

// cursor is the event collectors' msgpack cursor over one payload, with
// the scratch that collects a batch's hashes while its events are decoded
// (decoder.hs, lent for one payload).
type cursor struct {
	msgpack.Cursor
	scratch []uint64
}

// hash reads a block hash: an unsigned or (SGLang) signed integer kept as
// its 64-bit pattern, or a byte/str string keyed by its last 8 bytes
// big-endian (shorter strings right-aligned).
func (r *cursor) hash() (uint64, error) {
	c, err := r.Peek()
	if err != nil {
		return 0, err
	}
	if t := msgpack.TypeOf(c); t == msgpack.Str || t == msgpack.Bin {
		s, err := r.Str()
		if err != nil {
			return 0, err
		}
		return bytesKey(s), nil
	}
	v, err := r.Bits() // a full-width uint64 first
	if err != nil {
		return 0, fmt.Errorf("block hash: %w", err)
	}
	return v, nil
}

// bytesKey is the last 8 bytes of s, big-endian; shorter s right-aligned.
func bytesKey(s []byte) uint64 {
	if len(s) >= 8 {
		return binary.BigEndian.Uint64(s[len(s)-8:])
	}
	var v uint64
	for _, b := range s {
		v = v<<8 | uint64(b)
	}
	return v
}
