package pool

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/figures"
	"github.com/kvtop/kvtop/snapshot"
)

// Windowed latency quantiles from the engines' classic histograms, as
// PromQL's histogram_quantile(q, rate(h_bucket[window])) computes them:
//
//   - Each scrape's bucket counts minus the previous scrape's are the
//     increase since then. A decrease of the count (or of any bucket) is a
//     counter reset, and the new cumulative counts are the increase (the
//     process counted them since it restarted), as counterWindow does for
//     counters. A process restart seen otherwise (process_start_time)
//     counts the next scrape whole too. A histogram that first appears
//     after a successful scrape without it (engines create them at the
//     first observation) counts from zero, as a counter does; one on
//     kvtop's first page is a baseline.
//   - The increases are summed in time slots over the window (memory
//     follows the window, not uptime, and only slots that saw requests
//     hold buckets). A step longer than the window (a scrape after a long
//     gap, without a reset) is not put into it: those requests were
//     served before the window began.
//   - The quantile interpolates linearly inside the bucket its rank falls
//     in (from 0 for the first bucket, when its bound is above 0). A rank
//     in +Inf gives the highest finite bound, marked capped: it is a floor.
//   - Several engines (a worker) or workers (the pool) sum their bucket
//     increases, never their quantiles. Different bucket layouts are
//     merged on the bounds they all have, which coarsens the result; the
//     figure says so.

// Latency kinds, in the order of engine.lat.
const (
	latTTFT = iota
	latQueue
	latE2E
	latITL
	nLat
)

// latNames name the histograms for reasons ("no TTFT histogram").
var latNames = [nLat]string{"TTFT", "queue time", "e2e", "ITL"}

// latFields are the snapshot words of the histograms (collectors' notes).
var latFields = [nLat]string{"ttft", "queue_time", "e2e", "itl"}

func latOf(em *collectors.EngineMetrics) [nLat]*collectors.Histogram {
	return [nLat]*collectors.Histogram{em.TTFT, em.QueueTime, em.E2E, em.ITL}
}

// histWindow is one histogram's bucket increases over the window.
type histWindow struct {
	bounds []float64 // finite upper bounds of the layout in force, ascending
	last   []float64 // last cumulative counts, len(bounds)+1 (+Inf last)
	lastT  int64     // unix nanos of the last sample
	has    bool
	// fresh makes the next sample count whole: the process restarted.
	fresh bool
	// absent is the latest successful scrape that lacked the histogram
	// (unix nanos; 0 while it is present), as counterWindow.absent: an
	// engine that creates its histograms at the first observation
	// (llm-d-inference-sim, vLLM's labelled series) shows them with
	// those first requests already counted, so one that appears on a
	// target kvtop has scraped before counts from zero, not as a baseline.
	absent int64
	// samples counts the samples of the current layout (1 = a baseline
	// only: no increase known yet).
	samples int
	first   int64 // first sample of the current layout, for coverage

	width int64      // slot width, nanos
	slots []histSlot // ring of bucketsPerWindow+1
	sum   []float64  // Σ inc of the slots whose inSum is set
	dirty []float64  // scratch for one sample's counts
	// retired: every slot up to this epoch has left the running sum;
	// newest is the latest epoch holding increases.
	retired, newest int64
}

type histSlot struct {
	epoch int64
	inc   []float64 // cumulative increases in this slot; nil: none yet
	inSum bool      // inc is in the running sum (cleared once it left the window)
}

