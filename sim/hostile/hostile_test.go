package hostile

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/spf13/viper"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim/wire"
)

// TestSummarize: the figures the report prints. A flat RSS has no slope; one
// growing 1 MiB a second in its last minute reads +60 MiB/min; the start-up
// samples are left out; CPU is the share of one core.
func TestSummarize(t *testing.T) {
	var flat, growing []Sample
	for i := 0; i <= 120; i++ {
		at := time.Duration(i) * time.Second
		cpu := at / 4 // a quarter of one core
		rss := int64(100 << 20)
		if i < 10 {
			rss = 5 << 20 // starting up
		}
		flat = append(flat, Sample{At: at, RSS: rss, CPU: cpu})
		g := rss
		if i > 60 {
			g += int64(i-60) << 20
		}
		growing = append(growing, Sample{At: at, RSS: g, CPU: cpu})
	}
	s := Summarize(flat, 10*time.Second, time.Minute)
	if s.RSSMin != 100 || s.RSSMedian != 100 || s.RSSMax != 100 || s.Slope != 0 {
		t.Errorf("flat run: RSS %v/%v/%v slope %v, want 100/100/100 and 0", s.RSSMin, s.RSSMedian, s.RSSMax, s.Slope)
	}
	if math.Abs(s.CPU-25) > 1e-9 || math.Abs(s.CPULast-25) > 1e-9 {
		t.Errorf("CPU %v%% (last minute %v%%), want 25%%", s.CPU, s.CPULast)
	}
	g := Summarize(growing, 10*time.Second, time.Minute)
	if math.Abs(g.Slope-60) > 0.5 || g.RSSMax != 160 || g.RSSMin != 100 {
		t.Errorf("growing run: slope %v MiB/min, RSS %v..%v, want +60 and 100..160", g.Slope, g.RSSMin, g.RSSMax)
	}
}

// TestReadProc reads this process: resident memory, and CPU time that
// grows while it works.
func TestReadProc(t *testing.T) {
	rss, cpu, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Errorf("RSS %d bytes: not this test binary's", rss)
	}
	x := 1.0
	for {
		for i := 0; i < 1e6; i++ {
			x = math.Sqrt(x + float64(i))
		}
		_, now, err := ReadProc(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now >= cpu+20*time.Millisecond {
			break
		}
	}
	if _, _, err := ReadProc(1 << 30); err == nil {
		t.Error("a process that does not exist was read")
	}
	_ = x
}

// TestTrickler: a real DEALER asking for seq 10 gets one reply after the
// other, never the end marker: stale ones below the seq asked for, or the
// next seqs of the range, slowly.
func TestTrickler(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply Reply
		want  []uint64
	}{
		{"stale", Stale(func(uint64) []byte { return []byte("p") }), []uint64{9, 9, 9, 9}},
		{"in range", InRange(func(uint64) []byte { return []byte("p") }), []uint64{10, 11, 12, 13}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTrickler(nil, 20*time.Millisecond, tc.reply)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			d, err := zmq.NewSocket(zmq.DEALER)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			_ = d.SetLinger(0)
			_ = d.SetRcvtimeo(5 * time.Second)
			if err := d.Connect(tr.Endpoint); err != nil {
				t.Fatal(err)
			}
			if _, err := d.SendMessage("", wire.Seq8(10)); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for range tc.want {
				f, err := d.RecvMessageBytes(0)
				if err != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				if len(f) != 4 || len(f[2]) != 8 {
					t.Fatalf("reply %q: not the v26 layout", f)
				}
				got = append(got, binary.BigEndian.Uint64(f[2]))
			}
			if !slices.Equal(got, tc.want) || slices.Contains(got, wire.EndSeq) {
				t.Errorf("replies %v, want %v and no end marker", got, tc.want)
			}
			if req, _ := tr.Counts(); req != 1 {
				t.Errorf("%d requests counted, want 1", req)
			}
		})
	}
}

