// Package worker is one simulated inference worker: one engine core per
// data-parallel rank, each with its own KV cache and its own KV event
// publisher (PUB + replay ROUTER on base port + rank), and one HTTP /metrics
// page in vLLM's (or SGLang's) format. It is a real network peer.
package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
)

// Config describes one worker.
type Config struct {
	Name         string // w0, w1, ...
	Engine       string // vllm | sglang
	Model        string
	DPRanks      int
	EngineConfig engine.Config
	Format       wire.Format
	Layout       wire.Layout
	ReplayBuffer int    // batches kept for replay, per rank
	Topic        string // PUB topic
	Listen       string // host to bind
	Advertise    string // host to put in URLs and endpoints
	HTTPPort     int    // 0: a free port
	EventsPort   int    // rank 0's PUB port; 0: free ports
	ReplayPort   int    // rank 0's ROUTER port; 0: free ports
}

// Worker is one simulated worker.
type Worker struct {
	cfg     Config
	Engines []*engine.Engine
	Pubs    []*Publisher
	URL     string // base URL, http://host:port
	ln      net.Listener
	srv     *http.Server

	start atomic.Uint64 // process start, unix seconds as float64 bits
	delay atomic.Int64  // extra /metrics latency (slow scrape)
	down  atomic.Bool   // restarting: /metrics answers 503
	http  completions   // the OpenAI-compatible face (completions.go)
}

// Start binds the worker's sockets and serves /metrics. Nothing is
// published until the sim's clock drives the engines.
func Start(ctx *zmq.Context, cfg Config, now time.Time) (_ *Worker, err error) {
	if cfg.DPRanks < 1 {
		cfg.DPRanks = 1
	}
	w := &Worker{cfg: cfg}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	w.setStart(now)
	// The metrics port is the layout's base (--base-port): bind it first, so
	// a taken base port is the error the operator reads.
	addr := net.JoinHostPort(cfg.Listen, strconv.Itoa(cfg.HTTPPort))
	w.ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, &BindError{Addr: addr, What: cfg.Name + " metrics", Err: err}
	}
	if err := w.bindRanks(ctx); err != nil {
		return nil, err
	}
	for r := 0; r < cfg.DPRanks; r++ {
		w.Engines = append(w.Engines, engine.New(cfg.EngineConfig))
	}
	w.URL = "http://" + net.JoinHostPort(cfg.Advertise, strconv.Itoa(w.ln.Addr().(*net.TCPAddr).Port))
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", w.serveMetrics)
	mux.HandleFunc("/v1/chat/completions", w.serveCompletions)
	mux.HandleFunc("/v1/completions", w.serveCompletions)
	mux.HandleFunc("/health", func(rw http.ResponseWriter, _ *http.Request) {
		if w.down.Load() {
			http.Error(rw, "engine restarting", http.StatusServiceUnavailable)
		}
	})
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go w.srv.Serve(w.ln)
	return w, nil
}

// bindRanks binds rank r's PUB on events port + r and its ROUTER on replay
// port + r. With free ports it looks for a run of DPRanks free ports.
func (w *Worker) bindRanks(ctx *zmq.Context) error {
	fixed := w.cfg.EventsPort > 0
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		pubBase, repBase := w.cfg.EventsPort, w.cfg.ReplayPort
		ok := true
		for r := 0; r < w.cfg.DPRanks; r++ {
			pp, rp := 0, 0
			if r > 0 || fixed {
				pp, rp = pubBase+r, repBase+r
			}
			pub, rep, pubEP, repEP, err := bindPair(ctx, w.cfg.Listen, pp, rp, fmt.Sprintf("%s rank %d", w.cfg.Name, r))
			if err != nil {
				lastErr = err
				ok = false
				break
			}
			if r == 0 {
				pubBase, repBase = portOf(pubEP), portOf(repEP)
			}
			host := w.cfg.Advertise
			w.Pubs = append(w.Pubs, &Publisher{
				pub: pub, rep: rep, topic: w.cfg.Topic, format: w.cfg.Format, layout: w.cfg.Layout,
				ring:   wire.NewRing(w.cfg.ReplayBuffer),
				Events: "tcp://" + net.JoinHostPort(host, strconv.Itoa(portOf(pubEP))),
				Replay: "tcp://" + net.JoinHostPort(host, strconv.Itoa(portOf(repEP))),
			})
		}
		if ok {
			return nil
		}
		for _, p := range w.Pubs {
			p.close()
		}
		w.Pubs = nil
		if fixed {
			return lastErr
		}
	}
	return fmt.Errorf("%s: no run of %d free ports found: %w", w.cfg.Name, w.cfg.DPRanks, lastErr)
}

// Name is the worker's name.
func (w *Worker) Name() string { return w.cfg.Name }

// Config returns the worker's configuration.
func (w *Worker) Config() Config { return w.cfg }

func (w *Worker) setStart(t time.Time) {
	w.start.Store(math.Float64bits(promtext.Unix(t)))
}

// StartTime is process_start_time_seconds.
func (w *Worker) StartTime() float64 { return math.Float64frombits(w.start.Load()) }

// Publish encodes one step's events of rank and publishes them.
func (w *Worker) Publish(rank int, ts float64, events []kvcache.Event) error {
	return w.Pubs[rank].Publish(ts, events, rank)
}

// ServeReplays answers pending replay requests on every rank.
func (w *Worker) ServeReplays() {
	for _, p := range w.Pubs {
		p.ServeReplays()
	}
}

// Sockets returns the ROUTER sockets, for the sim's poller.
func (w *Worker) Sockets() []*zmq.Socket {
	out := make([]*zmq.Socket, len(w.Pubs))
	for i, p := range w.Pubs {
		out[i] = p.rep
	}
	return out
}

// Restart is a process restart: every engine aborts its requests and starts
// empty (metrics from zero, new start time), every publisher's seq goes back
// to 0 with an empty replay buffer. The sockets stay bound.
func (w *Worker) Restart(now time.Duration, wall time.Time) []engine.Result {
	var aborted []engine.Result
	for r, e := range w.Engines {
		aborted = append(aborted, e.Reset(now)...)
		w.Pubs[r].Restart()
	}
	w.setStart(wall)
	return aborted
}

// SetDown makes /metrics answer 503 (the process is restarting).
func (w *Worker) SetDown(down bool) { w.down.Store(down) }

// Down reports whether the worker is restarting.
func (w *Worker) Down() bool { return w.down.Load() }

// SetScrapeDelay makes every /metrics response wait d (slow scrape).
func (w *Worker) SetScrapeDelay(d time.Duration) { w.delay.Store(int64(d)) }

// Close stops the HTTP server and closes the sockets. Call it from the
// goroutine that used the sockets, after it stopped using them.
func (w *Worker) Close() error {
	var err error
	if w.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if e := w.srv.Shutdown(ctx); e != nil && !errors.Is(e, context.DeadlineExceeded) {
			err = e
		}
		cancel()
		w.srv.Close()
	} else if w.ln != nil {
		w.ln.Close()
	}
	for _, p := range w.Pubs {
		p.close()
	}
	return err
}
