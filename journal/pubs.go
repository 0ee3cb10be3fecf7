package journal

// A batch is written against its publisher's state, which the encoder
// and the decoder keep alike (the same frames, in the same order, change
// them the same way): the publisher itself (worker, rank, endpoint,
// topic: one number once known), its last seq and ts (the next batch's
// are a byte or three away), and the hashes it stored last (a new
// block's parent is almost always one of them: a byte or two instead of
// eight). The table is bounded: past maxPubs publishers the others are
// written in full, against an empty state.

// ringSize is how many stored hashes a publisher remembers for parents:
// 256 found 94 % of the parents of a busy 16-worker simulated pool.
const ringSize = 256

// pubID is a publisher as a batch names it.
type pubID struct {
	worker   string
	rank     int
	endpoint string
	topic    string
}

// pubState is what a publisher's next batch is written against.
type pubState struct {
	seq  uint64
	ts   uint64 // math.Float64bits of the last ts
	ring [ringSize]uint64
	n    uint64 // hashes stored so far (ring[i%ringSize] is the i-th)
}

type pubTable struct {
	ids  map[pubID]int
	list []*pubState
	keys []pubID // by index
}

func (t *pubTable) idOf(i int) pubID { return t.keys[i] }

func newPubTable() pubTable { return pubTable{ids: map[pubID]int{}} }

// lookup returns id's index (1-based; 0: not in the table) and state.
func (t *pubTable) lookup(id pubID) (int, *pubState) {
	if i, ok := t.ids[id]; ok {
		return i + 1, t.list[i]
	}
	return 0, nil
}

// add puts id in the table, unless it is full (then it has no state:
// nil, and its batches are written against zeros).
func (t *pubTable) add(id pubID) *pubState {
	if len(t.list) >= maxPubs {
		return nil
	}
	p := &pubState{}
	t.ids[id] = len(t.list)
	t.list = append(t.list, p)
	t.keys = append(t.keys, id)
	return p
}

// stored remembers a stored block's hash.
func (p *pubState) stored(h uint64) {
	if p == nil {
		return
	}
	p.ring[p.n%ringSize] = h
	p.n++
}

// back is how far back h was last stored (1: the last hash), 0 if it is
// not among the remembered ones. The ring is searched newest first (a
// parent is usually recent): cheaper than keeping a map of it, which
// every stored hash would update.
func (p *pubState) back(h uint64) uint64 {
	if p == nil {
		return 0
	}
	for d := uint64(1); d <= min(p.n, ringSize); d++ {
		if p.ring[(p.n-d)%ringSize] == h {
			return d
		}
	}
	return 0
}

// hash is the hash stored d hashes back; false if d is out of range.
func (p *pubState) hash(d uint64) (uint64, bool) {
	if p == nil || d == 0 || d > p.n || d > ringSize {
		return 0, false
	}
	return p.ring[(p.n-d)%ringSize], true
}
