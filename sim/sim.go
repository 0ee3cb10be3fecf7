// Package sim is kvtop's simulated pool: vLLM (or SGLang) workers that are
// real network peers (ZMQ PUB + replay ROUTER, HTTP /metrics, in the exact
// wire formats of PROTOCOLS.md), a router driving a synthetic workload and
// writing its decisions (kvtop audit JSONL, or Dynamo's request traces, or
// the SGLang model gateway's decision lines), and scenarios that inject
// faults on a timeline.
// It is the embedded default of `kvtop demo`, kvtop's test bed and its fault
// injector. It does not import kvtop's collectors: a kvtop bug must not hide
// behind a simulator that shares it.
package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/router"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/sim/wire"
	"github.com/kvtop/kvtop/sim/worker"
)

// Options configure a simulated pool. Zero values take the defaults.
type Options struct {
	Workers      int           // default 4
	Scenario     string        // default "steady"
	Engine       string        // vllm (default) | sglang
	Encoding     string        // map (default, vLLM >= 0.24) | array
	Batch        string        // array (default) | map (vLLM main after #42892, for a while)
	ReplayLayout string        // v26 (default for vllm) | legacy (default for sglang)
	Hash         string        // uint64 (default) | bytes; sglang: int64
	DPRanks      int           // engines per worker, on port offsets (default 1)
	Seed         int64         // same seed, same run
	Speed        float64       // time compression (default 1)
	Duration     time.Duration // simulated time until Done; 0 = forever
	Rate         float64       // requests per simulated second; 0 = 3 per worker
	Listen       string        // host to bind (default 127.0.0.1)
	ReplayBuffer int           // batches kept for replay per publisher (default 10000)
	// DecisionsPath is the decision log ("" = a file in a temp dir,
	// removed by Close). With DecisionsFormat dynamo-trace and TraceSink
	// gzip it is the sink's prefix (segments PATH.NNNNNN.jsonl.gz).
	DecisionsPath string
	// DecisionsFormat is what the router writes there: kvtop (default: the
	// audit record, a decision and an outcome per request), dynamo-trace
	// (Dynamo's request_end traces, the workers named by Dynamo worker id)
	// or smg (the SGLang model gateway's cache-aware selection lines, in
	// text or, with SMGLog json, JSON).
	DecisionsFormat string
	TraceSink       string // dynamo-trace: jsonl (default) | gzip | stderr
	TraceSchema     string // dynamo-trace: v1 (default: dynamo.request.trace.v1) | agent (dynamo.agent.trace.v1)
	// TraceNoBackendActual leaves backend_actual_cached_tokens out of the
	// traces, as Dynamo releases without it write them.
	TraceNoBackendActual bool
	SMGLog               string // smg: text (default) | json
	Policy               string // cache-aware (default) | round-robin
	BasePort             int    // 0 = free ports; else a fixed layout from here
	Logf                 func(format string, args ...any)
	// Manual stops the clock: it moves only on Advance (tests).
	Manual bool
	// EventPlane is where the workers publish their KV events: zmq
	// (default: vLLM's PUB and replay ROUTER per engine) or nats (Dynamo's
	// event plane, at NATS).
	EventPlane string
	NATS       string // nats://host:port, for EventPlane nats
	// DynamoEvents is Dynamo's way on NATS: jetstream (default: the
	// durable KV events, JSON in a JetStream stream) or core (the event
	// plane's msgpack envelopes on a core subject).
	DynamoEvents string
	// Models is how many models the pool serves (default 1): worker i
	// serves model i mod Models (Model, then Model70B), and each
	// conversation keeps one model.
	Models int
	// PD makes a disaggregated pool, "P:D": P prefill workers, then D
	// decode workers (Workers is their sum); "" aggregated workers.
	PD string
	// TapListen is where the config's kvtop tap listens and the sim's
	// clients send (scenarios with client load, e.g. tap); "" picks a
	// free loopback port.
	TapListen string
	// Ledger keeps the sim's own account of why each block was computed
	// (LadderTruth), for tests of kvtop's hit-rate ladder. It remembers
	// every hash the pool computes (up to 2 million): off by default.
	Ledger bool
}

