package wire

// Ring is a publisher's replay buffer: the last Cap batches, by seq.
type Ring struct {
	seqs     []uint64
	payloads [][]byte
	start, n int
}

// NewRing returns an empty ring of capacity batches (at least 1).
func NewRing(capacity int) *Ring {
	capacity = max(capacity, 1)
	return &Ring{seqs: make([]uint64, capacity), payloads: make([][]byte, capacity)}
}

// Cap is the ring's capacity in batches.
func (r *Ring) Cap() int { return len(r.seqs) }

// Len is the number of batches held.
func (r *Ring) Len() int { return r.n }

// Push keeps one batch, dropping the oldest when full. payload is kept as is.
func (r *Ring) Push(seq uint64, payload []byte) {
	i := (r.start + r.n) % len(r.seqs)
	if r.n == len(r.seqs) {
		r.start = (r.start + 1) % len(r.seqs)
	} else {
		r.n++
	}
	r.seqs[i], r.payloads[i] = seq, payload
}

// From calls fn for every held batch with seq >= from, oldest first.
func (r *Ring) From(from uint64, fn func(seq uint64, payload []byte)) {
	for k := 0; k < r.n; k++ {
		i := (r.start + k) % len(r.seqs)
		if r.seqs[i] >= from {
			fn(r.seqs[i], r.payloads[i])
		}
	}
}

// Reset empties the ring (the publisher restarted).
func (r *Ring) Reset() {
	clear(r.payloads)
	r.start, r.n = 0, 0
}
