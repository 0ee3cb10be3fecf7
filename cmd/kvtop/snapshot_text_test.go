package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvtop/kvtop/views/fixture"
)

// TestTextSnapshotTiers: the text snapshot says the pool's tiers and where
// its prompt tokens hit when a stream or page names more than the GPU, and
// nothing of them for a pool that does not.
func TestTextSnapshotTiers(t *testing.T) {
	var plain, tiered bytes.Buffer
	if err := writeText(&plain, fixture.Snapshot()); err != nil {
		t.Fatal(err)
	}
	sn := fixture.Tiered()
	sn.Pool.Tiers = append(sn.Pool.Tiers, sn.Workers[3].Tiers...)
	if err := writeText(&tiered, sn); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\ntiers ") {
		t.Fatalf("a GPU-only pool has a tiers line:\n%s", plain.String())
	}
	want := "\ntiers GPU 60200 blocks · CPU 40960 blocks · STORAGE 2048 blocks · hits GPU 91%, primary 6%, fs 1% of prompt tokens\n"
	if !strings.Contains(tiered.String(), want) {
		t.Fatalf("no %q in\n%s", want, tiered.String())
	}
}
