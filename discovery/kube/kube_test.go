package kube_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvtop/kvtop/discovery/kube"
	"github.com/kvtop/kvtop/snapshot"
)

// The operator's first run on a cluster: `kvtop --kube -n llm -l app=vllm`
// finds the worker pods, scrapes them and subscribes to their events,
// with Kubernetes' view of each pod on the row; a pod of another app is
// not a worker.
func TestDiscoversPodsBySelectorAndFollowsThem(t *testing.T) {
	h := newHarness(t, 3)
	h.api.AddPod(h.simPod(0, "vllm-a", "node-1", labels))
	h.api.AddPod(h.simPod(1, "vllm-b", "node-1", labels))
	other := h.simPod(2, "redis-0", "node-2", map[string]string{"app": "redis"})
	h.api.AddPod(other)
	h.run(kube.Options{Namespace: ns, Selector: "app=vllm", Access: kube.AccessDirect})

	s := h.waitSnap("both pods live", func(s *snapshot.Snapshot) bool {
		return live(worker(s, "vllm-a")) && live(worker(s, "vllm-b"))
	})
	if worker(s, "redis-0") != nil || s.Pool.Workers != 2 {
		t.Fatalf("want exactly the two selected pods as workers:\n%s", describe(s))
	}
	a := worker(s, "vllm-a")
	if a.Kube == nil || a.Kube.Pod != "vllm-a" || a.Kube.Node != "node-1" || a.Kube.Phase != "Running" || !a.Kube.Ready ||
		a.Kube.Access != kube.AccessDirect || a.Kube.New || a.Kube.AgeS == nil || *a.Kube.AgeS < 50 {
		t.Fatalf("kube view of vllm-a: %+v", a.Kube)
	}
	if s.Pool.Churn.Joined != 0 || s.Pool.Churn.Left != 0 {
		t.Fatalf("the pods found at start are the pool, not churn: %+v", s.Pool.Churn)
	}

	// A new pod: it joins, counted, and marked new.
	h.api.AddPod(h.simPod(2, "vllm-c", "node-2", labels))
	s = h.waitSnap("vllm-c live", func(s *snapshot.Snapshot) bool { return live(worker(s, "vllm-c")) })
	c := worker(s, "vllm-c")
	if !c.Kube.New || s.Pool.Churn.Joined != 1 || s.Pool.Workers != 3 {
		t.Fatalf("a pod created while kvtop watches is new and counted as joined:\n%s", describe(s))
	}

	// Deleted: its row stays, dimmed as "left", with the reason, and its
	// blocks leave the index; the pool counts it out.
	h.api.DeletePod(ns, "vllm-b")
	s = h.waitSnap("vllm-b left", func(s *snapshot.Snapshot) bool {
		b := worker(s, "vllm-b")
		return b != nil && b.State == snapshot.WorkerLeft
	})
	b := worker(s, "vllm-b")
	if !strings.Contains(b.Reason, "pod deleted") || b.LeftAt == nil || b.Up || s.Pool.Workers != 2 || s.Pool.Churn.Left != 1 {
		t.Fatalf("a deleted pod is a left row with its reason, out of the pool counts:\n%s", describe(s))
	}

	// Relabelled away: it leaves for that reason, not "deleted".
	a2 := h.api.Pod(ns, "vllm-a")
	a2.Labels = map[string]string{"app": "vllm-canary"}
	h.api.UpdatePod(a2)
	s = h.waitSnap("vllm-a left", func(s *snapshot.Snapshot) bool {
		w := worker(s, "vllm-a")
		return w != nil && w.State == snapshot.WorkerLeft
	})
	if r := worker(s, "vllm-a").Reason; !strings.Contains(r, "no longer matches the selector app=vllm") {
		t.Fatalf("reason of a relabelled pod: %q", r)
	}
}

