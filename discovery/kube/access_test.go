package kube_test

import (
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/snapshot"
)

// hiddenPod is a pod on a pod network kvtop cannot route to (ip, the
// usual ports 8000, 5557, 5558), which the API server reaches: its
// addresses are routed to simulated worker i.
func (h *harness) hiddenPod(i int, name, ip string) *corev1.Pod {
	we := h.sim.Endpoints().Workers[i]
	host := func(ep string) string { u, _ := url.Parse(ep); return u.Host }
	h.api.Reach(ip+":8000", host(we.Metrics))
	h.api.Reach(ip+":5557", host(we.Events[0]))
	h.api.Reach(ip+":5558", host(we.Replay[0]))
	p := h.simPod(i, name, "node-"+name, labels)
	p.Status.PodIP = ip
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8000}, {Name: "kv-events", ContainerPort: 5557}, {Name: "kv-replay", ContainerPort: 5558}}
	return p
}

// From a bastion that cannot route to pod IPs: metrics through the API
// server's pods/proxy, events (SUB and replay) through port-forwards kvtop
// opens itself, and reopens when they drop. auto finds that out alone.
func TestProxyAccessFromABastion(t *testing.T) {
	h := newHarness(t, 2)
	h.api.AddPod(h.hiddenPod(0, "vllm-0", "127.0.1.1"))
	h.api.AddPod(h.hiddenPod(1, "vllm-1", "127.0.1.2"))
	h.run(kube.Options{Selector: "app=vllm"}) // access auto
	s := h.waitSnap("both live through the API server", func(s *snapshot.Snapshot) bool {
		return live(worker(s, "vllm-0")) && live(worker(s, "vllm-1"))
	})
	w := worker(s, "vllm-0")
	if w.Kube.Access != kube.AccessProxy || !strings.Contains(w.Kube.AccessNote, "auto: pod IP 127.0.1.") ||
		!strings.Contains(w.Kube.AccessNote, "metrics via pods/proxy") || !strings.Contains(w.Kube.AccessNote, "events via port-forward 127.0.0.1:") {
		t.Fatalf("access path: %q %q", w.Kube.Access, w.Kube.AccessNote)
	}
	if !strings.HasPrefix(w.Streams[0].Endpoint, "tcp://127.0.0.1:") || h.api.Proxied.Load() == 0 || h.api.PortForwards.Load() < 2 {
		t.Fatalf("stream endpoint %s, proxied %d, port-forwards %d", w.Streams[0].Endpoint, h.api.Proxied.Load(), h.api.PortForwards.Load())
	}

	// The API server drops every port-forward: kvtop opens them again on
	// the same local ports, and the streams deliver again.
	forwards := h.api.PortForwards.Load()
	before := w.Streams[0].Batches
	h.api.CloseForwards()
	h.waitSnap("streams back after the forwards were reopened", func(s *snapshot.Snapshot) bool {
		w := worker(s, "vllm-0")
		return h.api.PortForwards.Load() >= forwards+2 && live(w) && w.Streams[0].Batches > before+5
	})
	if !strings.Contains(h.errors(), "vllm-0 port-forward") {
		t.Errorf("a dropped port-forward is said: %s", h.errors())
	}
}

func inferencePool(gvr schema.GroupVersionResource, name string, spec map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}
}

