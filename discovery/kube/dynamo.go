package kube

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/natsevents"
)

// Dynamo's ZMQ event plane publishers, found where Dynamo's own
// Kubernetes discovery keeps them (DYN_DISCOVERY_BACKEND=kubernetes, which
// Dynamo's operator sets on its pods; docs/PROTOCOLS.md §10.5):
//
//   - every worker process writes a DynamoWorkerMetadata
//     (nvidia.com/v1alpha1, namespaced, plural dynamoworkermetadatas)
//     named after its pod (pod-<container> for a second engine container
//     in container mode), owned by the pod, so deleted with it; spec.data
//     is its discovery metadata as JSON: endpoints, model_cards,
//     event_channels (and, newer, event_sources), each a map of path →
//     DiscoveryInstance;
//   - a KV event publisher registers an event_channels entry {"type":
//     "EventChannel", "scope": {...}, "topic": "kv-events", "instance_id":
//     <publisher id>, "transport": {"kind": "Zmq", "config": {"endpoint":
//     "tcp://<pod ip>:<port>"}}} (v1.2 wrote namespace and component
//     where scope is); a new publisher (a restarted worker) replaces it
//     with its own id and port, and a publisher dropped removes it.
//
// kvtop watches the CRs of the namespace (list, then watch) and sends the
// kv-events channels with a ZMQ endpoint as a set, after the first
// listing and then on every change. It reads what is advertised: Dynamo's
// router also requires the pod to be ready in its EndpointSlice, kvtop
// shows a publisher of a pod that is not ready rather than hide it. A CR
// whose data cannot be read keeps the channels it last advertised (as
// Dynamo's daemon does for the same CR UID); a bad entry (a wildcard or
// missing address, no publisher id, another transport kind) is said once
// and counted, never fatal. Channels on NATS, or through a ZMQ broker, are
// said once: they are read with event_plane.nats, or not at all.

// DynamoWorkers is the resource Dynamo's Kubernetes discovery writes.
var DynamoWorkers = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1alpha1", Resource: "dynamoworkermetadatas"}

// DynamoOptions configure the discovery of Dynamo's event plane.
type DynamoOptions struct {
	// Kubeconfig, Context and Namespace as Options' (the kubernetes
	// section's).
	Kubeconfig, Context, Namespace string
	// Topic is the channels' topic (default natsevents.DefaultTopic,
	// "kv-events").
	Topic string
	// Debounce is the least time between two sets (default 100ms).
	Debounce time.Duration
}

// DynamoSource follows the ZMQ event plane publishers Dynamo's workers
// advertise in Kubernetes (a natsevents.Discovery).
type DynamoSource struct {
	o         DynamoOptions
	cfg       *rest.Config
	namespace string
}

var _ natsevents.Discovery = (*DynamoSource)(nil)

// NewDynamo reads the kubeconfig (or the in-cluster config); it does not
// contact the API server.
func NewDynamo(o DynamoOptions) (*DynamoSource, error) {
	silenceKlog()
	if o.Topic == "" {
		o.Topic = natsevents.DefaultTopic
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	cfg, ns, _, err := restConfig(Options{Kubeconfig: o.Kubeconfig, Context: o.Context})
	if err != nil {
		return nil, err
	}
	if o.Namespace != "" {
		ns = o.Namespace
	}
	cfg.QPS, cfg.Burst = 50, 100
	return &DynamoSource{o: o, cfg: cfg, namespace: ns}, nil
}

// Name implements natsevents.Discovery.
func (s *DynamoSource) Name() string { return "kubernetes" }

// Namespace is the namespace watched.
func (s *DynamoSource) Namespace() string { return s.namespace }

// dynamoSource is the source of the SourceErrors about advertisements.
const dynamoSource = "dynamo discovery"

// Watch implements natsevents.Discovery. Only an API server that serves
// no DynamoWorkerMetadata is fatal; trouble reaching it is said, and the
// informer retries.
func (s *DynamoSource) Watch(ctx context.Context, sets chan<- natsevents.Channels, errs chan<- collectors.Observation) error {
	lim := &watcher{errs: errs, said: map[string]time.Time{}} // say's rate limit
	dc, err := discovery.NewDiscoveryClientForConfig(s.cfg)
	if err != nil {
		return fmt.Errorf("kubernetes: discovery client: %w", err)
	}
	if err := servesDynamo(dc); err != nil {
		if !apierrors.IsNotFound(err) {
			lim.say(ctx, "kubernetes dynamoworkermetadatas", "refused", fmt.Sprintf("API discovery of %s: %v (watching anyway)", DynamoWorkers.GroupVersion(), err))
		} else {
			return fmt.Errorf("kubernetes: the API server serves no DynamoWorkerMetadata (%s): is Dynamo's Kubernetes discovery in use (DYN_DISCOVERY_BACKEND=kubernetes, set by its operator)?",
				DynamoWorkers.GroupVersion())
		}
	}
	client, err := dynamic.NewForConfig(s.cfg)
	if err != nil {
		return fmt.Errorf("kubernetes: dynamic client: %w", err)
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(client, DynamoWorkers, s.namespace, 0, cache.Indexers{}, nil).Informer()
	_ = inf.SetTransform(slimDWM)
	watchErrors(inf, "dynamoworkermetadatas", s.namespace, lim.say)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(_, _ any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	go inf.Run(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			poke()
		}
	}()
	d := &dynamoSets{topic: s.o.Topic, good: map[string]goodCR{}, told: map[string]string{}, owners: map[string]string{}}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
		if !inf.HasSynced() {
			continue // the first set is the whole listing
		}
		if wait := s.o.Debounce - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		var crs []*unstructured.Unstructured
		for _, obj := range inf.GetStore().List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				crs = append(crs, u)
			}
		}
		set, said := d.build(crs)
		for _, n := range said {
			report(ctx, errs, dynamoSource, n.kind, n.msg)
		}
		select {
		case sets <- set:
		case <-ctx.Done():
			return nil
		}
	}
}