// observe records one scrape's histogram at t (nil: not on the page of a
// successful scrape; a histogram the collector rejected is not observed at
// all). window sets the slot width.
func (h *histWindow) observe(t time.Time, x *collectors.Histogram, window time.Duration) {
	ns := t.UnixNano()
	if h.has && ns < h.lastT {
		return // out of order: ignore rather than invent a reset
	}
	if x == nil {
		h.absent = ns
		return
	}
	if len(x.Buckets) == 0 {
		return
	}
	// A scrape lacked it since the last sample (or ever): it stood at 0
	// there, so all of its counts are the increase since. Only a
	// histogram present at kvtop's first scrape is a baseline.
	from := h.absent
	h.absent = 0
	n := len(x.Buckets)
	finite := n
	if math.IsInf(x.Buckets[n-1].UpperBound, 1) {
		finite = n - 1
	}
	if !h.sameLayout(x.Buckets[:finite]) || h.width == 0 {
		h.start(x.Buckets[:finite], ns, window)
	}
	cur := h.dirty[:0]
	for i := 0; i < finite; i++ {
		cur = append(cur, x.Buckets[i].Count)
	}
	cur = append(cur, x.Count) // +Inf is the count
	h.dirty = cur
	if !h.has && from == 0 {
		h.copyLast(cur, ns)
		return
	}
	if !h.has {
		// First seen after a scrape without it: its baseline is zero at
		// that scrape (coverage starts there, as a counter's fromZero).
		h.last = append(h.last[:0], make([]float64, len(cur))...)
		h.lastT, h.has, h.first = from, true, min(h.first, from)
		h.samples++
	}
	reset := h.fresh || from != 0 || cur[len(cur)-1] < h.last[len(h.last)-1]
	for i := 0; !reset && i < len(cur); i++ {
		reset = cur[i] < h.last[i]
	}
	// The increase: the new counts after a reset, else the difference; a
	// step that began before the window is not in it (unless a reset:
	// the new process counted all of it lately).
	if reset || ns-h.lastT <= int64(window) {
		inc := cur
		if !reset {
			for i := range inc {
				inc[i] -= h.last[i]
			}
		}
		if inc[len(inc)-1] > 0 {
			h.add(ns, inc)
		}
		// Restore the raw counts as the next baseline.
		if !reset {
			for i := range inc {
				inc[i] += h.last[i]
			}
		}
	}
	h.copyLast(cur, ns)
}

func (h *histWindow) copyLast(cur []float64, ns int64) {
	h.last = append(h.last[:0], cur...)
	h.lastT, h.has, h.fresh = ns, true, false
	h.samples++
}

func (h *histWindow) sameLayout(b []collectors.Bucket) bool {
	if len(b) != len(h.bounds) {
		return false
	}
	for i := range b {
		if b[i].UpperBound != h.bounds[i] {
			return false
		}
	}
	return true
}

// start begins a new layout: what was counted in another cannot be added.
func (h *histWindow) start(b []collectors.Bucket, ns int64, window time.Duration) {
	h.bounds = h.bounds[:0]
	for _, x := range b {
		h.bounds = append(h.bounds, x.UpperBound)
	}
	h.width = max(int64(window)/bucketsPerWindow, 1)
	if h.slots == nil {
		h.slots = make([]histSlot, bucketsPerWindow+1)
	}
	for i := range h.slots {
		h.slots[i].inSum = false // their inc slices are reused
		h.slots[i].epoch = -1
	}
	h.sum = make([]float64, len(h.bounds)+1)
	h.has, h.samples, h.first = false, 0, ns
	h.retired, h.newest = math.MinInt64/2, math.MinInt64/2
}

// add puts one sample's increases into the slot of ns.
func (h *histWindow) add(ns int64, inc []float64) {
	e := ns / h.width
	if e <= h.retired {
		return // a late scrape: its slot has already left the window
	}
	h.newest = max(h.newest, e)
	s := &h.slots[int(uint64(e)%uint64(len(h.slots)))]
	switch {
	case s.epoch == e && s.inc != nil:
		if !s.inSum {
			return // a late scrape: its slot has already left the window
		}
	default:
		h.retire(s)
		s.epoch = e
		if s.inc == nil || len(s.inc) != len(inc) {
			s.inc = make([]float64, len(inc))
		} else {
			clear(s.inc)
		}
		s.inSum = true
	}
	for i, v := range inc {
		s.inc[i] += v
		h.sum[i] += v
	}
}

