package sim

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim/scenario"
	"github.com/kvtop/kvtop/sim/wire"
)

// Actions a test or a demo can Inject (see package scenario).
type (
	Action         = scenario.Action
	EventLoss      = scenario.EventLoss
	ReplayOverflow = scenario.ReplayOverflow
	WorkerRestart  = scenario.WorkerRestart
	RouterRestart  = scenario.RouterRestart
	SlowScrape     = scenario.SlowScrape
	HotPrefix      = scenario.HotPrefix
	Truncate       = scenario.Truncate
	ClearCache     = scenario.ClearCache
	SlowFirstToken = scenario.SlowFirstToken
	CutStreams     = scenario.CutStreams
	ClientLoad     = scenario.ClientLoad
	SetRate        = scenario.SetRate
	Policy         = scenario.Policy
	HashSeed       = scenario.HashSeed
	Tiers          = scenario.Tiers
	ReportFull     = scenario.ReportFull
	Unique         = scenario.Unique
)

// WorkerEndpoints is where one simulated worker can be reached.
type WorkerEndpoints struct {
	Name    string
	BaseURL string   // http://host:port, as the router labels the worker
	Metrics string   // BaseURL + /metrics
	Events  []string // per rank: tcp://host:port (PUB, bound by the worker)
	Replay  []string // per rank: tcp://host:port (ROUTER)
	Topic   string
	Engine  string
	// Role is prefill or decode in a disaggregated pool (--pd), "" else.
	Role string
	// DynamoID is the worker id its Dynamo events and request traces
	// carry (event plane nats, decisions dynamo-trace): kvtop names it
	// worker_<id> unless an alias maps it.
	DynamoID uint64
}

// Endpoints lists everything the sim serves.
type Endpoints struct {
	Workers         []WorkerEndpoints
	RouterMetrics   string
	Decisions       string
	DecisionsFormat string // kvtop, dynamo-trace or smg
	// NATS is where the KV events go with event plane nats, and
	// DynamoWhere the stream or subject there ("" with ZMQ).
	NATS, DynamoWhere string
	// DynamoZMQ are the publishers' endpoints with event plane
	// dynamo-zmq (Dynamo's ZMQ event plane), every worker's ranks.
	DynamoZMQ []string
	// RouterHTTP is the router's HTTP face; Tap where the config's kvtop
	// tap listens ("" without client load).
	RouterHTTP, Tap string
}

// Endpoints returns what the sim serves.
func (s *Sim) Endpoints() Endpoints {
	e := Endpoints{RouterMetrics: s.routerURL + "/metrics", Decisions: s.decisions, DecisionsFormat: s.o.DecisionsFormat,
		RouterHTTP: s.routerURL + "/v1/chat/completions"}
	if s.clients != nil {
		e.Tap = s.o.TapListen
	}
	switch {
	case s.dyn != nil && s.dyn.enc == wire.DynamoZMQ:
		for w := range s.workers {
			e.DynamoZMQ = append(e.DynamoZMQ, s.dyn.endpoints(w)...)
		}
	case s.dyn != nil:
		e.NATS, e.DynamoWhere = s.o.NATS, "subject "+DynamoSubject
		if s.dyn.enc == wire.DynamoJSON {
			e.DynamoWhere = "stream " + DynamoStream + " (subject " + DynamoStream + ".queue)"
		}
	}
	for _, w := range s.workers {
		we := WorkerEndpoints{Name: w.Name(), BaseURL: w.URL, Metrics: w.URL + "/metrics", Topic: w.Config().Topic, Engine: s.o.Engine, Role: s.Role(len(e.Workers))}
		for _, p := range w.Pubs {
			we.Events = append(we.Events, p.Events)
			we.Replay = append(we.Replay, p.Replay)
		}
		if s.dynIDs != nil {
			we.DynamoID = s.dynIDs.id(len(e.Workers))
		}
		e.Workers = append(e.Workers, we)
	}
	return e
}

