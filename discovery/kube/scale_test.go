package kube_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/targets"
)

// scalePod is a realistic worker pod: labels, annotations and a container
// spec of the size a vLLM Deployment gives (env, probes, resources), on a
// closed loopback port, so its scrapes fail fast.
func scalePod(name string, port int) *corev1.Pod {
	start := metav1.NewTime(time.Now().Add(-time.Hour))
	env := make([]corev1.EnvVar, 20)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("VLLM_SETTING_%d", i), Value: "some-value-of-a-typical-length"}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{"app": "vllm", "pool": "big", "pod-template-hash": "7d9c8f6b5",
				"app.kubernetes.io/version": "v0.11.0"},
			Annotations: map[string]string{"prometheus.io/port": strconv.Itoa(port), "prometheus.io/scrape": "true",
				"kubectl.kubernetes.io/last-applied-configuration": string(make([]byte, 1500))}},
		Spec: corev1.PodSpec{NodeName: "gpu-" + name[len(name)-1:], Containers: []corev1.Container{{
			Name: "vllm", Image: "vllm/vllm-openai:v0.11.0", Env: env,
			Args:  []string{"--model", "Qwen/Qwen3-8B", "--kv-events-config", `{"enable_kv_cache_events":true}`},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", StartTime: &start,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}, {Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vllm", Ready: true, RestartCount: 1, Image: "vllm/vllm-openai:v0.11.0",
				ImageID: "docker.io/vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}}},
		},
	}
}

// applied runs sup into a pool State owned by one goroutine and reports,
// for each goal in turn, when the state had applied that many joins and
// leaves (TargetChange), with the snapshot built at that moment.
func applied(ctx context.Context, sup *targets.Supervisor, goals ...[2]int) <-chan *snapshot.Snapshot {
	obs := make(chan collectors.Observation, 8192)
	go func() { _ = sup.Run(ctx, obs) }()
	at := make(chan *snapshot.Snapshot, len(goals))
	go func() {
		st := pool.NewState(pool.Options{Window: 10 * time.Minute}) // the churn stays in the window however slow (-race)
		joined, left, next := 0, 0, 0
		for next < len(goals) {
			select {
			case <-ctx.Done():
				return
			case o := <-obs:
				st.Apply(o)
				c, ok := o.(*collectors.TargetChange)
				if !ok {
					continue
				}
				switch c.Kind {
				case collectors.TargetJoined:
					joined++
				case collectors.TargetLeft:
					left++
				}
				if joined >= goals[next][0] && left >= goals[next][1] {
					at <- st.Snapshot(time.Now())
					next++
				}
			}
		}
	}()
	return at
}

// TestDiscoveryAtScale reports (it does not judge: machines are shared)
// how long 1 000 pods take from the API server to the pool, and a churn
// of 100 (50 deleted, 50 new); docs/PERFORMANCE.md has the figures.
// Run: go test -run TestDiscoveryAtScale -v ./discovery/kube/
func TestDiscoveryAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale: skipped with -short")
	}
	h := newHarness(t, 0)
	port := closedPort(t)
	for i := range 1000 {
		h.api.AddPod(scalePod(fmt.Sprintf("vllm-%04d", i), port))
	}
	src, err := kube.New(kube.Options{Selector: "app=vllm", Access: kube.AccessDirect})
	if err != nil {
		t.Fatal(err)
	}
	sup, err := targets.New(targets.Options{}, src)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	at := applied(ctx, sup, [2]int{1000, 0}, [2]int{1050, 50})
	select {
	case s := <-at:
		if s.Pool.Workers != 1000 {
			t.Fatalf("%d workers", s.Pool.Workers)
		}
		t.Logf("discovery of 1000 pods applied to the pool in %v (list + watch + set + 1000 metrics collectors started + pool)", s.At.Sub(start).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatal("1 000 pods never reached the pool")
	}
	churn := time.Now()
	for i := range 50 {
		h.api.DeletePod(ns, fmt.Sprintf("vllm-%04d", i))
		h.api.AddPod(scalePod(fmt.Sprintf("vllm-new-%04d", i), port))
	}
	select {
	case s := <-at:
		if s.Pool.Workers != 1000 || s.Pool.Churn.Joined != 50 || s.Pool.Churn.Left != 50 {
			t.Fatalf("after the churn: %d workers, churn %+v", s.Pool.Workers, s.Pool.Churn)
		}
		t.Logf("churn of 100 pods (50 deleted, 50 created) applied to the pool in %v after the first change", s.At.Sub(churn).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatal("the churn never reached the pool")
	}
}

// BenchmarkInformerCache1000 measures what the pod informer's cache holds
// for 1 000 realistic pods, with kvtop's transform (slim) and without
// (full), in bytes per pod.
func BenchmarkInformerCache1000(b *testing.B) {
	api := kubetest.New()
	defer api.Close()
	for i := range 1000 {
		api.AddPod(scalePod(fmt.Sprintf("vllm-%04d", i), 8000))
	}
	kc := b.TempDir() + "/kubeconfig"
	if err := api.WriteKubeconfig(kc, ns); err != nil {
		b.Fatal(err)
	}
	b.Setenv("KUBECONFIG", kc)
	for _, slim := range []bool{true, false} {
		name := "full"
		if slim {
			name = "slim"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				heap := func() uint64 {
					runtime.GC()
					runtime.GC()
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					return m.HeapAlloc
				}
				cs, err := kubernetes.NewForConfig(restConfig(b))
				if err != nil {
					b.Fatal(err)
				}
				before := heap()
				f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
				inf := f.Core().V1().Pods().Informer()
				if slim {
					_ = inf.SetTransform(kube.SlimPod)
				}
				ctx, cancel := context.WithCancel(context.Background())
				go inf.Run(ctx.Done())
				if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) || len(inf.GetStore().List()) != 1000 {
					b.Fatal("no sync")
				}
				after := heap()
				b.ReportMetric(float64(after-before)/1000, "B/pod")
				runtime.KeepAlive(inf)
				cancel()
			}
		})
	}
}
