package natsevents

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Discovered publishers of Dynamo's ZMQ event plane (docs/PROTOCOLS.md
// §10.5): each worker's publisher advertises its PUB in Dynamo's
// discovery (an EventChannel: scope, topic, publisher id, transport
// {"kind":"Zmq","config":{"endpoint":…}}), and subscribers connect to what
// is advertised, following it as publishers come and go. kvtop does the
// same with a Discovery (Kubernetes' DynamoWorkerMetadata in
// discovery/kube): an advertised endpoint gets a SUB; a message must carry
// the publisher id advertised for its endpoint, as Dynamo's router checks
// (its ValidatedZmqSource): another is counted and said, not applied; an
// endpoint no longer advertised is closed, and the publishers it carried
// are gone — a worker with none left leaves the pool ("left", its blocks
// out of the index) instead of showing a gap or a disconnection.

// Channel is one advertised publisher.
type Channel struct {
	// Endpoint is its PUB, tcp://host:port.
	Endpoint string
	// PublisherID is the id its messages carry (the id frame and the
	// envelope's publisher_id).
	PublisherID uint64
	// Owner says who advertises it, for messages: "pod vllm-0".
	Owner string
}

// Channels is everything a discovery advertises now: each set replaces
// the one before.
type Channels struct {
	Channels []Channel
	// Left says why owners of the set before are gone ("pod vllm-0
	// deleted"), by Owner; a channel withdrawn by an owner still there was
	// replaced (its process re-registered).
	Left map[string]string
	At   time.Time
}

// Discovery follows the publishers Dynamo advertises. Watch sends the
// whole set after its first complete listing, then whenever it changes,
// until ctx is done; what goes wrong on the way (a bad advertisement, the
// API server unreachable) is a SourceError on errs. An error returned is
// fatal (the discovery API is not there).
type Discovery interface {
	Name() string
	Watch(ctx context.Context, sets chan<- Channels, errs chan<- collectors.Observation) error
}

// zreader is the SUB of one endpoint.
type zreader struct {
	gen    uint64 // tags its messages: those of a reader stopped since are dropped
	cancel context.CancelFunc
	// pids are the publisher ids advertised on the endpoint, with their
	// owners; nil for a configured endpoint (any id).
	pids map[uint64]string
}

// discover runs the discovery and hands its sets to the state goroutine.
func (r *runner) discover() {
	defer r.replays.Done()
	errs := make(chan collectors.Observation, 64)
	done := make(chan struct{})
	go func() { // its errors go out in order with the rest
		defer close(done)
		for {
			select {
			case <-r.ctx.Done():
				return
			case o := <-errs:
				r.emit(o)
			}
		}
	}()
	err := r.o.Discover.Watch(r.ctx, r.sets, errs)
	if err != nil && r.ctx.Err() == nil {
		r.fatal.Store(&err)
		r.cancel()
	}
	<-done
}

// onSet follows the set: new endpoints get a reader, withdrawn publishers
// are gone, endpoints no longer advertised are closed.
func (r *runner) onSet(set Channels) {
	now := time.Now()
	want := map[string]map[uint64]string{}
	for _, c := range set.Channels {
		if want[c.Endpoint] == nil {
			want[c.Endpoint] = map[uint64]string{}
		}
		want[c.Endpoint][c.PublisherID] = c.Owner
	}
	// Withdrawn publishers first: their events are over.
	var gone []withdrawn
	for ep, zr := range r.zrs {
		if zr.pids == nil {
			continue // configured: read whatever discovery says
		}
		for pid, owner := range zr.pids {
			if _, ok := want[ep][pid]; ok {
				continue
			}
			why, left := set.Left[owner]
			if !left {
				why = fmt.Sprintf("%s no longer advertises publisher %d on %s (its worker re-registered)", owner, pid, ep)
			}
			gone = append(gone, withdrawn{ep: ep, pid: pid, why: why})
		}
		if want[ep] == nil {
			zr.cancel()
			delete(r.zrs, ep)
			delete(r.zup, ep)
		} else {
			zr.pids = want[ep]
		}
	}
	r.withdraw(gone, now)
	eps := make([]string, 0, len(want))
	for ep := range want {
		eps = append(eps, ep)
	}
	sort.Strings(eps)
	for _, ep := range eps {
		if r.zrs[ep] == nil {
			r.startZMQ(ep, want[ep])
		}
	}
}

