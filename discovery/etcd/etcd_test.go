package etcd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/natsevents"
	"github.com/kvtop/kvtop/discovery/etcd"
	"github.com/kvtop/kvtop/internal/testproc"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/snapshot"
)

// needEtcd finds Debian's etcd-server binary: CI installs it (.ci/run,
// make test-deps), a developer machine without it skips.
func needEtcd(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("real etcd skipped in -short mode")
	}
	return testproc.Binary(t, "etcd", "etcd-server")
}

// etcdServer is a real etcd on 127.0.0.1, one member, its data in the
// test's temp dir; it can be stopped and started again on the same data
// and ports.
type etcdServer struct {
	t      *testing.T
	bin    string
	dir    string
	client string
	peer   string
	cmd    *exec.Cmd
	done   chan struct{}
}

func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	e := &etcdServer{t: t, bin: needEtcd(t), dir: t.TempDir(),
		client: "http://" + testproc.FreeAddr(t), peer: "http://" + testproc.FreeAddr(t)}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *etcdServer) start() {
	e.t.Helper()
	e.cmd = exec.Command(e.bin, "--name", "kvtop-test", "--data-dir", filepath.Join(e.dir, "data"),
		"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "kvtop-test="+e.peer, "--log-level", "error")
	log, err := os.Create(filepath.Join(e.dir, "log"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.cmd.Stdout, e.cmd.Stderr = log, log
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.done = make(chan struct{})
	go func() { _ = e.cmd.Wait(); log.Close(); close(e.done) }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if r, err := http.Get(e.client + "/health"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(e.dir, "log"))
			e.t.Fatalf("etcd did not start:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *etcdServer) stop() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.done
	}
	e.cmd = nil
}

// call is one request of etcd's JSON gateway.
func (e *etcdServer) call(path string, in any) map[string]any {
	e.t.Helper()
	b, _ := json.Marshal(in)
	r, err := http.Post(e.client+path, "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil || r.StatusCode != http.StatusOK {
		e.t.Fatalf("%s: HTTP %d %v %v", path, r.StatusCode, out, err)
	}
	return out
}

// lease grants a lease (a Dynamo worker's connection lease).
func (e *etcdServer) lease() string {
	return e.call("/v3/lease/grant", map[string]any{"TTL": "600"})["ID"].(string)
}

func (e *etcdServer) put(key, value, lease string) {
	e.call("/v3/kv/put", map[string]any{"key": b64(key), "value": b64(value), "lease": lease})
}

func (e *etcdServer) revoke(lease string) { e.call("/v3/lease/revoke", map[string]any{"ID": lease}) }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// channelKey and channelValue are a KV publisher's registration as
// Dynamo's kv store discovery writes it (kv_store.rs: the bucket, the
// scope's path, the topic, the publisher id in hex; the DiscoveryInstance
// as JSON).
func channelKey(pid uint64) string {
	return fmt.Sprintf("v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv-events/%x", pid)
}

func channelValue(ep string, pid uint64) string {
	return fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"backend","name":"generate"}},`+
		`"topic":"kv-events","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`, pid, ep)
}

type run struct {
	t    *testing.T
	sim  *sim.Sim
	pool *pool.Pool
	mu   sync.Mutex
	errs []*collectors.SourceError
}

func (r *run) publisher(w int) (ep string, pid uint64, name string) {
	eps, ids := r.sim.DynamoPublishers(w)
	return eps[0], ids[0], "worker_" + strconv.FormatUint(r.sim.Endpoints().Workers[w].DynamoID, 10)
}

func (r *run) said(kind string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.errs {
		if e.Kind == kind {
			out = append(out, e.Message)
		}
	}
	return strings.Join(out, "\n")
}

func (r *run) wait(what string, ok func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	r.t.Helper()
	var last *snapshot.Snapshot
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s := r.pool.Latest(); s != nil {
			last = s
			if ok(s) {
				return s
			}
		}
	}
	var b strings.Builder
	if last != nil {
		for _, w := range last.Workers {
			fmt.Fprintf(&b, "  %s %s %q streams %+v\n", w.Name, w.State, w.Reason, w.Streams)
		}
	}
	r.t.Fatalf("timed out waiting for %s:\n%s\nsaid:\n%s\n%s", what, b.String(), r.said("invalid"), r.said("refused"))
	return nil
}

func worker(s *snapshot.Snapshot, name string) *snapshot.Worker {
	for i := range s.Workers {
		if s.Workers[i].Name == name {
			return &s.Workers[i]
		}
	}
	return nil
}

func streaming(w *snapshot.Worker, ep string) bool {
	if w == nil || w.State == snapshot.WorkerLeft || len(w.Streams) != 1 {
		return false
	}
	st := w.Streams[0]
	return st.Endpoint == ep && st.Batches > 0 && st.Gaps == 0 &&
		(st.State == snapshot.StreamLive || st.State == snapshot.StreamJoinedLate)
}

