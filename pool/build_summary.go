package pool

import (
	"fmt"
	"math"
	"time"
)

// buildPool sums the up workers into the pool summary: queue, running, KV
// use weighted by num_gpu_blocks, the windowed hit rates and load skew.
func (s *State) buildPool(snap *Snapshot, now time.Time) {
	ps := &snap.Pool
	ps.Name = s.opt.Name
	ps.Workers = len(s.workers)
	ps.Blocks = s.index.distinct()
	ps.IndexComplete = true
	var queue, running sumOpt
	var queues []float64
	var kvW, kvB, kvSum float64
	kvN, kvNoBlocks := 0, false
	for i, w := range s.workers {
		row := &snap.Workers[i]
		if !row.IndexComplete {
			ps.IndexComplete = false
		}
		if !w.up {
			continue
		}
		ps.Up++
		if row.Queue != nil {
			queue.v += *row.Queue
			queue.ok = true
			queues = append(queues, *row.Queue)
		}
		if row.Running != nil {
			running.v += *row.Running
			running.ok = true
		}
		for _, e := range row.Engines {
			if e.KVUsage == nil {
				continue
			}
			kvSum += *e.KVUsage
			kvN++
			if e.NumGPUBlocks != nil && *e.NumGPUBlocks > 0 {
				kvW += *e.KVUsage * *e.NumGPUBlocks
				kvB += *e.NumGPUBlocks
			} else {
				kvNoBlocks = true
			}
		}
	}
	ps.Queue, ps.Running = queue.value(), running.value()
	switch {
	case kvN == 0:
	case kvNoBlocks:
		ps.KVUsage = fp(kvSum / float64(kvN))
	default:
		ps.KVUsage = fp(kvW / kvB)
	}
	h := s.poolHitSince(now.Add(-s.window), now)
	ps.PrefixHitRate.Tokens = h.rate()
	ps.PrefixHitRate.CoveredS = h.covered.Seconds()
	if hits, n, _ := s.outcomes.sum(now, s.window); n > 0 {
		ps.PrefixHitRate.Requests = fp(hits / n)
	}
	ps.LoadSkew = loadSkew(queues)
}

// overheat is one worker overheating on one prefix (for the alert).
type overheat struct {
	worker string
	prefix Prefix
	share  float64
	queue  float64
	median float64
}

