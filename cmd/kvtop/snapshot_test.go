package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/themes"
	"github.com/kvtop/kvtop/views"
	"github.com/kvtop/kvtop/views/fixture"
)

// TestSnapshotTextShowsEveryState: the text form names every worker with
// its state in words, prints unknowns as – and carries the alerts.
func TestSnapshotTextShowsEveryState(t *testing.T) {
	s := fixture.Snapshot()
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, s, "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, w := range s.Workers {
		if !strings.Contains(out, w.Name) || !strings.Contains(out, string(w.State)) {
			t.Errorf("text lacks worker %s in state %s", w.Name, w.State)
		}
	}
	for _, want := range []string{"WORKER", "STREAM", "PREFIX", "ROUTER", "decisions", "history_lost", "–",
		"latency TTFT 0.2/0.6/1.7 s", "tokens/s 37900 prompt, 3100 generation · 20.4 req/s",
		"recomputed 5910 tok/s, 12% of prompt tokens, 53 requests (1020 measured, 96 not measurable)", "recompute 1 of the 13 recent"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	if len(s.Alerts) > 0 && !strings.Contains(out, s.Alerts[0].Text) {
		t.Errorf("text lacks the first alert %q", s.Alerts[0].Text)
	}
}

// TestSnapshotTextRoundsAsTheScreen: one value, one text. KV use 0.465
// (46.5 % exactly in floating point) read 46 % in `snapshot --format text`
// (fmt rounds halves to even) and 47 % on screen.
func TestSnapshotTextRoundsAsTheScreen(t *testing.T) {
	s := fixture.Snapshot()
	kv := 0.465
	s.Workers[0].KVUsage = &kv
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, s, "text"); err != nil {
		t.Fatal(err)
	}
	text := rowOf(buf.String(), "w0 ")
	lipgloss.SetColorProfile(termenv.Ascii)
	th, err := themes.Load("default", nil)
	if err != nil {
		t.Fatal(err)
	}
	screen := rowOf(views.Render(s, views.State{Screen: views.Pool, Follow: true}, 160, 48, th), " w0 ")
	for what, l := range map[string]string{"text": text, "screen": screen} {
		if !strings.Contains(l, "47%") || strings.Contains(l, "46%") {
			t.Errorf("%s shows w0's KV 0.465 as not 47%%: %q", what, l)
		}
	}
}

// TestSnapshotTextSaysWhoLeftTheHitFigure: as the console's header does.
func TestSnapshotTextSaysWhoLeftTheHitFigure(t *testing.T) {
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, fixture.WorkersLeft(), "text"); err != nil {
		t.Fatal(err)
	}
	if want := "2 workers left the hit figure within the window (w7, w6): their hits and queries are out of the sum"; !strings.Contains(buf.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, buf.String())
	}
}

// rowOf is the first line of out that contains prefix (after leading space).
func rowOf(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " ▶⚠✖!"), strings.TrimLeft(prefix, " ")) {
			return l
		}
	}
	return ""
}

// TestSnapshotTextCannotDriveTheTerminal: names and errors come from the
// network; an escape sequence in them is printed harmless.
func TestSnapshotTextCannotDriveTheTerminal(t *testing.T) {
	s := fixture.Snapshot()
	s.Workers[0].Name = "w0\x1b]0;pwned\x07\x1b[2J"
	msg := "GET http://x/metrics: \x1b[31mred\x1b[0m"
	s.Workers[1].Error = &msg
	s.Workers[1].Reason = "down: " + msg
	s.Errors = append(s.Errors, s.Errors...)
	s.Errors[0].Last = msg
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, s, "text"); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(buf.Bytes(), "\x1b\x07") {
		t.Fatalf("text output carries control characters:\n%q", buf.String())
	}
	if !strings.Contains(buf.String(), "w0?]0;pwned??[2J") {
		t.Errorf("the name is not shown with its control characters replaced:\n%s", buf.String())
	}
}

// TestSnapshotCommandOnTheSim runs `kvtop snapshot` (the command, as a
// script would) against a live simulated pool and reads its JSON: every
// worker up with resident blocks and a known hit rate, streams live from
// seq 0, decisions joined to outcomes, the router seen.
func TestSnapshotCommandOnTheSim(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 3, Speed: 4, Listen: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	path := filepath.Join(t.TempDir(), "kvtop.yaml")
	c := s.Config()
	c.Refresh, c.ScrapeInterval = 250*time.Millisecond, 250*time.Millisecond // a short run still covers several scrapes
	if err := config.Write(path, c, "test"); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := simExec(ctx, "snapshot", "--config", path, "--for", "4s", "--format", "json")
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, stderr)
	}
	var snap struct {
		Pool struct {
			Workers, Up   int
			PrefixHitRate struct{ Tokens *float64 } `json:"prefix_hit_rate"`
		}
		Workers []struct {
			Name    string
			Up      bool
			Blocks  *int
			Streams []struct {
				State   string
				LastSeq *uint64 `json:"last_seq"`
				Lost    uint64
			}
		}
		Routers []struct {
			Name string
			Up   bool
		}
		Decisions struct {
			Records     int
			WithOutcome int `json:"with_outcome"`
		}
	}
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("snapshot JSON: %v\n%.500s", err, out)
	}
	if snap.Pool.Workers != 3 || snap.Pool.Up != 3 || snap.Pool.PrefixHitRate.Tokens == nil {
		t.Errorf("pool: %+v", snap.Pool)
	}
	for _, w := range snap.Workers {
		if !w.Up || w.Blocks == nil || *w.Blocks == 0 || len(w.Streams) != 1 {
			t.Errorf("worker %s: up %v blocks %v streams %d", w.Name, w.Up, w.Blocks, len(w.Streams))
			continue
		}
		if st := w.Streams[0]; st.State != "live" || st.LastSeq == nil || st.Lost != 0 {
			t.Errorf("worker %s stream: %+v", w.Name, st)
		}
	}
	if len(snap.Routers) != 1 || !snap.Routers[0].Up {
		t.Errorf("routers: %+v", snap.Routers)
	}
	if snap.Decisions.Records == 0 || snap.Decisions.WithOutcome == 0 {
		t.Errorf("decisions: %+v", snap.Decisions)
	}
}