// retire takes a slot's increases out of the running sum.
func (h *histWindow) retire(s *histSlot) {
	if !s.inSum {
		return
	}
	for i, v := range s.inc {
		h.sum[i] -= v
	}
	s.inSum = false
}

// restarted makes the next sample count whole.
func (h *histWindow) restarted() {
	if h.has {
		h.fresh = true
	}
}

// window returns the cumulative increases over the window ending at now
// (shared: read before the next observe) and the time it covers. ok is
// false while no layout is known.
func (h *histWindow) window(now time.Time, w time.Duration) (inc []float64, covered time.Duration, ok bool) {
	if h.width == 0 {
		return nil, 0, false
	}
	ns := now.UnixNano()
	lo, hi := (ns-int64(w))/h.width, ns/h.width
	// Slots leave the sum as the window passes them: only those since
	// the last call are looked at (one a second at a 1 s scrape).
	if lo > h.retired {
		n := int64(len(h.slots))
		for e := max(h.retired+1, lo-n+1); e <= lo; e++ {
			if s := &h.slots[int(uint64(e)%uint64(n))]; s.inSum && s.epoch <= lo {
				h.retire(s)
			}
		}
		h.retired = lo
	}
	inc = h.sum
	if h.newest > hi { // a snapshot older than the last sample (tests): sum what is in it
		inc = make([]float64, len(h.sum))
		for _, s := range h.slots {
			if s.inSum && s.epoch > lo && s.epoch <= hi {
				for i, v := range s.inc {
					inc[i] += v
				}
			}
		}
	}
	covered = min(time.Duration(ns-h.first), w)
	return inc, max(covered, 0), true
}

// ---------------------------------------------------------------------------
// Quantiles

// latPart is one histogram's window: its layout and increases.
type latPart struct {
	bounds []float64
	inc    []float64
}

// latAcc sums the windows of several histograms of one kind: those of
// the first layout as they come (the first borrowed, not copied: a worker
// of one engine costs nothing), others kept apart for mergeParts.
type latAcc struct {
	first  latPart // the first layout's sum; inc is borrowed until owned
	owned  bool
	others []latPart // parts in other layouts
	// seen: some part had a layout (a histogram was on a page).
	seen    bool
	covered time.Duration
	// increase: some part has two scrapes or more (an increase is known).
	increase bool
}

func (a *latAcc) add(h *histWindow, now time.Time, w time.Duration) {
	inc, cov, ok := h.window(now, w)
	if !ok {
		return
	}
	a.addPart(latPart{bounds: h.bounds, inc: inc})
	a.increase = a.increase || h.samples >= 2
	a.covered = max(a.covered, cov)
}

func (a *latAcc) addPart(p latPart) {
	switch {
	case !a.seen:
		a.first, a.owned, a.seen = p, false, true
	case slices.Equal(p.bounds, a.first.bounds):
		if !a.owned {
			a.first.inc, a.owned = slices.Clone(a.first.inc), true
		}
		for i, v := range p.inc {
			a.first.inc[i] += v
		}
	default:
		a.others = append(a.others, p)
	}
}

func (a *latAcc) merge(o *latAcc) {
	if !o.seen {
		return
	}
	a.addPart(o.first)
	for _, p := range o.others {
		a.addPart(p)
	}
	a.covered = max(a.covered, o.covered)
	a.increase = a.increase || o.increase
}

var quantiles = [...]struct {
	q    float64
	name string
}{{0.50, "p50"}, {0.95, "p95"}, {0.99, "p99"}}

