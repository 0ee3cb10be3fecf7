package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// TestDynamoEventPlaneFromConfig: `kvtop sim --event-plane nats` publishes
// the pool to NATS in Dynamo's format and writes a config (event_plane,
// the workers' Dynamo ids as aliases); kvtop started on that config names
// every stream after its configured worker and ends with exactly the
// blocks each simulated engine holds — for both of Dynamo's ways.
func TestDynamoEventPlaneFromConfig(t *testing.T) {
	for _, mode := range []string{"jetstream", "core"} {
		t.Run(mode, func(t *testing.T) {
			ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
			if err != nil {
				t.Fatal(err)
			}
			go ns.Start()
			if !ns.ReadyForConnections(10 * time.Second) {
				t.Fatal("nats-server not ready")
			}
			defer ns.Shutdown()
			s, err := sim.Start(nil, sim.Options{Workers: 3, Seed: 11, Rate: 15, Manual: true, Listen: "127.0.0.1",
				EventPlane: "nats", NATS: ns.ClientURL(), DynamoEvents: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c := s.Config()
			c.Refresh, c.ScrapeInterval, c.Window = 250*time.Millisecond, 250*time.Millisecond, 15*time.Second
			if errs := c.Validate(); len(errs) > 0 {
				t.Fatal(errs)
			}
			if c.EventPlane.NATS == "" || c.Workers[0].Events != "" || !strings.HasPrefix(c.Workers[0].Aliases[0], "worker_") {
				t.Fatalf("the sim's config: %+v / %+v", c.EventPlane, c.Workers[0])
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			subs := ns.NumSubscriptions()
			e, err := startEngine(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); ns.NumSubscriptions() <= subs; {
				if time.Now().After(deadline) {
					t.Fatal("kvtop did not subscribe to NATS within 10 s")
				}
				time.Sleep(10 * time.Millisecond)
			}
			go func() {
				for ctx.Err() == nil {
					if s.Advance(50*time.Millisecond) != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
			wait := func(what string, ok func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
				t.Helper()
				deadline := time.Now().Add(60 * time.Second)
				for {
					snap := e.Pool.Latest()
					if snap != nil && ok(snap) {
						return snap
					}
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s", what)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			wait("every worker's stream live with events", func(snap *snapshot.Snapshot) bool {
				if len(snap.Workers) != 3 {
					return false
				}
				for _, w := range snap.Workers {
					if len(w.Streams) != 1 || w.Streams[0].State != "live" || w.Streams[0].Batches < 10 {
						return false
					}
				}
				return true
			})
			if err := s.Inject(sim.SetRate{Factor: 0}); err != nil {
				t.Fatal(err)
			}
			snap := wait("kvtop's index equal to the engines' caches", func(snap *snapshot.Snapshot) bool {
				for i, w := range snap.Workers {
					if w.Blocks == nil || *w.Blocks != s.ResidentBlocks(i, 0) || !w.IndexComplete {
						return false
					}
				}
				return true
			})
			for _, w := range snap.Workers {
				if st := w.Streams[0]; st.Endpoint != ns.ClientURL() || st.Gaps != 0 || st.Restarts != 0 {
					t.Errorf("%s: %+v", w.Name, st)
				}
			}
		})
	}
}

// `KVTOP_EVENT_PLANE_KIND=dynamo-zmq KVTOP_EVENT_PLANE_DISCOVER=kubernetes
// kvtop snapshot -n dynamo`: no config file, no workers; the publishers
// come from the DynamoWorkerMetadata objects of the namespace, and the
// snapshot shows the streams of the one advertised.
func TestSnapshotOfDynamoDiscoveredOnKubernetes(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	s, err := sim.Start(nil, sim.Options{Workers: 2, Seed: 3, Rate: 10, EventPlane: "dynamo-zmq"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api := kubetest.New(kubetest.DynamoWorkers)
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kc, "default"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	t.Setenv("KVTOP_EVENT_PLANE_KIND", "dynamo-zmq")
	t.Setenv("KVTOP_EVENT_PLANE_DISCOVER", "kubernetes")
	eps, ids := s.DynamoPublishers(1)
	api.Put(kubetest.DynamoWorkers, map[string]any{
		"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
		"metadata": map[string]any{"name": "vllm-1", "namespace": "dynamo"},
		"spec": map[string]any{"data": map[string]any{"event_channels": map[string]any{"kv": map[string]any{
			"type": "EventChannel", "topic": "kv-events", "instance_id": ids[0],
			"scope":     map[string]any{"kind": "component", "namespace": "dynamo", "component": "backend"},
			"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": eps[0]}}}}}},
	})
	var out, errw bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs([]string{"snapshot", "-n", "dynamo", "--for", "3s", "--format", "json"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, errw.String())
	}
	var snap struct {
		Workers []struct {
			Name    string `json:"name"`
			Streams []struct {
				Endpoint string `json:"endpoint"`
				State    string `json:"state"`
				Batches  int    `json:"batches"`
			} `json:"streams"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(out.Bytes(), &snap); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	want := "worker_" + strconv.FormatUint(s.Endpoints().Workers[1].DynamoID, 10)
	if len(snap.Workers) != 1 || snap.Workers[0].Name != want || len(snap.Workers[0].Streams) != 1 ||
		snap.Workers[0].Streams[0].Endpoint != eps[0] || snap.Workers[0].Streams[0].Batches == 0 {
		t.Fatalf("want %s alone, read from %s:\n%s", want, eps[0], out.String())
	}
}

// event_plane.discover reaches the collector: etcd's options (a CA file
// that is not one is said at start, with its setting), Kubernetes' (the
// kubernetes section's kubeconfig).
func TestEventPlaneDiscoverBuilds(t *testing.T) {
	c := config.Defaults()
	c.EventPlane = config.EventPlane{Kind: config.EventPlaneDynamoZMQ, Discover: config.DiscoverEtcd, Etcd: "http://127.0.0.1:2379, http://127.0.0.1:2380"}
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	cs, err := buildCollectors(c)
	if err != nil || len(cs) != 2 || cs[1].Name() != "natsevents" {
		t.Fatalf("discover etcd: %v %v", cs, err)
	}
	c.EventPlane.CAFile = filepath.Join(t.TempDir(), "none.pem")
	if _, err := buildCollectors(c); err == nil || !strings.Contains(err.Error(), "event_plane: etcd ca_file") {
		t.Fatalf("a CA file that is not there: %v", err)
	}
	c.EventPlane = config.EventPlane{Kind: config.EventPlaneDynamoZMQ, Discover: config.DiscoverKubernetes}
	c.Kubernetes.Kubeconfig = filepath.Join(t.TempDir(), "none")
	if _, err := buildCollectors(c); err == nil || !strings.Contains(err.Error(), "event_plane: kubernetes") {
		t.Fatalf("a kubeconfig that is not there: %v", err)
	}
}
