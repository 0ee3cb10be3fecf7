package natsevents

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/kvtop/kvtop/collectors/internal/msgpack"
)

// kind is the type of the next value, whatever the encoding.
type kind uint8

const (
	kNone kind = iota
	kMap
	kArray
	kString
	kBytes
	kUint
	kInt
	kFloat
	kBool
	kNil
	kOther // msgpack ext and the reserved code
)

func (k kind) String() string {
	return [...]string{"nothing", "map", "array", "string", "bytes", "unsigned integer", "integer", "float", "bool", "null", "extension"}[k]
}

// maxDepth bounds nesting: Dynamo's deepest value (a stored block's
// multimodal info) is six levels down.
const maxDepth = 32

var (
	errDepth = errors.New("nesting deeper than 32 levels")
	errShort = errors.New("truncated")
)

// tokens walks one encoded value tree. The RouterEvent decoder is written
// once against it; jsonTokens and mpTokens read the two encodings Dynamo
// publishes (serde_json and rmp_serde). Values are read in document order;
// next reports whether another map entry or array element of the open
// container follows (stepping past the separator, and reading an entry's
// key: a string, msgpack also takes bin), so a container is read the same
// way whether its length is known up front (msgpack) or not (JSON): one
// call an item.
type tokens interface {
	peek() (kind, error)
	beginMap() error
	beginArray() error
	next() (key []byte, ok bool, err error) // ok false: the container's end, or err
	uint() (uint64, error)
	str() ([]byte, error)
	bytes(limit int) ([]byte, error) // msgpack bin; JSON: a string, or an array of byte values
	null() (bool, error)             // consumes a null if the next value is one
	skip() error
	rest() int // bytes not read yet
}

// ---------------------------------------------------------------------------
// JSON

type jsonTokens struct {
	b     []byte
	i     int
	stack []jframe
	scr   []byte // unescaped string scratch
}

// jframe is one open JSON container.
type jframe struct{ isMap, started bool }

func (t *jsonTokens) ws() {
	for t.i < len(t.b) {
		switch t.b[t.i] {
		case ' ', '\t', '\n', '\r':
			t.i++
		default:
			return
		}
	}
}

func (t *jsonTokens) rest() int { return len(t.b) - t.i }

func (t *jsonTokens) peek() (kind, error) {
	t.ws()
	if t.i >= len(t.b) {
		return kNone, errShort
	}
	switch c := t.b[t.i]; {
	case c == '{':
		return kMap, nil
	case c == '[':
		return kArray, nil
	case c == '"':
		return kString, nil
	case c == '-':
		return kInt, nil
	case c >= '0' && c <= '9':
		j := t.i
		for j < len(t.b) && t.b[j] >= '0' && t.b[j] <= '9' {
			j++
		}
		if j < len(t.b) && (t.b[j] == '.' || t.b[j] == 'e' || t.b[j] == 'E') {
			return kFloat, nil
		}
		return kUint, nil
	case c == 't' || c == 'f':
		return kBool, nil
	case c == 'n':
		return kNil, nil
	}
	return kNone, fmt.Errorf("unexpected %q at byte %d", t.b[t.i], t.i)
}

func (t *jsonTokens) open(c byte) error {
	t.ws()
	if t.i >= len(t.b) {
		return errShort
	}
	if t.b[t.i] != c {
		k, _ := t.peek()
		return fmt.Errorf("want %s at byte %d, found %s", map[byte]string{'{': "an object", '[': "an array"}[c], t.i, k)
	}
	if len(t.stack) >= maxDepth {
		return errDepth
	}
	t.i++
	t.stack = append(t.stack, jframe{isMap: c == '{'})
	return nil
}

func (t *jsonTokens) beginMap() error   { return t.open('{') }
func (t *jsonTokens) beginArray() error { return t.open('[') }

func (t *jsonTokens) more() (bool, error) {
	if len(t.stack) == 0 {
		return false, errors.New("more outside a container")
	}
	t.ws()
	if t.i >= len(t.b) {
		return false, errShort
	}
	if c := t.b[t.i]; c == '}' || c == ']' {
		t.i++
		t.stack = t.stack[:len(t.stack)-1]
		return false, nil
	}
	top := &t.stack[len(t.stack)-1]
	if top.started {
		if t.b[t.i] != ',' {
			return false, fmt.Errorf("want ',' at byte %d", t.i)
		}
		t.i++
	}
	top.started = true
	return true, nil
}