// Table renders the endpoints for a terminal.
func (e Endpoints) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tMETRICS\tEVENTS (PUB)\tREPLAY (ROUTER)")
	for _, w := range e.Workers {
		for r := range w.Events {
			name, metrics := w.Name, w.Metrics
			if r > 0 {
				name, metrics = fmt.Sprintf("  rank %d", r), ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, metrics, w.Events[r], w.Replay[r])
		}
	}
	tw.Flush()
	var roles []string
	for _, w := range e.Workers {
		if w.Role != "" {
			roles = append(roles, w.Name+"="+w.Role)
		}
	}
	if len(roles) > 0 {
		fmt.Fprintf(&b, "roles (P/D: the router sends each request to a prefill worker, a decode worker gets its KV) %s\n", strings.Join(roles, " "))
	}
	if e.NATS != "" {
		fmt.Fprintf(&b, "KV events (Dynamo) %s %s\n", e.NATS, e.DynamoWhere)
	}
	if len(e.DynamoZMQ) > 0 {
		fmt.Fprintf(&b, "KV events (Dynamo's ZMQ event plane) %s\n", strings.Join(e.DynamoZMQ, " "))
	}
	if len(e.Workers) > 0 && e.Workers[0].DynamoID != 0 {
		b.WriteString("Dynamo worker ids:")
		for _, w := range e.Workers {
			fmt.Fprintf(&b, " %s=%d", w.Name, w.DynamoID)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "router r0 metrics  %s\n", e.RouterMetrics)
	fmt.Fprintf(&b, "router r0 HTTP     %s (and /v1/completions; vllm-router's way)\n", e.RouterHTTP)
	if e.Tap != "" {
		fmt.Fprintf(&b, "kvtop tap          %s (the config's taps: t0; the sim's clients send there)\n", e.Tap)
	}
	fmt.Fprintf(&b, "decisions (%s)  %s\n", orKvtop(e.DecisionsFormat), e.Decisions)
	return b.String()
}

// Config is a kvtop config pointing at everything the sim serves.
func (s *Sim) Config() config.Config {
	c := config.Defaults()
	c.Pool = "sim"
	for _, w := range s.Endpoints().Workers {
		cw := config.Worker{
			Name: w.Name, Metrics: w.Metrics, Events: w.Events[0], Replay: w.Replay[0],
			Topic: w.Topic, DPRanks: len(w.Events), Engine: w.Engine, Role: w.Role,
		}
		if s.dyn != nil {
			// Dynamo's events come from NATS.
			cw.Events, cw.Replay, cw.Topic, cw.DPRanks = "", "", "", 0
		}
		if w.DynamoID != 0 {
			// Dynamo's events and traces name the worker by its id.
			cw.Aliases = []string{"worker_" + strconv.FormatUint(w.DynamoID, 10)}
		}
		c.Workers = append(c.Workers, cw)
	}
	switch {
	case s.dyn != nil && s.dyn.enc == wire.DynamoZMQ:
		c.EventPlane.Kind, c.EventPlane.Endpoints = config.EventPlaneDynamoZMQ, s.Endpoints().DynamoZMQ
	case s.dyn != nil:
		c.EventPlane.NATS = s.o.NATS
		if s.dyn.enc == wire.DynamoJSON {
			c.EventPlane.JetStream.Stream = DynamoStream
		} else {
			c.EventPlane.Subject = DynamoSubject
		}
	}
	c.Routers = []config.Router{{Name: "r0", Metrics: s.routerURL + "/metrics", Profile: "vllm-router"}}
	c.Decisions = []config.Decisions{{Path: s.decisions, Format: orKvtop(s.o.DecisionsFormat)}}
	if s.clients != nil {
		c.Taps = []config.Tap{{Name: "t0", Listen: s.o.TapListen, Upstream: s.routerURL}}
	}
	return c
}

func orKvtop(format string) string {
	if format == "" {
		return "kvtop"
	}
	return format
}