// servesDynamo: the API server serves DynamoWorkerMetadata (a NotFound
// error when it does not).
func servesDynamo(dc discovery.DiscoveryInterface) error {
	list, err := dc.ServerResourcesForGroupVersion(DynamoWorkers.GroupVersion().String())
	if err != nil {
		return err
	}
	for _, r := range list.APIResources {
		if r.Name == DynamoWorkers.Resource {
			return nil
		}
	}
	return apierrors.NewNotFound(DynamoWorkers.GroupResource(), "")
}

// slimDWM is the informer's transform: what kvtop reads of a CR (its
// managed fields, written by Dynamo's server-side apply, go).
func slimDWM(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
		u.SetAnnotations(nil)
	}
	return obj, nil
}

// dynamoSets turns the CRs into sets; it remembers what it said.
type dynamoSets struct {
	topic string
	// good is each CR's last readable channels, by name, for a CR whose
	// data is unreadable for a moment.
	good map[string]goodCR
	// told is what was said about each advertisement (CR, or CR and
	// entry): said again only when it changes.
	told map[string]string
	// bad counts the bad advertisements said.
	bad int
	// owners are the owners of the last set's channels, with their CR.
	owners map[string]string
}

type goodCR struct {
	uid   string
	chans []natsevents.Channel
}

type said struct{ kind, msg string }

// build makes the set from the CRs, and what to say about them.
func (d *dynamoSets) build(crs []*unstructured.Unstructured) (natsevents.Channels, []said) {
	sort.Slice(crs, func(i, j int) bool { return crs[i].GetName() < crs[j].GetName() })
	set := natsevents.Channels{At: time.Now(), Left: map[string]string{}}
	var out []said
	told := map[string]string{}
	say := func(key, kind, msg string, bad bool) {
		told[key] = msg
		if d.told[key] == msg {
			return
		}
		if bad {
			d.bad++
			msg = fmt.Sprintf("%s; not read (%d bad advertisement(s) so far)", msg, d.bad)
		}
		out = append(out, said{kind, msg})
	}
	owners := map[string]string{}
	good := map[string]goodCR{}
	for _, u := range crs {
		name, uid := u.GetName(), string(u.GetUID())
		owner := ownerOf(u)
		r := readDWM(u, d.topic)
		for _, n := range r.notes {
			say(name+" "+n.key, "config", fmt.Sprintf("DynamoWorkerMetadata %s: %s", name, n.msg), false)
		}
		for _, p := range r.problems {
			say(name+" "+p.key, "invalid", fmt.Sprintf("DynamoWorkerMetadata %s: %s", name, p.msg), true)
		}
		chans := r.chans
		if !r.ok {
			// Unreadable as a whole: its last readable channels stand,
			// if they are the same object's (a CR recreated is another).
			if g, ok := d.good[name]; ok && g.uid == uid {
				good[name] = g
				chans = g.chans
			}
		} else {
			good[name] = goodCR{uid: uid, chans: r.chans}
		}
		for _, c := range chans {
			c.Owner = owner
			set.Channels = append(set.Channels, c)
		}
		owners[owner] = name // there, with or without KV events to advertise
	}
	for owner, cr := range d.owners {
		if _, ok := owners[owner]; !ok {
			set.Left[owner] = fmt.Sprintf("%s gone (its DynamoWorkerMetadata %s was deleted)", owner, cr)
		}
	}
	d.owners, d.good, d.told = owners, good, told
	return set, out
}

