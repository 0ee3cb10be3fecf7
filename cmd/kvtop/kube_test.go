package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/sim"
)

// kubePool is a simulated pool as pods behind a test API server, with a
// kubeconfig in KUBECONFIG and no kvtop config anywhere.
func kubePool(t *testing.T, workers int) (*sim.Sim, *kubetest.Server) {
	t.Helper()
	t.Chdir(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	s, err := sim.Start(nil, sim.Options{Workers: workers, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	api := kubetest.New()
	t.Cleanup(api.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kc, "default"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	port := func(ep string) int32 {
		u, _ := url.Parse(ep)
		p, _ := strconv.Atoi(u.Port())
		return int32(p)
	}
	for i, w := range s.Endpoints().Workers {
		start := metav1.NewTime(time.Now().Add(-time.Hour))
		api.AddPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "vllm-" + strconv.Itoa(i), Namespace: "llm", Labels: map[string]string{"app": "vllm"}},
			Spec: corev1.PodSpec{NodeName: "gpu-node-" + strconv.Itoa(i%2), Containers: []corev1.Container{{Name: "vllm", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: port(w.Metrics)}, {Name: "kv-events", ContainerPort: port(w.Events[0])}, {Name: "kv-replay", ContainerPort: port(w.Replay[0])}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", StartTime: &start,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	api.AddPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-pending", Namespace: "llm", Labels: map[string]string{"app": "vllm"}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	})
	return s, api
}

// `kvtop snapshot --kube -n llm -l app=vllm`: no config, the pods are the
// workers, and the JSON carries workers[].kube in Kubernetes' words.
func TestSnapshotOnKubernetes(t *testing.T) {
	kubePool(t, 2)
	var out, errw bytes.Buffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs([]string{"snapshot", "--kube", "-n", "llm", "-l", "app=vllm", "--for", "4s", "--kube-access", "direct", "--fail-on", "down"})
	err := root.ExecuteContext(context.Background())
	var snap struct {
		Pool struct {
			Workers int `json:"workers"`
			Up      int `json:"up"`
			Churn   struct {
				Joined int `json:"joined"`
				Left   int `json:"left"`
			} `json:"churn"`
		} `json:"pool"`
		Workers []struct {
			Name   string                     `json:"name"`
			State  string                     `json:"state"`
			Reason string                     `json:"reason"`
			Kube   map[string]json.RawMessage `json:"kube"`
		} `json:"workers"`
	}
	if jerr := json.Unmarshal(out.Bytes(), &snap); jerr != nil {
		t.Fatalf("json: %v\n%s\nstderr: %s", jerr, out.String(), errw.String())
	}
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != exitDown || !strings.Contains(ex.msg, "vllm-pending (down: pod Pending)") {
		t.Errorf("--fail-on down sees the pending pod: %v", err)
	}
	if snap.Pool.Workers != 3 || snap.Pool.Up != 2 || snap.Pool.Churn.Joined != 0 {
		t.Fatalf("pool %+v\n%s", snap.Pool, out.String())
	}
	for _, w := range snap.Workers {
		for _, k := range []string{"pod", "node", "phase", "ready", "restarts", "reason"} {
			if _, ok := w.Kube[k]; !ok {
				t.Errorf("%s: workers[].kube has no %q: %v", w.Name, k, w.Kube)
			}
		}
		if w.Name == "vllm-pending" && (w.State != "down" || string(w.Kube["phase"]) != `"Pending"`) {
			t.Errorf("pending pod: state %s reason %q kube %v", w.State, w.Reason, w.Kube)
		}
		if w.Name == "vllm-1" && (w.State != "ok" || string(w.Kube["node"]) != `"gpu-node-1"`) {
			t.Errorf("vllm-1: state %s kube %v", w.State, w.Kube)
		}
	}
}

// The discovery flags exist on the console, snapshot and serve alike.
func TestKubeFlagsOnEveryFace(t *testing.T) {
	root := newRootCmd()
	for _, args := range [][]string{{}, {"snapshot"}, {"serve"}} {
		cmd, _, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		for _, kf := range kubeFlags {
			if cmd.Flags().Lookup(kf.flag) == nil {
				t.Errorf("%s has no --%s", cmd.CommandPath(), kf.flag)
			}
		}
		if f := cmd.Flags().ShorthandLookup("n"); f == nil || f.Name != "namespace" {
			t.Errorf("%s: -n is not --namespace", cmd.CommandPath())
		}
		if f := cmd.Flags().ShorthandLookup("l"); f == nil || f.Name != "selector" {
			t.Errorf("%s: -l is not --selector", cmd.CommandPath())
		}
	}
}

// --kube alone does not say which pods: a usage error naming the flags.
func TestKubeWithoutSelectorIsAUsageError(t *testing.T) {
	kubePool(t, 0)
	var errw bytes.Buffer
	root := newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&errw)
	root.SetArgs([]string{"snapshot", "--kube", "--for", "1s"})
	err := root.ExecuteContext(context.Background())
	var ex *exitError
	if !errors.As(err, &ex) || ex.code != exitUsage || !strings.Contains(err.Error(), "kubernetes.selector (-l) or kubernetes.inference_pool (--inference-pool)") {
		t.Fatalf("err = %v", err)
	}
}

// TestFakeClusterByHand serves a simulated pool as a cluster for a person
// to look at with kvtop, and skips unless asked:
//
//	KVTOP_FAKE_CLUSTER=/tmp/fake go test -run TestFakeClusterByHand -timeout 0 ./cmd/kvtop/ &
//	KUBECONFIG=/tmp/fake/kubeconfig ./bin/kvtop --kube -n llm -l app=vllm
//
// Four workers on three nodes, a pod Pending, one in CrashLoopBackOff;
// every 20 s a pod is deleted and comes back under its name (a new UID).
// KVTOP_FAKE_CLUSTER_FOR bounds it (default 10m).
func TestFakeClusterByHand(t *testing.T) {
	dir := os.Getenv("KVTOP_FAKE_CLUSTER")
	if dir == "" {
		t.Skip("set KVTOP_FAKE_CLUSTER=DIR to serve a fake cluster by hand")
	}
	hold := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("KVTOP_FAKE_CLUSTER_FOR")); err == nil {
		hold = d
	}
	s, api := kubePool(t, 4)
	nodes := []string{"gpu-a", "gpu-a", "gpu-b", "gpu-c"}
	for i := range 4 {
		p := api.Pod("llm", "vllm-"+strconv.Itoa(i))
		p.Spec.NodeName = nodes[i]
		api.UpdatePod(p)
	}
	crash := api.Pod("llm", "vllm-3")
	crash.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	crash.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", RestartCount: 7,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container=vllm"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137,
			FinishedAt: metav1.NewTime(time.Now().Add(-time.Minute))}}}}
	crash.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 1}}
	api.UpdatePod(crash)
	_ = s
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := api.WriteKubeconfig(kc, "llm"); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "fake cluster at %s; run: KUBECONFIG=%s kvtop --kube -n llm -l app=vllm\n", api.URL, kc)
	end := time.After(hold)
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-end:
			return
		case <-tick.C:
			name := "vllm-" + strconv.Itoa(n%3)
			p := api.Pod("llm", name)
			api.DeletePod("llm", name)
			p.UID, p.ResourceVersion, p.CreationTimestamp = "", "", metav1.Time{}
			api.AddPod(p)
		}
	}
}
