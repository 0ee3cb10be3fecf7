package tui

import (
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/views/fixture"
	"github.com/muesli/termenv"
)

func benchModel(b *testing.B, n int) (tea.Model, []*snapshot.Snapshot) {
	lipgloss.SetColorProfile(termenv.TrueColor)
	b.Cleanup(func() { lipgloss.SetColorProfile(termenv.Ascii) })
	m, err := New(newSource(), Options{Theme: "dark", Refresh: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 200, Height: 50})
	snaps := make([]*snapshot.Snapshot, 2)
	for i := range snaps {
		snaps[i] = fixture.Large(n)
		snaps[i].Seq += uint64(i)
	}
	tm, _ = tm.Update(snapshotMsg{snaps[0]})
	return tm, snaps
}

// BenchmarkSnapshotFrame16 is one refresh of a 16-worker pool: the
// snapshot message through Update, then the View Bubble Tea asks for.
func BenchmarkSnapshotFrame16(b *testing.B) {
	tm, snaps := benchModel(b, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tm, _ = tm.Update(snapshotMsg{snaps[i%2]})
		_ = tm.View()
	}
}

// BenchmarkSnapshotFrame1000 is one refresh of a thousand workers (issue
// 13): what the console pays each second on the pool screen.
func BenchmarkSnapshotFrame1000(b *testing.B) {
	tm, snaps := benchModel(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tm, _ = tm.Update(snapshotMsg{snaps[i%2]})
		_ = tm.View()
	}
}

// BenchmarkSortKey1000 is the operator changing the sort of a thousand
// rows: the key through Update, then the frame it asks for.
func BenchmarkSortKey1000(b *testing.B) {
	tm, _ := benchModel(b, 1000)
	_ = tm.View()
	keys := []rune{'s', 'S'}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{keys[i%2]}})
		_ = tm.View()
	}
}

// BenchmarkIdleFrame is a View with nothing changed (the renderer asking
// again, or a frozen display receiving snapshots): a cache hit.
func BenchmarkIdleFrame(b *testing.B) {
	tm, _ := benchModel(b, 16)
	_ = tm.View()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = tm.View()
	}
}

// BenchmarkFrozenArrival is a snapshot arriving while frozen: stored, not
// rendered.
func BenchmarkFrozenArrival(b *testing.B) {
	tm, snaps := benchModel(b, 16)
	tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'f'}})
	_ = tm.View()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tm, _ = tm.Update(snapshotMsg{snaps[i%2]})
		_ = tm.View()
	}
}

// BenchmarkSnapshotFrameDecisions is one refresh of a pool at 35
// decisions/s whose snapshots list the default two minutes of records
// (4 200 rows; 500 before issue 25), 35 new a snapshot: on the pool
// screen, and on the decisions list paused, holding what the pool lets go.
func BenchmarkSnapshotFrameDecisions(b *testing.B) {
	for _, c := range []struct {
		name   string
		window int
		keys   string
	}{{"pool/500", 500, ""}, {"pool/4200", 4200, ""}, {"decisions-paused/4200", 4200, "5kF"}} {
		b.Run(c.name, func(b *testing.B) {
			tm, _ := benchModel(b, 16)
			src := &busy{window: c.window}
			tm, _ = tm.Update(snapshotMsg{src.snapshot(c.window)})
			for _, k := range c.keys {
				tm, _ = tm.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{k}})
			}
			snaps := make([]*snapshot.Snapshot, 64)
			for i := range snaps {
				snaps[i] = src.snapshot(35)
			}
			_ = tm.View()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tm, _ = tm.Update(snapshotMsg{snaps[i%len(snaps)]})
				_ = tm.View()
			}
		})
	}
}
