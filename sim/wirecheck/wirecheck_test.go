package wirecheck

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func pack(t testing.TB, v interface{}) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tokens(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(1000 + i)
	}
	return out
}

func storedMap(hashes interface{}, parent interface{}, toks interface{}) map[string]interface{} {
	return map[string]interface{}{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
		"token_ids": toks, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil}
}

// TestPayloadShapes: what a consumer relies on is accepted, and every
// broken shape is rejected with a message naming the problem.
func TestPayloadShapes(t *testing.T) {
	big := uint64(1) << 63
	h32 := make([]byte, 32)
	h32[31] = 7
	cases := []struct {
		name    string
		payload interface{}
		opts    Options
		wantErr string
	}{
		{"map stored uint64", []interface{}{1.7e9, []interface{}{storedMap([]uint64{big + 1, big + 2}, nil, tokens(32))}, 0}, Options{Encoding: "map", Hash: "uint64", VLLMKeys: true}, ""},
		{"array stored with trailing nils", []interface{}{1.7e9, []interface{}{[]interface{}{"BlockStored", []uint64{big}, big + 9, tokens(16), 16, nil, "GPU", nil, nil, nil, nil, nil}}, 0}, Options{Encoding: "array", VLLMKeys: true}, ""},
		{"bytes hashes", []interface{}{1.7e9, []interface{}{storedMap([][]byte{h32}, nil, tokens(16))}, nil}, Options{Hash: "bytes"}, ""},
		{"signed hashes", []interface{}{1.7e9, []interface{}{storedMap([]int64{-5, 12}, int64(-9), tokens(32))}, 1}, Options{Hash: "int64"}, ""},
		{"map batch (vLLM main after #42892)", map[string]interface{}{"ts": 1.7e9, "events": []interface{}{storedMap([]uint64{big + 1}, nil, tokens(16))}, "data_parallel_rank": 0}, Options{Encoding: "map", Hash: "uint64", VLLMKeys: true}, ""},
		{"map batch without rank (omit_defaults)", map[string]interface{}{"ts": 1.7e9, "events": []interface{}{}}, Options{}, ""},
		{"two-element batch", []interface{}{1.7e9, []interface{}{[]interface{}{"AllBlocksCleared"}}}, Options{}, ""},
		{"unknown event skipped", []interface{}{1.7e9, []interface{}{map[string]interface{}{"type": "Future"}}, 0}, Options{}, ""},
		{"ts not float", []interface{}{1700000000, []interface{}{}, 0}, Options{}, "ts is"},
		{"one-element batch", []interface{}{1.7e9}, Options{}, "want >= 2"},
		{"token count", []interface{}{1.7e9, []interface{}{storedMap([]uint64{1, 2}, nil, tokens(16))}, 0}, Options{}, "16 token_ids for 2 blocks"},
		{"empty hashes", []interface{}{1.7e9, []interface{}{map[string]interface{}{"type": "BlockRemoved", "block_hashes": []uint64{}, "medium": "GPU"}}, 0}, Options{}, "empty"},
		{"short bytes hash", []interface{}{1.7e9, []interface{}{storedMap([][]byte{{1, 2}}, nil, tokens(16))}, 0}, Options{}, "want 32"},
		{"mixed kinds", []interface{}{1.7e9, []interface{}{storedMap([]interface{}{uint64(1), h32}, nil, tokens(32))}, 0}, Options{}, "mix"},
		{"uint64 wanted", []interface{}{1.7e9, []interface{}{storedMap([]int64{-1}, nil, tokens(16))}, 0}, Options{Hash: "uint64"}, "want uint64"},
		{"int64 range", []interface{}{1.7e9, []interface{}{storedMap([]uint64{big}, nil, tokens(16))}, 0}, Options{Hash: "int64"}, "above the int64 range"},
		{"encoding wanted", []interface{}{1.7e9, []interface{}{[]interface{}{"AllBlocksCleared"}}, 0}, Options{Encoding: "map"}, "array-encoded"},
		{"vllm keys", []interface{}{1.7e9, []interface{}{map[string]interface{}{"type": "BlockStored", "block_hashes": []uint64{1}, "parent_block_hash": nil, "token_ids": tokens(16), "block_size": 16, "medium": "GPU"}}, 0}, Options{VLLMKeys: true}, "no lora_id"},
		{"short array", []interface{}{1.7e9, []interface{}{[]interface{}{"BlockStored", []uint64{1}, nil, tokens(16), 16, nil, "GPU", nil}}, 0}, Options{VLLMKeys: true}, "want >= 12"},
		{"bad block size", []interface{}{1.7e9, []interface{}{[]interface{}{"BlockStored", []uint64{1}, nil, tokens(16), 0, nil, "GPU"}}, 0}, Options{}, "block_size"},
		{"negative token", []interface{}{1.7e9, []interface{}{[]interface{}{"BlockStored", []uint64{1}, nil, []int{-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 16, nil, "GPU"}}, 0}, Options{}, "token id"},
		{"bad parent", []interface{}{1.7e9, []interface{}{[]interface{}{"BlockStored", []uint64{1}, []byte{1}, tokens(16), 16, nil, "GPU"}}, 0}, Options{}, "parent_block_hash"},
		{"not a batch", "hello", Options{}, "want array or map"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Payload(pack(t, c.payload), c.opts)
			if c.wantErr == "" && err != nil {
				t.Fatalf("rejected a valid payload: %v", err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

func TestPeerQuirkParentZero(t *testing.T) {
	p := pack(t, []interface{}{1.7e9, []interface{}{[]interface{}{"BlockStored", []uint64{5}, uint64(0), tokens(16), 16, nil, "GPU", nil, nil}}, 0})
	b, err := Payload(p, Options{PeerQuirks: true})
	if err != nil {
		t.Fatal(err)
	}
	if b.Events[0].Parent != nil {
		t.Errorf("parent 0 read as a parent, want none")
	}
}

func TestTrailingBytes(t *testing.T) {
	p := append(pack(t, []interface{}{1.7e9, []interface{}{}, 0}), 0xc0)
	if _, err := Payload(p, Options{}); err == nil || !strings.Contains(err.Error(), "trailing") {
		t.Fatalf("error %v, want trailing bytes", err)
	}
}

// FuzzPayload: arbitrary bytes never panic the checker.
func FuzzPayload(f *testing.F) {
	f.Add(pack(f, []interface{}{1.7e9, []interface{}{storedMap([]uint64{1, 2}, nil, tokens(32))}, 0}))
	f.Add(pack(f, []interface{}{1.7e9, []interface{}{[]interface{}{"BlockRemoved", []uint64{3}, "GPU", nil}}, 0}))
	f.Add(pack(f, map[string]interface{}{"ts": 1.7e9, "events": []interface{}{}, "data_parallel_rank": 1}))
	f.Add([]byte{0x93, 0xcb})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := Payload(p, Options{})
		if err == nil && b == nil {
			t.Fatal("nil batch without error")
		}
		_, _ = ReplyFrames([][]byte{{}, p[:min(len(p), 8)], p}, "", Options{})
	})
}

// TestVLLMMainShapes: vLLM main's groups and offload tiers are accepted in
// the shapes vLLM publishes them, and nothing looser.
func TestVLLMMainShapes(t *testing.T) {
	with := func(m map[string]interface{}, kv ...interface{}) map[string]interface{} {
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	batch := func(ev interface{}) []byte { return pack(t, []interface{}{1.7e9, []interface{}{ev}, 0}) }
	placeholder := with(storedMap([]uint64{7}, nil, []uint32{}), "block_size", 0, "medium", "CPU", "group_idx", 0)
	window := with(storedMap([]uint64{3, 4}, nil, tokens(64)), "group_idx", 1, "kv_cache_spec_kind", "sliding_window",
		"kv_cache_spec_sliding_window", 1024)
	for _, c := range []struct {
		name    string
		ev      interface{}
		wantErr string
	}{
		{"offload placeholder", placeholder, ""},
		{"sliding window spanning skipped blocks", window, ""},
		{"grouped removal", map[string]interface{}{"type": "BlockRemoved", "block_hashes": []uint64{3}, "medium": "GPU", "group_idx": 1}, ""},
		{"array with group and kind", []interface{}{"BlockStored", []uint64{1}, nil, tokens(16), 16, nil, "CPU", nil, nil, 0, "full_attention", nil}, ""},
		{"placeholder on the GPU", with(storedMap([]uint64{7}, nil, []uint32{}), "block_size", 0), "not an offload placeholder"},
		{"placeholder of two keys", with(storedMap([]uint64{7, 8}, nil, []uint32{}), "block_size", 0, "medium", "CPU"), "not an offload placeholder"},
		{"full attention spanning more tokens", with(storedMap([]uint64{3, 4}, nil, tokens(64)), "kv_cache_spec_kind", "full_attention"), "64 token_ids for 2 blocks"},
		{"unknown kind", with(storedMap([]uint64{3}, nil, tokens(16)), "kv_cache_spec_kind", "encoder_only"), "not one of vLLM's"},
		{"window on full attention", with(storedMap([]uint64{3}, nil, tokens(16)), "kv_cache_spec_kind", "full_attention", "kv_cache_spec_sliding_window", 64), "sliding_window"},
		{"negative group", with(storedMap([]uint64{3}, nil, tokens(16)), "group_idx", -1), "group_idx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := Payload(batch(c.ev), Options{VLLMKeys: true})
			if c.wantErr == "" && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
			if c.name == "offload placeholder" && (!b.Events[0].Placeholder || b.Events[0].Group == nil || b.Events[0].Medium != "CPU") {
				t.Fatalf("placeholder read as %+v", b.Events[0])
			}
			if c.name == "sliding window spanning skipped blocks" && (b.Events[0].SpecKind != "sliding_window" || b.Events[0].Window != 1024 || *b.Events[0].Group != 1) {
				t.Fatalf("window event read as %+v", b.Events[0])
			}
		})
	}
}