// A worker that is down because of Kubernetes says it in Kubernetes'
// words: Pending (unschedulable, with the scheduler's message) and
// CrashLoopBackOff (restarts, last OOMKilled and its exit code), never
// just "connection refused" or "not scraped yet".
func TestDownWorkerSaysWhyInKubernetesWords(t *testing.T) {
	h := newHarness(t, 1)
	pending := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm-pending", Namespace: ns, Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
		}}},
	}
	h.api.AddPod(pending)
	crash := h.simPod(0, "vllm-crash", "node-3", labels)
	crash.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(closedPort(t))}}
	crash.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	crash.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "vllm", RestartCount: 5,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "back-off 5m0s restarting failed container=vllm"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "OOMKilled", ExitCode: 137, FinishedAt: metav1.NewTime(time.Now().Add(-30 * time.Second))}},
	}}
	h.api.AddPod(crash)
	h.run(kube.Options{Selector: "app=vllm", Access: kube.AccessDirect})

	s := h.waitSnap("both down", func(s *snapshot.Snapshot) bool {
		p, c := worker(s, "vllm-pending"), worker(s, "vllm-crash")
		return p != nil && c != nil && p.State == snapshot.WorkerDown && c.State == snapshot.WorkerDown && c.LastScrape != nil
	})
	p, c := worker(s, "vllm-pending"), worker(s, "vllm-crash")
	if !strings.HasPrefix(p.Reason, "down: pod Unschedulable (0/3 nodes are available: 3 Insufficient nvidia.com/gpu.)") ||
		p.Kube.Phase != "Pending" || p.Kube.Reason != "Unschedulable" {
		t.Errorf("pending pod: reason %q, kube %+v", p.Reason, p.Kube)
	}
	if !strings.HasPrefix(c.Reason, "down: pod CrashLoopBackOff (back-off 5m0s restarting failed container=vllm), restarts 5, last OOMKilled (exit 137)") ||
		c.Kube.Restarts != 5 || c.Kube.LastTermination == nil || c.Kube.LastTermination.ExitCode != 137 {
		t.Errorf("crashing pod: reason %q, kube %+v", c.Reason, c.Kube)
	}
	var alert bool
	for _, a := range s.Alerts {
		alert = alert || a.Kind == snapshot.AlertDown && a.Subject == "vllm-pending" && strings.Contains(a.Text, "Unschedulable")
	}
	if !alert {
		t.Errorf("no down alert in Kubernetes' words for the pending pod: %+v", s.Alerts)
	}

	// It gets scheduled and starts: the same worker comes up.
	up := h.simPod(0, "vllm-pending", "node-1", labels)
	up.UID = h.api.Pod(ns, "vllm-pending").UID
	h.api.UpdatePod(up)
	h.waitSnap("the pending pod is serving", func(s *snapshot.Snapshot) bool { return live(worker(s, "vllm-pending")) })
}

// A pod replaced under the same name (a StatefulSet's, or a deletion and
// a new one) is a restart of the worker: new UID, restarts counted, the
// old pod's blocks dropped.
func TestReplacedPodIsARestart(t *testing.T) {
	h := newHarness(t, 1)
	h.api.AddPod(h.simPod(0, "vllm-0", "node-1", labels))
	h.run(kube.Options{Selector: "app=vllm", Access: kube.AccessDirect})
	s := h.waitSnap("vllm-0 live with blocks", func(s *snapshot.Snapshot) bool {
		w := worker(s, "vllm-0")
		return live(w) && w.Blocks != nil && *w.Blocks > 0
	})
	uid := worker(s, "vllm-0").Kube.UID

	h.api.DeletePod(ns, "vllm-0")
	again := h.simPod(0, "vllm-0", "node-2", labels)
	again.UID = "uid-vllm-0-second"
	h.api.AddPod(again)
	s = h.waitSnap("vllm-0 back as a new pod", func(s *snapshot.Snapshot) bool {
		w := worker(s, "vllm-0")
		return w != nil && w.Kube != nil && w.Kube.UID == "uid-vllm-0-second" && live(w)
	})
	w := worker(s, "vllm-0")
	if w.Restarts < 1 || w.Kube.UID == uid || w.Kube.Node != "node-2" || !strings.Contains(w.Reason, "restarted") {
		t.Fatalf("a pod replaced under its name is a restart:\n%s", describe(s))
	}
}

