package tui

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/journal"
	"github.com/kvtop/kvtop/pool"
	"github.com/muesli/termenv"
)

// writeJournal records n snapshots a second apart of a two-worker pool
// (real recorder, real pool state), from t0.
func writeJournal(t *testing.T, n int, t0 time.Time) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kvtop.jnl")
	po := pool.Options{Name: "replayed", Refresh: time.Second, Workers: []pool.WorkerSpec{{Name: "w0"}, {Name: "w1"}}}
	rec, err := journal.Create(journal.Options{Path: path, Pool: po, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	st := pool.NewState(po)
	for i := 0; i < n; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		q := float64(i)
		for _, w := range []string{"w0", "w1"} {
			st.Apply(rec.Observed(&collectors.MetricsScrape{Target: w, At: at, Profile: "vllm",
				Engines: []collectors.EngineMetrics{{Waiting: &q}}}))
		}
		s := st.Snapshot(at.Add(500 * time.Millisecond))
		rec.Published(s)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplayConsole: on a journal the header says REPLAY with the
// journal's date and time, space pauses and resumes, → moves 10 s of
// journal time, g goes back to the start while home moves the cursor.
func TestReplayConsole(t *testing.T) {
	lipgloss.SetColorProfile(termenv.Ascii)
	t.Setenv("NO_COLOR", "")
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.Local)
	p, err := journal.NewPlayer(writeJournal(t, 40, t0))
	if err != nil {
		t.Fatal(err)
	}
	r := journal.NewReplay(p, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	src := Replay(r)
	m, err := New(src, Options{Refresh: time.Second, Banner: r.Banner})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, m: m}
	h.send(tea.WindowSizeMsg{Width: 120, Height: 30})
	// pump hands the replay's snapshots to the model, as Bubble Tea's
	// waiting command does, until the one of the second at.
	pump := func(at time.Time) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case s := <-src.Snapshots():
				h.send(snapshotMsg{s})
				if s.At.Truncate(time.Second).Equal(at) {
					return
				}
			case <-deadline:
				t.Fatalf("no snapshot at %s; status %+v", at, r.Status())
			}
		}
	}
	pump(t0)
	if head := h.header(); !strings.Contains(head, "REPLAY ×1 2026-11-30 03:00:00") {
		t.Fatalf("header %q", head)
	}
	h.keys(" ")
	if head := h.header(); !strings.Contains(head, "REPLAY paused") {
		t.Fatalf("after space: header %q", head)
	}
	h.contains("space play", "paused")
	h.send(tea.KeyMsg{Type: tea.KeyRight})
	pump(t0.Add(10 * time.Second))
	if head := h.header(); !strings.Contains(head, "03:00:10") {
		t.Fatalf("after →: header %q", head)
	}
	h.keys("G")
	pump(t0.Add(39 * time.Second))
	if head := h.header(); !strings.Contains(head, "REPLAY end 2026-11-30 03:00:39") {
		t.Fatalf("after G: header %q", head)
	}
	h.keys("g")
	pump(t0)
	if head := h.header(); !strings.Contains(head, "03:00:00") {
		t.Fatalf("after g: header %q", head)
	}
	h.keys("down")
	h.send(tea.KeyMsg{Type: tea.KeyHome})
	if row := h.cursorRow(); !strings.Contains(row, "w0") {
		t.Fatalf("home: cursor on %q", row)
	}
	if st := r.Status(); st.Pos != 1 {
		t.Fatalf("home moved the replay: %+v", st)
	}
}
