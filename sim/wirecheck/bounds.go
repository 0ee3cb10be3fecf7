package wirecheck

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const maxDepth = 32

// bounds walks a msgpack value without decoding it and checks that every
// length fits in the bytes that are left, so the generic decoder never
// preallocates for a length the payload cannot hold (a 5-byte header can
// claim 4 billion elements).
func bounds(p []byte) error {
	end, err := walk(p, 0, 0)
	if err != nil {
		return err
	}
	if end != len(p) {
		return fmt.Errorf("payload has %d trailing bytes", len(p)-end)
	}
	return nil
}

var errTruncated = errors.New("payload is truncated")

func walk(p []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("payload nests deeper than %d", maxDepth)
	}
	if i >= len(p) {
		return 0, errTruncated
	}
	c := p[i]
	i++
	size := func(k int) (int, error) {
		if i+k > len(p) {
			return 0, errTruncated
		}
		var n uint64
		switch k {
		case 1:
			n = uint64(p[i])
		case 2:
			n = uint64(binary.BigEndian.Uint16(p[i:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(p[i:]))
		}
		i += k
		if n > uint64(len(p)-i) {
			return 0, fmt.Errorf("length %d exceeds the %d bytes left", n, len(p)-i)
		}
		return int(n), nil
	}
	skip := func(n int) (int, error) {
		if i+n > len(p) {
			return 0, errTruncated
		}
		return i + n, nil
	}
	items := func(n int) (int, error) {
		var err error
		for k := 0; k < n; k++ {
			if i, err = walk(p, i, depth+1); err != nil {
				return 0, err
			}
		}
		return i, nil
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return i, nil
	case c&0xe0 == 0xa0:
		return skip(int(c & 0x1f))
	case c&0xf0 == 0x90:
		return items(int(c & 0x0f))
	case c&0xf0 == 0x80:
		return items(2 * int(c&0x0f))
	}
	switch c {
	case 0xcc, 0xd0:
		return skip(1)
	case 0xcd, 0xd1:
		return skip(2)
	case 0xce, 0xd2, 0xca:
		return skip(4)
	case 0xcf, 0xd3, 0xcb:
		return skip(8)
	case 0xc4, 0xd9, 0xc5, 0xda, 0xc6, 0xdb:
		k := map[byte]int{0xc4: 1, 0xd9: 1, 0xc5: 2, 0xda: 2, 0xc6: 4, 0xdb: 4}[c]
		n, err := size(k)
		if err != nil {
			return 0, err
		}
		return skip(n)
	case 0xdc, 0xdd, 0xde, 0xdf:
		k := 2
		if c == 0xdd || c == 0xdf {
			k = 4
		}
		n, err := size(k)
		if err != nil {
			return 0, err
		}
		if c >= 0xde {
			n *= 2
		}
		return items(n)
	}
	return 0, fmt.Errorf("msgpack type 0x%02x is not used by KV events", c)
}
