package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/worker"
	"github.com/kvtop/kvtop/views"
)

func init() { commands = append(commands, newSimCmd) }

func newSimCmd() *cobra.Command {
	var (
		o           sim.Options
		writeConfig string
		force       bool
		km          kubeManifestOptions
		kmDir       string
	)
	var scenarios strings.Builder
	for _, n := range sim.Scenarios() {
		fmt.Fprintf(&scenarios, "  %-18s %s\n", n, sim.ScenarioSummary(n))
	}
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "run only the simulated pool (workers, router, decisions) and print its endpoints",
		Long: `sim runs kvtop's simulated pool: workers that speak vLLM's (or SGLang's) real
wire formats — a ZMQ PUB of KV events and a replay ROUTER per engine, an HTTP
/metrics page — and a router that drives a synthetic workload (multi-turn chats,
long shared system prompts, RAG documents) and writes its decisions: kvtop
audit JSONL, or with --decisions-format Dynamo's request traces or the SGLang
model gateway's decision lines.
It binds free ports unless --base-port is given, prints the endpoints, and with
--write-config writes a kvtop config that points at all of it. Times are
simulated time: --speed 2 runs the timeline twice as fast.

Scenarios:
` + scenarios.String(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pdWorkers(cmd, o.PD, &o.Workers); err != nil {
				return &exitError{code: 2, msg: "sim: " + err.Error()}
			}
			if kmDir != "" {
				return runKubeManifests(cmd, o, km, kmDir, force)
			}
			return runSim(cmd, o, writeConfig, force)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Workers, "workers", 4, "simulated workers")
	f.IntVar(&o.Models, "models", 1, "models the pool serves: 1, or 2 (odd workers serve a second model; each conversation keeps one)")
	f.StringVar(&o.PD, "pd", "", "a disaggregated pool: `P:D` prefill and decode workers (e.g. 2:4; --workers is their sum): the router sends each request to a prefill worker, which hands its KV to a decode worker")
	f.StringVar(&o.Scenario, "scenario", "steady", "scenario: "+strings.Join(sim.Scenarios(), ", "))
	f.StringVar(&writeConfig, "write-config", "", "write a kvtop config pointing at the sim to this file (not over an existing one without --force)")
	f.BoolVar(&force, "force", false, "let --write-config replace an existing file")
	f.StringVar(&o.Engine, "engine", "vllm", "wire formats and metric names: vllm or sglang")
	f.StringVar(&o.Encoding, "encoding", "map", "KV event encoding: map (vLLM >= 0.24) or array (older)")
	f.StringVar(&o.Batch, "batch", "array", "KV event batch shape: array (vLLM releases, SGLang) or map (vLLM main for a while after #42892)")
	f.StringVar(&o.ReplayLayout, "replay-layout", "", "replay reply layout: v26 or legacy (default v26; sglang: legacy)")
	f.StringVar(&o.Hash, "hash", "", "block hash form: uint64 or bytes (default uint64; sglang: signed int64)")
	f.IntVar(&o.DPRanks, "dp", 1, "data-parallel ranks per worker (rank r publishes on port + r)")
	f.Int64Var(&o.Seed, "seed", 1, "random seed: the same seed gives the same run")
	f.Float64Var(&o.Speed, "speed", 1, "time compression (2 = twice as fast)")
	f.DurationVar(&o.Duration, "duration", 0, "stop after this much simulated time (0 = until interrupted)")
	f.Float64Var(&o.Rate, "rate", 0, "requests per simulated second (default 3 per worker)")
	f.StringVar(&o.Listen, "listen", "127.0.0.1", "address to bind")
	f.IntVar(&o.ReplayBuffer, "replay-buffer", 0, "batches each publisher keeps for replay (default 10000)")
	f.StringVar(&o.Policy, "policy", "cache-aware", "router policy: cache-aware or round-robin")
	f.IntVar(&o.BasePort, "base-port", 0, "bind a fixed port layout from here (default: free ports)")
	f.StringVar(&o.DecisionsPath, "decisions", "", "decision log file (default: a temporary file, removed on exit); with --trace-sink gzip the sink's prefix")
	f.StringVar(&o.DecisionsFormat, "decisions-format", "kvtop", "what the router writes there: kvtop (audit records), dynamo-trace (Dynamo's request_end traces) or smg (the SGLang model gateway's cache-aware selection lines)")
	f.StringVar(&o.TraceSink, "trace-sink", "jsonl", "with --decisions-format dynamo-trace: jsonl (wrapped lines), gzip (segments PATH.NNNNNN.jsonl.gz, a gzip member a second) or stderr (bare records)")
	f.StringVar(&o.SMGLog, "smg-log", "text", "with --decisions-format smg: text (tracing's layout) or json (--log-json)")
	f.StringVar(&o.EventPlane, "event-plane", "zmq", "where KV events go: zmq (vLLM's PUB + replay per engine), nats (Dynamo's event plane on NATS) or dynamo-zmq (Dynamo's ZMQ event plane: a PUB per worker rank, batched envelopes)")
	f.StringVar(&o.NATS, "nats", "", "NATS server for --event-plane nats, e.g. nats://127.0.0.1:4222")
	f.StringVar(&o.DynamoEvents, "dynamo-events", "jetstream", "with --event-plane nats: jetstream (Dynamo's durable KV events, JSON in a stream) or core (the event plane's msgpack envelopes)")
	f.StringVar(&kmDir, "kube-manifests", "", "write Kubernetes manifests of the simulated pool (one pod per worker, an InferencePool, kvtop's Role) into `DIR` and exit")
	f.StringVar(&km.Namespace, "kube-namespace", "kvtop-sim", "with --kube-manifests: the namespace")
	f.StringVar(&km.Image, "kube-image", "kvtop:dev", "with --kube-manifests: the kvtop image the pods run (build it from deploy/kubernetes/Dockerfile)")
	return cmd
}

