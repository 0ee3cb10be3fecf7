package kube

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Annotations and port names kvtop reads on a worker pod (README
// "Kubernetes").
const (
	AnnoPromPort   = "prometheus.io/port"
	AnnoPromPath   = "prometheus.io/path"
	AnnoPromScheme = "prometheus.io/scheme"
	AnnoEventsPort = "kvtop.dev/events-port"
	AnnoReplayPort = "kvtop.dev/replay-port"
	AnnoDPRanks    = "kvtop.dev/dp-ranks"
	AnnoTopic      = "kvtop.dev/topic"
	AnnoFirstSeq   = "kvtop.dev/first-seq"
	AnnoEngine     = "kvtop.dev/engine"
	// AnnoEPPMetricsPort, on an InferencePool, is its endpoint picker's
	// metrics port (default 9090).
	AnnoEPPMetricsPort = "kvtop.dev/epp-metrics-port"

	PortMetrics = "metrics"
	PortHTTP    = "http"
	PortEvents  = "kv-events"
	PortReplay  = "kv-replay"

	DefaultMetricsPort    = 8000
	DefaultEPPMetricsPort = 9090
)

// ports is where a pod serves what kvtop reads.
type ports struct {
	metrics        int
	path, scheme   string
	events, replay int // 0: none
	dpRanks        int
	topic          string
	firstSeq       uint64
	engine         string
	bad            []string // annotations that could not be read
}

// podPorts applies the conventions, most specific first: metrics from
// the pool's target port, else the prometheus.io annotations, else a
// container port named metrics or http, else 8000; events and replay
// from a container port named kv-events / kv-replay, else the kvtop.dev
// annotations.
func podPorts(p *corev1.Pod, poolPort int) ports {
	a := p.Annotations
	pt := ports{path: "/metrics", scheme: "http", dpRanks: 1}
	num := func(key string, lo, hi int) int {
		v, ok := a[key]
		if !ok {
			return 0
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo || n > hi {
			pt.bad = append(pt.bad, fmt.Sprintf("annotation %s=%q is not a number from %d to %d", key, v, lo, hi))
			return 0
		}
		return n
	}
	named := map[string]int{}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name != "" && cp.ContainerPort > 0 {
				if _, dup := named[cp.Name]; !dup {
					named[cp.Name] = int(cp.ContainerPort)
				}
			}
		}
	}
	switch {
	case poolPort > 0:
		pt.metrics = poolPort
	case num(AnnoPromPort, 1, 65535) > 0:
		pt.metrics = num(AnnoPromPort, 1, 65535)
	case named[PortMetrics] > 0:
		pt.metrics = named[PortMetrics]
	case named[PortHTTP] > 0:
		pt.metrics = named[PortHTTP]
	default:
		pt.metrics = DefaultMetricsPort
	}
	if v := strings.TrimSpace(a[AnnoPromPath]); v != "" {
		if !strings.HasPrefix(v, "/") {
			v = "/" + v
		}
		pt.path = v
	}
	switch v := strings.TrimSpace(a[AnnoPromScheme]); v {
	case "", "http":
	case "https":
		pt.scheme = v
	default:
		pt.bad = append(pt.bad, fmt.Sprintf("annotation %s=%q is not http or https", AnnoPromScheme, v))
	}
	pt.events = named[PortEvents]
	if pt.events == 0 {
		pt.events = num(AnnoEventsPort, 1, 65535)
	}
	pt.replay = named[PortReplay]
	if pt.replay == 0 {
		pt.replay = num(AnnoReplayPort, 1, 65535)
	}
	if n := num(AnnoDPRanks, 1, 256); n > 0 {
		pt.dpRanks = n
	}
	pt.topic = a[AnnoTopic]
	if v, ok := a[AnnoFirstSeq]; ok {
		switch strings.TrimSpace(v) {
		case "0":
		case "1":
			pt.firstSeq = 1
		default:
			pt.bad = append(pt.bad, fmt.Sprintf("annotation %s=%q is not 0 or 1", AnnoFirstSeq, v))
		}
	}
	pt.engine = a[AnnoEngine]
	return pt
}

