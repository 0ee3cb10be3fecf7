package hostile

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/kvtop/kvtop/sim/internal/promtext"
)

// engine is what one vLLM engine's page says; nil counters are absent.
type engine struct {
	id               string // engine label
	waiting, running float64
	kvUsage          float64
	queries, hits    *float64
	prompt           float64
	blocks           int
}

// vllmPage writes a vLLM V1 page of the engines (the families kvtop reads,
// HELP and TYPE as vLLM writes them), with process_start_time_seconds when
// start is not nil, then extra lines as they are.
func vllmPage(engines []engine, start *float64, extra string) []byte {
	var p promtext.Writer
	labels := func(e *engine) []string { return []string{"engine", e.id, "model_name", model} }
	gauge := func(name, help string, v func(e *engine) float64) {
		p.Family(name, help, "gauge")
		for i := range engines {
			p.Sample(name, labels(&engines[i]), v(&engines[i]))
		}
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func(e *engine) float64 { return e.running })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func(e *engine) float64 { return e.waiting })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func(e *engine) float64 { return e.kvUsage })
	counter := func(name, help string, v func(e *engine) *float64) {
		var any bool
		for i := range engines {
			any = any || v(&engines[i]) != nil
		}
		if !any {
			return // vLLM registers some counters only at the first request
		}
		p.Family(name+"_total", help, "counter")
		for i := range engines {
			if x := v(&engines[i]); x != nil {
				p.Sample(name+"_total", labels(&engines[i]), *x)
			}
		}
	}
	counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", func(e *engine) *float64 { return e.queries })
	counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", func(e *engine) *float64 { return e.hits })
	counter("vllm:prompt_tokens", "Number of prefill tokens processed.", func(e *engine) *float64 { return &e.prompt })
	p.Family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
	for i := range engines {
		p.Sample("vllm:cache_config_info", []string{"block_size", "16", "enable_prefix_caching", "True",
			"engine", engines[i].id, "num_gpu_blocks", strconv.Itoa(engines[i].blocks)}, 1)
	}
	if start != nil {
		p.Family("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge")
		p.Sample("process_start_time_seconds", nil, *start)
	}
	return append(p.Bytes(), extra...)
}

// model is the model name on every hostile page.
const model = "kvtop-hostile/model"

// seriesPage is n series of one family kvtop reads, each with its own
// engine label: 350 000 of them fit under the 16 MiB body limit and made
// the fold quadratic before issue 8.
func seriesPage(n int) []byte {
	var b bytes.Buffer
	b.Grow(n * 48)
	for i := range n {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{engine=\"%d\"} 1\n", i)
	}
	return b.Bytes()
}

// servePage answers every GET with body.
func servePage(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", promtext.ContentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}
}

// trickle sends body chunk bytes every every (the headers at once), then
// never ends when endless: a page that never finishes arriving.
func trickle(body []byte, chunk int, every time.Duration, endless bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", promtext.ContentType)
		f, _ := w.(http.Flusher)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for off := 0; ; off += chunk {
			if off >= len(body) {
				if !endless {
					return
				}
				off = 0
			}
			if _, err := w.Write(body[off:min(off+chunk, len(body))]); err != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}
}

// httpServer serves h on a free loopback port.
type httpServer struct {
	URL string // http://127.0.0.1:port
	srv *http.Server
	ln  net.Listener
}

func serveHTTP(h http.Handler) (*httpServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &httpServer{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln: ln}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *httpServer) Close() error { return s.srv.Close() }

// fp is a pointer to v.
func fp(v float64) *float64 { return &v }
