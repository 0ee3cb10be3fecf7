package pool

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// buildLatency fills the latency, throughput and recompute figures of
// every worker, its engines and the pool. Only up workers count toward the
// pool; a worker that is not up says so instead of a figure.
func (s *State) buildLatency(snap *snapshot.Snapshot, now time.Time) {
	var accs [][nLat]latAcc
	var tput tputAcc
	var tiers tierAcc
	for i, w := range s.workers {
		row := &snap.Workers[i]
		row.Recompute = s.workerRecompute(w, now)
		if !w.up {
			why := "not up"
			if !w.scraped {
				why = snapshot.ReasonNotScraped
			}
			for _, l := range latencies(row) {
				*l = snapshot.Latency{Capped: []string{}, Reason: why}
			}
			for j := range row.Engines { // its last-known engines: the same reason
				er := &row.Engines[j]
				for _, l := range [nLat]*snapshot.Latency{&er.TTFTMS, &er.QueueMS, &er.E2EMS, &er.ITLMS} {
					*l = snapshot.Latency{Capped: []string{}, Reason: why}
				}
			}
			continue
		}
		names := w.engineNames()
		lat := w.latency(names, now, s.window)
		setLatency(latencies(row), &lat.worker, nil)
		t := w.throughput(names, now, s.window)
		row.TokensPerS, row.RequestsPerS = t.figures()
		ct := w.cacheTiers(names, now, s.window)
		row.CacheTiers = ct.figures()
		tiers.merge(&ct)
		for j := range row.Engines {
			er := &row.Engines[j]
			k := slices.Index(names, er.Engine)
			if k < 0 {
				continue
			}
			dst := [nLat]*snapshot.Latency{&er.TTFTMS, &er.QueueMS, &er.E2EMS, &er.ITLMS}
			if lat.engines == nil {
				// One engine: the worker's figures are its own.
				for i, l := range latencies(row) {
					*dst[i] = *l
					dst[i].Capped = slices.Clone(l.Capped)
				}
			} else {
				setLatency(dst, &lat.engines[k], &lat.whole)
			}
			var et tputAcc
			et.addEngine(w.engines[names[k]], now, s.window)
			er.TokensPerS, er.RequestsPerS = et.figures()
		}
		accs = append(accs, lat.worker)
		tput.merge(t)
	}
	p := &snap.Pool
	l := poolLatency(accs)
	p.TTFTMS, p.QueueMS, p.E2EMS, p.ITLMS = l[latTTFT], l[latQueue], l[latE2E], l[latITL]
	p.TokensPerS, p.RequestsPerS = tput.figures()
	p.CacheTiers = tiers.figures()
	p.Recompute = s.poolRecompute(now)
}

// latencies are a row's four latency figures, in the order of the kinds.
func latencies(row *snapshot.Worker) [nLat]*snapshot.Latency {
	return [nLat]*snapshot.Latency{&row.TTFTMS, &row.QueueMS, &row.E2EMS, &row.ITLMS}
}

// latencySeries are a worker's latency and throughput figures over the
// window, one point per refresh while known.
type latencySeries struct {
	ttft50, ttft95, ttft99, itl95, queue95, tokens, recomp series
}

// poolLatencySeries are the pool's.
type poolLatencySeries struct {
	ttft95, tokens series
}

// sumTokens is prompt + generation tokens per second, nil when neither is
// known.
func sumTokens(t snapshot.Tokens) *float64 {
	switch {
	case t.Prompt == nil && t.Generation == nil:
		return nil
	case t.Prompt == nil:
		return cp(t.Generation)
	case t.Generation == nil:
		return cp(t.Prompt)
	}
	return fp(*t.Prompt + *t.Generation)
}

// appendLatencySeries adds this refresh's points and copies the series
// into the snapshot, one allocation per worker.
func (s *State) appendLatencySeries(snap *snapshot.Snapshot, now time.Time) {
	w := s.window
	for i, wk := range s.workers {
		row := &snap.Workers[i]
		ls := &wk.lseries
		ls.ttft50.addIf(now, row.TTFTMS.P50, w)
		ls.ttft95.addIf(now, row.TTFTMS.P95, w)
		ls.ttft99.addIf(now, row.TTFTMS.P99, w)
		ls.itl95.addIf(now, row.ITLMS.P95, w)
		ls.queue95.addIf(now, row.QueueMS.P95, w)
		ls.tokens.addIf(now, sumTokens(row.TokensPerS), w)
		ls.recomp.addIf(now, row.Recompute.TokensPerS, w)
		rs := &row.Series
		copySeries([]*[]snapshot.Point{&rs.TTFTP50MS, &rs.TTFTP95MS, &rs.TTFTP99MS, &rs.ITLP95MS, &rs.QueueP95MS, &rs.TokensPerS, &rs.RecomputeTokensPerS},
			[]*series{&ls.ttft50, &ls.ttft95, &ls.ttft99, &ls.itl95, &ls.queue95, &ls.tokens, &ls.recomp})
	}
	ps := &s.lpool
	ps.ttft95.addIf(now, snap.Pool.TTFTMS.P95, w)
	ps.tokens.addIf(now, sumTokens(snap.Pool.TokensPerS), w)
	copySeries([]*[]snapshot.Point{&snap.Pool.Series.TTFTP95MS, &snap.Pool.Series.TokensPerS}, []*series{&ps.ttft95, &ps.tokens})
}

// copySeries gives each snapshot series its pool series (shared, see
// series.points).
func copySeries(dst []*[]snapshot.Point, src []*series) {
	for i, x := range src {
		*dst[i] = x.points()
	}
}

// ttftVersus is the overheating alert's latency clause: the workers' TTFT
// p95 against the pool's, "" unless both are known.
func ttftVersus(snap *snapshot.Snapshot, workers []string) string {
	pool := snap.Pool.TTFTMS.P95
	if pool == nil {
		return ""
	}
	var vs []string
	for _, name := range workers {
		for i := range snap.Workers {
			if r := &snap.Workers[i]; r.Name == name && r.TTFTMS.P95 != nil {
				vs = append(vs, msText(*r.TTFTMS.P95, capped(r.TTFTMS, "p95")))
			}
		}
	}
	if len(vs) == 0 {
		return ""
	}
	return fmt.Sprintf("; TTFT p95 %s vs pool %s", strings.Join(vs, ", "), msText(*pool, capped(snap.Pool.TTFTMS, "p95")))
}

func capped(l snapshot.Latency, q string) bool {
	for _, c := range l.Capped {
		if c == q {
			return true
		}
	}
	return false
}

// msText prints milliseconds for an alert: "340 ms", "2.1 s"; "≥" when
// the value is a floor (its rank fell in +Inf).
func msText(v float64, floor bool) string {
	p := ""
	if floor {
		p = "≥"
	}
	switch {
	case v >= 10000:
		return fmt.Sprintf("%s%.0f s", p, v/1000)
	case v >= 1000:
		return fmt.Sprintf("%s%.1f s", p, v/1000)
	case v >= 10:
		return fmt.Sprintf("%s%.0f ms", p, v)
	}
	return fmt.Sprintf("%s%.1f ms", p, v)
}