// latency computes the figure. missing is the reason when no part had a
// histogram at all.
func (a *latAcc) latency(missing string) snapshot.Latency {
	out := snapshot.Latency{Capped: []string{}, CoveredS: a.covered.Seconds()}
	if !a.seen {
		out.Reason = missing
		return out
	}
	bounds, inc, merged := a.first.bounds, a.first.inc, ""
	if len(a.others) > 0 {
		bounds, inc, merged = mergeParts(append([]latPart{a.first}, a.others...))
	}
	out.Merged = merged
	total := inc[len(inc)-1]
	if !a.increase {
		out.Reason = "one scrape so far: no increase yet"
		return out
	}
	if math.IsInf(total, 0) || math.IsNaN(total) {
		// Counts near float64's top summed across workers or windows:
		// not a count anyone can use, and JSON has no Inf.
		out.Reason = "the bucket counts overflowed"
		return out
	}
	vals := new([4]float64) // one allocation for the figure's numbers
	vals[3] = total
	out.Observations = &vals[3]
	switch {
	case total <= 0:
		out.Reason = "no requests in the window"
		return out
	case len(bounds) == 0:
		out.Reason = "the histogram has no finite bucket bound"
		return out
	}
	dst := [...]**float64{&out.P50, &out.P95, &out.P99}
	for i, q := range quantiles {
		v, capped := bucketQuantile(q.q, bounds, inc)
		vals[i] = math.Round(v*1e6) / 1e3 // ms, to the microsecond: no float noise in the JSON
		if math.IsNaN(vals[i]) || math.IsInf(vals[i], 0) {
			out.Reason = "the bucket counts overflowed"
			continue
		}
		*dst[i] = &vals[i]
		if capped {
			out.Capped = append(out.Capped, q.name)
		}
	}
	return out
}

// mergeParts sums the parts' cumulative increases: directly when they
// share a layout, else on the bounds every layout has (+Inf always).
func mergeParts(parts []latPart) (bounds, inc []float64, merged string) {
	if len(parts) == 1 {
		return parts[0].bounds, parts[0].inc, ""
	}
	same := true
	for _, p := range parts[1:] {
		if !slices.Equal(p.bounds, parts[0].bounds) {
			same = false
			break
		}
	}
	if same {
		inc = make([]float64, len(parts[0].inc))
		for _, p := range parts {
			for i, v := range p.inc {
				inc[i] += v
			}
		}
		return parts[0].bounds, inc, ""
	}
	layouts := 1
	for i, p := range parts {
		if i > 0 && !slices.ContainsFunc(parts[:i], func(q latPart) bool { return slices.Equal(q.bounds, p.bounds) }) {
			layouts++
		}
	}
	for _, b := range parts[0].bounds {
		all := true
		for _, p := range parts[1:] {
			if _, ok := slices.BinarySearch(p.bounds, b); !ok {
				all = false
				break
			}
		}
		if all {
			bounds = append(bounds, b)
		}
	}
	inc = make([]float64, len(bounds)+1)
	for _, p := range parts {
		for i, b := range bounds {
			j, _ := slices.BinarySearch(p.bounds, b)
			inc[i] += p.inc[j]
		}
		inc[len(bounds)] += p.inc[len(p.inc)-1]
	}
	return bounds, inc, fmt.Sprintf("%d bucket layouts merged on %d common bounds", layouts, len(bounds))
}

// bucketQuantile is Prometheus' bucketQuantile on cumulative counts cum
// (len(bounds)+1, +Inf last, total > 0): the rank q×total is found in the
// first bucket that reaches it and interpolated linearly inside it; the
// first bucket starts at 0 (or is its bound when that is ≤ 0); a rank in
// +Inf gives the highest finite bound, capped. Counts that dip (scrape
// races between bucket counters) are held monotonic, as Prometheus does.
func bucketQuantile(q float64, bounds, cum []float64) (v float64, capped bool) {
	total := cum[len(cum)-1]
	rank := q * total
	prev := 0.0
	for i, b := range bounds {
		c := max(cum[i], prev)
		if c >= rank {
			if i == 0 && b <= 0 {
				return b, false
			}
			start, below := 0.0, 0.0
			if i > 0 {
				start, below = bounds[i-1], prev
			}
			if c == below { // rank 0 on an empty bucket
				return start, false
			}
			return start + (b-start)*(rank-below)/(c-below), false
		}
		prev = c
	}
	return bounds[len(bounds)-1], true
}