type withdrawn struct {
	ep, why string
	pid     uint64
}

// withdraw ends the publishers no longer advertised: each says so in its
// last status and its blocks leave the index. A worker kvtop named from
// its events (not a configured one) with no publisher left leaves the
// pool, as a deleted pod does.
func (r *runner) withdraw(gone []withdrawn, now time.Time) {
	if len(gone) == 0 {
		return
	}
	var ended []*pub
	var whys []string
	for _, p := range r.sorted() {
		for _, g := range gone {
			if p.St.Endpoint == g.ep && p.pubID == g.pid {
				p.end(g.why, now)
				delete(r.pubs, p.key)
				ended, whys = append(ended, p), append(whys, g.why)
				break
			}
		}
	}
	told := map[string]bool{}
	for i, p := range ended {
		name := p.key.name
		if !r.named[name] || r.hasPub(name) {
			// A configured worker stays, as does one with another rank
			// still advertised: the rank gone drops its blocks.
			p.emit(&collectors.StreamReset{Worker: name, Rank: p.key.rank, Reason: "gone", At: now})
			continue
		}
		if told[name] {
			continue
		}
		told[name] = true
		r.gone[name] = now
		r.emit(&collectors.TargetChange{Name: name, Role: collectors.RoleWorker, Kind: collectors.TargetLeft,
			Reason: "publisher gone: " + whys[i], At: now})
	}
}

// forget drops what is kept of workers no longer seen: the names kvtop
// gave that have no publisher, the workers left more than a window ago
// (the pool has forgotten them too). Their number stays that of the
// workers publishing.
func (r *runner) forget(now time.Time) {
	for n, at := range r.gone {
		if now.Sub(at) > r.o.Window {
			delete(r.gone, n)
		}
	}
	if len(r.named) <= len(r.pubs) {
		return
	}
	have := map[string]bool{}
	for k := range r.pubs {
		have[k.name] = true
	}
	for n := range r.named {
		if !have[n] {
			delete(r.named, n)
		}
	}
}

func (r *runner) hasPub(name string) bool {
	for k := range r.pubs {
		if k.name == name {
			return true
		}
	}
	return false
}

// rejoin brings back a worker that left when its publisher was withdrawn
// and is publishing again (a new publisher under the same worker id),
// while the pool still shows it as left (one window).
func (r *runner) rejoin(name string, now time.Time) {
	at, ok := r.gone[name]
	if !ok {
		return
	}
	delete(r.gone, name)
	if now.Sub(at) <= r.o.Window {
		r.emit(&collectors.TargetChange{Name: name, Role: collectors.RoleWorker, Kind: collectors.TargetJoined, At: now})
	}
}

// mismatch counts a message whose publisher id discovery does not
// advertise on its endpoint: not applied (Dynamo's router fences it too).
func (r *runner) mismatch(m inMsg, zr *zreader) {
	r.mismatched++
	if m.at.Sub(r.lastMismatch) < time.Second {
		return
	}
	r.lastMismatch = m.at
	ids := make([]string, 0, len(zr.pids))
	for pid, owner := range zr.pids {
		ids = append(ids, fmt.Sprintf("%d (%s)", pid, owner))
	}
	sort.Strings(ids)
	r.emit(r.note("identity_mismatch", "a message from %s carries publisher id %d, discovery advertises %v there: not applied (%d so far)",
		m.endpoint, m.pubID, ids, r.mismatched))
}