func (t *jsonTokens) next() ([]byte, bool, error) {
	ok, err := t.more()
	if err != nil || !ok || !t.stack[len(t.stack)-1].isMap {
		return nil, ok, err
	}
	k, err := t.key()
	return k, err == nil, err
}

func (t *jsonTokens) key() ([]byte, error) {
	k, err := t.str()
	if err != nil {
		return nil, err
	}
	t.ws()
	if t.i >= len(t.b) || t.b[t.i] != ':' {
		return nil, fmt.Errorf("want ':' at byte %d", t.i)
	}
	t.i++
	return k, nil
}

// str returns a string's bytes: a slice of the input when it has no
// escapes, else unescaped into a scratch buffer valid until the next str.
func (t *jsonTokens) str() ([]byte, error) {
	t.ws()
	if t.i >= len(t.b) || t.b[t.i] != '"' {
		k, _ := t.peek()
		return nil, fmt.Errorf("want a string at byte %d, found %s", t.i, k)
	}
	start := t.i + 1
	j := start
	for j < len(t.b) && t.b[j] != '"' && t.b[j] != '\\' {
		j++
	}
	if j < len(t.b) && t.b[j] == '"' {
		t.i = j + 1
		return t.b[start:j], nil
	}
	// Escapes: find the end, then let strconv unquote (JSON's escapes are
	// Go's but for \/, which is rare in keys and tiers).
	for j < len(t.b) {
		if t.b[j] == '\\' {
			j += 2
			continue
		}
		if t.b[j] == '"' {
			break
		}
		j++
	}
	if j >= len(t.b) {
		return nil, errShort
	}
	raw := t.b[t.i : j+1]
	t.i = j + 1
	s, err := strconv.Unquote(string(raw))
	if err != nil {
		return nil, fmt.Errorf("bad string escape: %w", err)
	}
	t.scr = append(t.scr[:0], s...)
	return t.scr, nil
}

// uint reads an integer. A negative one is taken bit for bit (Dynamo's
// hashes come from i64 as well as u64); fractions are refused.
func (t *jsonTokens) uint() (uint64, error) {
	t.ws()
	neg := false
	j := t.i
	if j < len(t.b) && t.b[j] == '-' {
		neg = true
		j++
	}
	start := j
	for j < len(t.b) && t.b[j] >= '0' && t.b[j] <= '9' {
		j++
	}
	if j == start {
		k, _ := t.peek()
		return 0, fmt.Errorf("want an integer at byte %d, found %s", t.i, k)
	}
	if j < len(t.b) && (t.b[j] == '.' || t.b[j] == 'e' || t.b[j] == 'E') {
		return 0, fmt.Errorf("want an integer at byte %d, found a fraction", t.i)
	}
	if neg {
		v, err := strconv.ParseInt(string(t.b[t.i:j]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("integer out of range at byte %d", t.i)
		}
		t.i = j
		return uint64(v), nil
	}
	var v uint64
	for _, c := range t.b[start:j] {
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, fmt.Errorf("integer out of range at byte %d", t.i)
		}
		v = v*10 + d
	}
	t.i = j
	return v, nil
}

// bytes reads the phase-1 envelope's payload: serde_json writes a Vec<u8>
// as an array of numbers.
func (t *jsonTokens) bytes(limit int) ([]byte, error) {
	k, err := t.peek()
	if err != nil {
		return nil, err
	}
	if k == kString {
		return t.str()
	}
	if err := t.beginArray(); err != nil {
		return nil, err
	}
	var out []byte
	for {
		ok, err := t.more()
		if err != nil || !ok {
			return out, err
		}
		v, err := t.uint()
		if err != nil {
			return nil, err
		}
		if v > 255 {
			return nil, fmt.Errorf("payload byte %d is over 255", v)
		}
		if len(out) >= limit {
			return nil, fmt.Errorf("payload over %d bytes", limit)
		}
		out = append(out, byte(v))
	}
}

func (t *jsonTokens) null() (bool, error) {
	t.ws()
	if t.i+4 <= len(t.b) && string(t.b[t.i:t.i+4]) == "null" {
		t.i += 4
		return true, nil
	}
	return false, nil
}

