package kube

import (
	"context"
	"fmt"
	"sort"
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
	"github.com/kvtop/kvtop/discovery/dynamo"
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
	d := &dynamoSets{topic: s.o.Topic, good: map[string]goodCR{}, owners: map[string]string{}}
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
			report(ctx, errs, dynamo.Source, n.Kind, n.Msg)
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
	said dynamo.Reporter
	// owners are the owners of the last set's channels, with their CR.
	owners map[string]string
}

type goodCR struct {
	uid   string
	chans []natsevents.Channel
}

// build makes the set from the CRs, and what to say about them.
func (d *dynamoSets) build(crs []*unstructured.Unstructured) (natsevents.Channels, []dynamo.Said) {
	sort.Slice(crs, func(i, j int) bool { return crs[i].GetName() < crs[j].GetName() })
	set := natsevents.Channels{At: time.Now(), Left: map[string]string{}}
	owners := map[string]string{}
	good := map[string]goodCR{}
	for _, u := range crs {
		name, uid := u.GetName(), string(u.GetUID())
		owner := ownerOf(u)
		r := readDWM(u, d.topic)
		for _, n := range r.notes {
			d.said.Say(name+" "+n.key, "config", fmt.Sprintf("DynamoWorkerMetadata %s: %s", name, n.msg), false)
		}
		for _, p := range r.problems {
			d.said.Say(name+" "+p.key, "invalid", fmt.Sprintf("DynamoWorkerMetadata %s: %s", name, p.msg), true)
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
	d.owners, d.good = owners, good
	return set, d.said.Done()
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
			what = fmt.Sprintf("a %s, not an object", dynamo.JSONKind(v))
		} else if present {
			what = "null"
		}
		r.problems = append(r.problems, adNote{"", "spec.data is " + what + ": its last readable channels stand, if any"})
		return r
	}
	raw, present := data["event_channels"]
	chans, isMap := raw.(map[string]any)
	if present && raw != nil && !isMap {
		r.problems = append(r.problems, adNote{"", fmt.Sprintf("spec.data.event_channels is a %s, not an object: its last readable channels stand, if any", dynamo.JSONKind(raw))})
		return r
	}
	r.ok = true // absent or null: none (Dynamo reads null as empty)
	keys := make([]string, 0, len(chans))
	for k := range chans {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where := fmt.Sprintf("event_channels[%q]: ", k)
		c, v, why := dynamo.Channel(chans[k], topic)
		switch v {
		case dynamo.Read:
			r.chans = append(r.chans, c)
		case dynamo.Elsewhere:
			r.notes = append(r.notes, adNote{k, where + why})
		case dynamo.Bad:
			r.problems = append(r.problems, adNote{k, where + why})
		}
	}
	return r
}
