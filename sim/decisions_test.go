package sim_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim"
)

// TestDecisionFormatsDescribeTheSameRun: with one seed, the router routes
// alike whatever log it writes, and each log says it as its router would:
// Dynamo's traces a request_end per finished request naming the worker by
// its Dynamo id (the id the endpoints give), the gateway's log a line per
// routed request inside its request's span naming the worker's URL. Read
// here with the standard library only, apart from kvtop's collectors.
func TestDecisionFormatsDescribeTheSameRun(t *testing.T) {
	run := func(o sim.Options) (*sim.Sim, []sim.Routed) {
		o.Seed, o.Rate = 5, 20
		if o.DecisionsPath == "" {
			o.DecisionsPath = filepath.Join(t.TempDir(), "decisions")
		}
		s := startSim(t, o)
		advance(t, s, 8*time.Second)
		var got []sim.Routed
		for i := 1; ; i++ {
			x, ok := s.Routed(fmt.Sprintf("req-%07d", i))
			if !ok {
				break
			}
			got = append(got, x)
		}
		if len(got) < 100 {
			t.Fatalf("%d requests routed", len(got))
		}
		return s, got
	}
	_, kv := run(sim.Options{})
	trace, tr := run(sim.Options{DecisionsFormat: "dynamo-trace", TraceSink: "gzip"})
	smg, sg := run(sim.Options{DecisionsFormat: "smg", SMGLog: "text"})
	for i := range min(len(kv), len(tr), len(sg)) {
		a, b, c := kv[i], tr[i], sg[i]
		if a.Worker != b.Worker || a.Worker != c.Worker || a.Predicted != b.Predicted || a.Cached != c.Cached {
			t.Fatalf("request %d routed differently: kvtop %+v, dynamo-trace %+v, smg %+v", i+1, a, b, c)
		}
	}

	// Dynamo's traces: the gzip sink's segments, whole members.
	if err := trace.Close(); err != nil {
		t.Fatal(err)
	}
	e := trace.Endpoints()
	ids := map[string]int{}
	for i, w := range e.Workers {
		ids[fmt.Sprint(w.DynamoID)] = i
	}
	segs, _ := filepath.Glob(e.Decisions + ".*.jsonl.gz")
	if len(segs) != 1 || !strings.HasSuffix(segs[0], ".000000.jsonl.gz") || e.DecisionsFormat != "dynamo-trace" {
		t.Fatalf("segments %v of %s (%s)", segs, e.Decisions, e.DecisionsFormat)
	}
	f, err := os.Open(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for _, x := range tr {
		if x.Finished {
			finished++
		}
	}
	n := 0
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var entry struct {
			Timestamp *int64 `json:"timestamp"`
			Event     struct {
				Schema  string `json:"schema"`
				Request struct {
					RequestID string `json:"request_id"`
					Cached    *int   `json:"cached_tokens"`
					Backend   *int   `json:"backend_actual_cached_tokens"`
					Worker    struct {
						Prefill json.Number `json:"prefill_worker_id"`
						Decode  json.Number `json:"decode_worker_id"`
					} `json:"worker"`
				} `json:"request"`
			} `json:"event"`
		}
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		q := entry.Event.Request
		var i int
		fmt.Sscanf(q.RequestID, "req-%d", &i)
		truth := tr[i-1]
		if entry.Timestamp == nil || entry.Event.Schema != "dynamo.request.trace.v1" || ids[string(q.Worker.Prefill)] != truth.Worker ||
			q.Worker.Decode != q.Worker.Prefill || q.Cached == nil || *q.Cached != truth.Predicted || q.Backend == nil || *q.Backend != truth.Cached {
			t.Fatalf("trace line %d: %s\nsim %+v", n+1, sc.Text(), truth)
		}
		n++
	}
	if err := sc.Err(); err != nil && err != io.ErrUnexpectedEOF {
		t.Fatal(err)
	}
	if n != finished {
		t.Errorf("%d request_end lines for %d finished requests", n, finished)
	}

	// The gateway's lines.
	if err := smg.Close(); err != nil {
		t.Fatal(err)
	}
	es := smg.Endpoints()
	data, err := os.ReadFile(es.Decisions)
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d DEBUG http_request\{[^}]* request_id="(req-\d+)"\}: smg::policies::cache_aware: \S+ Cache-aware selection index="tree" branch="(\w+)" worker="([^"]+)" model_id="[^"]+" matched_ratio=\S+ threshold=0\.0$`)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	branches := map[string]int{}
	for k, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("smg line %d: %s", k+1, l)
		}
		var i int
		fmt.Sscanf(m[1], "req-%d", &i)
		if truth := sg[i-1]; m[2] != truth.Branch || m[3] != es.Workers[truth.Worker].BaseURL {
			t.Fatalf("smg line %d: %s\nsim %+v", k+1, l, truth)
		}
		branches[m[2]]++
	}
	if len(lines) != len(sg) {
		t.Errorf("%d lines for %d routed requests", len(lines), len(sg))
	}
	keys := make([]string, 0, len(branches))
	for b := range branches {
		keys = append(keys, b)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "min_load_fallback,tree_match" && strings.Join(keys, ",") != "min_load_fallback,spill,tree_match" {
		t.Errorf("branches %v", branches)
	}
}