// The informer follows the watch across what the real server does to
// it: watches that end (it watches again from its resourceVersion) and
// a compacted history (410 Gone on the watch, and on the list at the
// old resourceVersion): it lists again and misses nothing.
func TestInformerRelistsAfterGone(t *testing.T) {
	h := newHarness(t, 2)
	h.api.NoWatchList = true // LIST and WATCH, as against a server before 1.32
	h.api.AddPod(h.simPod(0, "vllm-a", "node-1", labels))
	h.run(kube.Options{Selector: "app=vllm", Access: kube.AccessDirect})
	h.waitSnap("vllm-a", func(s *snapshot.Snapshot) bool { return worker(s, "vllm-a") != nil })
	lists := h.api.Lists.Load() + h.api.Watches.Load()

	h.api.Pause() // unreachable for a while: no watch open
	h.api.CloseWatches()
	h.api.AddPod(h.simPod(1, "vllm-b", "node-1", labels))
	h.api.DeletePod(ns, "vllm-a")
	h.api.Compact() // the informer's resourceVersion is now too old
	h.api.Resume()
	s := h.waitSnap("the changes made while compacted", func(s *snapshot.Snapshot) bool {
		a, b := worker(s, "vllm-a"), worker(s, "vllm-b")
		return a != nil && a.State == snapshot.WorkerLeft && b != nil
	})
	if h.api.Expired.Load() == 0 {
		t.Fatalf("the informer's watch from a compacted resourceVersion got no 410")
	}
	if n := h.api.Lists.Load() + h.api.Watches.Load(); n < lists+3 {
		t.Fatalf("the informer did not list again after the 410 (%d requests)", n)
	}
	if w := worker(s, "vllm-a"); !strings.Contains(w.Reason, "pod no longer listed (deleted or relabelled while the watch was interrupted)") {
		t.Fatalf("a pod deleted while the watch was down left with reason %q", w.Reason)
	}

	// The list at a compacted resourceVersion is 410 Gone too, as the
	// real server answers it: client-go sees an expired error.
	cs, err := kubernetes.NewForConfig(restConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{ResourceVersion: "101", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("list at a compacted resourceVersion: %v, want 410 Gone", err)
	}
}

// conventions: the README's rules for ports, one by one.
func TestPortConventions(t *testing.T) {
	h := newHarness(t, 0)
	base := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	plain := base("plain") // nothing said: 8000
	anno := base("anno")   // prometheus.io annotations, kvtop.dev events
	anno.Annotations = map[string]string{"prometheus.io/port": "9100", "prometheus.io/path": "stats",
		"kvtop.dev/events-port": "5557", "kvtop.dev/replay-port": "5558", "kvtop.dev/dp-ranks": "2", "kvtop.dev/topic": "kv@"}
	named := base("named") // container ports by name
	named.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
		{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9400}, {Name: "kv-events", ContainerPort: 6000}}}}
	bad := base("bad")
	bad.Annotations = map[string]string{"kvtop.dev/events-port": "many"}
	for _, p := range []*corev1.Pod{plain, anno, named, bad} {
		h.api.AddPod(p)
	}
	src, err := kube.New(kube.Options{Selector: "app=vllm", Access: kube.AccessDirect})
	if err != nil {
		t.Fatal(err)
	}
	set, errs := firstSet(t, src)
	byName := map[string]int{}
	for i, w := range set.Workers {
		byName[w.Name] = i
	}
	want := map[string][3]string{
		"plain": {"http://127.0.0.1:8000/metrics", "", ""},
		"anno":  {"http://127.0.0.1:9100/stats", "tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558"},
		"named": {"http://127.0.0.1:9400/metrics", "tcp://127.0.0.1:6000", ""},
		"bad":   {"http://127.0.0.1:8000/metrics", "", ""},
	}
	for name, w := range want {
		got := set.Workers[byName[name]]
		if got.Metrics != w[0] || got.Events != w[1] || got.Replay != w[2] {
			t.Errorf("%s: metrics %q events %q replay %q, want %q", name, got.Metrics, got.Events, got.Replay, w)
		}
	}
	if a := set.Workers[byName["anno"]]; a.DPRanks != 2 || a.Topic != "kv@" {
		t.Errorf("anno: dp %d topic %q", a.DPRanks, a.Topic)
	}
	if !strings.Contains(errs, `kvtop.dev/events-port="many" is not a number`) {
		t.Errorf("a bad annotation is said: %s", errs)
	}
}

