package pool

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

func joined(name string, t time.Time, k *collectors.KubeInfo, aliases ...string) *collectors.TargetChange {
	return &collectors.TargetChange{Name: name, Kind: collectors.TargetJoined, Kube: k, Aliases: aliases, At: t}
}

func podInfo(uid string, isNew bool) *collectors.KubeInfo {
	return &collectors.KubeInfo{Pod: "p", UID: uid, Node: "gpu-1", Phase: "Running", Ready: true, New: isNew, Access: "direct"}
}

// A pod that leaves keeps its row, dim as "left", with its last-known
// figures, for one window; its blocks leave the index at once; the pool
// counts it out of workers and up, and in churn; after the window the
// row is gone and its aliases free.
func TestLeftWorkerStaysOneWindow(t *testing.T) {
	s := NewState(Options{Window: time.Minute})
	s.Apply(joined("vllm-0", at(0), podInfo("u0", false), "10.0.0.5:8000"))
	s.Apply(joined("vllm-1", at(0), podInfo("u1", true), "10.0.0.6:8000"))
	s.Apply(scrape("vllm-0", at(1), counters("", 3, 100, 50)))
	s.Apply(scrape("vllm-1", at(1), counters("", 1, 100, 50)))
	s.Apply(batch("vllm-0", 0, 0, at(1), stored(0, false, 11, 12)))
	snap := s.Snapshot(at(2))
	if snap.Pool.Workers != 2 || snap.Pool.Up != 2 || snap.Pool.Churn.Joined != 1 || *snap.Pool.Blocks != 2 {
		t.Fatalf("before: workers %d up %d churn %+v", snap.Pool.Workers, snap.Pool.Up, snap.Pool.Churn)
	}

	s.Apply(&collectors.TargetChange{Name: "vllm-0", Kind: collectors.TargetLeft, Reason: "pod deleted", At: at(3)})
	snap = s.Snapshot(at(4))
	w := row(t, snap, "vllm-0")
	if w.State != snapshot.WorkerLeft || w.LeftAt == nil || !strings.HasPrefix(w.Reason, "left 14:00:03: pod deleted") || w.Up ||
		len(w.Engines) != 1 || !w.Engines[0].LastKnown {
		t.Fatalf("left row: %+v", w)
	}
	if snap.Pool.Workers != 1 || snap.Pool.Up != 1 || snap.Pool.Churn.Left != 1 || *snap.Pool.Queue != 1 || *snap.Pool.Blocks != 0 {
		t.Fatalf("pool after the leave: workers %d up %d churn %+v queue %v blocks %v", snap.Pool.Workers, snap.Pool.Up,
			snap.Pool.Churn, show(snap.Pool.Queue), *snap.Pool.Blocks)
	}
	for _, a := range snap.Alerts {
		if a.Subject == "vllm-0" {
			t.Errorf("a worker that left raises no alert: %+v", a)
		}
	}

	snap = s.Snapshot(at(64)) // a window after it left
	for _, w := range snap.Workers {
		if w.Name == "vllm-0" {
			t.Fatalf("the left row outlived its window")
		}
	}
	if snap.Pool.Churn.Left != 0 || len(snap.Workers) != 1 {
		t.Fatalf("churn after the window: %+v, %d rows", snap.Pool.Churn, len(snap.Workers))
	}
	// Its alias is free: a new pod on the same IP:port gets the router's label.
	s.Apply(joined("vllm-2", at(65), podInfo("u2", true), "10.0.0.5:8000"))
	if i := s.names.lookup("http://10.0.0.5:8000"); i < 0 || s.workers[i].name != "vllm-2" {
		t.Fatalf("the alias of a forgotten worker did not pass on")
	}
}

// The same name with a new UID is a restart of the worker: its old
// blocks dropped, restarts counted, and it is not scraped yet.
func TestReplacedPodIsARestart(t *testing.T) {
	s := NewState(Options{Window: time.Minute})
	s.Apply(joined("vllm-0", at(0), podInfo("u0", false)))
	s.Apply(scrape("vllm-0", at(1), counters("", 3, 100, 50)))
	s.Apply(batch("vllm-0", 0, 0, at(1), stored(0, false, 11, 12, 13)))
	s.Apply(joined("vllm-0", at(5), podInfo("u0-b", true)))
	snap := s.Snapshot(at(6))
	w := row(t, snap, "vllm-0")
	if w.Restarts != 1 || *w.Blocks != 0 || w.Kube.UID != "u0-b" || !strings.Contains(w.Reason, "restarted 14:00:05") || w.Up {
		t.Fatalf("replaced pod: %+v", w)
	}
	found := false
	for _, in := range w.Streams[0].History {
		found = found || in.Kind == "restart" && strings.Contains(in.Note, "pod replaced (new UID): 3 indexed blocks dropped")
	}
	if !found {
		t.Errorf("no restart incident on the stream: %+v", w.Streams[0].History)
	}
}

