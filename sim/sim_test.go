package sim_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

var vllmFamilies = []string{
	"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
	"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries_created",
	"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits_created",
	"vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:prompt_tokens_created",
	"vllm:generation_tokens_total", "vllm:request_success_total",
	"vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds", "vllm:e2e_request_latency_seconds",
	"vllm:time_to_first_token_seconds_created", "vllm:cache_config_info", "process_start_time_seconds",
}

var sglangFamilies = []string{
	"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cached_tokens_total",
	"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_retracted_requests_total",
	"sglang:time_to_first_token_seconds", "sglang:queue_time_seconds", "sglang:e2e_request_latency_seconds",
	"sglang:page_size", "sglang:num_pages", "process_start_time_seconds",
}

// TestWorkersFromOutside starts a 3-worker sim in each wire format and
// checks it as kvtop would see it: raw SUB, raw DEALER, HTTP /metrics.
func TestWorkersFromOutside(t *testing.T) {
	for _, c := range []struct {
		name string
		o    sim.Options
		enc  string
		hash string
		lay  string
	}{
		{"vllm-map-uint64-v26", sim.Options{}, "map", "uint64", "v26"},
		{"vllm-array-bytes-legacy", sim.Options{Encoding: "array", Hash: "bytes", ReplayLayout: "legacy"}, "array", "bytes", "legacy"},
		{"sglang-map-int64", sim.Options{Engine: "sglang"}, "map", "int64", "legacy"},
		{"vllm-array-uint64-dp2", sim.Options{Encoding: "array", DPRanks: 2}, "array", "uint64", "v26"},
		{"vllm-map-batch", sim.Options{Batch: "map"}, "map", "uint64", "v26"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Seed = 7
			s := startSim(t, c.o)
			zc := zctx(t)
			opts := wirecheck.Options{Encoding: c.enc, Hash: c.hash, VLLMKeys: c.o.Engine != "sglang"}
			type pubRef struct {
				worker sim.WorkerEndpoints
				rank   int
			}
			var pubs []pubRef
			subs := map[int]*zmqSocket{}
			for _, w := range s.Endpoints().Workers {
				for r := range w.Events {
					pubs = append(pubs, pubRef{w, r})
				}
			}
			if len(pubs) != 3*max(c.o.DPRanks, 1) {
				t.Fatalf("%d publishers", len(pubs))
			}
			for i, p := range pubs {
				subs[i] = subscribe(t, zc, p.worker.Events[p.rank])
			}
			advance(t, s, 20*time.Second)

			var all []*stream
			for i, p := range pubs {
				name := fmt.Sprintf("%s rank %d", p.worker.Name, p.rank)
				// Replay from 0 returns every batch so far (the ring holds them all).
				replies := replay(t, zc, p.worker.Replay[p.rank], 0)
				n := len(replies) - 1
				if n < 10 {
					t.Fatalf("%s: only %d batches in 20 s", name, n)
				}
				live := recv(t, subs[i], n)
				st := newStream(name)
				for k, msg := range live {
					topic, seq, b, err := wirecheck.Live(msg, opts)
					if err != nil {
						t.Fatalf("%s: live message %d: %v", name, k, err)
					}
					if seq != uint64(k) || topic != p.worker.Topic {
						t.Fatalf("%s: message %d has seq %d topic %q; want contiguous seq from 0", name, k, seq, topic)
					}
					if b.Rank == nil || *b.Rank != int64(p.rank) {
						t.Fatalf("%s: batch rank %v, want %d", name, b.Rank, p.rank)
					}
					st.apply(t, b)
					// The replayed batch with the same seq is byte-identical.
					r, err := wirecheck.ReplyFrames(replies[k], c.lay, opts)
					if err != nil {
						t.Fatalf("%s: replay %d: %v", name, k, err)
					}
					if r.Seq != seq || !bytes.Equal(replies[k][len(replies[k])-1], msg[2]) {
						t.Fatalf("%s: replayed seq %d differs from live seq %d", name, r.Seq, seq)
					}
				}
				end, err := wirecheck.ReplyFrames(replies[n], c.lay, opts)
				if err != nil || !end.End {
					t.Fatalf("%s: last reply %v (%v), want the end marker", name, end, err)
				}
				// Replay from the middle, and from beyond the newest batch.
				mid := replay(t, zc, p.worker.Replay[p.rank], uint64(n/2))
				if got, _ := wirecheck.ReplyFrames(mid[0], c.lay, opts); len(mid) != n-n/2+1 || got.Seq != uint64(n/2) {
					t.Fatalf("%s: replay from %d gave %d replies", name, n/2, len(mid))
				}
				if beyond := replay(t, zc, p.worker.Replay[p.rank], uint64(n+100)); len(beyond) != 1 {
					t.Fatalf("%s: replay beyond the newest batch gave %d replies, want only the end marker", name, len(beyond))
				}
				all = append(all, st)
			}

			for _, w := range s.Endpoints().Workers {
				pg := scrape(t, w.Metrics)
				fams := vllmFamilies
				if c.o.Engine == "sglang" {
					fams = sglangFamilies
				}
				for _, f := range fams {
					if pg[f] == nil {
						t.Errorf("%s /metrics has no %s", w.Name, f)
					}
				}
				for r := range w.Events {
					var capacity int
					if c.o.Engine == "sglang" {
						capacity = int(pg.sum("sglang:num_pages") / float64(len(w.Events)))
					} else {
						capacity = pg.numGPUBlocks(t, strconv.Itoa(r))
					}
					for _, st := range all {
						if st.name == fmt.Sprintf("%s rank %d", w.Name, r) && st.maxTotal > capacity {
							t.Errorf("%s: stored minus removed reached %d blocks, num_gpu_blocks is %d", st.name, st.maxTotal, capacity)
						}
					}
				}
				if c.o.Engine != "sglang" && (pg.sum("vllm:prefix_cache_hits_total") <= 0 || pg.sum("vllm:prompt_tokens_total") <= 0) {
					t.Errorf("%s: no prompt tokens or prefix hits after 20 s", w.Name)
				}
			}

			var kinds = map[string]int{}
			var above, neg int
			for _, st := range all {
				for k, v := range st.kinds {
					kinds[k] += v
				}
				above += st.above63
				neg += st.negative
				if st.kinds["AllBlocksCleared"] != 0 {
					t.Errorf("%s: AllBlocksCleared without a reset", st.name)
				}
			}
			if kinds["BlockStored"] == 0 {
				t.Errorf("no BlockStored in 20 s: %v", kinds)
			}
			switch c.hash {
			case "uint64", "bytes":
				if above == 0 {
					t.Errorf("no hash above the int64 range: vLLM's usually are")
				}
			case "int64":
				if neg == 0 {
					t.Errorf("no negative hash: SGLang's are signed")
				}
			}
		})
	}
}

