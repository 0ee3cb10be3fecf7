package collectors

import "time"

// ---------------------------------------------------------------------------
// Targets

// TargetChangeKind says what happened to one target of the current set.
type TargetChangeKind string

const (
	// TargetJoined: the target entered the set (a pod appeared, or was
	// replaced: then Kube.UID differs from the one before).
	TargetJoined TargetChangeKind = "joined"
	// TargetUpdated: the target is still in the set and what is known
	// about it changed (pod phase, readiness, restarts, access path).
	TargetUpdated TargetChangeKind = "updated"
	// TargetLeft: the target left the set; its collectors are stopped
	// before this is sent, so nothing of it follows.
	TargetLeft TargetChangeKind = "left"
)

// TargetChange is one change of the set of workers and routers kvtop
// watches, as the targets layer applies it (Kubernetes discovery, or the
// config at start). The pool learns of Kubernetes only through it.
type TargetChange struct {
	Name string
	Role Role
	Kind TargetChangeKind
	// Reason is why, in the words of the source: "pod deleted", "pod
	// Pending", "no longer matches the selector", "pod replaced (new
	// UID)". "" for a plain join.
	Reason string
	// Aliases are the other ids sources use for the target (pod IP,
	// ip:port of its metrics), as pool.WorkerSpec.Aliases.
	Aliases []string
	// NoMetrics: the target has no metrics endpoint (yet: a Pending pod
	// has no IP).
	NoMetrics bool
	// Kube is the pod behind a worker; nil for targets from the config.
	Kube *KubeInfo
	At   time.Time
}

func (c *TargetChange) ObservedAt() time.Time { return c.At }

// WallClock implements Observation.
func (c *TargetChange) WallClock() Observation {
	return wallCopy(c, func(x *TargetChange) {
		x.At = x.At.Round(0)
		x.Kube = wallCopy(x.Kube, func(k *KubeInfo) {
			k.Started, k.Created = k.Started.Round(0), k.Created.Round(0)
			k.LastTermination = wallCopy(k.LastTermination, func(t *Termination) { t.At = t.At.Round(0) })
		})
	})
}

// KubeInfo is Kubernetes' view of the pod behind a worker, in its words.
type KubeInfo struct {
	Pod       string
	Namespace string
	UID       string
	Node      string
	IP        string
	Phase     string // Pending | Running | Succeeded | Failed | Unknown
	Ready     bool
	// Restarts sums the containers' restart counts.
	Restarts int
	// Reason is why the pod is not serving, as Kubernetes says it: a
	// container's waiting reason (CrashLoopBackOff, ImagePullBackOff,
	// ContainerCreating), the pod's reason (Evicted), an unschedulable
	// condition (Unschedulable), or the phase when nothing more specific
	// is known (Pending, Failed). "" for a running, ready pod.
	Reason string
	// Message is Kubernetes' longer message for Reason (e.g. "0/3 nodes
	// are available: 3 Insufficient nvidia.com/gpu."), bounded.
	Message string
	// LastTermination is the last termination of a restarted container:
	// its reason (OOMKilled, Error, Completed) and exit code.
	LastTermination *Termination
	// Started is the pod's start time (zero before it is scheduled).
	Started time.Time
	// Created is its creation time.
	Created time.Time
	// New: the pod was created after kvtop's first listing: everything it
	// published is after kvtop started watching.
	New bool
	// Access is how kvtop reaches the pod: "direct" (pod IP) or "proxy"
	// (API server pods/proxy for metrics, port-forwards for events).
	Access string
	// AccessNote details the path, e.g. "events via port-forward
	// 127.0.0.1:41234 → 5557".
	AccessNote string
	// Role is what the pod's labels say of its part in a disaggregated
	// pool (snapshot.ParseRole's words): llm-d's llm-d.ai/role, Dynamo's
	// nvidia.com/dynamo-component-type or -sub-component-type. "" when
	// none says.
	Role string
}

// Termination is how a container last ended.
type Termination struct {
	Reason   string
	ExitCode int
	At       time.Time
}
