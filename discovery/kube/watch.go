package kube

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/targets"
)

// watcher is one Watch: the informers, what they found, and the
// port-forwards of the pods read through the API server.
type watcher struct {
	s    *Source
	cs   kubernetes.Interface
	errs chan<- collectors.Observation
	wake chan struct{} // something changed: rebuild the set

	mu       sync.Mutex
	pods     cache.SharedIndexInformer // current pod informer, nil while none
	podStop  context.CancelFunc
	synced   bool              // the current pod informer listed everything once
	initial  map[string]bool   // UIDs of the first listings: every other pod is new
	leftWhy  map[string]string // pod name → why it left, until the next set
	pool     *poolSpec         // the InferencePool, nil before it is read
	poolGone bool              // the InferencePool was deleted
	said     map[string]time.Time

	// Rebuild goroutine only.
	access    string                // direct or proxy, once auto is decided
	accessWhy string                // how auto decided
	fwd       map[string]*forwarder // by pod UID
	bad       map[string]bool       // pods whose bad annotations were reported
	stale     []*forwarder          // replaced forwards, stopped after the next set
	prev      map[string]bool       // worker names in the last set
}

// Watch implements targets.Source: it sends the set of worker pods (and
// the endpoint picker) after the first complete listing, then whenever
// the watch changes it. Trouble with the API server is a SourceError on
// errs (informers retry by themselves); only a missing InferencePool API
// is fatal.
func (s *Source) Watch(ctx context.Context, sets chan<- targets.Set, errs chan<- collectors.Observation) error {
	// Pods in protobuf, as kubectl asks for built-in types: a third of
	// JSON's decode time at 1 000 pods (docs/PERFORMANCE.md); a server
	// that only speaks JSON answers JSON.
	pc := rest.CopyConfig(s.cfg)
	pc.ContentType = "application/vnd.kubernetes.protobuf"
	pc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs, err := kubernetes.NewForConfig(pc)
	if err != nil {
		return fmt.Errorf("kubernetes: client: %w", err)
	}
	w := &watcher{
		s: s, cs: cs, errs: errs, wake: make(chan struct{}, 1),
		initial: map[string]bool{}, leftWhy: map[string]string{}, said: map[string]time.Time{},
		fwd: map[string]*forwarder{}, bad: map[string]bool{}, prev: map[string]bool{},
	}
	if s.o.Access != AccessAuto {
		w.access = s.o.Access
	}
	defer w.stopAll()
	if s.o.InferencePool != "" {
		gvr, err := poolResource(ctx, cs.Discovery())
		if err != nil {
			return err
		}
		dc, err := dynamic.NewForConfig(s.cfg)
		if err != nil {
			return fmt.Errorf("kubernetes: dynamic client: %w", err)
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(dc, gvr, s.namespace, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + s.o.InferencePool }).Informer()
		w.watchErrors(inf, "inferencepool "+s.o.InferencePool)
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.onPool(ctx, obj, false) },
			UpdateFunc: func(_, obj any) { w.onPool(ctx, obj, false) },
			DeleteFunc: func(obj any) { w.onPool(ctx, obj, true) },
		})
		go inf.Run(ctx.Done())
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && len(inf.GetStore().List()) == 0 {
				w.say(ctx, "inferencepool", "config", fmt.Sprintf("InferencePool %s/%s not found (%s): waiting for it",
					s.namespace, s.o.InferencePool, gvr.GroupVersion()))
			}
		}()
	} else {
		w.startPods(ctx, s.o.Selector)
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		}
		if d := s.o.Debounce - time.Since(last); d > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d):
			}
		}
		last = time.Now()
		set, ok, stale := w.build(ctx)
		if !ok {
			continue
		}
		select {
		case sets <- set:
		case <-ctx.Done():
			return nil
		}
		for _, f := range stale { // after the set: the streams on them are stopped
			f.stop()
		}
	}
}

