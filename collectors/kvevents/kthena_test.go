package kvevents

import (
	"fmt"
	"math/big"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

var testNow = time.Unix(1_800_000_000, 0)

// pyLiteral parses the Python repr that the kthena issue printed (lists,
// dicts, 'strings', ints, floats, None) into mpEncode values, keeping dict
// order. Integers above int64 become uint64, as msgspec writes them (0xcf).
type pyLiteral struct {
	s string
	i int
}

func (p *pyLiteral) ws() {
	for p.i < len(p.s) && strings.ContainsRune(" \n\t", rune(p.s[p.i])) {
		p.i++
	}
}

func (p *pyLiteral) value() (any, error) {
	p.ws()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '[':
		p.i++
		var out []any
		for {
			p.ws()
			if p.s[p.i] == ']' {
				p.i++
				return out, nil
			}
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			p.ws()
			if p.s[p.i] == ',' {
				p.i++
			}
		}
	case c == '{':
		p.i++
		var out om
		for {
			p.ws()
			if p.s[p.i] == '}' {
				p.i++
				return out, nil
			}
			k, err := p.value()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.s[p.i] != ':' {
				return nil, fmt.Errorf("want ':' at %d", p.i)
			}
			p.i++
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			out = append(out, kv{k.(string), v})
			p.ws()
			if p.s[p.i] == ',' {
				p.i++
			}
		}
	case c == '\'':
		end := strings.IndexByte(p.s[p.i+1:], '\'')
		if end < 0 {
			return nil, fmt.Errorf("unterminated string")
		}
		v := p.s[p.i+1 : p.i+1+end]
		p.i += end + 2
		return v, nil
	case strings.HasPrefix(p.s[p.i:], "None"):
		p.i += 4
		return nil, nil
	default:
		j := p.i
		for j < len(p.s) && strings.ContainsRune("-+.0123456789e", rune(p.s[j])) {
			j++
		}
		tok := p.s[p.i:j]
		p.i = j
		if strings.ContainsAny(tok, ".e") {
			return strconv.ParseFloat(tok, 64)
		}
		n, ok := new(big.Int).SetString(tok, 10)
		if !ok {
			return nil, fmt.Errorf("bad number %q", tok)
		}
		if n.IsInt64() {
			return int(n.Int64()), nil
		}
		return n.Uint64(), nil
	}
}

// The one real vLLM v0.26.0 batch we have (printed after decoding), encoded
// again as msgpack: a map event with group_idx, kv_cache_spec_kind and
// extra_keys, none of which may count as unknown.
func TestKthenaBatch(t *testing.T) {
	text, err := os.ReadFile("testdata/kthena-1535-vllm-0.26.0-decoded.txt")
	if err != nil {
		t.Fatal(err)
	}
	p := &pyLiteral{s: string(text)}
	v, err := p.value()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBatch(mpEncode(v))
	if err != nil {
		t.Fatal(err)
	}
	want := Batch{TS: 1789095808.8378847, HasRank: true, Events: []collectors.KVEvent{{
		Kind: collectors.BlockStored, Hashes: []uint64{15760518052499183552},
		NumTokens: 16, BlockSize: 16, Medium: "GPU", GroupKind: "full_attention", // group_idx 0
	}}}
	got.Mem = 0              // (TestDecodeBatchMem)
	dropRoots(t, got.Events) // a root of 16 token ids: fingerprinted (TestRootContent)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