// TestSnapshotTextCacheHealth: the cache's own health as the JSON has it
// (issue 15): the pool's cache line, the hash check naming the pairs, the
// worker across its restart and the block sizes, each worker's EVICT/s and
// thrash share, each prefix's TTFT and queue p95 with its joined requests,
// and the classes of requests away from the hot prefix.
func TestSnapshotTextCacheHealth(t *testing.T) {
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, fixture.HashMismatch(), "text"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"cache resident 1314300 of 1744000 tok · stored 397/s · evicted 382/s · thrash 57.1/s (14% of stores) · residency p50 38 s, mean 1m36s",
		"hashes DIFFER: w0 and w5 differ on 9 prefixes; w3 and w5 differ on 4 prefixes; w4 and w5 differ on 6 prefixes; across a restart: w7; " +
			"block sizes differ: 16 (w0, w1, w3, w4, w5, w6, w7), 32 (w2) · 21 root prefixes stored alike on two workers",
		"requests under no hot prefix: TTFT p50/p95/p99 0.4/1.9/2.6 s (n 640) · queue p50/p95/p99 0.03/1.1/1.7 s (n 640)",
		"requests on overheating workers: TTFT p50/p95/p99 0.9/1.9/2.4 s (n 402)",
		"requests on the other workers: TTFT p50/p95/p99 210/560/980 ms (n 821)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	// w4 thrashes a third of its stores: its row ends EVICT/s 118, THRASH
	// 34%. The hot prefix's row ends TTFT p95 420 ms, queue p95 160 ms, 380
	// joined (durations by the console's one rule); one with under 20 requests has unknown quantiles and its n.
	for first, want := range map[string]string{"w4": "118 34%", "9f2c4e1a…": "420 ms 160 ms 380", "5e6f7a8b…": "– – 12"} {
		if r := tableRow(out, first); !strings.HasSuffix(strings.Join(strings.Fields(r), " "), want) {
			t.Errorf("row %q does not end with %q", r, want)
		}
	}
	var agree bytes.Buffer
	if err := writeSnapshot(&agree, fixture.Snapshot(), "text"); err != nil {
		t.Fatal(err)
	}
	if want := "hashes agree · 38 root prefixes stored alike on two workers · fingerprints 5120 of 65536, 0 forgotten"; !strings.Contains(agree.String(), want) {
		t.Errorf("text lacks %q", want)
	}
}

// tableRow is the first line of out whose first field is first.
func tableRow(out, first string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return l
		}
	}
	return ""
}

// TestSnapshotShorterThanAScrapeRound: `snapshot --for 1s` on a pool with a
// 1 s refresh printed the snapshot published at start, before any scrape,
// and exited 1 "no worker could be reached … not scraped yet" while every
// worker was up. A --for shorter than the first scrape round waits for it.
func TestSnapshotShorterThanAScrapeRound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := sim.Start(ctx, sim.Options{Workers: 4, Listen: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	path := filepath.Join(t.TempDir(), "kvtop.yaml")
	c := s.Config()
	c.Refresh, c.ScrapeInterval = time.Second, time.Second // the defaults, as the operator had them
	if err := config.Write(path, c, "test"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"1s", "10ms"} {
		start := time.Now()
		out, stderr, err := simExec(ctx, "snapshot", "--config", path, "--for", d, "--format", "json")
		if err != nil {
			t.Fatalf("--for %s: %v\n%s", d, err, stderr)
		}
		var snap struct {
			Pool    struct{ Workers, Up int }
			Workers []struct {
				Name, Reason string
				LastScrape   *time.Time `json:"last_scrape"`
			}
		}
		if err := json.Unmarshal([]byte(out), &snap); err != nil {
			t.Fatalf("--for %s: snapshot JSON: %v\n%.500s", d, err, out)
		}
		if snap.Pool.Workers != 4 || snap.Pool.Up != 4 {
			t.Errorf("--for %s: %d of %d workers up, want 4 of 4: %+v", d, snap.Pool.Up, snap.Pool.Workers, snap.Workers)
		}
		for _, w := range snap.Workers {
			if w.LastScrape == nil {
				t.Errorf("--for %s: %s not scraped: %q", d, w.Name, w.Reason)
			}
		}
		if took, most := time.Since(start), firstRoundWait(c)+time.Second; took > most {
			t.Errorf("--for %s took %s, more than the first round's bound %s", d, took, most)
		}
	}
}

// A disaggregated pool's text snapshot gives each role's figures.
func TestSnapshotTextRoles(t *testing.T) {
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, fixture.Disaggregated(), "text"); err != nil {
		t.Fatal(err)
	}
	want := "roles prefill 2/2 up, queue 2 (median 1), KV 31% · decode 4/5 up, queue 38 (median 7.5), KV 75% · aggregated 1/2 up, queue 3 (median 3), KV 49%"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, buf.String())
	}
}
