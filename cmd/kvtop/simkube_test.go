package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/targets"
)

// manifestDocs reads every YAML document of a file as unstructured JSON.
func manifestDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []map[string]any
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

func kindOf(docs []map[string]any, kind string) map[string]any {
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	return nil
}

// `kvtop sim --kube-manifests DIR` writes manifests that discovery reads
// as intended: pods made from the StatefulSet's template are workers with
// metrics, events and replay on the conventional ports, the InferencePool
// selects them and names the endpoint picker, and the Role grants what
// README says kvtop needs.
func TestSimKubeManifests(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k8s")
	var out bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"sim", "--kube-manifests", dir, "--workers", "3", "--kube-namespace", "sim"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kvtop-sim.yaml") || !strings.Contains(out.String(), "--kube -n sim -l app=kvtop-sim") {
		t.Errorf("output: %s", out.String())
	}
	pool := manifestDocs(t, filepath.Join(dir, "kvtop-sim.yaml"))
	var sts appsv1.StatefulSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(kindOf(pool, "StatefulSet"), &sts); err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 3 || sts.Namespace != "sim" {
		t.Fatalf("statefulset: %d replicas in %q", *sts.Spec.Replicas, sts.Namespace)
	}
	var role rbacv1.Role
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(kindOf(manifestDocs(t, filepath.Join(dir, "kvtop-rbac.yaml")), "Role"), &role); err != nil {
		t.Fatal(err)
	}
	grants := map[string]bool{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				grants[res+" "+v] = true
			}
		}
	}
	for _, need := range []string{"pods list", "pods watch", "inferencepools list", "inferencepools watch", "pods/proxy get", "services/proxy get", "pods/portforward create"} {
		if !grants[need] {
			t.Errorf("the Role does not grant %s", need)
		}
	}

	// The pods a cluster would make, in the test API server; the
	// InferencePool as written.
	api := kubetest.New(kubetest.PoolV1)
	defer api.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kc, "sim"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	for i := range 3 {
		p := &corev1.Pod{ObjectMeta: sts.Spec.Template.ObjectMeta, Spec: sts.Spec.Template.Spec}
		p.Name, p.Namespace = "kvtop-sim-"+string(rune('0'+i)), "sim"
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.2." + string(rune('1'+i)),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		api.AddPod(p)
	}
	ip := kindOf(manifestDocs(t, filepath.Join(dir, "inferencepool.yaml")), "InferencePool")
	api.Put(kubetest.PoolV1, ip)
	src, err := kube.New(kube.Options{InferencePool: "kvtop-sim", Access: kube.AccessDirect})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sets := make(chan targets.Set, 1)
	go func() { _ = src.Watch(ctx, sets, make(chan collectors.Observation, 64)) }()
	var set targets.Set
	select {
	case set = <-sets:
	case <-ctx.Done():
		t.Fatal("no set")
	}
	if len(set.Workers) != 3 || len(set.Routers) != 1 || set.Routers[0].Name != "kvtop-sim-epp" ||
		set.Routers[0].Metrics != "http://kvtop-sim-epp.sim.svc:9090/metrics" {
		t.Fatalf("set: %+v", set)
	}
	w := set.Workers[1]
	if w.Metrics != "http://127.0.2.2:8000/metrics" || w.Events != "tcp://127.0.2.2:8001" || w.Replay != "tcp://127.0.2.2:8002" || w.Engine != "vllm" {
		t.Fatalf("worker from the manifest's pod: %+v", w)
	}
}
