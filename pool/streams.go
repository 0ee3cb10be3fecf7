package pool

import (
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

type pubKey struct {
	w    *worker
	rank int
}

// publisher is one KV event stream (worker, rank): its blocks, the latest
// status its collector reported, and what the pool itself counted.
type publisher struct {
	id       int32 // index in State.pubList
	w        *worker
	rank     int
	endpoint string
	topic    string
	idx      *pubIndex

	status *collectors.StreamStatus // latest, copied; nil until one arrives

	// Counted by the pool as batches are applied: exact and current even
	// when status messages are rate-limited.
	counts       *buckets // (batches, events)
	batches      uint64
	events       uint64
	hasSeq       bool
	lastSeq      uint64
	lastAt       time.Time
	lastTS       float64
	unknownKinds uint64

	clearedAt time.Time // last AllBlocksCleared, StreamReset or process restart
	// roots are the root contents this process stored (fingerprint →
	// block hash, at most maxOwnRoots), prevRoots its previous process's,
	// compared with after a restart (fingerprints.go).
	roots, prevRoots map[uint64]uint64
	// fullSince is when the first store was dropped because the index
	// was at its limit, since the last clear (zero: none). Until its
	// block set is known again (a clear), this publisher's index is
	// incomplete. dropped counts the blocks not indexed, in all.
	fullSince time.Time
	// mediaFull: stores were dropped because the publisher named more
	// storage media than an index column set holds (maxMedia), not
	// because the index is at its limit.
	mediaFull bool
	dropped   uint64
	// incidents are the pool's own (a restart seen in metrics), merged
	// with the collector's history in the snapshot; bounded like it.
	incidents []collectors.StreamIncident
	lostSince time.Time // pool clock when the current history loss was first reported
	// connSince / discSince: when the collector first reported the
	// current connecting / disconnected state.
	connSince time.Time
	discSince time.Time
	resets    uint64
	decodeErr counterWindow // status DecodeErrors over time

	tails   recentTails // tails of recent stores, to tell continuations from requests
	created time.Time   // observation time that created it (pool clock)

	// hashGen counts this publisher's process restarts (fingerprints.go);
	// resetAt is the last StreamReset.
	hashGen uint32
	resetAt time.Time
	// cache is its window of cache figures (nil until a live batch) and
	// sample the blocks followed for residency and thrash (cache.go).
	cache  *cacheWindow
	sample blockSample

	// tiers are its media (tiers.go); reannounced counts stores of blocks
	// already resident (touches), inconsistent the full-attention stores
	// whose token ids do not fill their blocks (not indexed).
	tiers        []*tier
	reannounced  uint64
	inconsistent uint64
}

func (s *State) publisher(w *worker, rank int, at time.Time) *publisher {
	k := pubKey{w, rank}
	if p := s.pubs[k]; p != nil {
		return p
	}
	p := &publisher{id: int32(len(s.pubList)), w: w, rank: rank, idx: newPubIndex(), counts: newBuckets(s.window), created: at}
	p.decodeErr.onChange = true
	s.pubs[k] = p
	s.pubList = append(s.pubList, p)
	w.idx.addPub(p.idx)
	w.pubs = append(w.pubs, p)
	sort.Slice(w.pubs, func(i, j int) bool { return w.pubs[i].rank < w.pubs[j].rank })
	return p
}

func (s *State) applyBatch(b *collectors.EventBatch) {
	w := s.workerFor(b.Worker, "events")
	if w == nil {
		return
	}
	p := s.publisher(w, b.Rank, b.At)
	if b.Endpoint != "" {
		p.endpoint = b.Endpoint
	}
	if b.Topic != "" {
		p.topic = b.Topic
	}
	p.batches++
	p.events += uint64(len(b.Events))
	p.counts.add(b.At, 1, float64(len(b.Events)))
	if !p.hasSeq || b.Seq > p.lastSeq {
		p.lastSeq = b.Seq
	}
	p.hasSeq = true
	p.lastAt = b.At
	p.lastTS = b.TS

	x := s.index
	// A replayed batch is history recovered for the index, not traffic of
	// now: the startup replay alone can hold 10 000 batches per worker and
	// would set the first window's hot prefixes (and its stores/s).
	live := !b.Replayed
	if live && p.cache == nil {
		p.cache = newCacheWindow(s.window)
	}
	var cb cacheBatch
	ns := b.At.UnixNano()
	var g float64 // traffic weight of one BlockStored at b.At, computed once
	ahead := 0    // events before this one have had their hashes prefetched
	for i := range b.Events {
		ev := &b.Events[i]
		switch ev.Kind {
		case collectors.BlockStored:
			if live && g == 0 {
				g = s.evPrefix.weight(b.At)
			}
			s.storeEvent(w, p, ev, g, live, b.At, &cb)
		case collectors.BlockRemoved:
			m := p.idx.column(ev.Medium, ev.Group, false)
			switch {
			case m < 0:
			case len(ev.Hashes) > 1:
				x.prefetch(p.idx, m, ev.Hashes)
			case i >= ahead:
				ahead = x.prefetchRemovals(p.idx, m, b.Events, i)
			}
			if m >= 0 {
				p.noteRemoval(p.tierOf(m, s.window), len(ev.Hashes), live, b.At)
			}
			primary := m >= 0 && m == p.idx.primary
			for _, h := range ev.Hashes {
				x.remove(&w.idx, p.idx, m, h)
				if primary && x.lost {
					s.ladderEvict(w, h)
				}
				switch {
				case !primary:
				case live:
					p.trackRemove(&cb, h, ns, s.window)
				default:
					p.forget(h)
				}
			}
		case collectors.AllBlocksCleared:
			s.clearPublisher(p, b.At)
		default:
			p.unknownKinds++
		}
	}
	if live {
		p.flushCache(&cb, ns)
	}
}

// storeEvent indexes one BlockStored (credit: from a live batch) and, when
// credit is set, counts it as one request's worth of traffic: for its parent (the prefix it continues)
// and for any tracked hot prefix re-stored inside its chain.
//
// Only the blocks of a pool column (the GPU's full-attention-like groups)
// are prefix blocks: a sliding-window group's or an offload tier's store
// is indexed in its own column and counted in its tier, never credited,
// followed for thrash or checked for hash boundaries. A full-attention
// store whose token ids do not fill its blocks exactly (llm-d's rule:
// tokens = block size × hashes) is counted inconsistent and not indexed:
// nothing in it can be placed without a guess.
//
// A store that continues a chain this publisher itself ended moments ago
// is not a new request: vLLM stores decode-filled blocks and chunked-
// prefill chunks one after the other, each with the request's own previous
// block as parent. Crediting those would weigh prefixes by output length.
// So a store whose parent is the tail (last block) of one of this
// publisher's stores within continuationWindow is indexed but not
// credited, and that tail is used up: a sequence continues its own tail
// once, so the next store under the same block is another request again
// (see recentTails). The cost: when the store that ended on a block was a
// request of its own (a prompt that is exactly a shared document), the
// first other request under it within the window is not counted; nor is
// a follow-up turn sent within the window after the answer's last block.
//
// Re-announced blocks (kv_cache_report_mode="full": a reused prefix
// stored again from block 0, parent none) are touches: not stores, not
// thrash. An event that begins with them reads as a request under the
// last of them, as it would have been published without the re-announce.
// A resident hash stored under a parent is a second copy, refcounted.
func (s *State) storeEvent(w *worker, p *publisher, ev *collectors.KVEvent, g float64, credit bool, at time.Time, cb *cacheBatch) {
	ix := p.idx
	m := ix.column(ev.Medium, ev.Group, true)
	if m < 0 {
		// A publisher naming more than maxColumns (medium, group) pairs
		// is hostile or broken: these blocks cannot be indexed, so its
		// index is incomplete.
		p.mediaFull = true
		for range ev.Hashes {
			p.indexFull(at)
		}
		return
	}
	if ev.GroupKind != "" || ev.Window != 0 {
		ix.describe(m, ev.GroupKind, ev.Window)
	}
	c := &ix.cols[m]
	if c.prefix && ev.NumTokens > 0 && !s.tokensFit(ix, m, ev) {
		p.inconsistent++
		return
	}
	// The group's block size: the largest an event names (vLLM's partial
	// prefix entries name their own, smaller, span).
	if ev.BlockSize > c.blockSize {
		ix.setBlockSize(m, ev.BlockSize)
	}
	t := p.tierOf(m, s.window)
	if ev.Locality != collectors.LocalityNone {
		t.locality = ev.Locality
	}
	live := credit // a live batch: its stores count in the cache figures
	hs := ev.Hashes
	if t.storeOnly {
		t.unindexed += uint64(len(hs))
		s.noteStores(p, t, len(hs), live, at)
		return
	}
	// Offload tiers refcount (chunks re-announce shared hashes). On the
	// GPU a resident hash stored again is a re-announce when its event has
	// no parent: vLLM reports a reused prefix from block 0, parent none.
	// Under a parent it is a second physical copy (a hybrid model
	// recomputes what its sliding-window group no longer holds; two
	// requests computed the block at once), as it is when the producer
	// says so.
	copies := c.offload || ev.Origin == collectors.OriginNew || ev.HasParent && ev.Origin != collectors.OriginReused
	parent, hasParent := ev.Parent, ev.HasParent
	if !c.pool {
		fresh := 0
		for _, h := range hs {
			switch s.index.store(&w.idx, ix, m, h, parent, hasParent, copies) {
			case reannounced:
				p.reannounced++
				continue
			case notIndexed:
				p.indexFull(at)
			}
			fresh++
			parent, hasParent = h, true
		}
		s.noteStores(p, t, fresh, live, at)
		return
	}
	// lead: the event's leading blocks this column already holds (all of
	// them for a REUSED event).
	lead := 0
	switch {
	case ev.Origin == collectors.OriginReused:
		lead = len(hs)
	case !copies:
		for lead < len(hs) && ix.residentIn(m, hs[lead]) {
			lead++
		}
	}
	if lead > 0 {
		parent, hasParent = hs[lead-1], true
	}
	ns := at.UnixNano()
	if lead == len(hs) {
		credit = false // only touches: no request of its own
	}
	if lead < len(hs) && hasParent && p.tails.take(parent, ns) {
		credit = false
	}
	if n := len(hs); n > lead {
		p.tails.put(hs[n-1], ns)
	}
	pc := s.evPrefix
	// One request counts at most once per prefix: a share never passes 1.
	// A fixed array: this runs for every BlockStored.
	var buf [4]uint64
	credited := buf[:0]
	if credit {
		pc.addTotal(g)
		if hasParent {
			credited = append(credited, slotKey(parent))
			pc.add(credited[0], "", w, g)
		}
	}
	hot := credit && s.hot.n > 0
	if len(hs) > 1 {
		s.index.prefetch(ix, m, hs)
	}
	primary := m == ix.primary
	// The ladder looks at the event before the index and the fingerprint
	// table take it (ladder.go).
	var le ladderEvent
	if primary && live {
		le = s.ladderStart(w, ev, lead, c.blockSize, ns)
	}
	if ev.RootContent != 0 && len(hs) > 0 {
		s.fingerprint(p, ev.RootContent, hs[0], at)
	}
	parent, hasParent = ev.Parent, ev.HasParent
	fresh := 0
	for j, h := range hs {
		r := s.index.store(&w.idx, ix, m, h, parent, hasParent, copies)
		parent, hasParent = h, true
		if r == reannounced || j < lead {
			p.reannounced++
			continue
		}
		if r == notIndexed {
			p.indexFull(at)
		}
		fresh++
		switch {
		case !primary:
		case live:
			p.trackStore(cb, h, ns, s.window)
			switch x := s.index.gained; {
			case w.role == snapshot.RoleDecode:
				// A decode worker stores what its prefill worker sent:
				// received, not computed; seen all the same.
				s.ladderSeen(h)
			case x >= 0:
				s.ladderStore(w, h, x, &le)
			}
		default:
			p.forget(h)
			s.ladderSeen(h)
		}
		if hot {
			if k := slotKey(h); s.hot.has(k) && !seen(credited, k) {
				pc.add(k, "", w, g)
				credited = append(credited, k)
			}
		}
	}
	if primary && live && fresh > 0 {
		s.ladderEnd(w, &le, hs[len(hs)-1])
	}
	s.noteStores(p, t, fresh, live, at)
}

// tokensFit applies llm-d's admission rule to a full-attention-like
// store that carries token ids: they fill its blocks exactly (block size
// × hashes), the block size from the event, else its column's, else the
// one the ids imply (then it is the column's from now on).
func (s *State) tokensFit(ix *pubIndex, m int, ev *collectors.KVEvent) bool {
	n := len(ev.Hashes)
	bs := ev.BlockSize
	if bs <= 0 {
		bs = ix.cols[m].blockSize
	}
	if bs > 0 {
		return ev.NumTokens == bs*n
	}
	if n == 0 || ev.NumTokens%n != 0 {
		return false
	}
	ix.setBlockSize(m, ev.NumTokens/n)
	return true
}

// indexFull records a block not indexed because the index is at its
// limit.
func (p *publisher) indexFull(at time.Time) {
	p.dropped++
	if p.fullSince.IsZero() {
		p.fullSince = at
	}
}

// clearPublisher drops every block of p: its block set is known again
// (empty), so an incomplete index from the limit ends here.
func (s *State) clearPublisher(p *publisher, at time.Time) {
	s.index.clear(&p.w.idx, p.idx)
	p.clearTiers()
	p.clearedAt = at
	p.fullSince, p.mediaFull = time.Time{}, false
	p.sample.reset() // a cleared block stored again is no eviction
}

// addIncident appends one of the pool's own incidents, keeping the last
// limit.
func (p *publisher) addIncident(in collectors.StreamIncident, limit int) {
	p.incidents = append(p.incidents, in)
	if over := len(p.incidents) - limit; over > 0 {
		p.incidents = append(p.incidents[:0], p.incidents[over:]...)
	}
}

func seen(ks []uint64, k uint64) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (s *State) applyReset(r *collectors.StreamReset) {
	w := s.workerFor(r.Worker, "events")
	if w == nil {
		return
	}
	p := s.publisher(w, r.Rank, r.At)
	s.restartedHashing(p)
	p.resetAt = r.At
	s.clearPublisher(p, r.At)
	p.resets++
}

func (s *State) applyStatus(st *collectors.StreamStatus) {
	w := s.workerFor(st.Worker, "events")
	if w == nil {
		return
	}
	p := s.publisher(w, st.Rank, st.At)
	c := *st
	// Keep our own bounded copy: the collector may reuse its slice.
	h := st.History
	if lim := s.opt.Limits.Incidents; len(h) > lim {
		h = h[len(h)-lim:]
	}
	c.History = append([]collectors.StreamIncident(nil), h...)
	prev := snapshot.StreamState("")
	if p.status != nil {
		prev = p.status.State
	}
	if c.State != prev {
		switch c.State {
		case snapshot.StreamHistoryLost:
			p.lostSince = st.At
		case snapshot.StreamConnecting:
			p.connSince = st.At
		case snapshot.StreamDisconnected:
			p.discSince = st.At
		}
	}
	p.status = &c
	if st.Endpoint != "" {
		p.endpoint = st.Endpoint
	}
	if st.Topic != "" {
		p.topic = st.Topic
	}
	p.decodeErr.add(st.At, float64(st.DecodeErrors), s.window)
}

// state is the stream's effective state. A history loss (or late join)
// ends when the publisher clears all its blocks or restarts after it: from
// then on the index holds everything again, whatever the collector's last
// word was.
func (p *publisher) state() snapshot.StreamState {
	if p.status == nil {
		if p.batches > 0 {
			return snapshot.StreamLive
		}
		return snapshot.StreamConnecting
	}
	st := p.status.State
	if (st == snapshot.StreamHistoryLost || st == snapshot.StreamJoinedLate) &&
		!p.clearedAt.IsZero() && !p.clearedAt.Before(p.incompleteSince()) {
		return snapshot.StreamLive
	}
	return st
}

// incompleteSince is when the current loss of history began: the start of
// the latest matching incident, else when the pool first heard of it.
func (p *publisher) incompleteSince() time.Time {
	kind := string(p.status.State)
	h := p.status.History
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Kind == kind && !h[i].Start.IsZero() {
			return h[i].Start
		}
	}
	if p.status.State == snapshot.StreamHistoryLost && !p.lostSince.IsZero() {
		return p.lostSince
	}
	return p.status.At
}