// ownerOf names who advertises the CR's channels: its pod (the CR's
// owner), else the CR.
func ownerOf(u *unstructured.Unstructured) string {
	for _, ref := range u.GetOwnerReferences() {
		if ref.Kind == "Pod" && ref.Name != "" {
			return "pod " + ref.Name
		}
	}
	return "DynamoWorkerMetadata " + u.GetName()
}

type adNote struct{ key, msg string }

// dwmRead is what one CR advertises.
type dwmRead struct {
	chans    []natsevents.Channel
	ok       bool // spec.data was readable
	notes    []adNote
	problems []adNote
}

// readDWM reads the topic's channels of one CR: DiscoveryMetadata's
// event_channels, a map of DiscoveryInstance (serde's internally tagged
// "type"), whose transport is adjacently tagged (kind, config) with its
// variants' Rust names (Zmq, Nats, ZmqBroker).
func readDWM(u *unstructured.Unstructured, topic string) dwmRead {
	var r dwmRead
	spec, _ := u.Object["spec"].(map[string]any)
	data, ok := spec["data"].(map[string]any)
	if !ok {
		what := "missing"
		if v, present := spec["data"]; present && v != nil {
			what = fmt.Sprintf("a %s, not an object", jsonKind(v))
		} else if present {
			what = "null"
		}
		r.problems = append(r.problems, adNote{"", "spec.data is " + what + ": its last readable channels stand, if any"})
		return r
	}
	raw, present := data["event_channels"]
	chans, isMap := raw.(map[string]any)
	if present && raw != nil && !isMap {
		r.problems = append(r.problems, adNote{"", fmt.Sprintf("spec.data.event_channels is a %s, not an object: its last readable channels stand, if any", jsonKind(raw))})
		return r
	}
	r.ok = true // absent or null: none (Dynamo reads null as empty)
	keys := make([]string, 0, len(chans))
	for k := range chans {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where := fmt.Sprintf("event_channels[%q]", k)
		bad := func(format string, args ...any) {
			r.problems = append(r.problems, adNote{k, where + ": " + fmt.Sprintf(format, args...)})
		}
		e, ok := chans[k].(map[string]any)
		if !ok {
			bad("a %s, not a DiscoveryInstance", jsonKind(chans[k]))
			continue
		}
		if t, _ := e["type"].(string); t != "EventChannel" {
			bad("type %q, want EventChannel", t)
			continue
		}
		if t, _ := e["topic"].(string); t != topic {
			continue // another topic (kv_metrics, …)
		}
		tr, _ := e["transport"].(map[string]any)
		kind, _ := tr["kind"].(string)
		cfg, _ := tr["config"].(map[string]any)
		switch kind {
		case "Zmq":
		case "Nats":
			prefix, _ := cfg["subject_prefix"].(string)
			r.notes = append(r.notes, adNote{k, fmt.Sprintf("%s: %s on NATS (subject prefix %q): read them with event_plane.nats, not here", where, topic, prefix)})
			continue
		case "ZmqBroker":
			r.notes = append(r.notes, adNote{k, fmt.Sprintf("%s: %s through a ZMQ broker (xpub %v): broker mode is not read", where, topic, cfg["xpub_endpoints"])})
			continue
		default:
			bad("transport kind %q is not Zmq, Nats or ZmqBroker", kind)
			continue
		}
		id, err := publisherID(e["instance_id"])
		if err != nil {
			bad("instance_id %v", err)
			continue
		}
		ep, _ := cfg["endpoint"].(string)
		if err := zmqEndpoint(ep); err != nil {
			bad("endpoint %q %v", ep, err)
			continue
		}
		r.chans = append(r.chans, natsevents.Channel{Endpoint: ep, PublisherID: id})
	}
	return r
}

// publisherID reads an instance_id: a JSON integer from 0 to 2^64-1
// (Dynamo's are below 2^53).
func publisherID(v any) (uint64, error) {
	switch n := v.(type) {
	case int64:
		if n >= 0 {
			return uint64(n), nil
		}
	case float64:
		if n >= 0 && n <= 1<<53 && n == math.Trunc(n) {
			return uint64(n), nil
		}
	case nil:
		return 0, fmt.Errorf("is missing")
	}
	return 0, fmt.Errorf("%v is not a publisher id", v)
}

// zmqEndpoint checks an advertised endpoint: tcp://host:port that kvtop
// can connect to (Dynamo advertises the pod's IP, never a wildcard).
func zmqEndpoint(ep string) error {
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" {
		return fmt.Errorf("is not tcp://host:port")
	}
	host, port := u.Hostname(), u.Port()
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("has no port from 1 to 65535")
	}
	if ip := net.ParseIP(host); host == "*" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("is a wildcard address, not one to connect to")
	}
	if strings.ContainsAny(host, " \t") {
		return fmt.Errorf("is not tcp://host:port")
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int64, float64:
		return "number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