// Quantum is the simulated clock's step.
const Quantum = 10 * time.Millisecond

// Model is the model name the simulated pool serves; Model70B the
// second model of a pool of two (Options.Models).
const (
	Model    = "kvtop-sim/model-8b"
	Model70B = "kvtop-sim/model-70b"
)

// DefaultThreshold is the cache-aware router's default load threshold
// (in-flight requests).
const DefaultThreshold = 8

// overflowRing is the replay buffer of workers a scenario overflows when
// --replay-buffer is not given: 10000 batches would take minutes to outrun.
const overflowRing = 128

// Sim is a running simulated pool.
type Sim struct {
	o Options
	// pd is the number of decode workers of a disaggregated pool (the
	// last pd workers; 0: none); legs and decodeOf follow its requests
	// between their two legs (pd.go).
	pd        int
	legs      map[*engine.Request]pdLeg
	decodeOf  map[*engine.Request]decodeLeg
	zctx      *zmq.Context
	workers   []*worker.Worker
	router    *router.Router
	routerURL string
	routerSrv *http.Server
	decisions string
	tmpDir    string
	player    *scenario.Player
	baseRate  float64
	// basePolicy is the run's own policy (--policy), restored by a
	// scenario's Policy{}.
	basePolicy router.Policy

	cmds    chan func()
	stop    chan struct{}
	stopped chan struct{}
	done    chan struct{}
	doneSet bool
	closeMu sync.Once
	closeEr error

	now    time.Duration // simulated time, owned by the loop
	wall0  time.Time
	timers []timer
	phase  atomic.Value     // string
	dyn    *dynamoPublisher // EventPlane nats: publishes instead of the ZMQ PUBs
	// dynIDs are the workers' Dynamo ids, with EventPlane nats or
	// DecisionsFormat dynamo-trace (nil otherwise).
	dynIDs *dynamoIDs
	// rankTurn rotates ties between data-parallel ranks.
	rankTurn int
	logf     func(string, ...any)

	// seeds is each worker's hash seed (0: the pool's); reseeded events
	// are written to evBuf/hashBuf (loop goroutine only). roots is the
	// truth kvtop's hash check must find (inspect.go).
	seeds   []uint64
	evBuf   []kvcache.Event
	hashBuf []uint64
	roots   rootTruth
	ledger  *ledger // Options.Ledger (ledger.go), else nil

	front   *router.Front // the router's HTTP face (router/front.go)
	clients *clientLoad   // client requests through kvtop tap, when the scenario has them
}

type timer struct {
	at time.Duration
	fn func()
}

// Scenarios lists the scenario names, for help and validation.
func Scenarios() []string { return scenario.Names() }

// ScenarioSummary describes a scenario in one line.
func ScenarioSummary(name string) string { return scenario.Summary(name) }

// CheckWorkers says why a pool of n simulated workers cannot be (nil when
// it can): for a command line, where 0 is an answer, not "the default".
func CheckWorkers(n int) error {
	if n < 1 || n > router.MaxWorkers {
		return fmt.Errorf("workers: %d is not between 1 and %d", n, router.MaxWorkers)
	}
	return nil
}

// CheckDecisionsFormat says why f is not a decision log format the router
// writes (nil when it is): kvtop, dynamo-trace or smg.
func CheckDecisionsFormat(f string) error {
	_, err := router.ParseFormat(f)
	return err
}

