package kube_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/internal/kubetest"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
	"github.com/kvtop/kvtop/targets"
)

// harness is a simulated pool behind a test API server, discovered by
// kvtop's kube source and run through the targets supervisor into a pool:
// the path `kvtop --kube` takes, end to end over real sockets.
type harness struct {
	t    *testing.T
	api  *kubetest.Server
	sim  *sim.Sim
	pool *pool.Pool

	mu     sync.Mutex
	errs   []*collectors.SourceError
	runErr chan error
}

const ns = "llm"

// newHarness starts n simulated workers and the API server (serving the
// given InferencePool versions), and writes a kubeconfig that kvtop reads
// through KUBECONFIG, as kubectl would.
func newHarness(t *testing.T, workers int, pools ...schema.GroupVersionResource) *harness {
	t.Helper()
	var s *sim.Sim
	if workers > 0 {
		var err error
		s, err = sim.Start(nil, sim.Options{Workers: workers, Seed: 1, Rate: float64(workers)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}
	api := kubetest.New(pools...)
	t.Cleanup(api.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := api.WriteKubeconfig(kc, ns); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc)
	return &harness{t: t, api: api, sim: s}
}

// port is the port of a URL or tcp:// endpoint.
func port(t *testing.T, endpoint string) int {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// simPod is a running, ready pod whose ports are those of simulated
// worker i, named by the conventions (http, kv-events, kv-replay).
func (h *harness) simPod(i int, name, node string, lbl map[string]string) *corev1.Pod {
	we := h.sim.Endpoints().Workers[i]
	now := metav1.NewTime(time.Now().Add(-time.Minute))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl,
			Annotations: map[string]string{"kvtop.dev/first-seq": "0", "unrelated.example/big": strings.Repeat("x", 2000)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "vllm", Image: "vllm/vllm-openai",
			Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: int32(port(h.t, we.Metrics))},
				{Name: "kv-events", ContainerPort: int32(port(h.t, we.Events[0]))},
				{Name: "kv-replay", ContainerPort: int32(port(h.t, we.Replay[0]))},
			},
		}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "127.0.0.1", StartTime: &now,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vllm", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
		},
	}
}

// run starts discovery with o, the supervisor and a pool; all stop with
// the test.
func (h *harness) run(o kube.Options) {
	h.t.Helper()
	src, err := kube.New(o)
	if err != nil {
		h.t.Fatal(err)
	}
	sup, err := targets.New(targets.Options{}, src)
	if err != nil {
		h.t.Fatal(err)
	}
	h.start(sup)
}

// start runs c into a pool, through a tee that keeps the source errors
// the operator would see; all stop with the test. Run's error goes to
// runErr (when there is room).
func (h *harness) start(c collectors.Collector) {
	ctx, cancel := context.WithCancel(context.Background())
	obs := make(chan collectors.Observation, 8192)
	in := make(chan collectors.Observation, 8192)
	h.pool = pool.New(pool.Options{Window: 30 * time.Second, Refresh: pool.MinRefresh})
	if h.runErr == nil {
		h.runErr = make(chan error, 1)
	}
	done := make(chan struct{}, 3)
	go func() { h.pool.Run(ctx, in); done <- struct{}{} }()
	go func() { // tee: the test sees the source errors the operator would
		defer func() { done <- struct{}{} }()
		for {
			select {
			case <-ctx.Done():
				return
			case o := <-obs:
				if e, ok := o.(*collectors.SourceError); ok {
					h.mu.Lock()
					h.errs = append(h.errs, e)
					h.mu.Unlock()
				}
				select {
				case in <- o:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	go func() {
		err := c.Run(ctx, obs)
		select {
		case h.runErr <- err:
		default:
		}
		done <- struct{}{}
	}()
	h.t.Cleanup(func() {
		cancel()
		for range 3 {
			<-done
		}
	})
}

// waitSnap waits until cond holds for the latest snapshot.
func (h *harness) waitSnap(what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last *snapshot.Snapshot
	for time.Now().Before(deadline) {
		if s := h.pool.Latest(); s != nil {
			last = s
			if cond(s) {
				return s
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("timed out waiting for %s; last snapshot:\n%s\nerrors: %s", what, describe(last), h.errors())
	return nil
}

func (h *harness) errors() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, e := range h.errs {
		fmt.Fprintf(&b, "\n  %s", e.Error())
	}
	return b.String()
}

func describe(s *snapshot.Snapshot) string {
	if s == nil {
		return "(none)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pool workers=%d up=%d churn=%+v\n", s.Pool.Workers, s.Pool.Up, s.Pool.Churn)
	for _, w := range s.Workers {
		fmt.Fprintf(&b, "  %s state=%s up=%v reason=%q", w.Name, w.State, w.Up, w.Reason)
		for _, st := range w.Streams {
			fmt.Fprintf(&b, " stream[%d]=%s@%s", st.Rank, st.State, st.Endpoint)
		}
		if w.Kube != nil {
			fmt.Fprintf(&b, " kube=%+v", *w.Kube)
		}
		b.WriteString("\n")
	}
	for _, r := range s.Routers {
		fmt.Fprintf(&b, "  router %s up=%v\n", r.Name, r.Up)
	}
	return b.String()
}

func worker(s *snapshot.Snapshot, name string) *snapshot.Worker {
	for i := range s.Workers {
		if s.Workers[i].Name == name {
			return &s.Workers[i]
		}
	}
	return nil
}

// live: the worker is up and every stream delivers.
func live(w *snapshot.Worker) bool {
	if w == nil || !w.Up || len(w.Streams) == 0 {
		return false
	}
	for _, st := range w.Streams {
		if st.State != snapshot.StreamLive || st.Batches == 0 {
			return false
		}
	}
	return true
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

var labels = map[string]string{"app": "vllm", "pool": "kvtop"}

// firstSet runs src until its first set and returns it with the source
// errors said by then.
func firstSet(t *testing.T, src targets.Source) (targets.Set, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sets := make(chan targets.Set, 1)
	errs := make(chan collectors.Observation, 64)
	go func() { _ = src.Watch(ctx, sets, errs) }()
	select {
	case set := <-sets:
		var b strings.Builder
		for {
			select {
			case o := <-errs:
				if e, ok := o.(*collectors.SourceError); ok {
					b.WriteString(e.Error() + "\n")
				}
			default:
				return set, b.String()
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no set from the source")
	}
	return targets.Set{}, ""
}
