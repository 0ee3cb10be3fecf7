package worker

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/wire"
)

func start(t *testing.T, cfg Config) *Worker {
	t.Helper()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Advertise, cfg.EngineConfig, cfg.ReplayBuffer = "127.0.0.1", "127.0.0.1", engine.DefaultConfig(), 8
	w, err := Start(ctx, cfg, time.Unix(1_790_000_000, 250_000_000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); ctx.Term() })
	return w
}

func page(t *testing.T, w *Worker) string {
	var p promtext.Writer
	w.WriteMetrics(&p)
	s := string(p.Bytes())
	parser := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := parser.TextToMetricFamilies(strings.NewReader(s)); err != nil {
		t.Fatalf("page does not parse: %v", err)
	}
	return s
}

// Data-parallel ranks bind on consecutive ports and show as separate
// engines on the page.
func TestRanksOnPortOffsets(t *testing.T) {
	w := start(t, Config{Name: "w0", Engine: "vllm", Model: "m", DPRanks: 3, Format: wire.Format{}, Layout: wire.V26})
	for r := 1; r < 3; r++ {
		if portOf(w.Pubs[r].Events) != portOf(w.Pubs[0].Events)+r || portOf(w.Pubs[r].Replay) != portOf(w.Pubs[0].Replay)+r {
			t.Fatalf("rank %d at %s / %s, rank 0 at %s / %s", r, w.Pubs[r].Events, w.Pubs[r].Replay, w.Pubs[0].Events, w.Pubs[0].Replay)
		}
	}
	s := page(t, w)
	for _, want := range []string{
		`vllm:num_requests_waiting{engine="2",model_name="m"} 0.0`,
		`vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7900000005e+09`,
		`num_gpu_blocks="4096"`,
		`vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 0.0`,
		"process_start_time_seconds 1.79000000025e+09",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

func TestSGLangPage(t *testing.T) {
	w := start(t, Config{Name: "w0", Engine: "sglang", Model: "m", DPRanks: 2, Format: wire.Format{Hash: wire.HashInt64}, Layout: wire.Legacy})
	s := page(t, w)
	for _, want := range []string{`sglang:num_queue_reqs{dp_rank="1",`, "sglang:cached_tokens_total{model_name=\"m\"} 0.0", "sglang:num_pages{"} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(s, "_created") || strings.Contains(s, "vllm:") {
		t.Error("SGLang page with vLLM names or _created samples")
	}
}

// SGLang's scheduler counts prompt tokens as it admits them: the matched
// prefix under mode prefill_cache, the rest under prefill_compute, and
// decode tokens after the first; per dp_rank, like its gauges.
func TestSGLangRealtimeTokens(t *testing.T) {
	w := start(t, Config{Name: "w0", Engine: "sglang", Model: "m", DPRanks: 2, Format: wire.Format{Hash: wire.HashInt64}, Layout: wire.Legacy})
	e := w.Engines[1]
	const prompt, output = 64, 8
	toks := make([]uint32, prompt+output)
	hashes := []uint64{11, 12, 13, 14}
	at := time.Duration(0)
	for i, id := range []string{"a", "b"} { // the same prompt twice: b hits a's first 3 blocks
		if !e.Submit(&engine.Request{ID: id, Tokens: toks, Hashes: hashes, PromptLen: prompt, OutputLen: output, Arrival: at}) {
			t.Fatalf("request %s rejected", id)
		}
		for at = time.Duration(i+1) * time.Minute; len(e.TakeResults()) == 0; at += time.Second {
			if at > time.Duration(i+2)*time.Minute {
				t.Fatalf("request %s did not finish", id)
			}
			e.Run(at, nil)
		}
	}
	st := e.Snapshot()
	if st.PrefixHits != 48 || st.PrefixQueries != 2*prompt {
		t.Fatalf("engine hits %v queries %v, want 48 / %d", st.PrefixHits, st.PrefixQueries, 2*prompt)
	}
	s := page(t, w)
	lbl := `{dp_rank="1",engine_type="unified",mode="%s",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} `
	for _, want := range []string{
		"# TYPE sglang:realtime_tokens_total counter",
		"sglang:realtime_tokens_total" + strings.Replace(lbl, "%s", "prefill_cache", 1) + "48.0",
		"sglang:realtime_tokens_total" + strings.Replace(lbl, "%s", "prefill_compute", 1) + "80.0",
		"sglang:realtime_tokens_total" + strings.Replace(lbl, "%s", "decode", 1) + "14.0",
		`sglang:realtime_tokens_total{dp_rank="0",engine_type="unified",mode="prefill_cache",`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

func TestBindErrorMessage(t *testing.T) {
	busy := &BindError{Addr: "127.0.0.1:5557", What: "w0 rank 0 events", Err: zmq.Errno(syscall.EADDRINUSE)}
	if got := busy.Error(); got != "port 127.0.0.1:5557 (w0 rank 0 events) is already in use" {
		t.Errorf("busy: %q", got)
	}
	other := &BindError{Addr: "10.9.9.9:1", What: "w0 metrics", Err: errors.New("cannot assign requested address")}
	if got := other.Error(); !strings.Contains(got, "cannot bind 10.9.9.9:1 (w0 metrics)") {
		t.Errorf("other: %q", got)
	}
	// A real busy port, through Start.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ctx, _ := zmq.NewContext()
	defer ctx.Term()
	_, err := Start(ctx, Config{Name: "w9", Listen: "127.0.0.1", Advertise: "127.0.0.1", DPRanks: 1, EngineConfig: engine.DefaultConfig(),
		HTTPPort: ln.Addr().(*net.TCPAddr).Port}, time.Now())
	var be *BindError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "w9 metrics") {
		t.Fatalf("error %v", err)
	}
}

// A taken events port is named as such.
func TestBusyEventsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, _ := zmq.NewContext()
	defer ctx.Term()
	port := ln.Addr().(*net.TCPAddr).Port
	_, err = Start(ctx, Config{Name: "w3", Listen: "127.0.0.1", Advertise: "127.0.0.1", DPRanks: 1, EngineConfig: engine.DefaultConfig(),
		EventsPort: port, ReplayPort: port + 1000}, time.Now())
	var be *BindError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "already in use") || !strings.Contains(err.Error(), "w3 rank 0 events") {
		t.Fatalf("error %v, want the events port named as busy", err)
	}
}
