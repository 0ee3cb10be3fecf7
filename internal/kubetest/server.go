// Package kubetest is a Kubernetes API server for tests, on 127.0.0.1: no
// real one can be installed on these machines, and client-go must be
// driven through the API's real protocol, not mocked. It serves what
// kvtop's discovery asks for, the way the real server answers:
//
//   - discovery: /api, /apis, /apis/<group>/<version>;
//   - pods (/api/v1/namespaces/N/pods) and custom resources
//     (InferencePools, Dynamo's DynamoWorkerMetadata: their API group
//     paths) as list (JSON, resourceVersion) and watch (chunked
//     JSON events ADDED / MODIFIED / DELETED, BOOKMARK when asked, the
//     streaming list of sendInitialEvents with its initial-events-end
//     bookmark), label and field selectors (an object that stops
//     matching is DELETED from that watch, one that starts is ADDED);
//   - 410 Gone: a watch from a resourceVersion older than the last
//     Compact gets an ERROR event with a Status of code 410, a list at
//     such a resourceVersion a 410 response, so the informer relists;
//   - pods/NAME[:PORT]/proxy/PATH and services/NAME:PORT/proxy/PATH,
//     forwarded to the pod's IP (tests give pods 127.0.0.1 and the
//     simulator's ports) or the registered service address;
//   - pods/NAME/portforward: the SPDY upgrade and the port-forward stream
//     protocol (a data and an error stream per port and requestID),
//     forwarded to the pod's IP and the asked port;
//   - a bearer token: any other request is 401.
//
// It is test code that is also run by hand (see Hold in kube's tests),
// kept out of the binary by being imported from tests only.
package kubetest

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/kubernetes/scheme"
)

// PodsGVR and the custom resources the server knows: the InferencePool
// versions and Dynamo's DynamoWorkerMetadata.
var (
	PodsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	PoolV1        = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}
	PoolV1Alpha2  = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferencepools"}
	DynamoWorkers = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1alpha1", Resource: "dynamoworkermetadatas"}
	bookmarkEvery = 2 * time.Second
)

// kinds are the custom resources' kinds (and singular names).
var kinds = map[string][2]string{
	"inferencepools":        {"InferencePool", "inferencepool"},
	"dynamoworkermetadatas": {"DynamoWorkerMetadata", "dynamoworkermetadata"},
}

// kindOf is the kind of a served resource.
func kindOf(gvr schema.GroupVersionResource) string {
	if gvr == PodsGVR {
		return "Pod"
	}
	return kinds[gvr.Resource][0]
}

// Server is the test API server.
type Server struct {
	URL   string
	Token string
	srv   *httptest.Server

	mu        sync.Mutex
	rv        int64
	compacted int64
	objs      map[objKey]map[string]any
	log       []change
	watchers  map[*watcher]bool
	served    map[schema.GroupVersionResource]bool
	services  map[string]string // "ns/name:port" → host:port
	forwards  map[httpstream.Connection]bool
	paused    chan struct{}     // non-nil: lists and watches wait for Resume
	routes    map[string]string // pod "ip:port" → where it really is (Reach)

	// NoWatchList answers a streaming list (sendInitialEvents) with 422,
	// as a server before 1.32 with the WatchList gate off does: client-go
	// then falls back to LIST and WATCH. Set before use.
	NoWatchList bool

	// Counts of what clients asked, for tests.
	Lists, Watches, Proxied, PortForwards, Streams atomic.Int64
	Expired                                        atomic.Int64 // 410 Gone served (watch ERROR events and lists)
}

type objKey struct {
	gvr      schema.GroupVersionResource
	ns, name string
}

type change struct {
	rv       int64
	key      objKey
	old, obj map[string]any // old nil: created; obj nil: deleted
}

type watcher struct {
	key   objKey // gvr and namespace
	sel   labels.Selector
	field fields.Selector
	ch    chan change
	gone  chan struct{} // closed by the server: end the watch
	once  sync.Once
}

func (w *watcher) end() { w.once.Do(func() { close(w.gone) }) }