// TestEvictionsKeepResidencyBounded: a small cache under load evicts, and
// what a subscriber counts (stored minus removed) never exceeds it.
func TestEvictionsKeepResidencyBounded(t *testing.T) {
	s := startSim(t, sim.Options{Workers: 1, Rate: 12, Seed: 3})
	zc := zctx(t)
	w := s.Endpoints().Workers[0]
	sub := subscribe(t, zc, w.Events[0])
	advance(t, s, 40*time.Second)
	n := len(replay(t, zc, w.Replay[0], 0)) - 1
	st := newStream("w0")
	for _, msg := range recv(t, sub, n) {
		_, _, b, err := wirecheck.Live(msg, wirecheck.Options{VLLMKeys: true})
		if err != nil {
			t.Fatal(err)
		}
		st.apply(t, b)
	}
	capacity := scrape(t, w.Metrics).numGPUBlocks(t, "0")
	if st.kinds["BlockRemoved"] == 0 {
		t.Fatalf("no evictions at 12 req/s on one worker: %v", st.kinds)
	}
	if st.maxTotal > capacity || st.total > capacity {
		t.Fatalf("stored minus removed = %d (max %d), num_gpu_blocks %d", st.total, st.maxTotal, capacity)
	}
	if st.maxTotal < capacity*9/10 {
		t.Errorf("cache only reached %d of %d blocks before evicting", st.maxTotal, capacity)
	}
}

// --batch is checked before anything binds: a typo, or a map batch for
// SGLang (whose batch is an array), is an error naming the option.
func TestBatchOptionChecked(t *testing.T) {
	for _, c := range []struct {
		o    sim.Options
		want string
	}{
		{sim.Options{Batch: "dict", Manual: true}, `batch "dict" is not one of array, map`},
		{sim.Options{Batch: "map", Engine: "sglang", Manual: true}, "batch: map batches are vLLM's"},
	} {
		s, err := sim.Start(nil, c.o)
		if err == nil {
			s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.o, err, c.want)
		}
	}
}
