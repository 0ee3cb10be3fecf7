package kube

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/kvtop/kvtop/figures"
)

// The InferencePool API versions kvtop reads, newest first.
var poolVersions = []schema.GroupVersionResource{
	{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"},
	{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferencepools"},
}

// poolSpec is what kvtop reads of an InferencePool.
type poolSpec struct {
	selector string // label selector of its pods, "" when it selects none
	port     int    // target port (metrics and serving), 0 unknown
	epp      string // endpoint picker Service, "" none
	eppPort  int    // its metrics port
	version  string // the API version it was read through
	problem  string // what could not be read, "" when all was
}

// poolResource finds which InferencePool version the API server serves.
func poolResource(ctx context.Context, dc discovery.DiscoveryInterface) (schema.GroupVersionResource, error) {
	var tried []string
	for _, gvr := range poolVersions {
		gv := gvr.GroupVersion().String()
		tried = append(tried, gv)
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == gvr.Resource {
				return gvr, nil
			}
		}
	}
	if ctx.Err() != nil {
		return schema.GroupVersionResource{}, ctx.Err()
	}
	return schema.GroupVersionResource{}, fmt.Errorf("kubernetes: the API server serves no InferencePool (tried %s): is the Gateway API Inference Extension installed?",
		strings.Join(tried, ", "))
}

// readPool reads both shapes: v1 has selector.matchLabels, targetPorts
// [{number}] and endpointPickerRef; v1alpha2 a plain selector map,
// targetPortNumber and extensionRef. Either shape is read whatever the
// version says, so a server that mixes them is still understood.
func readPool(u *unstructured.Unstructured) poolSpec {
	ps := poolSpec{version: u.GetAPIVersion(), eppPort: DefaultEPPMetricsPort}
	spec, _ := u.Object["spec"].(map[string]any)
	var problems []string
	sel := map[string]string{}
	if raw, ok := spec["selector"].(map[string]any); ok {
		src := raw
		if ml, ok := raw["matchLabels"].(map[string]any); ok {
			src = ml
		}
		for k, v := range src {
			s, ok := v.(string)
			if !ok {
				problems = append(problems, fmt.Sprintf("selector label %q is not a string", k))
				continue
			}
			sel[k] = s
		}
	}
	if len(sel) == 0 {
		problems = append(problems, "no selector")
	} else {
		ps.selector = labels.SelectorFromSet(sel).String()
	}
	if tp, ok := spec["targetPorts"].([]any); ok && len(tp) > 0 {
		if m, ok := tp[0].(map[string]any); ok {
			ps.port = intOf(m["number"])
		}
	}
	if ps.port == 0 {
		ps.port = intOf(spec["targetPortNumber"])
	}
	ref, _ := spec["endpointPickerRef"].(map[string]any)
	if ref == nil {
		ref, _ = spec["extensionRef"].(map[string]any)
	}
	if ref != nil {
		kind, _ := ref["kind"].(string)
		if kind == "" || kind == "Service" {
			ps.epp, _ = ref["name"].(string)
		} else {
			problems = append(problems, fmt.Sprintf("endpoint picker is %s, not a Service: not scraped", figures.A(kind)))
		}
	}
	if v, ok := u.GetAnnotations()[AnnoEPPMetricsPort]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 && n < 65536 {
			ps.eppPort = n
		} else {
			problems = append(problems, fmt.Sprintf("annotation %s=%q is not a port", AnnoEPPMetricsPort, v))
		}
	}
	sort.Strings(problems)
	ps.problem = strings.Join(problems, "; ")
	return ps
}

// intOf reads a JSON number (int64 or float64 in unstructured).
func intOf(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case int32:
		return int(n)
	case int:
		return n
	case float64:
		return int(n)
	}
	return 0
}