// --inference-pool NAME, v1: the pool's selector picks the pods, its
// target port is their metrics port, its endpoint picker is a router.
func TestInferencePoolV1(t *testing.T) {
	h := newHarness(t, 2, kubetest.PoolV1)
	h.api.AddPod(h.hiddenPod(0, "vllm-0", "127.0.1.1"))
	h.api.AddPod(h.hiddenPod(1, "vllm-1", "127.0.1.2"))
	other := h.hiddenPod(1, "other", "127.0.1.3")
	other.Labels = map[string]string{"app": "other"}
	h.api.AddPod(other)
	rt, _ := url.Parse(h.sim.Endpoints().RouterMetrics)
	h.api.ServeService(ns, "pool-a-epp", 9090, rt.Host)
	h.api.Put(kubetest.PoolV1, inferencePool(kubetest.PoolV1, "pool-a", map[string]any{
		"selector":          map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
		"targetPorts":       []any{map[string]any{"number": int64(8000)}},
		"endpointPickerRef": map[string]any{"name": "pool-a-epp", "portNumber": int64(9002)},
	}))
	h.run(kube.Options{InferencePool: "pool-a", Access: kube.AccessProxy})
	s := h.waitSnap("the pool's pods live and its picker scraped", func(s *snapshot.Snapshot) bool {
		return live(worker(s, "vllm-0")) && live(worker(s, "vllm-1")) && len(s.Routers) == 1 && s.Routers[0].Up
	})
	if worker(s, "other") != nil || s.Routers[0].Name != "pool-a-epp" {
		t.Fatalf("workers are the pool's pods, the router its endpoint picker:\n%s", describe(s))
	}
}

// The older v1alpha2 shape (a plain selector map, targetPortNumber,
// extensionRef); a changed selector moves the set; a deleted pool
// empties it, saying so.
func TestInferencePoolV1Alpha2(t *testing.T) {
	h := newHarness(t, 2, kubetest.PoolV1Alpha2)
	h.api.AddPod(h.hiddenPod(0, "vllm-0", "127.0.1.1"))
	b := h.hiddenPod(1, "vllm-1", "127.0.1.2")
	b.Labels = map[string]string{"app": "vllm", "tier": "b"}
	h.api.AddPod(b)
	spec := map[string]any{
		"selector":         map[string]any{"app": "vllm"},
		"targetPortNumber": int64(8000),
		"extensionRef":     map[string]any{"name": "epp", "failureMode": "FailClose"},
	}
	h.api.Put(kubetest.PoolV1Alpha2, inferencePool(kubetest.PoolV1Alpha2, "pool-b", spec))
	h.run(kube.Options{InferencePool: "pool-b", Access: kube.AccessProxy})
	h.waitSnap("both pods", func(s *snapshot.Snapshot) bool { return live(worker(s, "vllm-0")) && live(worker(s, "vllm-1")) })

	spec["selector"] = map[string]any{"app": "vllm", "tier": "b"}
	h.api.Put(kubetest.PoolV1Alpha2, inferencePool(kubetest.PoolV1Alpha2, "pool-b", spec))
	s := h.waitSnap("vllm-0 out of the new selector", func(s *snapshot.Snapshot) bool {
		w := worker(s, "vllm-0")
		return w != nil && w.State == snapshot.WorkerLeft && live(worker(s, "vllm-1"))
	})
	if r := worker(s, "vllm-0").Reason; !strings.Contains(r, "no longer") {
		t.Errorf("reason of a pod out of the pool's new selector: %q", r)
	}

	h.api.Delete(kubetest.PoolV1Alpha2, ns, "pool-b")
	s = h.waitSnap("every worker left with the pool", func(s *snapshot.Snapshot) bool {
		w := worker(s, "vllm-1")
		return w != nil && w.State == snapshot.WorkerLeft && s.Pool.Workers == 0
	})
	if r := worker(s, "vllm-1").Reason; !strings.Contains(r, "InferencePool pool-b deleted") {
		t.Errorf("reason: %q", r)
	}
}

// An API server without the InferencePool API is a clear, fatal error.
func TestNoInferencePoolAPI(t *testing.T) {
	newHarness(t, 0)
	src, err := kube.New(kube.Options{InferencePool: "pool-a"})
	if err != nil {
		t.Fatal(err)
	}
	err = src.Watch(t.Context(), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "the API server serves no InferencePool (tried inference.networking.k8s.io/v1, inference.networking.x-k8s.io/v1alpha2)") {
		t.Fatalf("err = %v", err)
	}
}
