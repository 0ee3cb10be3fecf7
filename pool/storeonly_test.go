package pool

import (
	"testing"

	"github.com/kvtop/kvtop/snapshot"
)

// TestStoreOnlyAfterOption: Options.StoreOnlyAfter sets the store-only
// bound (tests use it to reach the rule with a simulated pool in seconds);
// 0 keeps the default.
func TestStoreOnlyAfterOption(t *testing.T) {
	cpuStores := func(s *State) snapshot.Tier {
		s.Apply(batch("w0", 0, 0, at(1), stored(0, false, 1)))
		for i := 0; i < 3; i++ {
			h := uint64(100 + 2*i)
			s.Apply(batch("w0", 0, uint64(1+i), at(1), onMedium(stored(0, false, h, h+1), "CPU")))
		}
		return tierOf(t, row(t, s.Snapshot(at(2)), "w0").Tiers, "CPU")
	}
	s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}, StoreOnlyAfter: 6})
	if cpu := cpuStores(s); !cpu.StoreOnly || cpu.Blocks != nil {
		t.Fatalf("6 CPU stores, no removal, bound 6: %+v, want store-only", cpu)
	}
	if s := NewState(Options{Workers: []WorkerSpec{{Name: "w0"}}}); s.storeOnlyAfter != storeOnlyAfter {
		t.Fatalf("default bound %d, want %d", s.storeOnlyAfter, storeOnlyAfter)
	} else if cpu := cpuStores(s); cpu.StoreOnly || blocksOf(cpu.Blocks) != 6 {
		t.Fatalf("6 CPU stores under the default bound: %+v, want 6 blocks resident", cpu)
	}
}