// ---------------------------------------------------------------------------
// Per engine, worker and pool

// latencyInto adds the engine's windows of each kind to acc.
func (e *engine) latencyInto(acc *[nLat]latAcc, now time.Time, w time.Duration) {
	for k := range e.lat {
		acc[k].add(&e.lat[k], now, w)
	}
}

// applyLatency records one scrape's histograms. A histogram the collector
// rejected (inv) teaches nothing: no sample.
func (e *engine) applyLatency(em *collectors.EngineMetrics, at time.Time, window time.Duration, inv map[invalidKey]bool) {
	for k, h := range latOf(em) {
		if inv[invalidKey{em.Engine, latFields[k]}] {
			continue
		}
		e.lat[k].observe(at, h, window)
	}
}

func (e *engine) latencyRestarted() {
	for k := range e.lat {
		e.lat[k].restarted()
	}
}

// workerLatency is one worker's windows of each kind, and its engines'
// (by name, the order of names): a kind its page has as worker-level
// series (SGLang counts TTFT and e2e per server, not per rank) is read
// from those, else summed over its engines. Never both.
type workerLatency struct {
	worker  [nLat]latAcc
	engines [][nLat]latAcc // nil for one engine: the worker's are its
	// whole: the kind is counted for the whole worker only.
	whole [nLat]bool
}

func (w *worker) latency(names []string, now time.Time, win time.Duration) workerLatency {
	var out workerLatency
	var tot [nLat]latAcc
	if w.totals != nil {
		w.totals.latencyInto(&tot, now, win)
	}
	if len(names) == 1 && w.totals == nil { // the worker's figures are its engine's
		w.engines[names[0]].latencyInto(&out.worker, now, win)
	} else {
		out.engines = make([][nLat]latAcc, len(names))
		for i, name := range names {
			w.engines[name].latencyInto(&out.engines[i], now, win)
			for k := range out.worker {
				out.worker[k].merge(&out.engines[i][k])
			}
		}
	}
	for k := range tot {
		if tot[k].seen {
			out.worker[k], out.whole[k] = tot[k], true
		}
	}
	return out
}

// engineNames lists the worker's engines in name order (every one still
// in the window: one that left the last scrape served its requests).
func (w *worker) engineNames() []string {
	names := make([]string, 0, len(w.engines))
	for name := range w.engines {
		names = append(names, name)
	}
	slices.SortFunc(names, collectors.CompareEngines)
	return names
}

// latencyMissing is the reason for a figure no histogram fed, poolMissing
// the pool's.
func latencyMissing(k int) string { return latMissing[k] }

var latMissing, poolMissing = func() (w, p [nLat]string) {
	for k, name := range latNames {
		w[k] = "no " + name + " histogram on its page"
		p[k] = "no up worker exposes " + figures.A(name+" histogram")
	}
	return w, p
}()

// setLatency sets the four figures of a row from accs.
func setLatency(dst [nLat]*snapshot.Latency, acc *[nLat]latAcc, whole *[nLat]bool) {
	for k := range acc {
		why := latencyMissing(k)
		if whole != nil && whole[k] && !acc[k].seen {
			why = "counted for the whole worker, not per engine"
		}
		*dst[k] = acc[k].latency(why)
	}
}

// poolLatency sums the up workers' windows.
func poolLatency(accs [][nLat]latAcc) [nLat]snapshot.Latency {
	var sum [nLat]latAcc
	for i := range accs {
		for k := range sum {
			sum[k].merge(&accs[i][k])
		}
	}
	var out [nLat]snapshot.Latency
	for k := range sum {
		out[k] = sum[k].latency(poolMissing[k])
	}
	return out
}
