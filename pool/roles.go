package pool

import (
	"sort"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Roles (issue 27): a worker is prefill, decode or aggregated, from the
// first source that answers — the config, the pod's labels, Dynamo's
// router (router_worker_registered{worker_type}) — else aggregated.
// Queues and KV use mean different things per role, so the pool sums them
// per role too, and the overheating and skew rules compare workers of one
// role only.

// routerRoles is what the routers' last good scrapes say of each worker's
// role (Dynamo names workers worker_<id>, worker_<id>/dp<r>).
func (s *State) routerRoles() map[*worker]string {
	var out map[*worker]string
	for _, r := range s.routers {
		if r.dyn == nil {
			continue
		}
		for label, t := range r.dyn.Roles {
			role, ok := snapshot.ParseRole(t)
			if !ok {
				continue
			}
			w := s.workerFor(foldRank(label), "")
			if w == nil {
				w = s.workerFor(label, "")
			}
			if w == nil {
				continue
			}
			if out == nil {
				out = map[*worker]string{}
			}
			out[w] = role
		}
	}
	return out
}

// roleOf is w's role and who said so.
func roleOf(w *worker, fromRouter map[*worker]string) (string, string) {
	if r, ok := snapshot.ParseRole(w.cfgRole); ok {
		return r, snapshot.RoleFromConfig
	}
	if k := w.tg.kube; k != nil {
		if r, ok := snapshot.ParseRole(k.Role); ok {
			return r, snapshot.RoleFromKubernetes
		}
	}
	if r, ok := fromRouter[w]; ok {
		return r, snapshot.RoleFromRouter
	}
	return snapshot.RoleAggregated, snapshot.RoleFromDefault
}

// setRole records w's role; its engines keep transferred prompt tokens
// out of their hit rates when it is a decode worker.
func (w *worker) setRole(role, source string) (changed bool) {
	changed = w.role != role
	w.role, w.roleSource = role, source
	decode := role == snapshot.RoleDecode
	for _, e := range w.engines {
		e.decode = decode
	}
	if w.totals != nil {
		w.totals.decode = decode
	}
	return changed
}

// upSum adds up the up workers' rows: queue and running summed, KV use
// weighted by num_gpu_blocks (a plain mean when an engine lacks them).
type upSum struct {
	workers, up     int
	queue, running  sumOpt
	queues          []float64
	kvW, kvB, kvSum float64
	kvN             int
	kvNoBlocks      bool
}

func (u *upSum) add(row *snapshot.Worker) {
	u.workers++
	if !row.Up {
		return
	}
	u.up++
	if row.Queue != nil {
		u.queue.v += *row.Queue
		u.queue.ok = true
		u.queues = append(u.queues, *row.Queue)
	}
	if row.Running != nil {
		u.running.v += *row.Running
		u.running.ok = true
	}
	for _, e := range row.Engines {
		if e.KVUsage == nil {
			continue
		}
		u.kvSum += *e.KVUsage
		u.kvN++
		if e.NumGPUBlocks != nil && *e.NumGPUBlocks > 0 {
			u.kvW += *e.KVUsage * *e.NumGPUBlocks
			u.kvB += *e.NumGPUBlocks
		} else {
			u.kvNoBlocks = true
		}
	}
}

func (u *upSum) kvUsage() *float64 {
	switch {
	case u.kvN == 0:
		return nil
	case u.kvNoBlocks:
		return fraction(u.kvSum / float64(u.kvN))
	}
	return fraction(u.kvW / u.kvB)
}

// buildRoles sums the workers per role, the roles present only; in a
// pool of several the load skew is the worst role's.
func (s *State) buildRoles(snap *snapshot.Snapshot) {
	by := map[string]*upSum{}
	for i, w := range s.workers {
		if w.left() {
			continue
		}
		row := &snap.Workers[i]
		u := by[row.Role]
		if u == nil {
			u = &upSum{}
			by[row.Role] = u
		}
		u.add(row)
	}
	ps := &snap.Pool
	ps.Roles = []snapshot.RoleFigures{}
	var worst *snapshot.RoleFigures
	for _, role := range snapshot.Roles {
		u := by[role]
		if u == nil {
			continue
		}
		f := snapshot.RoleFigures{Role: role, Workers: u.workers, Up: u.up, Queue: u.queue.value(), Running: u.running.value(),
			KVUsage: u.kvUsage(), QueueMedian: snapshot.QueueMedianOf(snap.Workers, role), LoadSkew: loadSkew(u.queues)}
		ps.Roles = append(ps.Roles, f)
	}
	if !ps.Mixed() {
		return
	}
	for i := range ps.Roles {
		f := &ps.Roles[i]
		if m := f.LoadSkew.MaxOverMean; m != nil && (worst == nil || worst.LoadSkew.MaxOverMean == nil || *m > *worst.LoadSkew.MaxOverMean) {
			worst = f
		}
	}
	if worst != nil {
		ps.LoadSkew = worst.LoadSkew
		ps.LoadSkew.Role = worst.Role
	}
}

// pageModel is the model a page's engines name (model_name): the first
// engine's, else the worker totals'.
func pageModel(m *collectors.MetricsScrape) string {
	for i := range m.Engines {
		if m.Engines[i].Model != "" {
			return m.Engines[i].Model
		}
	}
	if m.WorkerTotals != nil {
		return m.WorkerTotals.Model
	}
	return ""
}

// buildModels sums the workers per model they serve, in name order (case
// aside), when
// the pages name at least one (a pool of several models is grouped by
// model: their queues and hit rates are not one pool's).
func (s *State) buildModels(snap *snapshot.Snapshot, now time.Time) {
	by := map[string]*upSum{}
	hits := map[string]*hitSum{}
	var names []string
	from := now.Add(-s.window)
	for i, w := range s.workers {
		row := &snap.Workers[i]
		if w.left() || row.Model == "" {
			continue
		}
		u := by[row.Model]
		if u == nil {
			u, hits[row.Model] = &upSum{}, &hitSum{}
			by[row.Model] = u
			names = append(names, row.Model)
		}
		u.add(row)
		if w.up {
			hits[row.Model].addSum(w.hitSince(from, now), w.name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	snap.Pool.Models = []snapshot.ModelFigures{}
	for _, m := range names {
		u := by[m]
		snap.Pool.Models = append(snap.Pool.Models, snapshot.ModelFigures{Model: m, Workers: u.workers, Up: u.up,
			Queue: u.queue.value(), Running: u.running.value(), KVUsage: u.kvUsage(), HitTokens: hits[m].rate()})
	}
}