// restConfig is the client config of the test's KUBECONFIG.
func restConfig(t testing.TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// --context picks a context of the kubeconfig (and its namespace) as
// kubectl does; one that is not there is a clear error.
func TestContextFromKubeconfig(t *testing.T) {
	newHarness(t, 0)
	src, err := kube.New(kube.Options{Context: "other", Selector: "app=vllm"})
	if err != nil {
		t.Fatal(err)
	}
	if src.Namespace() != "elsewhere" {
		t.Errorf("namespace of context other: %q", src.Namespace())
	}
	if src, _ := kube.New(kube.Options{Selector: "app=vllm"}); src.Namespace() != ns {
		t.Errorf("namespace of the current context: %q", src.Namespace())
	}
	_, err = kube.New(kube.Options{Selector: "app in (vllm"})
	if err == nil || !strings.HasPrefix(err.Error(), `kubernetes: selector "app in (vllm":`) {
		t.Errorf("a bad selector: %v", err)
	}
	_, err = kube.New(kube.Options{Context: "nope", Selector: "app=vllm"})
	if err == nil || !strings.Contains(err.Error(), `context "nope" does not exist`) {
		t.Errorf("err = %v", err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err = kube.New(kube.Options{Selector: "app=vllm"})
	if err == nil || !strings.Contains(err.Error(), "no kubeconfig found (looked in") {
		t.Errorf("err = %v", err)
	}
}

// A pod's labels say its role in a disaggregated pool, the way llm-d and
// Dynamo label their workers; a pod whose labels say nothing is aggregated
// by default. The role follows a relabelled pod.
func TestRoleFromPodLabels(t *testing.T) {
	h := newHarness(t, 4)
	with := func(extra map[string]string) map[string]string {
		l := map[string]string{}
		for k, v := range labels {
			l[k] = v
		}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	h.api.AddPod(h.simPod(0, "llmd-p", "node-1", with(map[string]string{kube.LabelLLMDRole: "prefill"})))
	h.api.AddPod(h.simPod(1, "dyn-d", "node-1", with(map[string]string{kube.LabelDynamoType: "decode"})))
	h.api.AddPod(h.simPod(2, "dyn-w", "node-2", with(map[string]string{kube.LabelDynamoType: "worker", kube.LabelDynamoSubType: "prefill"})))
	h.api.AddPod(h.simPod(3, "plain", "node-2", labels))
	h.run(kube.Options{Namespace: ns, Selector: "app=vllm", Access: kube.AccessDirect})
	s := h.waitSnap("four pods live", func(s *snapshot.Snapshot) bool {
		return live(worker(s, "llmd-p")) && live(worker(s, "dyn-d")) && live(worker(s, "dyn-w")) && live(worker(s, "plain"))
	})
	for _, c := range []struct{ pod, role, source string }{
		{"llmd-p", snapshot.RolePrefill, snapshot.RoleFromKubernetes},
		{"dyn-d", snapshot.RoleDecode, snapshot.RoleFromKubernetes},
		{"dyn-w", snapshot.RolePrefill, snapshot.RoleFromKubernetes},
		{"plain", snapshot.RoleAggregated, snapshot.RoleFromDefault},
	} {
		if w := worker(s, c.pod); w.Role != c.role || w.RoleSource != c.source {
			t.Errorf("%s: role %q from %q, want %q from %q", c.pod, w.Role, w.RoleSource, c.role, c.source)
		}
	}
	if len(s.Pool.Roles) != 3 {
		t.Errorf("pool roles %+v, want prefill, decode and aggregated", s.Pool.Roles)
	}
	p := h.api.Pod(ns, "plain")
	p.Labels = with(map[string]string{kube.LabelLLMDRole: "decode"})
	h.api.UpdatePod(p)
	h.waitSnap("plain relabelled decode", func(s *snapshot.Snapshot) bool {
		w := worker(s, "plain")
		return w != nil && w.Role == snapshot.RoleDecode && w.RoleSource == snapshot.RoleFromKubernetes
	})
}