func batches(s *snapshot.Snapshot, name string) uint64 { return worker(s, name).Streams[0].Batches }

// Dynamo's default discovery off Kubernetes, in a real etcd: kvtop reads
// the publishers registered under v1/event_channels, follows one added and
// one whose lease ends (gone, not a gap), says the bad registrations once,
// and lists again when etcd comes back after a restart.
func TestDynamoEventPlaneFromEtcd(t *testing.T) {
	e := startEtcd(t)
	s, err := sim.Start(context.Background(), sim.Options{Workers: 4, Seed: 9, Rate: 16, EventPlane: "dynamo-zmq"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := &run{t: t, sim: s}
	ep0, pid0, w0 := r.publisher(0)
	ep1, pid1, w1 := r.publisher(1)
	ep2, pid2, w2 := r.publisher(2)
	ep3, pid3, w3 := r.publisher(3)
	l0, l1 := e.lease(), e.lease()
	e.put(channelKey(pid0), channelValue(ep0, pid0), l0)
	e.put(channelKey(pid1), channelValue(ep1, pid1), l1)
	e.put(channelKey(1), channelValue("tcp://0.0.0.0:5557", 1), l0)
	e.put(channelKey(2), "{not json", l0)
	e.put("v1/event_channels/namespace/dynamo/component/backend/topic/kv_metrics/3",
		`{"type":"EventChannel","scope":{"kind":"component","namespace":"dynamo","component":"backend"},"topic":"kv_metrics","instance_id":3,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.1:1"}}}`, l1)

	src, err := etcd.New(etcd.Options{Endpoints: []string{"http://127.0.0.1:1", e.client}}) // the first refuses: the next is tried
	if err != nil {
		t.Fatal(err)
	}
	c, err := natsevents.New(natsevents.Options{Discover: src})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	obs := make(chan collectors.Observation, 8192)
	in := make(chan collectors.Observation, 8192)
	r.pool = pool.New(pool.Options{Window: 30 * time.Second, Refresh: pool.MinRefresh})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); r.pool.Run(ctx, in) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case o := <-obs:
				if se, ok := o.(*collectors.SourceError); ok {
					r.mu.Lock()
					r.errs = append(r.errs, se)
					r.mu.Unlock()
				}
				select {
				case in <- o:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	go func() { defer wg.Done(); _ = c.Run(ctx, obs) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	r.wait("both registered publishers read", func(s *snapshot.Snapshot) bool {
		return streaming(worker(s, w0), ep0) && streaming(worker(s, w1), ep1)
	})
	r.wait("the bad registrations said", func(*snapshot.Snapshot) bool { return strings.Count(r.said("invalid"), "\n") == 1 })
	bad := r.said("invalid")
	for _, want := range []string{
		`etcd v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv-events/1: endpoint "tcp://0.0.0.0:5557" is a wildcard address`,
		`/kv-events/2: not JSON`, `(2 bad advertisement(s) so far)`,
	} {
		if !strings.Contains(bad, want) {
			t.Errorf("said:\n%s\nwant %q", bad, want)
		}
	}
	if !strings.Contains(r.said("refused"), "127.0.0.1:1") {
		t.Errorf("the refusing endpoint was not said: %q", r.said("refused"))
	}

	// Registered while kvtop watches: read.
	e.put(channelKey(pid2), channelValue(ep2, pid2), l0)
	r.wait("the new publisher read", func(s *snapshot.Snapshot) bool { return streaming(worker(s, w2), ep2) })

	// Worker 1's lease ends (it died; revoked here rather than waited
	// out): its keys go, its publisher is gone, not a gap.
	e.revoke(l1)
	r.wait("worker 1 gone", func(s *snapshot.Snapshot) bool {
		w := worker(s, w1)
		if w == nil || w.State != snapshot.WorkerLeft || !strings.Contains(w.Reason, "its registration left etcd") || len(w.Streams) != 1 {
			return false
		}
		st := w.Streams[0]
		return st.Gaps == 0 && st.Missing == 0 && st.History[len(st.History)-1].Kind == "gone"
	})

	// etcd restarts: kvtop lists again; what was registered stays read,
	// and what is registered after is read.
	e.stop()
	snap := r.wait("w0 still read with etcd down", func(s *snapshot.Snapshot) bool { return streaming(worker(s, w0), ep0) })
	before := batches(snap, w0)
	e.start()
	e.put(channelKey(pid3), channelValue(ep3, pid3), l0)
	r.wait("the publisher registered after the restart read", func(s *snapshot.Snapshot) bool {
		return streaming(worker(s, w3), ep3) && streaming(worker(s, w0), ep0) && batches(s, w0) > before && streaming(worker(s, w2), ep2)
	})
	if n := strings.Count(r.said("invalid"), "\n"); n != 1 {
		t.Errorf("the bad registrations said again after the relist (%d lines):\n%s", n+1, r.said("invalid"))
	}
}