// New starts a server that serves pods and the given custom resources
// (InferencePool versions, DynamoWorkers: none, one or more).
func New(pools ...schema.GroupVersionResource) *Server {
	s := &Server{
		Token:    "kvtop-test-token",
		objs:     map[objKey]map[string]any{},
		watchers: map[*watcher]bool{},
		served:   map[schema.GroupVersionResource]bool{PodsGVR: true},
		services: map[string]string{},
		forwards: map[httpstream.Connection]bool{},
		routes:   map[string]string{},
		rv:       100,
	}
	for _, p := range pools {
		s.served[p] = true
	}
	// TLS, as every API server: client-go sends a bearer token only
	// over TLS.
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close ends every watch and port-forward and stops the server.
func (s *Server) Close() {
	s.CloseWatches()
	s.CloseForwards()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// WriteKubeconfig writes a kubeconfig for the server (context "test",
// the given default namespace, a bearer token) to path.
func (s *Server) WriteKubeconfig(path, namespace string) error {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
contexts:
- name: test
  context:
    cluster: test
    user: kvtop
    namespace: %s
- name: other
  context:
    cluster: test
    user: kvtop
    namespace: elsewhere
current-context: test
users:
- name: kvtop
  user:
    token: %s
`, s.URL, base64.StdEncoding.EncodeToString(ca), namespace, s.Token)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// ---------------------------------------------------------------------------
// Objects

// AddPod creates a pod (UID and creation time filled in when empty).
func (s *Server) AddPod(p *corev1.Pod) { s.put(PodsGVR, podObj(p), true) }

// UpdatePod replaces a pod.
func (s *Server) UpdatePod(p *corev1.Pod) { s.put(PodsGVR, podObj(p), false) }

// Pod returns a copy of a stored pod, nil if none.
func (s *Server) Pod(ns, name string) *corev1.Pod {
	s.mu.Lock()
	o := s.objs[objKey{PodsGVR, ns, name}]
	s.mu.Unlock()
	if o == nil {
		return nil
	}
	var p corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deepCopy(o), &p); err != nil {
		return nil
	}
	return &p
}

// DeletePod deletes a pod (DELETED with a deletion timestamp, as the last
// state a watcher sees of a pod the kubelet killed).
func (s *Server) DeletePod(ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := objKey{PodsGVR, ns, name}
	old := s.objs[k]
	if old == nil {
		return
	}
	last := deepCopy(old)
	meta := last["metadata"].(map[string]any)
	meta["deletionTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	s.rv++
	meta["resourceVersion"] = strconv.FormatInt(s.rv, 10)
	delete(s.objs, k)
	s.publish(change{rv: s.rv, key: k, old: old, obj: nil}, last)
}

// Put creates or replaces any object of a served resource (an
// InferencePool, a DynamoWorkerMetadata, as unstructured JSON).
func (s *Server) Put(gvr schema.GroupVersionResource, obj map[string]any) { s.put(gvr, obj, false) }

// Delete deletes any object.
func (s *Server) Delete(gvr schema.GroupVersionResource, ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := objKey{gvr, ns, name}
	old := s.objs[k]
	if old == nil {
		return
	}
	s.rv++
	last := deepCopy(old)
	last["metadata"].(map[string]any)["resourceVersion"] = strconv.FormatInt(s.rv, 10)
	delete(s.objs, k)
	s.publish(change{rv: s.rv, key: k, old: old}, last)
}

// ResourceVersion is the current one.
func (s *Server) ResourceVersion() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv
}

// Compact forgets history up to now, as etcd compaction does: a watch or
// list from an older resourceVersion is 410 Gone.
func (s *Server) Compact() {
	s.mu.Lock()
	s.compacted = s.rv
	s.log = nil
	s.mu.Unlock()
}

// CloseWatches ends every open watch (as the server's timeout does); the
// informers watch again from their last resourceVersion.
func (s *Server) CloseWatches() {
	s.mu.Lock()
	for w := range s.watchers {
		w.end()
	}
	s.mu.Unlock()
}

// Reach makes the pod address podAddr ("ip:port") reachable through the
// server (pods/proxy, port-forward) at addr, while kvtop dialing podAddr
// itself gets nothing: a pod network the bastion cannot route to.
func (s *Server) Reach(podAddr, addr string) {
	s.mu.Lock()
	s.routes[podAddr] = addr
	s.mu.Unlock()
}

// route is where a pod address really is.
func (s *Server) route(addr string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.routes[addr]; ok {
		return a
	}
	return addr
}

// Pause holds every list and watch request until Resume: an API server
// that is unreachable for a while.
func (s *Server) Pause() {
	s.mu.Lock()
	if s.paused == nil {
		s.paused = make(chan struct{})
	}
	s.mu.Unlock()
}

// Resume lets the held requests through.
func (s *Server) Resume() {
	s.mu.Lock()
	if s.paused != nil {
		close(s.paused)
		s.paused = nil
	}
	s.mu.Unlock()
}

// ServeService makes services/NAME:PORT/proxy in ns forward to addr.
func (s *Server) ServeService(ns, name string, port int, addr string) {
	s.mu.Lock()
	s.services[fmt.Sprintf("%s/%s:%d", ns, name, port)] = addr
	s.mu.Unlock()
}

// CloseForwards drops every open port-forward connection (the API server
// or the network going away); clients must open them again.
func (s *Server) CloseForwards() {
	s.mu.Lock()
	cs := make([]httpstream.Connection, 0, len(s.forwards))
	for c := range s.forwards {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (s *Server) put(gvr schema.GroupVersionResource, obj map[string]any, create bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	k := objKey{gvr, ns, name}
	old := s.objs[k]
	if create && old != nil {
		panic("kubetest: " + name + " exists")
	}
	if meta["uid"] == nil || meta["uid"] == "" {
		if old != nil {
			meta["uid"] = old["metadata"].(map[string]any)["uid"]
		} else {
			meta["uid"] = fmt.Sprintf("uid-%s-%d", name, s.rv+1)
		}
	}
	if meta["creationTimestamp"] == nil {
		meta["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	}
	s.rv++
	meta["resourceVersion"] = strconv.FormatInt(s.rv, 10)
	s.objs[k] = obj
	s.publish(change{rv: s.rv, key: k, old: old, obj: obj}, nil)
}

// publish logs a change and hands it to the watchers (s.mu held). last
// is the final state of a deleted object.
func (s *Server) publish(c change, last map[string]any) {
	if c.obj == nil {
		c.old = last // a watcher's DELETED carries the final state
	}
	s.log = append(s.log, c)
	for w := range s.watchers {
		if w.key.gvr != c.key.gvr || (w.key.ns != "" && w.key.ns != c.key.ns) {
			continue
		}
		select {
		case w.ch <- c:
		default:
			w.end() // a watcher that cannot keep up is dropped, as the real server does
		}
	}
}

func podObj(p *corev1.Pod) map[string]any {
	p = p.DeepCopy()
	if p.Kind == "" {
		p.Kind, p.APIVersion = "Pod", "v1"
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		panic(err)
	}
	if p.UID == "" {
		m["metadata"].(map[string]any)["uid"] = ""
	}
	return m
}

func deepCopy(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// ---------------------------------------------------------------------------
// HTTP

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		status(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/api":
		writeJSON(w, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	case r.URL.Path == "/apis":
		s.groups(w)
	case len(parts) == 3 && parts[0] == "apis":
		s.resources(w, schema.GroupVersion{Group: parts[1], Version: parts[2]})
	case len(parts) >= 5 && parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces":
		s.core(w, r, parts[3], parts[4:])
	case len(parts) >= 6 && parts[0] == "apis" && parts[3] == "namespaces":
		gvr := schema.GroupVersionResource{Group: parts[1], Version: parts[2], Resource: parts[5]}
		if !s.served[gvr] || len(parts) != 6 {
			status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
			return
		}
		s.collection(w, r, gvr, parts[4])
	default:
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
	}
}

func (s *Server) groups(w http.ResponseWriter) {
	byGroup := map[string][]string{}
	for gvr := range s.served {
		if gvr.Group != "" {
			byGroup[gvr.Group] = append(byGroup[gvr.Group], gvr.Version)
		}
	}
	var groups []map[string]any
	for g, vs := range byGroup {
		var versions []map[string]any
		for _, v := range vs {
			versions = append(versions, map[string]any{"groupVersion": g + "/" + v, "version": v})
		}
		groups = append(groups, map[string]any{"name": g, "versions": versions, "preferredVersion": versions[0]})
	}
	writeJSON(w, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

func (s *Server) resources(w http.ResponseWriter, gv schema.GroupVersion) {
	var rs []map[string]any
	for gvr := range s.served {
		if gvr.GroupVersion() != gv || gvr == PodsGVR {
			continue
		}
		k := kinds[gvr.Resource]
		r := map[string]any{"name": gvr.Resource, "singularName": k[1], "namespaced": true,
			"kind": k[0], "verbs": []string{"get", "list", "watch"}}
		if gvr.Resource == "inferencepools" {
			r["shortNames"] = []string{"infpool"}
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	writeJSON(w, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv.String(), "resources": rs})
}

// core serves /api/v1/namespaces/NS/pods[/NAME[/proxy/...|/portforward]]
// and services/NAME:PORT/proxy/...
func (s *Server) core(w http.ResponseWriter, r *http.Request, ns string, rest []string) {
	switch {
	case len(rest) == 1 && rest[0] == "pods":
		s.collection(w, r, PodsGVR, ns)
	case len(rest) >= 3 && rest[0] == "pods" && rest[2] == "proxy":
		s.podProxy(w, r, ns, rest[1], "/"+strings.Join(rest[3:], "/"))
	case len(rest) == 3 && rest[0] == "pods" && rest[2] == "portforward":
		s.portForward(w, r, ns, rest[1])
	case len(rest) >= 3 && rest[0] == "services" && rest[2] == "proxy":
		s.mu.Lock()
		addr := s.services[ns+"/"+rest[1]]
		s.mu.Unlock()
		if addr == "" {
			status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "no endpoints available for service \""+rest[1]+"\"")
			return
		}
		s.proxyTo(w, r, "http", addr, "/"+strings.Join(rest[3:], "/"))
	default:
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
	}
}

// collection is list or watch of one resource in one namespace.
func (s *Server) collection(w http.ResponseWriter, r *http.Request, gvr schema.GroupVersionResource, ns string) {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	if paused != nil {
		select {
		case <-paused:
		case <-r.Context().Done():
			return
		}
	}
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "unable to parse requirement: "+err.Error())
		return
	}
	fsel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", "invalid field selector: "+err.Error())
		return
	}
	if v := q.Get("watch"); v == "1" || v == "true" {
		s.watch(w, r, gvr, ns, sel, fsel)
		return
	}
	s.Lists.Add(1)
	s.mu.Lock()
	if rv, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64); rv > 0 && rv < s.compacted {
		s.mu.Unlock()
		s.Expired.Add(1)
		status(w, http.StatusGone, "Expired", "The resourceVersion for the provided list is too old.")
		return
	}
	items := s.matching(gvr, ns, sel, fsel)
	rv := s.rv
	s.mu.Unlock()
	if gvr == PodsGVR && wantsProtobuf(r) {
		list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(rv, 10)}}
		for _, o := range items {
			var p corev1.Pod
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o, &p); err == nil {
				list.Items = append(list.Items, p)
			}
		}
		b, err := runtime.Encode(protoEncoder(), list)
		if err != nil {
			status(w, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		w.Header().Set("Content-Type", mediaProtobuf)
		_, _ = w.Write(b)
		return
	}
	writeJSON(w, map[string]any{"kind": kindOf(gvr) + "List", "apiVersion": gvr.GroupVersion().String(),
		"metadata": map[string]any{"resourceVersion": strconv.FormatInt(rv, 10)}, "items": items})
}

// matching lists the objects a list or an initial watch returns (s.mu held).
func (s *Server) matching(gvr schema.GroupVersionResource, ns string, sel labels.Selector, fsel fields.Selector) []map[string]any {
	var keys []objKey
	for k := range s.objs {
		if k.gvr == gvr && (ns == "" || k.ns == ns) && matches(s.objs[k], sel, fsel) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].name < keys[j].name })
	items := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		items = append(items, s.objs[k])
	}
	return items
}

func matches(obj map[string]any, sel labels.Selector, fsel fields.Selector) bool {
	if obj == nil {
		return false
	}
	meta, _ := obj["metadata"].(map[string]any)
	ls := labels.Set{}
	if m, ok := meta["labels"].(map[string]any); ok {
		for k, v := range m {
			ls[k], _ = v.(string)
		}
	}
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	return sel.Matches(ls) && fsel.Matches(fields.Set{"metadata.name": name, "metadata.namespace": ns})
}

// watch streams events from the asked resourceVersion.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, gvr schema.GroupVersionResource, ns string, sel labels.Selector, fsel fields.Selector) {
	s.Watches.Add(1)
	q := r.URL.Query()
	fl, _ := w.(http.Flusher)
	w.Header().Set("Transfer-Encoding", "chunked")
	var send func(typ string, obj any) bool
	if gvr == PodsGVR && wantsProtobuf(r) {
		// Length-delimited frames of metav1.WatchEvent, the object inside
		// encoded on its own, as the API server streams protobuf.
		w.Header().Set("Content-Type", mediaProtobuf+";stream=watch")
		info := protoInfo()
		stream := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(w), info.StreamSerializer.Serializer)
		send = func(typ string, obj any) bool {
			raw, err := protoObject(obj)
			if err != nil {
				return false
			}
			if err := stream.Encode(&metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}); err != nil {
				return false
			}
			if fl != nil {
				fl.Flush()
			}
			return true
		}
	} else {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		send = func(typ string, obj any) bool {
			if err := enc.Encode(map[string]any{"type": typ, "object": obj}); err != nil {
				return false
			}
			if fl != nil {
				fl.Flush()
			}
			return true
		}
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	initial := q.Get("sendInitialEvents") == "true"
	from, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	if initial && s.NoWatchList {
		status(w, http.StatusUnprocessableEntity, "Invalid", "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
		return
	}
	wt := &watcher{key: objKey{gvr: gvr, ns: ns}, sel: sel, field: fsel, ch: make(chan change, 4096), gone: make(chan struct{})}

	s.mu.Lock()
	if !initial && from > 0 && from < s.compacted {
		s.mu.Unlock()
		s.Expired.Add(1)
		w.WriteHeader(http.StatusOK)
		send("ERROR", statusObj(http.StatusGone, "Expired", fmt.Sprintf("too old resource version: %d (%d)", from, s.compacted)))
		return
	}
	var backlog []change
	var start []map[string]any
	if initial || from == 0 {
		start = s.matching(gvr, ns, sel, fsel)
	} else {
		for _, c := range s.log {
			if c.rv > from {
				backlog = append(backlog, c)
			}
		}
	}
	rv := s.rv
	s.watchers[wt] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, wt)
		s.mu.Unlock()
	}()
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	for _, o := range start {
		if !send("ADDED", o) {
			return
		}
	}
	if initial {
		if !send("BOOKMARK", bookmark(gvr, rv, true)) {
			return
		}
	}
	emit := func(c change) bool {
		oldIn := matches(c.old, sel, fsel)
		newIn := matches(c.obj, sel, fsel)
		switch {
		case c.obj == nil: // deleted: old holds its last state
			if oldIn {
				return send("DELETED", c.old)
			}
		case oldIn && newIn:
			return send("MODIFIED", c.obj)
		case newIn:
			return send("ADDED", c.obj) // created, or started matching
		case oldIn:
			return send("DELETED", c.obj) // stopped matching: gone from this watch
		}
		return true
	}
	for _, c := range backlog {
		if !emit(c) {
			return
		}
	}
	timeout := 5 * time.Minute
	if t, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil && t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	end := time.NewTimer(timeout)
	defer end.Stop()
	tick := time.NewTicker(bookmarkEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-wt.gone:
			return
		case <-end.C:
			return
		case <-tick.C:
			if bookmarks {
				s.mu.Lock()
				rv := s.rv
				s.mu.Unlock()
				if !send("BOOKMARK", bookmark(gvr, rv, false)) {
					return
				}
			}
		case c := <-wt.ch:
			if !emit(c) {
				return
			}
		}
	}
}

func bookmark(gvr schema.GroupVersionResource, rv int64, initialEnd bool) map[string]any {
	meta := map[string]any{"resourceVersion": strconv.FormatInt(rv, 10)}
	if initialEnd {
		meta["annotations"] = map[string]any{"k8s.io/initial-events-end": "true"}
	}
	return map[string]any{"kind": kindOf(gvr), "apiVersion": gvr.GroupVersion().String(), "metadata": meta}
}

// podProxy forwards pods/NAME[:PORT]/proxy/PATH to the pod's IP.
func (s *Server) podProxy(w http.ResponseWriter, r *http.Request, ns, target, path string) {
	scheme := "http"
	if rest, ok := strings.CutPrefix(target, "https:"); ok {
		scheme, target = "https", rest
	} else if rest, ok := strings.CutPrefix(target, "http:"); ok {
		target = rest
	}
	name, port, _ := strings.Cut(target, ":")
	p := s.Pod(ns, name)
	if p == nil {
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("pods %q not found", name))
		return
	}
	if p.Status.PodIP == "" {
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "pod "+name+" has no IP")
		return
	}
	if port == "" {
		port = "80"
	}
	s.proxyTo(w, r, scheme, s.route(net.JoinHostPort(p.Status.PodIP, port)), path)
}

func (s *Server) proxyTo(w http.ResponseWriter, r *http.Request, scheme, addr, path string) {
	s.Proxied.Add(1)
	u := &url.URL{Scheme: scheme, Host: addr}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.URL.Path = path
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.Out.Header.Del("Authorization") // the API server never passes the client's token on
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "error trying to reach service: "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// portForward serves the port-forward subprotocol over SPDY: streams come
// in pairs (error, data) sharing a requestID, each naming the port.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request, ns, name string) {
	p := s.Pod(ns, name)
	if p == nil {
		status(w, http.StatusNotFound, "NotFound", fmt.Sprintf("pods %q not found", name))
		return
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		status(w, http.StatusBadRequest, "BadRequest", "pod "+name+" is not running")
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
		return // Handshake wrote the error
	}
	s.PortForwards.Add(1)
	streams := make(chan httpstream.Stream, 16)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(st httpstream.Stream, _ <-chan struct{}) error {
		streams <- st
		return nil
	})
	if conn == nil {
		return
	}
	s.mu.Lock()
	s.forwards[conn] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.forwards, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	conn.SetIdleTimeout(10 * time.Minute)
	type pair struct{ data, errs httpstream.Stream }
	pairs := map[string]*pair{}
	for {
		select {
		case <-conn.CloseChan():
			return
		case st := <-streams:
			h := st.Headers()
			id := h.Get(corev1.PortForwardRequestIDHeader)
			pr := pairs[id]
			if pr == nil {
				pr = &pair{}
				pairs[id] = pr
			}
			switch h.Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				pr.errs = st
			case corev1.StreamTypeData:
				pr.data = st
			default:
				st.Reset()
				continue
			}
			if pr.data != nil && pr.errs != nil {
				delete(pairs, id)
				go s.forwardStream(p.Status.PodIP, h.Get(corev1.PortHeader), pr.data, pr.errs)
			}
		}
	}
}

func (s *Server) forwardStream(ip, port string, data, errs httpstream.Stream) {
	s.Streams.Add(1)
	defer errs.Close()
	c, err := net.Dial("tcp", s.route(net.JoinHostPort(ip, port)))
	if err != nil {
		fmt.Fprintf(errs, "error forwarding port %s to pod %s: %v", port, ip, err)
		data.Reset()
		return
	}
	defer c.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(c, data); done <- struct{}{} }()
	go func() { _, _ = io.Copy(data, c); done <- struct{}{} }()
	<-done
	data.Close()
}

// ---------------------------------------------------------------------------
// Protobuf, which client-go asks for first for built-in types (as kubectl)

const mediaProtobuf = "application/vnd.kubernetes.protobuf"

// wantsProtobuf: the client lists protobuf before JSON in Accept.
func wantsProtobuf(r *http.Request) bool {
	a := r.Header.Get("Accept")
	i := strings.Index(a, mediaProtobuf)
	j := strings.Index(a, "application/json")
	return i >= 0 && (j < 0 || i < j)
}

func protoInfo() runtime.SerializerInfo {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaProtobuf)
	return info
}

func protoEncoder() runtime.Encoder {
	return scheme.Codecs.EncoderForVersion(protoInfo().Serializer, corev1.SchemeGroupVersion)
}

// protoObject encodes a watch event's object: a pod (also the bookmark's
// pod with only metadata) or a Status.
func protoObject(obj any) ([]byte, error) {
	m, ok := obj.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("kubetest: %T is not an object", obj)
	}
	var o runtime.Object = &corev1.Pod{}
	if m["kind"] == "Status" {
		o = &metav1.Status{}
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, o); err != nil {
		return nil, err
	}
	return runtime.Encode(protoEncoder(), o)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func statusObj(code int, reason, msg string) map[string]any {
	return map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code}
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(statusObj(code, reason, msg))
}

// UID types a uid for pods built in tests.
func UID(s string) types.UID { return types.UID(s) }
