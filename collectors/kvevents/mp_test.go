package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// The tests' own tiny msgpack encoding, built on msgpack.Encoder so that the
// decoder under test is checked against an independent writer.
//
// Values: nil, string, bool, int (compact), int64 (always 0xd3, like a
// signed SGLang hash), uint64 (always 0xcf, like a vLLM hash), uint32 (0xce,
// like token ids), float64, []byte (bin), []any (array), om (ordered map),
// raw (bytes spliced in as is).
type om []kv

type kv struct {
	k string
	v any
}

type raw []byte

func mpEncode(v any) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	mpWrite(e, &buf, v)
	return buf.Bytes()
}

func mpWrite(e *msgpack.Encoder, buf *bytes.Buffer, v any) {
	var err error
	switch v := v.(type) {
	case nil:
		err = e.EncodeNil()
	case string:
		err = e.EncodeString(v)
	case bool:
		err = e.EncodeBool(v)
	case int:
		err = e.EncodeInt(int64(v))
	case int64:
		err = e.EncodeInt64(v)
	case uint64:
		err = e.EncodeUint64(v)
	case uint32:
		err = e.EncodeUint32(v)
	case float64:
		err = e.EncodeFloat64(v)
	case []byte:
		err = e.EncodeBytes(v)
	case raw:
		buf.Write(v)
	case []any:
		err = e.EncodeArrayLen(len(v))
		for _, x := range v {
			mpWrite(e, buf, x)
		}
	case om:
		err = e.EncodeMapLen(len(v))
		for _, p := range v {
			if err := e.EncodeString(p.k); err != nil {
				panic(err)
			}
			mpWrite(e, buf, p.v)
		}
	default:
		panic(fmt.Sprintf("mpWrite: unsupported %T", v))
	}
	if err != nil {
		panic(err)
	}
}

// tokens returns n token ids encoded like vLLM's (uint32 values).
func tokens(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = uint32(0x80000000 + i*7919)
	}
	return out
}

// hashList builds a block_hashes array from uint64s.
func hashList(hs ...uint64) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h
	}
	return out
}

// storedMap is a vLLM ≥ 0.24 map-encoded BlockStored.
func storedMap(parent any, hs ...uint64) om {
	return om{
		{"type", "BlockStored"}, {"block_hashes", hashList(hs...)}, {"parent_block_hash", parent},
		{"token_ids", tokens(16 * len(hs))}, {"block_size", 16}, {"lora_id", nil},
		{"medium", "GPU"}, {"lora_name", nil},
	}
}

// storedArray is an array-encoded BlockStored with every vLLM position.
func storedArray(parent any, hs ...uint64) []any {
	return []any{"BlockStored", hashList(hs...), parent, tokens(16 * len(hs)), 16, nil, "GPU", nil, nil, 0, "full_attention", nil}
}

func removedMap(hs ...uint64) om {
	return om{{"type", "BlockRemoved"}, {"block_hashes", hashList(hs...)}, {"medium", "GPU"}}
}

func removedArray(hs ...uint64) []any {
	return []any{"BlockRemoved", hashList(hs...), "GPU"}
}

// batchOf is a vLLM batch [ts, events, dp_rank].
func batchOf(ts float64, events ...any) []byte {
	return mpEncode([]any{ts, []any(events), 0})
}