// buildPrefixes fills the hot prefixes, marks overheating workers and
// returns what overheats.
func (s *State) buildPrefixes(snap *Snapshot, now time.Time) []overheat {
	// Decisions that name a prefix are the better source while they come
	// (about one within the window); else estimate from events.
	pc, src := s.decPrefix, "decisions"
	if pc.decayedNamed(now) < minPrefixRequests {
		pc, src = s.evPrefix, "events"
	}
	top := pc.top(now, s.opt.Limits.Prefixes)
	keys := make([]uint64, 0, len(top))
	memo := map[uint64]depthInfo{}
	for _, t := range top {
		keys = append(keys, t.key)
		d := s.index.depth(t.key, memo)
		p := Prefix{
			ID:       t.id,
			Tokens:   d.blocks * s.blockSize,
			Share:    t.share,
			Replicas: s.index.replicas(t.key),
			Workers:  map[string]float64{},
			Source:   src,
			Requests: t.n,
			Orphan:   d.orphan || d.blocks == 0,
		}
		if p.ID == "" {
			p.ID = fmt.Sprintf("%016x", hashOf(t.key))
		}
		for _, wc := range t.workers {
			if wc.w != nil && t.n > 0 {
				p.Workers[wc.w.name] += wc.n / t.n
			}
		}
		snap.Prefixes = append(snap.Prefixes, p)
	}
	s.hot.set(keys)

	// Worker rows by name, the pool median queue, and the rule.
	rowOf := make(map[*worker]*Worker, len(s.workers))
	var queues []float64
	for i, w := range s.workers {
		rowOf[w] = &snap.Workers[i]
		if w.up && snap.Workers[i].Queue != nil {
			queues = append(queues, *snap.Workers[i].Queue)
		}
	}
	med := median(queues)
	th := s.opt.Thresholds
	var hot []overheat
	for i, t := range top {
		p := &snap.Prefixes[i]
		for _, wc := range t.workers {
			if wc.w == nil || t.n <= 0 {
				continue
			}
			row := rowOf[wc.w]
			share := wc.n / t.n
			if p.Overheating != nil || p.Share < th.HotPrefixShare || share < th.OverheatShare ||
				med == nil || row.Queue == nil || !row.Up {
				continue
			}
			q := *row.Queue
			if q >= th.OverheatQueueRatio**med && q >= th.OverheatMinQueue {
				name := wc.w.name
				p.Overheating = &name
				if !row.Overheating {
					row.Overheating = true
					row.HotShare = &share
				}
				hot = append(hot, overheat{worker: name, prefix: *p, share: share, queue: q, median: *med})
			}
		}
	}
	// The hot prefixes each worker holds now, with its share of their traffic.
	for i, t := range top {
		p := &snap.Prefixes[i]
		for j, w := range s.workers {
			if w.idx.holds(t.key) {
				row := &snap.Workers[j]
				row.TopPrefixes = append(row.TopPrefixes, WorkerPrefix{ID: p.ID, Tokens: p.Tokens, Share: p.Workers[w.name]})
			}
		}
	}
	// HotShare of the others: their share of the hottest prefix.
	if len(top) > 0 {
		for i, w := range s.workers {
			row := &snap.Workers[i]
			if row.HotShare != nil {
				continue
			}
			v := 0.0
			for _, wc := range top[0].workers {
				if wc.w == w && top[0].n > 0 {
					v = wc.n / top[0].n
				}
			}
			row.HotShare = &v
		}
	}
	return hot
}

// buildStates sets each worker's one-word state, most important first.
func (s *State) buildStates(snap *Snapshot) {
	th := s.opt.Thresholds
	for i, w := range s.workers {
		row := &snap.Workers[i]
		switch {
		case w.scraped && !w.up:
			row.State = "down"
		case row.Overheating:
			row.State = "overheating"
		case !row.IndexComplete:
			row.State = "stale"
		case !w.scraped:
			row.State = "unknown"
		case row.KVUsage != nil && *row.KVUsage >= th.KVUsageHigh:
			row.State = "saturated"
		default:
			row.State = "ok"
		}
	}
}

// buildRouters fills router rows (advancing their recovery) and each
// worker's share of routed requests over the window.
func (s *State) buildRouters(snap *Snapshot, now time.Time) {
	perWorker := map[string]float64{}
	var all float64
	for _, r := range s.routers {
		row := Router{
			Name:        r.name,
			Profile:     r.profile,
			Up:          r.up,
			Restarts:    r.restarts,
			Recovery:    s.recovery(r, now),
			RoutedShare: map[string]float64{},
		}
		if r.scraped && !r.up {
			msg := r.errMsg
			row.Error = &msg
		}
		if !r.lastRestart.IsZero() {
			t := r.lastRestart
			row.LastRestart = &t
		}
		per, total, cov := s.routed(r, now)
		if total > 0 && !math.IsInf(total, 0) {
			for k, v := range per {
				row.RoutedShare[k] = v / total
				perWorker[k] += v
			}
			all += total
		}
		if d, c, ok := r.requests.delta(now, s.window); ok && c > 0 {
			row.RequestsPerS = fp(d / c.Seconds())
		} else if cov > 0 {
			row.RequestsPerS = fp(total / cov.Seconds())
		}
		snap.Routers = append(snap.Routers, row)
	}
	if all <= 0 || math.IsInf(all, 0) {
		return
	}
	for i := range snap.Workers {
		snap.Workers[i].RoutedShare = fp(perWorker[snap.Workers[i].Name] / all)
	}
}
