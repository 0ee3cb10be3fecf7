// Package kube finds the pool where it lives: the workers are pods, found
// with client-go informers (list, then watch; never polling) by namespace
// and label selector, or by an InferencePool's selector, and followed as
// they come and go. It is a targets.Source: it sends whole sets of
// workers (and the InferencePool's endpoint picker as a router), and the
// targets layer starts and stops collectors; the pool never talks to
// Kubernetes.
//
// Decisions, and why:
//
//   - Kubeconfig as kubectl reads it: $KUBECONFIG (a list), else
//     ~/.kube/config, the current context unless Context names one;
//     in a pod without a kubeconfig, the in-cluster service account.
//   - InferencePool: inference.networking.k8s.io/v1 first, else the older
//     inference.networking.x-k8s.io/v1alpha2, read through the dynamic
//     client (unstructured): kvtop depends on no CRD package. v1's
//     selector is {matchLabels: {...}} and its port targetPorts[0].number;
//     v1alpha2's selector is a plain map and its port targetPortNumber.
//     The endpoint picker is endpointPickerRef (v1) or extensionRef
//     (v1alpha2): its Service is a router. The ref's portNumber is the
//     picker's gRPC ext-proc port (9002 by default), not its metrics, so
//     the router is scraped at 9090 (the picker's default metrics port)
//     unless the pool's annotation kvtop.dev/epp-metrics-port says
//     otherwise.
//   - The informer cache keeps only what kvtop reads of a pod (a
//     transform drops managed fields, the spec beyond ports and node,
//     annotations other than prometheus.io/* and kvtop.dev/*): 1 000 pods
//     cost little (docs/PERFORMANCE.md).
//   - Sets are sent after the first complete listing (never 1 000 sets of
//     one pod at start), then at most once per Debounce while the watch
//     delivers changes.
//   - A pod is a worker as soon as it exists, with its collectors started
//     as soon as it has an IP, not once it is ready: a starting engine
//     binds its event PUB before it serves, and the SUB connected early
//     sees seq 0, so a pod that starts while kvtop watches is never
//     joined_late (nor needs a replay). A pod that was already there when
//     kvtop started may have published before kvtop listened: its first
//     seq tells, and its replay endpoint (if any) fills the history, as
//     for a configured worker. KubeInfo.New marks the pods created after
//     the first listing.
//   - Access. direct: pod IPs. proxy: metrics through the API server's
//     pods/proxy subresource, and every ZMQ stream (SUB and replay
//     DEALER) through a port-forward kvtop opens itself (SPDY, as
//     kubectl), one local loopback port per pod and stream, kept across
//     re-opens so the ZMQ sockets reconnect to the same address. auto:
//     direct when a pod IP answers (a TCP connect to the metrics port of
//     up to three pods, 1 s each), else proxy for the whole pool (pod
//     networks are reachable from a bastion wholly or not at all).
package kube

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Access modes.
const (
	AccessDirect = "direct"
	AccessProxy  = "proxy"
	AccessAuto   = "auto"
)

// Options configure discovery. Zero fields take the defaults.
type Options struct {
	// Kubeconfig is a kubeconfig path; "" reads $KUBECONFIG, else
	// ~/.kube/config, as kubectl does, and in a pod without either the
	// in-cluster service account.
	Kubeconfig string
	Context    string // "" = the current context
	// Namespace of the pods; "" = the context's namespace, else
	// "default" (in a pod: its own namespace).
	Namespace     string
	Selector      string // label selector of the worker pods
	InferencePool string // name of an InferencePool: its selector, port and endpoint picker
	Access        string // direct | proxy | auto (default auto; direct in a pod)
	// Debounce is the least time between two sets sent while the watch
	// delivers changes, default 100ms.
	Debounce time.Duration
	// ProbeTimeout bounds each TCP probe of access auto, default 1s.
	ProbeTimeout time.Duration
}

// Source discovers workers in Kubernetes (a targets.Source).
type Source struct {
	o         Options
	cfg       *rest.Config
	namespace string
	inCluster bool
	proxyRT   http.RoundTripper // authenticated transport to the API server
}

// ErrNoSelector: neither a selector nor an InferencePool says which pods.
var ErrNoSelector = errors.New("kubernetes: say which pods are workers: --selector (-l) or --inference-pool")

// New reads the kubeconfig (or the in-cluster config) and checks the
// options; it does not contact the API server.
func New(o Options) (*Source, error) {
	silenceKlog()
	if o.Selector == "" && o.InferencePool == "" {
		return nil, ErrNoSelector
	}
	if o.Selector != "" && o.InferencePool != "" {
		return nil, errors.New("kubernetes: --selector and --inference-pool both say which pods: give one")
	}
	if o.Selector != "" {
		if _, err := labels.Parse(o.Selector); err != nil {
			return nil, fmt.Errorf("kubernetes: selector %q: %v", o.Selector, err)
		}
	}
	switch o.Access {
	case "", AccessAuto, AccessDirect, AccessProxy:
	default:
		return nil, fmt.Errorf("kubernetes: access %q is not one of direct, proxy, auto", o.Access)
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = time.Second
	}
	cfg, ns, inCluster, err := restConfig(o)
	if err != nil {
		return nil, err
	}
	if o.Namespace != "" {
		ns = o.Namespace
	}
	if o.Access == "" {
		o.Access = AccessAuto
		if inCluster {
			o.Access = AccessDirect
		}
	}
	// Informers watch for long: no client-side timeout on the watch
	// itself (client-go bounds each watch with timeoutSeconds).
	cfg.QPS, cfg.Burst = 50, 100
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: transport: %w", err)
	}
	return &Source{o: o, cfg: cfg, namespace: ns, inCluster: inCluster, proxyRT: rt}, nil
}

// Name implements targets.Source.
func (s *Source) Name() string { return "kubernetes" }

// Namespace is the namespace watched.
func (s *Source) Namespace() string { return s.namespace }

// Host is the API server's URL.
func (s *Source) Host() string { return s.cfg.Host }

// restConfig loads the client config the way kubectl does.
func restConfig(o Options) (*rest.Config, string, bool, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		// No kubeconfig at all: in a pod, its service account.
		if clientcmd.IsEmptyConfig(err) && o.Kubeconfig == "" && o.Context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			ic, ierr := rest.InClusterConfig()
			if ierr != nil {
				return nil, "", false, fmt.Errorf("kubernetes: in-cluster config: %w", ierr)
			}
			return ic, inClusterNamespace(), true, nil
		}
		return nil, "", false, fmt.Errorf("kubernetes: %s", kubeconfigError(err, rules))
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, false, nil
}

// kubeconfigError says where kvtop looked.
func kubeconfigError(err error, rules *clientcmd.ClientConfigLoadingRules) string {
	if clientcmd.IsEmptyConfig(err) {
		where := rules.GetLoadingPrecedence()
		if rules.ExplicitPath != "" {
			where = []string{rules.ExplicitPath}
		}
		return fmt.Sprintf("no kubeconfig found (looked in %s; set KUBECONFIG or --context)", strings.Join(where, ", "))
	}
	return err.Error()
}

func inClusterNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || strings.TrimSpace(string(b)) == "" {
		return "default"
	}
	return strings.TrimSpace(string(b))
}

// silenceKlog keeps client-go's own logging off the console's screen:
// what matters reaches the operator as a SourceError.
func silenceKlog() {
	klog.SetOutput(discard{})
	klog.LogToStderr(false)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