// disconnectedSince is when the open disconnect began: the collector's
// incident if it has one, else when the pool first heard of it.
func (p *publisher) disconnectedSince() time.Time {
	if p.status != nil {
		h := p.status.History
		for i := len(h) - 1; i >= 0; i-- {
			if (h[i].Kind == "disconnected" || h[i].Kind == "disconnect") && h[i].End.IsZero() && !h[i].Start.IsZero() {
				return h[i].Start
			}
		}
	}
	return p.discSince
}

// connectingGrace is how long a stream may stay connecting before its
// worker's index counts as stale: two refreshes, at least 2 s (a
// reachable publisher connects in milliseconds).
func (s *State) connectingGrace() time.Duration { return max(2*s.refresh, 2*time.Second) }

// incomplete reports whether the stream (in effective state st) leaves its
// worker's index incomplete at now. A disconnected stream is: the PUB
// drops everything while no SUB is connected, so the index is frozen. So
// is one still connecting past the grace: nothing of it is known.
func (s *State) incomplete(p *publisher, st snapshot.StreamState, now time.Time) bool {
	switch st {
	case snapshot.StreamHistoryLost, snapshot.StreamReplaying, snapshot.StreamJoinedLate, snapshot.StreamDisconnected:
		return true
	case snapshot.StreamConnecting:
		return s.connectingLong(p, now)
	}
	return false
}