func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// startPods (re)starts the pod informer on selector; w.mu is not held.
func (w *watcher) startPods(ctx context.Context, selector string) {
	f := informers.NewSharedInformerFactoryWithOptions(w.cs, 0, informers.WithNamespace(w.s.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := f.Core().V1().Pods().Informer()
	_ = inf.SetTransform(slimPod)
	w.watchErrors(inf, "pods")
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, _ bool) {
			if p, ok := obj.(*corev1.Pod); ok {
				w.mu.Lock()
				delete(w.leftWhy, p.Name)
				w.mu.Unlock()
			}
			w.poke()
		},
		UpdateFunc: func(_, _ any) { w.poke() },
		DeleteFunc: func(obj any) {
			// A tombstone is the informer's relist missing a pod whose
			// deletion (or relabelling) happened while its watch was down.
			why := "pod no longer listed (deleted or relabelled while the watch was interrupted)"
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			} else if p, ok := obj.(*corev1.Pod); ok {
				why = "pod deleted"
				if p.DeletionTimestamp == nil {
					why = "pod no longer matches the selector " + selector
				}
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.mu.Lock()
				w.leftWhy[p.Name] = why
				w.mu.Unlock()
			}
			w.poke()
		},
	})
	pctx, stop := context.WithCancel(ctx)
	w.mu.Lock()
	if w.podStop != nil {
		w.podStop()
	}
	w.pods, w.podStop, w.synced = inf, stop, false
	w.mu.Unlock()
	go inf.Run(pctx.Done())
	go func() {
		if cache.WaitForCacheSync(pctx.Done(), inf.HasSynced) {
			w.mu.Lock()
			if w.pods == inf {
				w.synced = true
				// The pods of kvtop's first listing are the pool; any pod
				// it sees later is new (decided by UID, not by when its
				// event handler runs, which may be after a set saw it).
				// A selector change later brings existing pods: not new
				// either, so the first listing of every informer counts.
				for _, obj := range inf.GetStore().List() {
					if p, ok := obj.(*corev1.Pod); ok {
						w.initial[string(p.UID)] = true
					}
				}
			}
			w.mu.Unlock()
			w.poke()
		}
	}()
}

// onPool follows the InferencePool: a new selector restarts the pod
// informer on it; its deletion empties the set.
func (w *watcher) onPool(ctx context.Context, obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if deleted {
		w.mu.Lock()
		w.poolGone, w.pool = true, nil
		if w.podStop != nil {
			w.podStop()
		}
		w.pods, w.podStop = nil, nil
		w.mu.Unlock()
		w.poke()
		return
	}
	ps := readPool(u)
	if ps.problem != "" {
		w.say(ctx, "inferencepool "+u.GetName(), "invalid", fmt.Sprintf("InferencePool %s/%s (%s): %s", u.GetNamespace(), u.GetName(), ps.version, ps.problem))
	}
	w.mu.Lock()
	old := w.pool
	w.pool, w.poolGone = &ps, false
	restart := old == nil || old.selector != ps.selector
	w.mu.Unlock()
	if restart && ps.selector != "" {
		w.startPods(ctx, ps.selector)
	}
	w.poke()
}

// watchErrors turns the informer's list and watch failures into
// SourceErrors (rate-limited).
func (w *watcher) watchErrors(inf cache.SharedIndexInformer, what string) {
	watchErrors(inf, what, w.s.namespace, w.say)
}

// watchErrors reports an informer's list and watch failures through say.
// An expired resourceVersion (410 Gone) is the informer's business: it
// lists again, which is not a fault.
func watchErrors(inf cache.SharedIndexInformer, what, namespace string, say func(ctx context.Context, source, kind, msg string)) {
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return
		}
		kind := "refused"
		switch {
		case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
			kind = "http_status"
		case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
			kind = "timeout"
		}
		say(ctx, "kubernetes "+what, kind, fmt.Sprintf("list/watch %s in %s: %v (retrying)", what, namespace, err))
	})
}

// say reports a SourceError, at most once per 5 s per source.
func (w *watcher) say(ctx context.Context, source, kind, msg string) {
	w.mu.Lock()
	if t, ok := w.said[source]; ok && time.Since(t) < 5*time.Second {
		w.mu.Unlock()
		return
	}
	w.said[source] = time.Now()
	w.mu.Unlock()
	report(ctx, w.errs, source, kind, msg)
}