func (o *Options) defaults() error {
	if o.PD != "" {
		p, d, err := ParsePD(o.PD)
		if err != nil {
			return err
		}
		if o.Workers != 0 && o.Workers != p+d {
			return fmt.Errorf("--pd %s makes %d workers, --workers says %d: give one of them", o.PD, p+d, o.Workers)
		}
		if o.Engine == "sglang" {
			return errors.New("--pd: the sim's P/D workers are vLLM's (its KV connector); not with --engine sglang")
		}
		o.Workers = p + d
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if err := CheckWorkers(o.Workers); err != nil {
		return err
	}
	switch {
	case o.Models == 0:
		o.Models = 1
	case o.Models < 1 || o.Models > 2:
		return fmt.Errorf("--models %d: the sim serves 1 or 2 models", o.Models)
	case o.Models == 2 && o.Workers < 2:
		return errors.New("--models 2 needs at least 2 workers")
	case o.Models == 2 && o.PD != "":
		return errors.New("--models 2 with --pd: not simulated (one model's P/D pool)")
	}
	if o.Scenario == "" {
		o.Scenario = "steady"
	}
	switch o.Engine {
	case "":
		o.Engine = "vllm"
	case "vllm", "sglang":
	default:
		return fmt.Errorf("engine: %q is not one of vllm, sglang", o.Engine)
	}
	if o.ReplayLayout == "" {
		o.ReplayLayout = "v26"
		if o.Engine == "sglang" {
			o.ReplayLayout = "legacy"
		}
	}
	if o.Hash == "" {
		o.Hash = "uint64"
		if o.Engine == "sglang" {
			o.Hash = "int64"
		}
	}
	if o.DPRanks == 0 {
		o.DPRanks = 1
	}
	if o.DPRanks < 1 || o.DPRanks > 64 {
		return fmt.Errorf("dp: %d ranks is not between 1 and 64", o.DPRanks)
	}
	if o.Speed == 0 {
		o.Speed = 1
	}
	if o.Speed < 0.01 || o.Speed > 1000 {
		return fmt.Errorf("speed: %g is not between 0.01 and 1000", o.Speed)
	}
	if o.Rate < 0 || o.Duration < 0 || o.ReplayBuffer < 0 || o.BasePort < 0 || o.BasePort > 65535 {
		return errors.New("rate, duration, replay-buffer and base-port must not be negative")
	}
	if o.Rate == 0 {
		o.Rate = 3 * float64(o.Workers)
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1"
	}
	if o.Policy == "" {
		o.Policy = "cache-aware"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	switch o.EventPlane {
	case "":
		o.EventPlane = "zmq"
	case "zmq":
	case "dynamo-zmq":
	case "nats":
		if o.NATS == "" {
			return errors.New("event-plane nats needs --nats URL")
		}
		if o.DynamoEvents == "" {
			o.DynamoEvents = "jetstream"
		}
		if _, err := ParseDynamoEvents(o.DynamoEvents); err != nil {
			return err
		}
	default:
		return fmt.Errorf("event-plane: %q is not one of zmq, nats, dynamo-zmq", o.EventPlane)
	}
	var err error
	if o.DecisionsFormat, err = router.ParseFormat(o.DecisionsFormat); err != nil {
		return err
	}
	if o.DecisionsFormat == router.FormatDynamoTrace {
		if o.TraceSink, err = router.ParseSink(o.TraceSink); err != nil {
			return err
		}
	}
	return nil
}

// Start binds everything (a busy port is a *worker.BindError naming it) and
// starts the clock.
func Start(ctx context.Context, o Options) (_ *Sim, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	enc, err := wire.ParseEncoding(o.Encoding)
	if err != nil {
		return nil, err
	}
	hash, err := wire.ParseHash(o.Hash)
	if err != nil {
		return nil, err
	}
	if hash == wire.HashInt64 && o.Engine != "sglang" {
		return nil, errors.New("hash: int64 hashes are SGLang's (use --engine sglang)")
	}
	batch, err := wire.ParseBatch(o.Batch)
	if err != nil {
		return nil, err
	}
	if batch == wire.MapBatch && o.Engine == "sglang" {
		return nil, errors.New("batch: map batches are vLLM's; SGLang's batch is an array")
	}
	layout, err := wire.ParseLayout(o.ReplayLayout)
	if err != nil {
		return nil, err
	}
	policy, err := router.ParsePolicy(o.Policy)
	if err != nil {
		return nil, err
	}
	scen, err := scenario.Get(o.Scenario, o.Workers)
	if err != nil {
		return nil, err
	}

	s := &Sim{o: o, cmds: make(chan func(), 16), stop: make(chan struct{}), stopped: make(chan struct{}),
		done: make(chan struct{}), wall0: time.Now(), logf: o.Logf, player: scenario.NewPlayer(scen), baseRate: o.Rate}
	s.phase.Store("")
	if o.PD != "" {
		_, s.pd, _ = ParsePD(o.PD)
		s.legs, s.decodeOf = map[*engine.Request]pdLeg{}, map[*engine.Request]decodeLeg{}
	}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	if s.zctx, err = zmq.NewContext(); err != nil {
		return nil, err
	}
	advertise := o.Listen
	if ip := net.ParseIP(o.Listen); ip != nil && ip.IsUnspecified() {
		advertise = "127.0.0.1"
	}
	rings := map[int]int{}
	if o.ReplayBuffer == 0 {
		for _, w := range scen.OverflowWorkers() {
			rings[w] = overflowRing
			o.Logf("w%d keeps %d batches for replay (not 10000) so that %s can outrun it; set --replay-buffer to choose", w, overflowRing, o.Scenario)
		}
	}
	stride := 1 + 2*o.DPRanks
	for i := 0; i < o.Workers; i++ {
		ring := o.ReplayBuffer
		if ring == 0 {
			ring = 10000
		}
		if r, ok := rings[i]; ok {
			ring = r
		}
		ec := engine.DefaultConfig()
		if o.Engine == "sglang" {
			ec.Buckets = engine.SGLangBuckets()
		}
		if s.pd > 0 {
			// P/D needs a KV connector (NIXL): vLLM main's events and
			// prompt_tokens_by_source.
			ec.Tiers = engine.Tiers{Main: true}
		}
		cfg := worker.Config{
			Name: fmt.Sprintf("w%d", i), Engine: o.Engine, Model: workerModel(o, i), DPRanks: o.DPRanks,
			EngineConfig: ec, Format: wire.Format{Encoding: enc, Hash: hash, Batch: batch}, Layout: layout,
			ReplayBuffer: ring, Listen: o.Listen, Advertise: advertise,
		}
		if o.BasePort > 0 {
			base := o.BasePort + i*stride
			cfg.HTTPPort, cfg.EventsPort, cfg.ReplayPort = base, base+1, base+1+o.DPRanks
		}
		w, err := worker.Start(s.zctx, cfg, s.wall0)
		if err != nil {
			return nil, err
		}
		s.workers = append(s.workers, w)
	}
	s.seeds = make([]uint64, o.Workers)
	s.roots = newRootTruth()
	if o.Ledger {
		s.ledger = newLedger(o.Workers, o.DPRanks)
	}

	if o.EventPlane != "zmq" || o.DecisionsFormat == router.FormatDynamoTrace {
		s.dynIDs = newDynamoIDs(o.Workers, uint64(o.Seed))
	}
	switch o.EventPlane {
	case "nats":
		enc, _ := ParseDynamoEvents(o.DynamoEvents)
		if s.dyn, err = newDynamoPublisher(o.NATS, nil, enc, s.dynIDs, o.Workers, o.DPRanks, s.wallNow); err != nil {
			return nil, err
		}
	case "dynamo-zmq":
		if s.dyn, err = newDynamoPublisher("", s.zctx, wire.DynamoZMQ, s.dynIDs, o.Workers, o.DPRanks, s.wallNow); err != nil {
			return nil, err
		}
	}

	if s.decisions = o.DecisionsPath; s.decisions == "" {
		if s.tmpDir, err = os.MkdirTemp("", "kvtop-sim-"); err != nil {
			return nil, err
		}
		name := "decisions.jsonl"
		switch {
		case o.DecisionsFormat == router.FormatSMG:
			name = "smg.log"
		case o.DecisionsFormat == router.FormatDynamoTrace && o.TraceSink == router.SinkGzip:
			name = "dynamo-request-trace" // the sink's prefix, as DYN_REQUEST_TRACE_FILE_PATH
		case o.DecisionsFormat == router.FormatDynamoTrace:
			name = "dynamo-request-trace.jsonl"
		}
		s.decisions = filepath.Join(s.tmpDir, name)
	}
	names, urls := make([]string, o.Workers), make([]string, o.Workers)
	for i, w := range s.workers {
		names[i], urls[i] = w.Name(), w.URL
	}
	s.basePolicy = policy
	rc := router.Config{
		Decode: make([]bool, o.Workers),
		Name:   "r0", Workers: names, URLs: urls, Policy: policy, Threshold: DefaultThreshold, Model: Model,
		Seed: uint64(o.Seed), Rate: o.Rate, Audit: s.decisions, Now: s.wallNow,
		Format: o.DecisionsFormat, TraceSink: o.TraceSink, TraceSchema: o.TraceSchema,
		TraceNoBackendActual: o.TraceNoBackendActual, SMGLog: o.SMGLog,
	}
	if s.dynIDs != nil {
		rc.DynamoID = s.dynIDs.id
	}
	for w := range rc.Decode {
		rc.Decode[w] = s.isDecode(w)
		rc.WorkerModels = append(rc.WorkerModels, workerModel(o, w))
	}
	s.router, err = router.New(rc, kvcache.NewHasher(uint64(o.Seed)))
	if err != nil {
		return nil, err
	}
	s.front = s.router.NewFront(func(w int) bool { return !s.workers[w].Down() })
	if scen.HasClients() {
		if s.o.TapListen == "" {
			if s.o.TapListen, err = freeLoopback(); err != nil {
				return nil, err
			}
		}
		s.clients = newClientLoad("http://"+s.o.TapListen, o.Logf)
	}
	if err := s.serveRouter(); err != nil {
		return nil, err
	}
	go s.loop()
	if ctx != nil {
		go func() {
			select {
			case <-ctx.Done():
				s.Close()
			case <-s.stopped:
			}
		}()
	}
	return s, nil
}

func (s *Sim) serveRouter() error {
	port := 0
	if s.o.BasePort > 0 {
		port = s.o.BasePort + s.o.Workers*(1+2*s.o.DPRanks)
	}
	addr := net.JoinHostPort(s.o.Listen, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &worker.BindError{Addr: addr, What: "router metrics", Err: err}
	}
	host := s.workers[0].Config().Advertise
	s.routerURL = "http://" + net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	mux := http.NewServeMux()
	mux.Handle("/v1/chat/completions", s.front)
	mux.Handle("/v1/completions", s.front)
	mux.HandleFunc("/metrics", func(rw http.ResponseWriter, _ *http.Request) {
		var p promtext.Writer
		s.router.WriteMetrics(&p)
		rw.Header().Set("Content-Type", promtext.ContentType)
		rw.Write(p.Bytes())
	})
	s.routerSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.routerSrv.Serve(ln)
	return nil
}

// freeLoopback is a loopback address nothing listens on now.
func freeLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Front is the router's HTTP face (/v1/chat/completions, /v1/completions).
func (s *Sim) Front() *router.Front { return s.front }

// RouterURL is the router's base URL: its HTTP face and /metrics.
func (s *Sim) RouterURL() string { return s.routerURL }

// wallNow is the time written in records and batches: the wall clock, or in
// manual mode the start time plus simulated time (so runs compare).
func (s *Sim) wallNow() time.Time {
	if s.o.Manual {
		return s.wall0.Add(s.now)
	}
	return time.Now()
}

// Done is closed when Duration of simulated time has elapsed.
func (s *Sim) Done() <-chan struct{} { return s.done }

// Phase is what the scenario is doing now, in a few words.
func (s *Sim) Phase() string { return s.phase.Load().(string) }

// Options returns the options in effect (defaults filled in).
func (s *Sim) Options() Options { return s.o }

// Close stops the clock, unbinds every socket and port, and closes files.
func (s *Sim) Close() error {
	s.closeMu.Do(func() {
		close(s.stop)
		<-s.stopped
		s.closeEr = s.release()
	})
	return s.closeEr
}

// release frees what Start acquired; the loop has stopped (or never ran).
func (s *Sim) release() error {
	var errs []error
	if s.clients != nil {
		s.clients.close()
	}
	if s.routerSrv != nil {
		s.routerSrv.Close()
	}
	for _, w := range s.workers {
		if err := w.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.dyn != nil {
		s.dyn.close()
	}
	if s.router != nil {
		if err := s.router.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.zctx != nil {
		if err := s.zctx.Term(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.tmpDir != "" {
		os.RemoveAll(s.tmpDir)
	}
	return errors.Join(errs...)
}

// workerModel is the model worker i serves.
func workerModel(o Options, i int) string {
	if o.Models == 2 && i%2 == 1 {
		return Model70B
	}
	return Model
}
