package offload

import (
	"testing"

	"github.com/kvtop/kvtop/sim/kvcache"
)

func seq(base uint64, n int) ([]uint64, []uint32) {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = base + uint64(i)
	}
	return hs, make([]uint32, n*kvcache.BlockSize)
}

// Placeholders: one store per key (its last hash alone, no tokens, block
// size 0, group 0, no kind); a full tier evicts the least recently used
// key, published in one removal per step before the step's stores; a
// chunk stored in this step is never the one evicted.
func TestPlaceholders(t *testing.T) {
	tr := New(Config{Mode: Placeholders, ChunkBlocks: 2, Blocks: 4})
	a, toks := seq(100, 6)
	tr.Store(a, toks, 0, 2)
	ev := tr.TakeEvents(nil)
	if len(ev) != 2 || !ev[0].Placeholder || len(ev[0].Hashes) != 1 || ev[0].Hashes[0] != 101 || ev[1].Hashes[0] != 103 ||
		ev[0].Medium != "CPU" || !ev[0].Grouped || ev[0].Spec != "" || ev[0].HasParent || tr.Blocks() != 2 {
		t.Fatalf("stores %+v", ev)
	}
	tr.Store(a, toks, 2, 3) // evicts key 101
	ev = tr.TakeEvents(nil)
	if len(ev) != 2 || ev[0].Kind != kvcache.Removed || len(ev[0].Hashes) != 1 || ev[0].Hashes[0] != 101 || ev[1].Hashes[0] != 105 {
		t.Fatalf("evict then store: %+v", ev)
	}
	b, btoks := seq(200, 4)
	tr.Store(b, btoks, 0, 2) // evicts 103 and 105
	ev = tr.TakeEvents(nil)
	if len(ev) != 3 || ev[0].Kind != kvcache.Removed || len(ev[0].Hashes) != 2 || ev[0].Hashes[0] != 103 || ev[0].Hashes[1] != 105 {
		t.Fatalf("two evictions in one step: %+v", ev)
	}
	c, ctoks := seq(300, 6)
	tr.Store(c, ctoks, 0, 3) // evicts 201 and 203; then full of this step's chunks: the third is not stored
	if ev = tr.TakeEvents(nil); tr.Keys() != 2 || len(ev) != 3 || len(ev[0].Hashes) != 2 || ev[1].Hashes[0] != 301 || ev[2].Hashes[0] != 303 {
		t.Fatalf("keys %d, events %+v: an in-transfer chunk was evicted", tr.Keys(), ev)
	}
	if tr.Stored != 14 || tr.Evicted != 10 {
		t.Fatalf("stored %d evicted %d GPU blocks, want 14 and 10", tr.Stored, tr.Evicted)
	}
}

// Chunks: one store per chunk with all its hashes, its tokens, the hash
// before it as parent; a chunk that begins inside a shared prefix names
// the shared hashes again, and a subscriber refcounting them holds what
// the tier's Blocks says.
func TestChunks(t *testing.T) {
	tr := New(Config{Mode: Chunks, ChunkBlocks: 4, Blocks: 64})
	a, toks := seq(100, 8)
	b := append(append([]uint64(nil), a[:6]...), 900, 901) // shares 6 blocks with a
	tr.Store(a, toks, 0, 2)
	tr.Store(b, toks, 0, 2) // chunk 0 is a's; chunk 1 is new, naming 104 and 105 again
	ev := tr.TakeEvents(nil)
	if len(ev) != 3 || len(ev[0].Hashes) != 4 || len(ev[0].Tokens) != 64 || ev[0].HasParent || ev[0].Spec != "full_attention" ||
		!ev[1].HasParent || ev[1].Parent != 103 || ev[2].Hashes[0] != 104 || ev[2].Parent != 103 {
		t.Fatalf("chunk stores %+v", ev)
	}
	refs := map[uint64]int{}
	for _, e := range ev {
		for _, h := range e.Hashes {
			refs[h]++
		}
	}
	if refs[104] != 2 || len(refs) != tr.Blocks() || tr.Blocks() != 10 || tr.Keys() != 3 {
		t.Fatalf("refs %v, blocks %d keys %d", refs, tr.Blocks(), tr.Keys())
	}
	if n := tr.Lookup(b, 0, 2); n != 2 {
		t.Fatalf("lookup %d chunks of b, want 2", n)
	}
	if n := tr.Lookup(append(a[:4:4], 7, 7, 7, 7), 0, 2); n != 1 {
		t.Fatalf("lookup %d chunks, want the first only", n)
	}
}

// LMCache: runs of new blocks stored as one event each (medium CPU, no
// group, tokens and parent), blocks already held skipped, and evictions
// never published.
func TestLMCacheStoresOnly(t *testing.T) {
	tr := New(Config{Mode: LMCache, ChunkBlocks: 8, Blocks: 4})
	a, toks := seq(100, 6)
	tr.Store(a, toks, 0, 2)
	tr.TakeEvents(nil)
	tr.Store(a, toks, 0, 6) // 100 and 101 held; 102..105 new, two evicted silently
	ev := tr.TakeEvents(nil)
	if tr.Chunk() != 1 || len(ev) != 1 || len(ev[0].Hashes) != 4 || ev[0].Parent != 101 || len(ev[0].Tokens) != 64 || ev[0].Grouped || ev[0].Medium != "CPU" {
		t.Fatalf("events %+v", ev)
	}
	if tr.Blocks() != 4 || tr.Evicted != 2 || tr.Stored != 6 {
		t.Fatalf("blocks %d evicted %d stored %d", tr.Blocks(), tr.Evicted, tr.Stored)
	}
	if n := tr.Lookup(a, 0, 6); n != 0 {
		t.Fatalf("lookup from block 0 found %d: 100 was evicted", n)
	}
}
