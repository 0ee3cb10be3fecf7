package kube_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors/natsevents"
	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// DynamoWorkerMetadata CRs as Dynamo's Kubernetes discovery writes them
// (lib/runtime/src/discovery/kube/crd.rs, metadata.rs, mod.rs): named
// after the pod and owned by it, spec.data the worker's discovery
// metadata, its KV event publishers under event_channels.

// dwm is the CR of pod with the given event_channels.
func dwm(pod string, channels map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
		"metadata": map[string]any{"name": pod, "namespace": ns, "ownerReferences": []any{map[string]any{
			"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": "pod-uid-" + pod, "controller": false, "blockOwnerDeletion": false}}},
		"spec": map[string]any{"data": map[string]any{
			"endpoints": map[string]any{"dynamo/backend/generate/" + pod: map[string]any{
				"type": "Endpoint", "namespace": "dynamo", "component": "backend", "endpoint": "generate", "instance_id": 7,
				"transport": map[string]any{"tcp": "10.0.0.1:9999"}}},
			"model_cards":    map[string]any{},
			"event_channels": channels,
		}},
	}
}

// kvChannel is a KV event publisher's channel as the current code
// registers it: endpoint-scoped, topic kv-events, ZMQ direct.
func kvChannel(endpoint string, pid uint64) (string, map[string]any) {
	return fmt.Sprintf("namespace/dynamo/component/backend/endpoint/generate/topic/kv-events/%x", pid), map[string]any{
		"type":        "EventChannel",
		"scope":       map[string]any{"kind": "endpoint", "endpoint": map[string]any{"namespace": "dynamo", "component": "backend", "name": "generate"}},
		"topic":       "kv-events",
		"instance_id": pid,
		"transport":   map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": endpoint}},
	}
}

// legacyChannel is the v1.2 shape: namespace and component where scope is.
func legacyChannel(endpoint string, pid uint64) (string, map[string]any) {
	return fmt.Sprintf("dynamo/backend/kv-events/%x", pid), map[string]any{
		"type": "EventChannel", "namespace": "dynamo", "component": "backend", "topic": "kv-events", "instance_id": pid,
		"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": endpoint}},
	}
}