// skip steps over one value, iteratively: a hostile document cannot grow
// the Go stack (and nesting is bounded by maxDepth anyway).
func (t *jsonTokens) skip() error {
	base := len(t.stack)
	for {
		k, err := t.peek()
		if err != nil {
			return err
		}
		switch k {
		case kMap:
			err = t.beginMap()
		case kArray:
			err = t.beginArray()
		default:
			err = t.scalar(k)
		}
		if err != nil {
			return err
		}
		// Step to the next value to skip, closing finished containers.
		for {
			if len(t.stack) == base {
				return nil
			}
			ok, err := t.more()
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if t.stack[len(t.stack)-1].isMap {
				if _, err := t.key(); err != nil {
					return err
				}
			}
			break
		}
	}
}

func (t *jsonTokens) scalar(k kind) error {
	switch k {
	case kString:
		_, err := t.str()
		return err
	case kUint, kInt, kFloat:
		j := t.i
		for j < len(t.b) && (t.b[j] == '-' || t.b[j] == '+' || t.b[j] == '.' || t.b[j] == 'e' || t.b[j] == 'E' || (t.b[j] >= '0' && t.b[j] <= '9')) {
			j++
		}
		t.i = j
		return nil
	case kBool:
		for _, w := range []string{"true", "false"} {
			if t.i+len(w) <= len(t.b) && string(t.b[t.i:t.i+len(w)]) == w {
				t.i += len(w)
				return nil
			}
		}
	case kNil:
		if ok, _ := t.null(); ok {
			return nil
		}
	}
	return fmt.Errorf("bad %s at byte %d", k, t.i)
}

// ---------------------------------------------------------------------------
// MessagePack

// mpTokens reads rmp_serde's encoding with the event collectors' msgpack
// cursor; it only adds the open containers' counts that more needs.
type mpTokens struct {
	c     msgpack.Cursor
	stack []mpFrame
}

// mpFrame is one open container: its items left (a map: its pairs).
type mpFrame struct {
	left  int
	isMap bool
}

func (t *mpTokens) rest() int { return t.c.Left() }

func (t *mpTokens) peek() (kind, error) {
	c, err := t.c.Peek()
	if err != nil {
		return kNone, err
	}
	return mpKinds[c], nil
}

// mpKinds is the kind of the value each msgpack type code starts.
var mpKinds = func() (k [256]kind) {
	of := [...]kind{msgpack.Invalid: kOther, msgpack.Nil: kNil, msgpack.Bool: kBool, msgpack.Int: kUint,
		msgpack.Float: kFloat, msgpack.Str: kString, msgpack.Bin: kBytes, msgpack.Array: kArray,
		msgpack.Map: kMap, msgpack.Ext: kOther}
	for c := range k {
		k[c] = of[msgpack.TypeOf(byte(c))]
		if k[c] == kUint && msgpack.Signed(byte(c)) {
			k[c] = kInt
		}
	}
	return k
}()

// open enters a container of n items (pairs).
func (t *mpTokens) open(n int, isMap bool, err error) error {
	if err != nil {
		return err
	}
	if len(t.stack) >= maxDepth {
		return errDepth
	}
	t.stack = append(t.stack, mpFrame{n, isMap})
	return nil
}

func (t *mpTokens) beginMap() error {
	n, err := t.c.MapLen()
	return t.open(n, true, err)
}

func (t *mpTokens) beginArray() error {
	n, err := t.c.ArrayLen()
	return t.open(n, false, err)
}

func (t *mpTokens) next() ([]byte, bool, error) {
	top := len(t.stack) - 1
	if top < 0 {
		return nil, false, errors.New("next outside a container")
	}
	f := &t.stack[top]
	if f.left == 0 {
		t.stack = t.stack[:top]
		return nil, false, nil
	}
	f.left--
	if !f.isMap {
		return nil, true, nil
	}
	k, err := t.c.Str()
	return k, err == nil, err
}

func (t *mpTokens) str() ([]byte, error) { return t.c.Str() }

func (t *mpTokens) bytes(limit int) ([]byte, error) {
	b, err := t.c.Str()
	if err == nil && len(b) > limit {
		return nil, fmt.Errorf("payload over %d bytes", limit)
	}
	return b, err
}

// uint reads any integer, a negative one bit for bit (Dynamo's hashes
// come from i64 as well as u64).
func (t *mpTokens) uint() (uint64, error) { return t.c.Bits() }

func (t *mpTokens) null() (bool, error) { return t.c.TryNil(), nil }

// skip steps over one value (the cursor's is iterative: a hostile
// document cannot grow the Go stack).
func (t *mpTokens) skip() error { return t.c.Skip() }
