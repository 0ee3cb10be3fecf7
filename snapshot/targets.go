package snapshot

import "time"

// Kube is Kubernetes' view of the pod behind a worker (Worker.Kube), in
// its words; nil for a worker that is not a discovered pod.
type Kube struct {
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Node      string `json:"node"`
	IP        string `json:"ip"`
	Phase     string `json:"phase"` // Pending | Running | Succeeded | Failed | Unknown
	Ready     bool   `json:"ready"`
	Restarts  int    `json:"restarts"` // summed over its containers
	// Reason is why the pod is not serving, as Kubernetes says it
	// (CrashLoopBackOff, ImagePullBackOff, Unschedulable, Evicted,
	// Pending); "" for a running pod with nothing waiting.
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// LastTermination is how a container last ended (OOMKilled, exit
	// 137); nil when none restarted.
	LastTermination *Termination `json:"last_termination"`
	Started         *time.Time   `json:"started"`
	AgeS            *float64     `json:"age_s"`
	// New: created after kvtop's first listing, so everything it
	// published is after kvtop started watching.
	New bool `json:"new"`
	// Access is the path kvtop uses: "direct" (pod IP) or "proxy" (API
	// server pods/proxy and port-forwards); AccessNote details it.
	Access     string `json:"access"`
	AccessNote string `json:"access_note"`
}

// Termination is how a container last ended.
type Termination struct {
	Reason   string     `json:"reason"`
	ExitCode int        `json:"exit_code"`
	At       *time.Time `json:"at"`
}

// Churn is how many workers joined or left the set within the window
// (PoolSummary.Churn). The pods found at start are not joins; a pod
// replaced under its name (new UID) is a restart of the worker
// (Worker.Restarts), neither.
type Churn struct {
	Joined int `json:"joined"`
	Left   int `json:"left"`
}