func chans(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// dynamoHarness is a simulated Dynamo pool on its ZMQ event plane, its
// CRs in the test API server, read by kvtop's event plane collector with
// the discovery: `event_plane: {kind: dynamo-zmq, discover: kubernetes}`.
type dynamoHarness struct{ *harness }

func newDynamoHarness(t *testing.T, workers int, served ...bool) *dynamoHarness {
	t.Helper()
	s, err := sim.Start(context.Background(), sim.Options{Workers: workers, Seed: 5, Rate: 4 * float64(workers), EventPlane: "dynamo-zmq"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	api := kubetest.New(kubetest.DynamoWorkers)
	if len(served) > 0 && !served[0] {
		api = kubetest.New()
	}
	t.Cleanup(api.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kc, ns); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	return &dynamoHarness{&harness{t: t, api: api, sim: s}}
}

// publisher is simulated worker w's (rank 0) endpoint and publisher id,
// and the name kvtop gives it.
func (h *dynamoHarness) publisher(w int) (ep string, pid uint64, name string) {
	eps, ids := h.sim.DynamoPublishers(w)
	if len(eps) == 0 {
		h.t.Fatalf("sim worker %d has no ZMQ event plane publisher", w)
	}
	return eps[0], ids[0], "worker_" + strconv.FormatUint(h.sim.Endpoints().Workers[w].DynamoID, 10)
}

func (h *dynamoHarness) run() {
	h.t.Helper()
	src, err := kube.NewDynamo(kube.DynamoOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if src.Namespace() != ns {
		h.t.Fatalf("namespace %q, want the context's %q", src.Namespace(), ns)
	}
	c, err := natsevents.New(natsevents.Options{Discover: src})
	if err != nil {
		h.t.Fatal(err)
	}
	h.start(c)
}

// said are the source errors of kind said so far.
func (h *dynamoHarness) said(kind string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.errs {
		if e.Kind == kind {
			out = append(out, e.Message)
		}
	}
	return out
}

// streaming: the worker is in the pool and its one stream delivers from
// ep, without a gap. A publisher found running has published before kvtop
// listened (the event plane keeps no history): joined_late is then true.
func streaming(w *snapshot.Worker, ep string) bool {
	if w == nil || w.State == snapshot.WorkerLeft || len(w.Streams) != 1 {
		return false
	}
	st := w.Streams[0]
	return st.Endpoint == ep && st.Batches > 0 && st.Gaps == 0 &&
		(st.State == snapshot.StreamLive || st.State == snapshot.StreamJoinedLate)
}

// gone: the worker left with its publisher: a left row, for reason, and
// its stream's last word "gone" (no gap, no loss).
func gone(w *snapshot.Worker, reason string) bool {
	if w == nil || w.State != snapshot.WorkerLeft || !strings.Contains(w.Reason, reason) || len(w.Streams) != 1 {
		return false
	}
	st := w.Streams[0]
	h := st.History
	return st.Gaps == 0 && st.Missing == 0 && st.Lost == 0 && len(h) > 0 && h[len(h)-1].Kind == "gone"
}

// The operator's Dynamo pool on Kubernetes with the ZMQ event plane
// (Dynamo's defaults: DYN_DISCOVERY_BACKEND=kubernetes from its operator,
// DYN_EVENT_PLANE unset): kvtop reads the publishers the workers' CRs
// advertise, and follows pods added, deleted and replaced; bad
// advertisements are said and counted, never fatal, and the good ones
// beside them are read.
func TestDynamoEventPlaneFromKubernetes(t *testing.T) {
	h := newDynamoHarness(t, 5)
	ep0, pid0, w0 := h.publisher(0)
	ep1, pid1, w1 := h.publisher(1)
	ep2, pid2, w2 := h.publisher(2)
	ep3, pid3, w3 := h.publisher(3)
	ep4, pid4, w4 := h.publisher(4)

	h.api.Put(kubetest.DynamoWorkers, dwm("vllm-0", chans(kvChannel(ep0, pid0))))
	h.api.Put(kubetest.DynamoWorkers, dwm("vllm-1", chans(legacyChannel(ep1, pid1))))
	// A frontend: no KV events, its metrics channel on NATS.
	h.api.Put(kubetest.DynamoWorkers, dwm("frontend", chans("dynamo//kv_metrics/1", map[string]any{
		"type": "EventChannel", "namespace": "dynamo", "component": "", "topic": "kv_metrics", "instance_id": 1,
		"transport": map[string]any{"kind": "Nats", "config": map[string]any{"subject_prefix": "namespace.dynamo"}}})))
	// Bad advertisements, and two kvtop does not read here.
	zmq := func(ep string) map[string]any {
		return map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": ep}}
	}
	h.api.Put(kubetest.DynamoWorkers, dwm("odd", chans(
		"wildcard", map[string]any{"type": "EventChannel", "topic": "kv-events", "instance_id": 11, "transport": zmq("tcp://0.0.0.0:5557")},
		"no-id", map[string]any{"type": "EventChannel", "topic": "kv-events", "transport": zmq(ep4)},
		"no-port", map[string]any{"type": "EventChannel", "topic": "kv-events", "instance_id": 12, "transport": zmq("tcp://10.0.0.9")},
		"carrier-pigeon", map[string]any{"type": "EventChannel", "topic": "kv-events", "instance_id": 13, "transport": map[string]any{"kind": "Pigeon"}},
		"not-a-channel", map[string]any{"type": "Endpoint", "topic": "kv-events"},
		"nats", map[string]any{"type": "EventChannel", "topic": "kv-events", "instance_id": 14,
			"transport": map[string]any{"kind": "Nats", "config": map[string]any{"subject_prefix": "namespace.dynamo.component.backend"}}},
		"broker", map[string]any{"type": "EventChannel", "topic": "kv-events", "instance_id": 15,
			"transport": map[string]any{"kind": "ZmqBroker", "config": map[string]any{"xsub_endpoints": []any{"tcp://broker:5555"}, "xpub_endpoints": []any{"tcp://broker:5556"}}}},
	)))
	garbage := dwm("garbage", nil)
	garbage["spec"] = map[string]any{"data": "not metadata"}
	h.api.Put(kubetest.DynamoWorkers, garbage)
	h.run()

	h.waitSnap("vllm-0 and vllm-1's publishers read", func(s *snapshot.Snapshot) bool {
		return streaming(worker(s, w0), ep0) && streaming(worker(s, w1), ep1)
	})
	h.waitSnap("the bad advertisements said", func(s *snapshot.Snapshot) bool { return len(h.said("invalid")) == 6 })
	bad := strings.Join(h.said("invalid"), "\n")
	for _, want := range []string{
		`DynamoWorkerMetadata garbage: spec.data is a string, not an object`,
		`event_channels["wildcard"]: endpoint "tcp://0.0.0.0:5557" is a wildcard address`,
		`event_channels["no-id"]: instance_id is missing`,
		`event_channels["no-port"]: endpoint "tcp://10.0.0.9" has no port`,
		`event_channels["carrier-pigeon"]: transport kind "Pigeon" is not Zmq, Nats or ZmqBroker`,
		`event_channels["not-a-channel"]: type "Endpoint", want EventChannel`,
		`(6 bad advertisement(s) so far)`,
	} {
		if !strings.Contains(bad, want) {
			t.Errorf("said about the bad advertisements:\n%s\nwant %q", bad, want)
		}
	}
	notes := strings.Join(h.said("config"), "\n")
	if !strings.Contains(notes, `kv-events on NATS (subject prefix "namespace.dynamo.component.backend"): read them with event_plane.nats`) ||
		!strings.Contains(notes, "through a ZMQ broker") || strings.Contains(notes, "frontend") {
		t.Errorf("said about what is not read here:\n%s", notes)
	}

	// Added: a new pod's publisher is read.
	h.api.Put(kubetest.DynamoWorkers, dwm("vllm-2", chans(kvChannel(ep2, pid2))))
	h.waitSnap("vllm-2's publisher read", func(s *snapshot.Snapshot) bool { return streaming(worker(s, w2), ep2) })

	// Its data unreadable for a moment (server-side apply writing null):
	// its last readable channels stand, as in Dynamo's own daemon.
	nulled := dwm("vllm-2", nil)
	nulled["spec"] = map[string]any{"data": nil}
	h.api.Put(kubetest.DynamoWorkers, nulled)
	h.waitSnap("the null data said", func(s *snapshot.Snapshot) bool {
		return strings.Contains(strings.Join(h.said("invalid"), "\n"), "DynamoWorkerMetadata vllm-2: spec.data is null")
	})
	batches := func(s *snapshot.Snapshot, name string) uint64 { return worker(s, name).Streams[0].Batches }
	s := h.waitSnap("vllm-2 still read", func(s *snapshot.Snapshot) bool { return streaming(worker(s, w2), ep2) })
	before := batches(s, w2)
	h.waitSnap("vllm-2 still read", func(s *snapshot.Snapshot) bool {
		return streaming(worker(s, w2), ep2) && batches(s, w2) > before
	})

	// Deleted (its CR goes with the pod, owned by it): the worker leaves
	// with its publisher — gone, not a gap — and stays gone while the
	// simulated engine goes on publishing: kvtop closed its SUB.
	h.api.Delete(kubetest.DynamoWorkers, ns, "vllm-1")
	h.waitSnap("vllm-1's worker gone", func(s *snapshot.Snapshot) bool {
		return gone(worker(s, w1), "pod vllm-1 gone (its DynamoWorkerMetadata vllm-1 was deleted)")
	})

	// Replaced (a Deployment's new pod, its worker on another port): the
	// old worker leaves, the new one is read.
	h.api.Delete(kubetest.DynamoWorkers, ns, "vllm-0")
	h.api.Put(kubetest.DynamoWorkers, dwm("vllm-0-b7x2k", chans(kvChannel(ep3, pid3))))
	h.waitSnap("vllm-0 replaced", func(s *snapshot.Snapshot) bool {
		return gone(worker(s, w0), "pod vllm-0 gone") && streaming(worker(s, w3), ep3)
	})

	// A publisher id that is not the one publishing there: its messages
	// are counted and said, never applied.
	h.api.Put(kubetest.DynamoWorkers, dwm("vllm-4", chans(kvChannel(ep4, pid4+1))))
	h.waitSnap("vllm-4's messages refused", func(s *snapshot.Snapshot) bool {
		m := h.said("identity_mismatch")
		return len(m) > 0 && strings.Contains(m[0], fmt.Sprintf("carries publisher id %d, discovery advertises [%d (pod vllm-4)]", pid4, pid4+1))
	})

	time.Sleep(time.Second) // the engines go on publishing
	s = h.waitSnap("the end", func(s *snapshot.Snapshot) bool { return streaming(worker(s, w2), ep2) && streaming(worker(s, w3), ep3) })
	if !gone(worker(s, w1), "vllm-1") || !gone(worker(s, w0), "vllm-0") || worker(s, w4) != nil {
		t.Fatalf("the withdrawn workers came back, or the refused one was read:\n%s", describe(s))
	}
	if n := len(h.said("invalid")); n != 7 {
		t.Fatalf("%d bad advertisements said, want 7 (each once):\n%s", n, strings.Join(h.said("invalid"), "\n"))
	}
}

// A cluster without Dynamo's CRD: kvtop says so at start, as it does for
// a missing InferencePool API.
func TestDynamoDiscoveryNeedsItsCRD(t *testing.T) {
	h := newDynamoHarness(t, 1, false)
	h.run()
	select {
	case err := <-h.runErr:
		if err == nil || !strings.Contains(err.Error(), "serves no DynamoWorkerMetadata (nvidia.com/v1alpha1)") {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no error from a cluster without the CRD")
	}
}