// A pod that is not serving makes its worker down in Kubernetes' words,
// even before any scrape (a Pending pod has no IP to scrape).
func TestPodNotServingIsDownWithItsReason(t *testing.T) {
	s := NewState(Options{Window: time.Minute})
	k := podInfo("u0", false)
	k.Phase, k.Ready, k.Reason, k.Message = "Pending", false, "Unschedulable", "0/3 nodes are available"
	s.Apply(&collectors.TargetChange{Name: "vllm-0", Kind: collectors.TargetJoined, Kube: k, NoMetrics: true, At: at(0)})
	c := podInfo("u1", false)
	c.Ready, c.Reason, c.Restarts = false, "CrashLoopBackOff", 4
	c.LastTermination = &collectors.Termination{Reason: "OOMKilled", ExitCode: 137}
	s.Apply(joined("vllm-1", at(0), c))
	s.Apply(failedScrape("vllm-1", at(1), "connection refused"))
	snap := s.Snapshot(at(2))
	p, cr := row(t, snap, "vllm-0"), row(t, snap, "vllm-1")
	if p.State != snapshot.WorkerDown || p.Reason != "down: pod Unschedulable (0/3 nodes are available)" {
		t.Errorf("pending: %s %q", p.State, p.Reason)
	}
	if cr.State != snapshot.WorkerDown || cr.Reason != "down: pod CrashLoopBackOff, restarts 4, last OOMKilled (exit 137); scrape: connection refused" {
		t.Errorf("crashloop: %s %q", cr.State, cr.Reason)
	}
	if cr.Kube.LastTermination == nil || cr.Kube.LastTermination.ExitCode != 137 || cr.Kube.Reason != "CrashLoopBackOff" {
		t.Errorf("kube: %+v", cr.Kube)
	}
}

// TestKubeJSONKeysOfARunningPod: the README lists message and access_note
// among workers[].kube's keys: there, "", for a running pod with nothing
// to say.
func TestKubeJSONKeysOfARunningPod(t *testing.T) {
	s := NewState(Options{Window: time.Minute})
	s.Apply(joined("vllm-0", at(0), podInfo("u0", false)))
	b, err := json.Marshal(row(t, s.Snapshot(at(1)), "vllm-0").Kube)
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := json.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"reason", "message", "access", "access_note"} {
		if v, ok := k[key]; !ok || v == nil {
			t.Errorf("workers[].kube.%s = %v (there: %v), want a string", key, v, ok)
		}
	}
}

// BenchmarkTargets1000 is the pool's part of discovering 1 000 pods (1 000
// joins and a snapshot) and of a churn of 100 (50 leaves, 50 joins, a
// snapshot).
func BenchmarkTargets1000(b *testing.B) {
	changes := func(from, n int, kind collectors.TargetChangeKind, t time.Time) []*collectors.TargetChange {
		out := make([]*collectors.TargetChange, n)
		for i := range out {
			name := "vllm-" + strconv.Itoa(from+i)
			out[i] = &collectors.TargetChange{Name: name, Kind: kind, At: t,
				Aliases: []string{"10.1." + strconv.Itoa((from+i)/250) + "." + strconv.Itoa((from+i)%250), "10.1.0.1:8000"},
				Kube:    &collectors.KubeInfo{Pod: name, UID: "u" + name, Node: "gpu-" + strconv.Itoa(i%16), Phase: "Running", Ready: true}}
		}
		return out
	}
	joins := changes(0, 1000, collectors.TargetJoined, at(0))
	leaves := changes(0, 50, collectors.TargetLeft, at(1))
	news := changes(1000, 50, collectors.TargetJoined, at(1))
	b.Run("discover", func(b *testing.B) {
		for b.Loop() {
			s := NewState(Options{Window: time.Minute})
			for _, c := range joins {
				s.Apply(c)
			}
			if s.Snapshot(at(0.5)).Pool.Workers != 1000 {
				b.Fatal("not 1000")
			}
		}
	})
	b.Run("churn100", func(b *testing.B) {
		s := NewState(Options{Window: time.Minute})
		for _, c := range joins {
			s.Apply(c)
		}
		s.Snapshot(at(0.5))
		for b.Loop() {
			for _, c := range leaves {
				s.Apply(c)
			}
			for _, c := range news {
				s.Apply(c)
			}
			s.Snapshot(at(1.5))
			b.StopTimer()
			for _, c := range news { // back to the 1 000 of the start
				s.Apply(&collectors.TargetChange{Name: c.Name, Kind: collectors.TargetLeft, At: at(1)})
			}
			for _, c := range joins[:50] {
				s.Apply(c)
			}
			b.StartTimer()
		}
	})
}
