package views_test

import (
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
	"github.com/muesli/termenv"
)

func benchView(b *testing.B, n int, sc *views.Screen, w, h int, profile termenv.Profile) {
	benchViewWith(b, n, sc, w, h, profile, func(*views.State) {})
}

func benchViewWith(b *testing.B, n int, sc *views.Screen, w, h int, profile termenv.Profile, set func(*views.State)) {
	lipgloss.SetColorProfile(profile)
	defer lipgloss.SetColorProfile(termenv.Ascii)
	th, err := themes.Load("dark", nil)
	if err != nil {
		b.Fatal(err)
	}
	s := fixture.Large(n)
	st := state(sc)
	st.Pool.Sort = "wait" // sorting 256 rows is part of the job
	st.Worker = "w003"    // the overheating one, with full series (charts)
	set(&st)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if out := views.Render(s, st, w, h, th); len(out) == 0 {
			b.Fatal("empty view")
		}
	}
}

// BenchmarkPoolView256 is the target: the pool screen of 256 workers at
// 200×50 in at most 5 ms (aim 2 ms), in colour.
func BenchmarkPoolView256(b *testing.B) {
	benchView(b, 256, views.Pool, 200, 50, termenv.TrueColor)
}

func BenchmarkPoolView256NoColor(b *testing.B) {
	benchView(b, 256, views.Pool, 200, 50, termenv.Ascii)
}
func BenchmarkPoolView16(b *testing.B) {
	benchView(b, 16, views.Pool, 200, 50, termenv.TrueColor)
}
func BenchmarkWorkerView(b *testing.B) {
	benchView(b, 16, views.Worker, 200, 50, termenv.TrueColor)
}
func BenchmarkStreamsView256(b *testing.B) {
	benchView(b, 256, views.Streams, 200, 50, termenv.TrueColor)
}
func BenchmarkDecisionsView(b *testing.B) {
	benchView(b, 16, views.Decisions, 200, 50, termenv.TrueColor)
}

// BenchmarkPoolView1000 is the pool screen of a thousand workers (issue
// 13): only the visible rows are drawn, but sorting and the header's
// aggregates see every row each frame.
func BenchmarkPoolView1000(b *testing.B) {
	benchView(b, 1000, views.Pool, 200, 50, termenv.TrueColor)
}

// BenchmarkPoolView1000Filtered is the same with a filter (`/`) applied.
func BenchmarkPoolView1000Filtered(b *testing.B) {
	benchViewWith(b, 1000, views.Pool, 200, 50, termenv.TrueColor, func(st *views.State) { st.Pool.Filter = "w01" })
}
