package pool

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Targets that come and go (collectors.TargetChange, from the targets
// layer following Kubernetes):
//
//   - joined: the worker is added (or, if it left a moment ago under the
//     same name, comes back). A join with a new pod UID under a known
//     name is a restart: the old pod's blocks are dropped (its cache is
//     gone), its counters start again, and restarts counts it. A join
//     counts toward pool.churn.joined only for a pod created after
//     kvtop's first listing (KubeInfo.New): the pods found at start are
//     the pool, not churn.
//   - left: its collectors were stopped before this; its blocks leave the
//     index at once (the pod is gone, so is its cache), and its row stays,
//     dimmed, with its last-known figures and state "left", for one
//     window, then it is forgotten.
//   - a pod that is not serving (Pending, CrashLoopBackOff, Evicted, not
//     ready) makes a worker whose scrapes fail, or that has no endpoint
//     yet, "down" with Kubernetes' words first in its reason, instead of
//     "connection refused" or "not scraped yet".

// targetInfo is what the targets layer told about a worker.
type targetInfo struct {
	aliases []string
	kube    *collectors.KubeInfo
	leftAt  time.Time // zero while in the set
	leftWhy string
	// podRestartAt: the pod was replaced (same name, new UID).
	podRestartAt time.Time
}

// churn counts joins, leaves and replacements over the window.
type churn struct {
	joins, leaves *buckets // (count, 0)
}

func (s *State) applyTarget(c *collectors.TargetChange) {
	if c.Role == collectors.RoleRouter {
		if c.Kind != collectors.TargetLeft {
			s.router(c.Name)
		}
		return
	}
	if s.churn.joins == nil {
		s.churn = churn{joins: newBuckets(s.window), leaves: newBuckets(s.window)}
	}
	w := s.workerFor(c.Name, "")
	switch c.Kind {
	case collectors.TargetLeft:
		if w == nil || !w.tg.leftAt.IsZero() {
			return
		}
		w.tg.leftAt, w.tg.leftWhy = c.At, c.Reason
		s.setUp(w, false)
		for _, p := range w.pubs {
			s.clearPublisher(p, c.At)
		}
		s.churn.leaves.add(c.At, 1, 0)
		return
	case collectors.TargetJoined, collectors.TargetUpdated:
	default:
		s.ignore("unknown target change " + truncate(string(c.Kind), 40))
		return
	}
	if w == nil {
		if len(s.workers) >= maxWorkers {
			s.ignore("too many workers: " + truncate(c.Name, 80))
			return
		}
		w = s.addWorker(c.Name, nil, true)
		w.tg.aliases = append([]string(nil), c.Aliases...)
		s.names.add(len(s.workers)-1, "", w.tg.aliases)
		if c.Kind == collectors.TargetJoined && c.Kube != nil && c.Kube.New {
			s.churn.joins.add(c.At, 1, 0)
		}
	} else if !w.tg.leftAt.IsZero() && c.Kind == collectors.TargetJoined {
		// Back under the same name within the window (a StatefulSet pod,
		// or a pod that matches the selector again).
		w.tg.leftAt, w.tg.leftWhy = time.Time{}, ""
		if c.Kube != nil && c.Kube.New {
			s.churn.joins.add(c.At, 1, 0)
		}
	}
	old := w.tg.kube
	if old != nil && c.Kube != nil && old.UID != "" && c.Kube.UID != "" && old.UID != c.Kube.UID {
		s.podReplaced(w, c.At)
	}
	w.noMetrics = c.NoMetrics
	if c.Kube != nil {
		k := *c.Kube
		k.Message = message(k.Message, 200)
		w.tg.kube = &k
	}
	if !sameStrings(w.tg.aliases, c.Aliases) {
		w.tg.aliases = append([]string(nil), c.Aliases...)
		s.reindexNames()
	}
}

// podReplaced handles a pod replaced under the same name: a restart.
func (s *State) podReplaced(w *worker, at time.Time) {
	dropped := 0
	for _, p := range w.pubs {
		dropped += p.idx.t.count
		s.clearPublisher(p, at)
		p.addIncident(collectors.StreamIncident{Kind: "restart", Start: at, End: at,
			Note: fmt.Sprintf("pod replaced (new UID): %s indexed blocks dropped", count(uint64(dropped)))}, s.opt.Limits.Incidents)
	}
	for _, e := range w.engines {
		e.restarted()
	}
	if w.totals != nil {
		w.totals.restarted()
	}
	w.restarts++
	w.restartAt, w.restartDropped, w.restartWhy = at, dropped, restartPod
	w.restartDrops++
	w.tg.podRestartAt = at
	// The new pod has not been scraped: what the old one said is no
	// figure of it.
	w.scraped, w.up, w.lastGood, w.procStart = false, false, time.Time{}, nil
	w.current = w.current[:0]
}

// restartPod is the evidence of a replaced pod.
const restartPod = "pod replaced (same name, new UID)"

// forgetLeft removes the workers that left more than a window ago.
func (s *State) forgetLeft(now time.Time) {
	keep := s.workers[:0]
	gone := false
	for _, w := range s.workers {
		if !w.tg.leftAt.IsZero() && now.Sub(w.tg.leftAt) > s.window {
			s.forgetHashing(w)
			for _, p := range w.pubs {
				s.clearPublisher(p, now)
				delete(s.pubs, pubKey{w, p.rank})
			}
			gone = true
			continue
		}
		keep = append(keep, w)
	}
	if !gone {
		return
	}
	for i := len(keep); i < len(s.workers); i++ {
		s.workers[i] = nil
	}
	s.workers = keep
	s.reindexNames()
}

// reindexNames rebuilds the name and alias maps after workers left or
// changed aliases (a new pod IP).
func (s *State) reindexNames() {
	s.names = newNames()
	for i, w := range s.workers {
		s.names.add(i, w.name, w.aliasesNow())
	}
}

// aliasesNow are the ids the worker answers to: those it was configured
// with and those the targets layer gave it last.
func (w *worker) aliasesNow() []string {
	return append(append([]string(nil), w.aliases...), w.tg.aliases...)
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// left reports whether the worker left the set (its row is last-known).
func (w *worker) left() bool { return !w.tg.leftAt.IsZero() }

// podServing: Kubernetes says the pod can serve (running, ready, nothing
// waiting); true when there is no pod.
func podServing(k *collectors.KubeInfo) bool {
	return k == nil || k.Phase == "Running" && k.Ready && k.Reason == ""
}

// podNote is the pod's state in Kubernetes' words, e.g. "pod
// CrashLoopBackOff, restarts 5, last OOMKilled (exit 137)"; "" for a
// serving pod without restarts.
func podNote(k *collectors.KubeInfo) string {
	if k == nil {
		return ""
	}
	var parts []string
	switch {
	case k.Reason != "":
		r := "pod " + k.Reason
		if k.Message != "" {
			r += " (" + k.Message + ")"
		}
		parts = append(parts, r)
	case k.Phase != "" && k.Phase != "Running":
		parts = append(parts, "pod "+k.Phase)
	case !k.Ready:
		parts = append(parts, "pod not ready")
	}
	if k.Restarts > 0 {
		parts = append(parts, fmt.Sprintf("restarts %d", k.Restarts))
	}
	if t := k.LastTermination; t != nil && t.Reason != "" {
		parts = append(parts, fmt.Sprintf("last %s (exit %d)", t.Reason, t.ExitCode))
	}
	return strings.Join(parts, ", ")
}

// kubeRow is the pod in the snapshot.
func kubeRow(k *collectors.KubeInfo, now time.Time) *snapshot.Kube {
	if k == nil {
		return nil
	}
	out := &snapshot.Kube{
		Pod: k.Pod, Namespace: k.Namespace, UID: k.UID, Node: k.Node, IP: k.IP,
		Phase: k.Phase, Ready: k.Ready, Restarts: k.Restarts, Reason: k.Reason, Message: k.Message,
		New: k.New, Access: k.Access, AccessNote: k.AccessNote,
	}
	if t := k.LastTermination; t != nil {
		out.LastTermination = &snapshot.Termination{Reason: t.Reason, ExitCode: t.ExitCode}
		if !t.At.IsZero() {
			at := t.At
			out.LastTermination.At = &at
		}
	}
	if !k.Started.IsZero() {
		st := k.Started
		out.Started = &st
		age := now.Sub(k.Started).Seconds()
		out.AgeS = &age
	}
	return out
}

func (s *State) buildChurn(now time.Time) snapshot.Churn {
	if s.churn.joins == nil {
		return snapshot.Churn{}
	}
	j, _, _ := s.churn.joins.sum(now, s.window)
	l, _, _ := s.churn.leaves.sum(now, s.window)
	return snapshot.Churn{Joined: int(j), Left: int(l)}
}