// TestInputs starts every input and reads back the config it writes as
// kvtop would (it must load: the next person runs kvtop on it), with the
// hostile workers and the limits it says, and checks what the hostile
// peers serve where a GET can tell.
func TestInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a simulated pool per input")
	}
	checks := map[string]func(t *testing.T, c config.Config){
		"too-large": func(t *testing.T, c config.Config) {
			body, _ := get(t, worker(t, c, "h-series").Metrics)
			if n := bytes.Count(body, []byte("\n")); n != 350_000 || len(body) >= config.DefaultBodyBytes {
				t.Errorf("h-series: %d series in %d bytes, want 350 000 under %d", n, len(body), config.DefaultBodyBytes)
			}
		},
		"redirect": func(t *testing.T, c config.Config) {
			w := worker(t, c, "h-redirect-port")
			_, resp := get(t, w.Metrics)
			loc := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasSuffix(loc, "/other/metrics") || strings.HasPrefix(loc, strings.TrimSuffix(w.Metrics, "/metrics")) {
				t.Errorf("h-redirect-port: %s to %q, want 307 to another port and path", resp.Status, loc)
			}
			if st, err := os.Stat(w.BearerTokenFile); err != nil || st.Mode().Perm() != 0o640 {
				t.Errorf("token file: %v %v, want mode 0640 (the warning is part of the input)", st, err)
			}
		},
		"index-cap": func(t *testing.T, c config.Config) {
			if c.Limits.IndexBlocks != 2_000_000 {
				t.Errorf("limits.index_blocks %d, want 2 000 000", c.Limits.IndexBlocks)
			}
		},
		"oversized": func(t *testing.T, c config.Config) {
			if c.Limits.EventMessageBytes != 1<<20 {
				t.Errorf("limits.event_message_bytes %d, want 1 MiB", c.Limits.EventMessageBytes)
			}
		},
		"late-restart": func(t *testing.T, c config.Config) {
			body, _ := get(t, worker(t, c, "h-late").Metrics)
			if bytes.Contains(body, []byte("prefix_cache")) || bytes.Contains(body, []byte("process_start_time_seconds")) {
				t.Errorf("h-late before %s: the prefix counters or the process start are there:\n%s", lateAt, body)
			}
		},
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := Start(context.Background(), name, Options{Workers: 1, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			file := filepath.Join(dir, "kvtop.yaml")
			if err := p.WriteConfig(file); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(viper.New(), file)
			if err != nil {
				t.Fatalf("kvtop would refuse the config: %v", err)
			}
			var names []string
			for _, w := range c.Workers {
				names = append(names, w.Name)
			}
			want := 1 + len(p.Hostile) // one simulated worker
			if name == "baseline" {
				want = 2 // and one more in place of the hostile ones
			} else if len(p.Hostile) == 0 {
				t.Error("no hostile worker")
			}
			if len(names) != want {
				t.Errorf("workers %v, hostile %v", names, p.Hostile)
			}
			for _, h := range p.Hostile {
				if !slices.Contains(names, h) || !strings.HasPrefix(h, "h-") {
					t.Errorf("hostile worker %s not in the config %v", h, names)
				}
			}
			if check := checks[name]; check != nil {
				check(t, c)
			}
		})
	}
}

func worker(t *testing.T, c config.Config, name string) config.Worker {
	t.Helper()
	for _, w := range c.Workers {
		if w.Name == name {
			return w
		}
	}
	t.Fatalf("no worker %s", name)
	return config.Worker{}
}

// get GETs url without following redirects.
func get(t *testing.T, url string) ([]byte, *http.Response) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body, resp
}

// TestDigest: what the report says kvtop told the operator, read from the
// snapshot's JSON: the hostile worker's state, error and stream counters,
// its errors, and how the others fared.
func TestDigest(t *testing.T) {
	js := `{"at":"2026-12-01T10:00:10Z","pool":{"workers":2,"up":1,"blocks":5,"index_full":true,"prefix_hit_rate":{"tokens":0.5}},
"workers":[
 {"name":"w0","up":true,"state":"ok","last_scrape_ok":"2026-12-01T10:00:09Z","streams":[]},
 {"name":"h-x","up":false,"state":"down","reason":"down: too big","error":"GET u: 350 000 series","index_full":true,
  "streams":[{"state":"history_lost","batches":7,"lost":2,"oversized":3,"dropped_blocks":9,
   "history":[{"kind":"gap","note":"replay timed out"},{"kind":"gap","note":"replay timed out"}]}]}],
"errors":[{"source":"h-x metrics","kind":"too_large","count":4,"last":"GET u: 350 000 series"},{"source":"w0 metrics","kind":"timeout","count":1,"last":"x"}],
"alerts":[{"kind":"down","subject":"h-x","text":"h-x down"}]}`
	got, err := Digest([]byte(js), []string{"h-x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`h-x: state down (down: too big); error "GET u: 350 000 series"; index_full`,
		`  stream history_lost: 7 batches, gaps 0, replayed 0, lost 2, restarts 0, oversized 3, dropped 0, blocks 0, dropped_blocks 9, unknown_removals 0`,
		`  history: gap x2`,
		`  history note: replay timed out`,
		`error h-x metrics [too_large] x4: GET u: 350 000 series`,
		`alert down: h-x down`,
		`others: 1/1 up, oldest good scrape 1.0 s before the snapshot; pool: index_full true, blocks 5, hit 0.5`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("digest:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := Digest([]byte("not json"), nil); err == nil {
		t.Error("a broken snapshot was read")
	}
}