// connectingLong: the stream has been connecting for longer than the
// grace (since its first status, or since the pool heard of it).
func (s *State) connectingLong(p *publisher, now time.Time) bool {
	since := p.connSince
	if since.IsZero() {
		since = p.created
	}
	return !since.IsZero() && now.Sub(since) >= s.connectingGrace()
}

// blocksKnown: the worker has a publisher whose blocks kvtop knows: its
// block count is a measurement, maybe 0.
func (w *worker) blocksKnown() bool {
	for _, p := range w.pubs {
		if !p.historyUnknown() {
			return true
		}
	}
	return false
}

// historyUnknown: the publisher has delivered nothing since kvtop
// subscribed, and no restart or clear since says its cache is empty. A
// stream that is connected (live) is no exception: a publisher that
// stored blocks before kvtop started and has been idle since sends
// nothing that would tell, and the late-join check (and the replay that
// recovers the history) starts at its first batch. So its resident
// blocks are not known, not 0.
func (p *publisher) historyUnknown() bool {
	return p.batches == 0 && p.clearedAt.IsZero()
}

// eventsUnknown: the worker should have KV events (a stream, or an event
// source in its config) and some of its publishers' blocks are unknown
// (historyUnknown, or no stream at all yet): its index is not complete.
// say: the reason should say so (a stream still connecting says it
// itself, in its state).
func (w *worker) eventsUnknown() (unknown, say bool) {
	if len(w.pubs) == 0 {
		return w.events, w.events
	}
	for _, p := range w.pubs {
		if p.historyUnknown() {
			unknown = true
			say = say || p.state() != snapshot.StreamConnecting
		}
	}
	return unknown, say
}