// kubeInfo is Kubernetes' view of the pod, in its words.
func kubeInfo(p *corev1.Pod, isNew bool) *collectors.KubeInfo {
	k := &collectors.KubeInfo{
		Pod: p.Name, Namespace: p.Namespace, UID: string(p.UID), Node: p.Spec.NodeName, IP: p.Status.PodIP,
		Phase: string(p.Status.Phase), Created: p.CreationTimestamp.Time, New: isNew,
	}
	if p.Status.StartTime != nil {
		k.Started = p.Status.StartTime.Time
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			k.Ready = c.Status == corev1.ConditionTrue
		}
	}
	var last *collectors.Termination
	var lastAt time.Time
	waiting, waitMsg, terminated := "", "", ""
	for _, cs := range p.Status.ContainerStatuses {
		k.Restarts += int(cs.RestartCount)
		if w := cs.State.Waiting; w != nil && w.Reason != "" && waiting == "" {
			waiting, waitMsg = w.Reason, w.Message
		}
		if t := cs.State.Terminated; t != nil && t.Reason != "" && terminated == "" {
			terminated = t.Reason
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			if at := t.FinishedAt.Time; last == nil || at.After(lastAt) {
				last = &collectors.Termination{Reason: t.Reason, ExitCode: int(t.ExitCode), At: at}
				lastAt = at
			}
		}
	}
	k.LastTermination = last
	switch {
	case p.DeletionTimestamp != nil:
		k.Reason = "Terminating"
	case p.Status.Reason != "": // Evicted, NodeLost, ...
		k.Reason, k.Message = p.Status.Reason, p.Status.Message
	case waiting != "":
		k.Reason, k.Message = waiting, waitMsg
	case p.Status.Phase == corev1.PodPending:
		k.Reason = "Pending"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
				k.Reason, k.Message = c.Reason, c.Message // Unschedulable
			}
		}
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		k.Reason = string(p.Status.Phase)
		if terminated != "" {
			k.Reason = terminated
		}
	}
	if len(k.Message) > 200 {
		k.Message = k.Message[:200] + "…"
	}
	k.Role = podRole(p.Labels)
	return k
}

// Pod labels that name a worker's role in a disaggregated pool
// (docs/PROTOCOLS.md §13): llm-d's role filter reads llm-d.ai/role
// (prefill, decode, both); Dynamo's operator stamps
// nvidia.com/dynamo-component-type (prefill or decode on native
// workers) and, on workers of the older "worker" type,
// nvidia.com/dynamo-sub-component-type (prefill or decode; absent:
// aggregated).
const (
	LabelLLMDRole      = "llm-d.ai/role"
	LabelDynamoType    = "nvidia.com/dynamo-component-type"
	LabelDynamoSubType = "nvidia.com/dynamo-sub-component-type"
	dynamoTypeWorker   = "worker"
)

// podRole is the role the labels name ("" when none does): llm-d's
// first, then Dynamo's.
func podRole(l map[string]string) string {
	if r, ok := snapshot.ParseRole(l[LabelLLMDRole]); ok {
		return r
	}
	if r, ok := snapshot.ParseRole(l[LabelDynamoType]); ok && r != snapshot.RoleAggregated {
		return r
	}
	if l[LabelDynamoType] == dynamoTypeWorker {
		if r, ok := snapshot.ParseRole(l[LabelDynamoSubType]); ok && r != snapshot.RoleAggregated {
			return r
		}
		return snapshot.RoleAggregated
	}
	return ""
}

// slimPod is the informer's transform: only what kvtop reads of a pod is
// kept in the cache (its memory follows the pod count).
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone, or a foreign object
	}
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp, Labels: p.Labels,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, PodIP: p.Status.PodIP, Reason: p.Status.Reason, Message: p.Status.Message,
			StartTime: p.Status.StartTime,
		},
	}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, "prometheus.io/") || strings.HasPrefix(k, "kvtop.dev/") {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.PodScheduled {
			c.LastProbeTime, c.LastTransitionTime = metav1.Time{}, metav1.Time{}
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, Ready: cs.Ready, RestartCount: cs.RestartCount,
			State: cs.State, LastTerminationState: cs.LastTerminationState,
		})
	}
	return out, nil
}

// hostPort joins an IP and a port (IPv6 in brackets).
func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