// build makes the set from the informer's store. ok false: nothing to
// send yet (the first listing is not complete). stale are the
// port-forwards of pods that left, to stop once the set is applied.
func (w *watcher) build(ctx context.Context) (targets.Set, bool, []*forwarder) {
	w.mu.Lock()
	inf, synced, pool, gone := w.pods, w.synced, w.pool, w.poolGone
	initial := maps.Clone(w.initial) // read outside the lock
	leftWhy := w.leftWhy
	w.leftWhy = map[string]string{}
	w.mu.Unlock()

	set := targets.Set{At: time.Now(), Left: map[string]string{}}
	var pods []*corev1.Pod
	switch {
	case gone:
		for name := range w.prev {
			set.Left[name] = "InferencePool " + w.s.o.InferencePool + " deleted"
		}
	case inf == nil || !synced:
		// Restore the reasons: they belong to the set that will be sent.
		w.mu.Lock()
		for k, v := range leftWhy {
			w.leftWhy[k] = v
		}
		w.mu.Unlock()
		return targets.Set{}, false, nil
	default:
		for _, obj := range inf.GetStore().List() {
			if p, ok := obj.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	poolPort := 0
	if pool != nil {
		poolPort = pool.port
	}
	w.decideAccess(pods, poolPort)
	keep := map[string]bool{}
	names := map[string]bool{}
	for _, p := range pods {
		wk := w.worker(ctx, p, poolPort, !initial[string(p.UID)], keep)
		set.Workers = append(set.Workers, wk)
		names[wk.Name] = true
	}
	for name := range w.prev {
		if !names[name] {
			why := leftWhy[name]
			if why == "" && set.Left[name] == "" {
				why = "pod no longer listed"
			}
			if why != "" {
				set.Left[name] = why
			}
		}
	}
	w.prev = names
	if pool != nil && pool.epp != "" && !gone {
		set.Routers = append(set.Routers, w.router(pool))
	}
	stale := w.stale
	w.stale = nil
	for uid, f := range w.fwd {
		if !keep[uid] {
			stale = append(stale, f)
			delete(w.fwd, uid)
		}
	}
	return set, true, stale
}

// worker turns one pod into a worker with its endpoints on the access
// path in use.
func (w *watcher) worker(ctx context.Context, p *corev1.Pod, poolPort int, isNew bool, keep map[string]bool) targets.Worker {
	pt := podPorts(p, poolPort)
	uid := string(p.UID)
	if len(pt.bad) > 0 && !w.bad[uid] {
		w.bad[uid] = true
		report(ctx, w.errs, p.Name+" kubernetes", "config", "pod "+p.Name+": "+strings.Join(pt.bad, "; "))
	}
	k := kubeInfo(p, isNew)
	wk := targets.Worker{Name: p.Name, Engine: pt.engine, Topic: pt.topic, DPRanks: pt.dpRanks, FirstSeq: pt.firstSeq, Kube: k}
	ip := p.Status.PodIP
	if ip == "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return wk // no endpoint (yet, or any more): Kubernetes says why
	}
	wk.Aliases = []string{ip, hostPort(ip, pt.metrics)}
	k.Access = w.access
	if w.access != AccessProxy {
		k.AccessNote = w.accessWhy
		wk.Metrics = fmt.Sprintf("%s://%s%s", pt.scheme, hostPort(ip, pt.metrics), pt.path)
		if pt.events > 0 {
			wk.Events = "tcp://" + hostPort(ip, pt.events)
		}
		if pt.replay > 0 {
			wk.Replay = "tcp://" + hostPort(ip, pt.replay)
		}
		return wk
	}
	// Through the API server: pods/proxy for metrics, a port-forward for
	// every ZMQ port (each DP rank has its own).
	wk.Metrics = w.proxyURL("pods", p.Name, pt.scheme, pt.metrics, pt.path)
	wk.Auth.Transport = w.s.proxyRT
	notes := []string{"metrics via pods/proxy"}
	if w.accessWhy != "" {
		notes = append([]string{w.accessWhy}, notes...)
	}
	var remote []int
	var groups [][]int
	for _, base := range []int{pt.events, pt.replay} {
		if base == 0 {
			continue
		}
		var g []int
		for r := 0; r < max(pt.dpRanks, 1); r++ {
			g = append(g, base+r)
		}
		groups = append(groups, g)
		remote = append(remote, g...)
	}
	if len(remote) > 0 {
		f := w.fwd[uid]
		if f != nil && !slices.Equal(f.remote, remote) {
			// The pod's ports changed (an annotation): a new forward, the
			// old one stopped once the set moved off it.
			w.stale = append(w.stale, f)
			delete(w.fwd, uid)
			f = nil
		}
		if f == nil {
			var err error
			if f, err = newForwarder(ctx, w.s.cfg, p.Namespace, p.Name, groups, w.errs); err != nil {
				report(ctx, w.errs, p.Name+" port-forward", "config", err.Error())
			} else {
				w.fwd[uid] = f
			}
		}
		if f != nil {
			keep[uid] = true
			if pt.events > 0 {
				wk.Events = f.endpoint(pt.events)
			}
			if pt.replay > 0 {
				wk.Replay = f.endpoint(pt.replay)
			}
			notes = append(notes, "events via "+f.note(remote))
			// The ranks' endpoints are base+rank (kvevents offsets the
			// base): the local runs are consecutive, checked here.
			if pt.dpRanks > 1 && !consecutive(f, pt.events, pt.replay, pt.dpRanks) {
				wk.DPRanks = 1
				report(ctx, w.errs, p.Name+" port-forward", "config",
					fmt.Sprintf("pod %s has %d DP ranks; through a port-forward kvtop reads rank 0 only (local ports are not consecutive)", p.Name, pt.dpRanks))
			}
		}
	}
	k.AccessNote = strings.Join(notes, "; ")
	return wk
}

// consecutive reports whether the local ports of each DP rank follow the
// rank-0 one as the remote ones do.
func consecutive(f *forwarder, events, replay, ranks int) bool {
	for _, base := range []int{events, replay} {
		if base == 0 {
			continue
		}
		for r := 1; r < ranks; r++ {
			if f.local[base+r] != f.local[base]+r {
				return false
			}
		}
	}
	return true
}

// router is the InferencePool's endpoint picker as a router target.
func (w *watcher) router(ps *poolSpec) targets.Router {
	r := targets.Router{Name: ps.epp}
	if w.access == AccessProxy {
		r.Metrics = w.proxyURL("services", ps.epp, "http", ps.eppPort, "/metrics")
		r.Auth.Transport = w.s.proxyRT
		return r
	}
	r.Metrics = fmt.Sprintf("http://%s/metrics", hostPort(ps.epp+"."+w.s.namespace+".svc", ps.eppPort))
	return r
}

// proxyURL is the API server's proxy subresource for a pod or service
// port: /api/v1/namespaces/NS/pods/[https:]NAME:PORT/proxy/PATH.
func (w *watcher) proxyURL(kind, name, scheme string, port int, path string) string {
	target := fmt.Sprintf("%s:%d", name, port)
	if scheme == "https" {
		target = "https:" + target
	}
	base := strings.TrimRight(w.s.cfg.Host, "/")
	return fmt.Sprintf("%s/api/v1/namespaces/%s/%s/%s/proxy%s", base, url.PathEscape(w.s.namespace), kind, target, path)
}

// decideAccess settles access auto once, on the first pods with an IP:
// direct if any of up to three answers a TCP connect on its metrics
// port within ProbeTimeout, else proxy.
func (w *watcher) decideAccess(pods []*corev1.Pod, poolPort int) {
	if w.access != "" {
		return
	}
	var addrs []string
	for _, p := range pods {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			addrs = append(addrs, hostPort(p.Status.PodIP, podPorts(p, poolPort).metrics))
			if len(addrs) == 3 {
				break
			}
		}
	}
	if len(addrs) == 0 {
		return // decided with the first running pod
	}
	ok := make(chan string, len(addrs))
	for _, a := range addrs {
		go func() {
			c, err := net.DialTimeout("tcp", a, w.s.o.ProbeTimeout)
			if err != nil {
				ok <- ""
				return
			}
			c.Close()
			ok <- a
		}()
	}
	for range addrs {
		if a := <-ok; a != "" {
			w.access, w.accessWhy = AccessDirect, "auto: pod IP "+a+" answered"
			return
		}
	}
	w.access = AccessProxy
	w.accessWhy = fmt.Sprintf("auto: pod IP %s did not answer in %v", addrs[0], w.s.o.ProbeTimeout)
}

func (w *watcher) stopAll() {
	w.mu.Lock()
	if w.podStop != nil {
		w.podStop()
	}
	w.mu.Unlock()
	for _, f := range w.fwd {
		f.stop()
	}
}