// eventsUnknownNote is the reason of a worker whose blocks are unknown
// because none of (some of) its streams delivered yet.
const eventsUnknownNote = "no KV events yet: resident blocks unknown"

// continuationWindow is how recent a publisher's own store must be for a
// store continuing it to count as the same request (decode blocks come
// every fraction of a second; a few seconds covers slow decoding).
const continuationWindow = 3 * time.Second

// recentTails remembers the last block of each recent store of one
// publisher: a direct-mapped table of (hash, time), grown while live
// entries collide, so a lookup is one probe and memory follows the store
// rate (bounded by maxTailSlots). A lost entry only means a continuation
// is credited as a request, as before this heuristic.
type recentTails struct {
	slots []tailSlot
	mask  uint64
	// puts in the current and the previous continuationWindow: how many
	// entries can be live. The table grows on a live collision only while
	// it has fewer than 16 slots per live entry; else a collision just
	// replaces (grown on every live collision, a busy publisher's table
	// reached maxTailSlots — 1 MB — whatever its rate).
	winStart       int64
	puts, prevPuts int
}

type tailSlot struct {
	h  uint64
	ns int64
}

const (
	minTailSlots = 64
	maxTailSlots = 1 << 16
)

func tailIndex(h, mask uint64) uint64 { return (h * 0x9e3779b97f4a7c15) >> 32 & mask }

