package wire

import (
	"testing"

	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

// TestTierFields: vLLM main's fields in both encodings. A map writes
// group_idx, the kind and the window only when set (omit_defaults); an
// array writes every position up to the window. Placeholders have block
// size 0 and no tokens; removals carry the group, never a kind.
func TestTierFields(t *testing.T) {
	toks := make([]uint32, 64)
	g1 := kvcache.Tag{Grouped: true, Group: 1, Spec: "sliding_window", Window: 1024}
	evs := []kvcache.Event{
		{Kind: kvcache.Stored, Hashes: []uint64{3, 4}, Tokens: toks, Tag: g1}, // a report spanning skipped blocks
		{Kind: kvcache.Removed, Hashes: []uint64{3}, Tag: kvcache.Tag{Grouped: true, Group: 1}},
		{Kind: kvcache.Stored, Hashes: []uint64{9}, Placeholder: true, Tag: kvcache.Tag{Medium: "CPU", Grouped: true}},
		{Kind: kvcache.Removed, Hashes: []uint64{9, 11}, Tag: kvcache.Tag{Medium: "CPU", Grouped: true}},
		{Kind: kvcache.Stored, Hashes: []uint64{5}, Tokens: toks[:16], Tag: kvcache.Tag{Medium: "CPU"}}, // LMCache: no group
	}
	for _, c := range []struct {
		enc    Encoding
		fields []int
	}{
		{Map, []int{11, 4, 9, 4, 8}},
		{Array, []int{12, 4, 12, 4, 12}},
	} {
		b, err := wirecheck.Payload(Format{Encoding: c.enc}.AppendBatch(nil, 1.8e9, evs, 0), wirecheck.Options{Encoding: c.enc.String(), VLLMKeys: true})
		if err != nil {
			t.Fatalf("%s: %v", c.enc, err)
		}
		for i, e := range b.Events {
			if e.Fields != c.fields[i] {
				t.Errorf("%s event %d has %d fields, want %d", c.enc, i, e.Fields, c.fields[i])
			}
		}
		sw, rm, ph, cpuRm, lm := b.Events[0], b.Events[1], b.Events[2], b.Events[3], b.Events[4]
		if sw.Group == nil || *sw.Group != 1 || sw.SpecKind != "sliding_window" || sw.Window != 1024 || sw.NumTokens != 64 || len(sw.Keys) != 2 {
			t.Errorf("%s: sliding-window store %+v", c.enc, sw)
		}
		if rm.Group == nil || *rm.Group != 1 || rm.Medium != "GPU" {
			t.Errorf("%s: group removal %+v", c.enc, rm)
		}
		if !ph.Placeholder || ph.BlockSize != 0 || ph.Medium != "CPU" || ph.Group == nil || *ph.Group != 0 || ph.SpecKind != "" {
			t.Errorf("%s: placeholder %+v", c.enc, ph)
		}
		if len(cpuRm.Keys) != 2 || cpuRm.Medium != "CPU" {
			t.Errorf("%s: CPU removal %+v", c.enc, cpuRm)
		}
		if lm.Group != nil || lm.Medium != "CPU" || lm.BlockSize != 16 {
			t.Errorf("%s: LMCache store %+v", c.enc, lm)
		}
	}
}
