package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// kubeManifests are the files `kvtop sim --kube-manifests DIR` writes: the
// simulated pool as a workload of a real cluster, following the
// conventions kvtop's discovery reads (README "Kubernetes"), so a person
// with a cluster can try discovery, InferencePool, access and churn end
// to end. Each pod is one simulated worker with its own router (the
// StatefulSet's pod 0 router is the endpoint picker's metrics); a
// StatefulSet, so a deleted pod comes back under its name with a new UID
// (kvtop counts a restart).
var kubeManifests = map[string]string{
	"kvtop-sim.yaml": `# The simulated pool: {{.Workers}} pods, each one simulated vLLM worker
# (ports named as kvtop reads them: http = metrics, kv-events, kv-replay).
apiVersion: v1
kind: Namespace
metadata:
  name: {{.Namespace}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: kvtop-sim
  namespace: {{.Namespace}}
spec:
  serviceName: kvtop-sim
  replicas: {{.Workers}}
  selector:
    matchLabels:
      app: kvtop-sim
  template:
    metadata:
      labels:
        app: kvtop-sim
      annotations:
        kvtop.dev/dp-ranks: "1"
        kvtop.dev/engine: {{.Engine}}
    spec:
      containers:
        - name: sim
          image: {{.Image}}
          args: [sim, --workers, "1", --listen, 0.0.0.0, --base-port, "8000", --scenario, {{.Scenario}}, --engine, {{.Engine}}]
          ports:
            - {name: http, containerPort: 8000}
            - {name: kv-events, containerPort: 8001}
            - {name: kv-replay, containerPort: 8002}
            - {name: router, containerPort: 8003}
          readinessProbe:
            httpGet: {path: /metrics, port: http}
            periodSeconds: 5
          resources:
            requests: {cpu: 100m, memory: 64Mi}
---
apiVersion: v1
kind: Service
metadata:
  name: kvtop-sim
  namespace: {{.Namespace}}
spec:
  clusterIP: None
  selector:
    app: kvtop-sim
  ports:
    - {name: http, port: 8000}
---
# The endpoint picker's metrics, as kvtop scrapes them (port 9090): the
# router of pod 0.
apiVersion: v1
kind: Service
metadata:
  name: kvtop-sim-epp
  namespace: {{.Namespace}}
spec:
  selector:
    statefulset.kubernetes.io/pod-name: kvtop-sim-0
  ports:
    - {name: metrics, port: 9090, targetPort: router}
`,
	"inferencepool.yaml": `# An InferencePool over the simulated pods (Gateway API Inference Extension,
# v1; needs its CRDs). kvtop --inference-pool kvtop-sim -n {{.Namespace}}
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: kvtop-sim
  namespace: {{.Namespace}}
spec:
  selector:
    matchLabels:
      app: kvtop-sim
  targetPorts:
    - number: 8000
  endpointPickerRef:
    name: kvtop-sim-epp
    portNumber: 9002
`,
	"kvtop-rbac.yaml": `# What kvtop needs in {{.Namespace}}: read pods and InferencePools, scrape
# through pods/proxy and services/proxy, port-forward the event streams.
# Bind it to the operator (a User) or to kvtop's ServiceAccount in-cluster.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: kvtop
  namespace: {{.Namespace}}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [pods/proxy, services/proxy]
    verbs: [get]
  - apiGroups: [""]
    resources: [pods/portforward]
    verbs: [create, get]
  - apiGroups: [inference.networking.k8s.io, inference.networking.x-k8s.io]
    resources: [inferencepools]
    verbs: [get, list, watch]
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kvtop
  namespace: {{.Namespace}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kvtop
  namespace: {{.Namespace}}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kvtop
subjects:
  - kind: ServiceAccount
    name: kvtop
    namespace: {{.Namespace}}
`,
	"README.md": `# kvtop's simulated pool on Kubernetes

Written by ` + "`kvtop sim --kube-manifests`" + `. {{.Workers}} pods in namespace {{.Namespace}}, each one
simulated {{.Engine}} worker (scenario {{.Scenario}}), image {{.Image}}.

    kubectl apply -f kvtop-sim.yaml -f kvtop-rbac.yaml
    kubectl apply -f inferencepool.yaml     # only with the Inference Extension's CRDs

From a machine with a kubeconfig for the cluster (a bastion: pods are read
through the API server when their IPs do not answer):

    kvtop --kube -n {{.Namespace}} -l app=kvtop-sim
    kvtop --inference-pool kvtop-sim -n {{.Namespace}}
    kvtop snapshot --kube -n {{.Namespace}} -l app=kvtop-sim --for 10s --format text

Churn: ` + "`kubectl -n {{.Namespace}} delete pod kvtop-sim-1`" + ` (it comes back under its
name with a new UID: a restart), ` + "`kubectl -n {{.Namespace}} scale statefulset kvtop-sim --replicas {{.More}}`" + `
(a worker joins), ` + "`... --replicas {{.Workers}}`" + ` (it leaves: its row stays dim for a window).
`,
}

// kubeManifestOptions fill the manifests.
type kubeManifestOptions struct {
	Namespace, Image, Scenario, Engine string
	Workers, More                      int
}

// writeKubeManifests writes the manifests into dir (created if needed);
// existing files are replaced only with force.
func writeKubeManifests(dir string, o kubeManifestOptions, force bool) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	o.More = o.Workers + 1
	var written []string
	for _, name := range []string{"kvtop-sim.yaml", "inferencepool.yaml", "kvtop-rbac.yaml", "README.md"} {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil && !force {
			return written, fmt.Errorf("%s exists; add --force to replace it", path)
		}
		var b strings.Builder
		if err := template.Must(template.New(name).Parse(kubeManifests[name])).Execute(&b, o); err != nil {
			return written, err
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}
