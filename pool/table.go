package pool

// table is an open-addressing hash table keyed by block hash (linear
// probing, backward-shift deletion, no tombstones). Values live in parallel
// uint16 columns (one per medium, or one holder count) and an optional
// parent column: this layout costs 10-18 bytes per slot, far less than a Go
// map of structs, which matters at 10 M resident blocks.
//
// Key 0 marks an empty slot; the real hash 0 is stored as zeroKey (see
// slotKey).
type table struct {
	keys    []uint64
	cols    [][]uint16
	parents []uint64 // nil unless the table keeps parents
	count   int
	mask    uint64
	shift   uint8
}

// zeroKey stands in for block hash 0, which cannot be a key (0 = empty). A
// real hash equal to zeroKey would alias hash 0: a 2^-64 chance we accept.
const zeroKey = 0x9e3779b97f4a7c15

func slotKey(h uint64) uint64 {
	if h == 0 {
		return zeroKey
	}
	return h
}

func hashOf(k uint64) uint64 {
	if k == zeroKey {
		return 0
	}
	return k
}

const minTableBits = 4

func newTable(ncols int, withParents bool) *table {
	t := &table{}
	t.alloc(minTableBits, ncols, withParents)
	return t
}

func (t *table) alloc(bits uint8, ncols int, withParents bool) {
	n := 1 << bits
	t.keys = make([]uint64, n)
	t.cols = make([][]uint16, ncols)
	for i := range t.cols {
		t.cols[i] = make([]uint16, n)
	}
	if withParents {
		t.parents = make([]uint64, n)
	} else {
		t.parents = nil
	}
	t.mask = uint64(n - 1)
	t.shift = 64 - bits
	t.count = 0
}

// home is the preferred slot of key k. Fibonacci hashing spreads keys even
// when producers use small or sequential hashes.
func (t *table) home(k uint64) uint64 {
	return (k * 0x9e3779b97f4a7c15) >> t.shift
}

// find returns the slot holding k, or the empty slot where k would go.
func (t *table) find(k uint64) (int, bool) {
	i := t.home(k)
	for {
		switch t.keys[i] {
		case k:
			return int(i), true
		case 0:
			return int(i), false
		}
		i = (i + 1) & t.mask
	}
}

// lookup returns the slot of k, or -1.
func (t *table) lookup(k uint64) int {
	i, ok := t.find(k)
	if !ok {
		return -1
	}
	return i
}

// insert places k (known absent) and returns its slot, growing first when
// the table would pass 3/4 full.
func (t *table) insert(k uint64) int {
	if (t.count+1)*4 > len(t.keys)*3 {
		t.grow()
	}
	i, _ := t.find(k)
	t.keys[i] = k
	t.count++
	return i
}

// addColumn appends a zeroed value column (a new medium).
func (t *table) addColumn() int {
	t.cols = append(t.cols, make([]uint16, len(t.keys)))
	return len(t.cols) - 1
}

func (t *table) grow() {
	old := *t
	t.alloc(old.shift2bits()+1, len(old.cols), old.parents != nil)
	for i, k := range old.keys {
		if k == 0 {
			continue
		}
		j, _ := t.find(k)
		t.keys[j] = k
		for c := range t.cols {
			t.cols[c][j] = old.cols[c][i]
		}
		if t.parents != nil {
			t.parents[j] = old.parents[i]
		}
		t.count++
	}
}

func (t *table) shift2bits() uint8 { return 64 - t.shift }

// remove deletes slot i by shifting later entries of the same probe run
// back (Knuth's algorithm R), so lookups never meet tombstones.
func (t *table) remove(i int) {
	hole := uint64(i)
	j := hole
	for {
		j = (j + 1) & t.mask
		k := t.keys[j]
		if k == 0 {
			break
		}
		h := t.home(k)
		// k may fill the hole only if the hole lies on its probe path
		// (cyclically between its home and j).
		if (j-h)&t.mask >= (j-hole)&t.mask {
			t.move(int(j), int(hole))
			hole = j
		}
	}
	t.keys[hole] = 0
	for c := range t.cols {
		t.cols[c][hole] = 0
	}
	if t.parents != nil {
		t.parents[hole] = 0
	}
	t.count--
}

func (t *table) move(from, to int) {
	t.keys[to] = t.keys[from]
	for c := range t.cols {
		t.cols[c][to] = t.cols[c][from]
	}
	if t.parents != nil {
		t.parents[to] = t.parents[from]
	}
}

// reset empties the table, keeping its columns but shrinking storage.
func (t *table) reset() {
	t.alloc(minTableBits, len(t.cols), t.parents != nil)
}