func runSim(cmd *cobra.Command, o sim.Options, writeConfig string, force bool) error {
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := sim.CheckWorkers(o.Workers); err != nil {
		return &exitError{code: 2, msg: "sim: " + err.Error()}
	}
	// A config is the operator's work: replaced only when asked, and
	// checked before any port is bound.
	if writeConfig != "" && !force {
		if _, err := os.Stat(writeConfig); err == nil {
			return &exitError{code: 2, msg: fmt.Sprintf("sim: --write-config %s: the file exists; add --force to replace it", shellArg(writeConfig))}
		}
	}
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(errw, "%s kvtop sim: %s\n", time.Now().Format("15:04:05"), views.Clean(fmt.Sprintf(format, args...)))
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	s, err := sim.Start(ctx, o)
	if err != nil {
		var bind *worker.BindError
		if errors.As(err, &bind) {
			return &exitError{code: 1, msg: "sim: " + bind.Error()}
		}
		return &exitError{code: 2, msg: "sim: " + err.Error()}
	}
	defer s.Close()
	eff := s.Options()
	fmt.Fprintf(out, "kvtop sim: scenario %s, %d workers x %d rank(s), %s (%s events in %s batches, %s hashes, replay %s), %s router, seed %d, speed %gx, %.1f req/s\n",
		eff.Scenario, eff.Workers, eff.DPRanks, eff.Engine, orDefault(eff.Encoding, "map"), orDefault(eff.Batch, "array"), eff.Hash, eff.ReplayLayout, eff.Policy, eff.Seed, eff.Speed, eff.Rate)
	fmt.Fprint(out, s.Endpoints().Table())
	if writeConfig != "" {
		header := "kvtop config for the simulated pool of `kvtop sim` (" + eff.Scenario + ").\nValid while that sim runs: its ports are chosen at start."
		if err := config.Write(writeConfig, s.Config(), header); err != nil {
			return &exitError{code: 1, msg: "sim: --write-config: " + err.Error()}
		}
		fmt.Fprintf(out, "config written to %s (in another terminal, run: %s -c %s)\n", views.Clean(writeConfig), self(), shellArg(writeConfig))
	}
	fmt.Fprintln(out, "press Ctrl-C to stop")
	select {
	case <-ctx.Done():
	case <-s.Done():
		fmt.Fprintf(out, "kvtop sim: %s of simulated time elapsed\n", eff.Duration)
	}
	if err := s.Close(); err != nil {
		return &exitError{code: 1, msg: "sim: stopping: " + err.Error()}
	}
	fmt.Fprintln(out, "kvtop sim: stopped")
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// runKubeManifests writes the simulated pool as Kubernetes manifests.
func runKubeManifests(cmd *cobra.Command, o sim.Options, km kubeManifestOptions, dir string, force bool) error {
	if err := sim.CheckWorkers(o.Workers); err != nil {
		return &exitError{code: 2, msg: "sim: " + err.Error()}
	}
	if !contains(sim.Scenarios(), o.Scenario) {
		return &exitError{code: 2, msg: fmt.Sprintf("sim: scenario %q is not one of %s", o.Scenario, strings.Join(sim.Scenarios(), ", "))}
	}
	km.Workers, km.Scenario, km.Engine = o.Workers, o.Scenario, o.Engine
	files, err := writeKubeManifests(dir, km, force)
	if err != nil {
		return &exitError{code: 1, msg: "sim: --kube-manifests: " + err.Error()}
	}
	out := cmd.OutOrStdout()
	for _, f := range files {
		fmt.Fprintf(out, "wrote %s\n", views.Clean(f))
	}
	fmt.Fprintf(out, "apply with: kubectl apply -f %s; then run: %s --kube -n %s -l app=kvtop-sim\n",
		shellArg(filepath.Join(dir, "kvtop-sim.yaml")), self(), shellArg(km.Namespace))
	return nil
}

// pdWorkers makes --workers the sum of --pd's P:D when --pd is given and
// --workers is not (a --workers that disagrees is an error).
func pdWorkers(cmd *cobra.Command, pd string, workers *int) error {
	if pd == "" {
		return nil
	}
	p, d, err := sim.ParsePD(pd)
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("workers") && *workers != p+d {
		return fmt.Errorf("--pd %s makes %d workers, --workers says %d: give one of them", pd, p+d, *workers)
	}
	*workers = p + d
	return nil
}