// take reports whether h is the tail of a store within the window before
// ns, and forgets it: a tail is continued once.
func (r *recentTails) take(h uint64, ns int64) bool {
	if r.slots == nil {
		return false
	}
	sl := &r.slots[tailIndex(h, r.mask)]
	if sl.h != h || sl.ns == 0 || ns < sl.ns || ns-sl.ns > int64(continuationWindow) {
		return false
	}
	*sl = tailSlot{}
	return true
}

func (r *recentTails) put(h uint64, ns int64) {
	if r.slots == nil {
		r.slots = make([]tailSlot, minTailSlots)
		r.mask = minTailSlots - 1
	}
	if ns-r.winStart > int64(continuationWindow) || ns < r.winStart {
		r.winStart, r.prevPuts, r.puts = ns, r.puts, 0
	}
	r.puts++
	sl := &r.slots[tailIndex(h, r.mask)]
	if sl.ns != 0 && sl.h != h && ns-sl.ns <= int64(continuationWindow) && len(r.slots) < maxTailSlots &&
		len(r.slots) < 16*max(r.puts, r.prevPuts) {
		r.grow(ns)
		sl = &r.slots[tailIndex(h, r.mask)]
	}
	*sl = tailSlot{h: h, ns: ns}
}

// grow doubles the table, keeping the entries still within the window.
func (r *recentTails) grow(ns int64) {
	old := r.slots
	r.slots = make([]tailSlot, 2*len(old))
	r.mask = uint64(len(r.slots) - 1)
	for _, sl := range old {
		if sl.ns != 0 && ns-sl.ns <= int64(continuationWindow) {
			r.slots[tailIndex(sl.h, r.mask)] = sl
		}
	}
}
