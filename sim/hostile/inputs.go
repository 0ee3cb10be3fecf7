package hostile

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvtop/kvtop/config"
)

// inputs, one per load item of issue 8 (8–10 are not load inputs).
var inputs = []input{
	{"baseline", "the simulated pool alone, one worker more: what the others compare with", nil},
	{"too-large", "h-series: 350 000 series, each its own engine label (15.6 MB, under the 16 MiB body limit); h-engines: 40 000 engines in 40 000 series (under the series limit)", tooLarge},
	{"slow-body", "h-trickle: a body that never ends (64 bytes every 100 ms); h-slow: a 40 KB page at 10 KB/s (4 s for a 2 s scrape_timeout)", slowBody},
	{"replay-stale", "h-stale: live batches of 27 kB at 100/s, a one-seq gap every 10 s, and a replay endpoint that trickles replies older than the seq asked for, 5 a second, forever", replayStale},
	{"replay-slow", "h-slowreplay: live batches of 27 kB at 100/s, a 100 000-seq gap every 40 s, and a replay endpoint that trickles in-range replies, 5 a second", replaySlow},
	{"oversized", "h-oversized: small live batches at 50/s and a 1.8 MB batch every 2 s, limits.event_message_bytes 1 MiB; its replay ring holds them too", oversized},
	{"flood", "h-flood: batches of 73 kB (1 024 blocks stored, 1 024 removed) at 3 000/s, 220 MB/s, with an honest replay ring of 1 000", flood},
	{"flood-big", "h-flood-big: batches of 1 MB (one BlockRemoved of 110 000 hashes, under the 64 MiB message limit) at 300/s, with an honest replay ring of 100", floodBig},
	{"flood-stores", "h-flood-stores: batches of 0.9 MB (16 384 blocks stored, 16 384 removed) at 300/s, with an honest replay ring of 100", floodStores},
	{"index-cap", "h-blocks: 204 800 new distinct blocks a second (200 batches of 1 024), never removed, limits.index_blocks 2 000 000", indexCap},
	{"redirect", "h-redirect-https: https that redirects to http on another port; h-redirect-port: http to another port and path; both with a bearer token file readable by group", redirect},
	{"invalid", "h-dup: every series twice; h-negative: negative queue and running; h-hits-over: hits grow 3x faster than queries; h-oscillating: hits up and down each scrape", invalid},
	{"late-restart", "h-late: prefix counters absent until t=75 s, then a 40-request burst (true hit rate 0.685); h-restart: no process_start_time, every 40 s refused 4 s and back with counters from 0, idle 10 s, then storing blocks 20 s", lateRestart},
}

// since is the time since the pool started.
func (p *Pool) since() time.Duration { return time.Since(p.t0) }

// serveWorker serves a worker's metrics page on its own port.
func (p *Pool) serveWorker(h http.Handler) (string, error) {
	s, err := serveHTTP(h)
	if err != nil {
		return "", err
	}
	p.onClose(func() { s.Close() })
	return s.URL + "/metrics", nil
}

// plainPage is a hostile event worker's well-formed page (so the worker
// is up and its metrics are not the test).
func plainPage() []byte {
	start := float64(time.Now().Unix())
	return vllmPage([]engine{{id: "0", running: 2, kvUsage: 0.4, queries: fp(1000), hits: fp(500), prompt: 1000, blocks: 65536}}, &start, "")
}

// eventWorker adds a worker publishing on pub, with replay the replay
// endpoint ("" for none) and a plain metrics page.
func (p *Pool) eventWorker(name string, pub *publisher, replay string) error {
	url, err := p.serveWorker(servePage(plainPage()))
	if err != nil {
		return err
	}
	p.add(config.Worker{Name: name, Metrics: url, Events: pub.Events, Replay: replay})
	p.onClose(pub.close)
	return nil
}

// pace calls send every 10 ms with how many batches are due for rate per
// second, until the pool closes.
func (p *Pool) pace(rate float64, send func(n int)) {
	p.run(func(ctx context.Context) {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start, done := time.Now(), 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			due := int(time.Since(start).Seconds()*rate) - done
			if due > 0 {
				send(due)
				done += due
			}
		}
	})
}

func tooLarge(p *Pool) error {
	for _, w := range []struct {
		name string
		n    int
	}{{"h-series", 350_000}, {"h-engines", 40_000}} {
		url, err := p.serveWorker(servePage(seriesPage(w.n)))
		if err != nil {
			return err
		}
		p.add(config.Worker{Name: w.name, Metrics: url})
	}
	return nil
}

func slowBody(p *Pool) error {
	start := float64(time.Now().Unix())
	page := vllmPage([]engine{{id: "0", running: 1, kvUsage: 0.2, prompt: 10, blocks: 1024}}, &start, "")
	// Padding the parser drops: a page of 40 KB that is valid once whole.
	padded := append([]byte(strings.Repeat("# padding: a comment the prefilter drops, sent slowly\n", 740)), page...)
	for _, w := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"h-trickle", trickle(page, 64, 100*time.Millisecond, true)},
		{"h-slow", trickle(padded, 1024, 100*time.Millisecond, false)},
	} {
		url, err := p.serveWorker(w.h)
		if err != nil {
			return err
		}
		p.add(config.Worker{Name: w.name, Metrics: url})
	}
	return nil
}

// heavy is a hash-heavy live batch: one BlockRemoved of 3 000 hashes,
// 27 kB on the wire and about as much decoded, cheap to build.
func heavy(id uint8) func(seq uint64) []byte {
	return func(seq uint64) []byte { return removedBatch(hashes(id, seq*3000, 3000)) }
}

// trickled is a trickler's reply payload: a small batch.
func trickled(id uint8) func(seq uint64) []byte {
	return func(seq uint64) []byte { return removedBatch(hashes(id, 1<<39+seq*16, 16)) }
}

// replayAttack is a publisher of heavy live batches at 100/s, leaving gap
// seqs out every period (the first 2 s in), with a trickling replay.
func (p *Pool) replayAttack(name string, id uint8, reply Reply, gap uint64, period time.Duration) error {
	tr, err := NewTrickler(p.zctx, 200*time.Millisecond, reply)
	if err != nil {
		return err
	}
	p.onClose(tr.Close)
	pub, err := newPublisher(p.zctx, 0, 100000)
	if err != nil {
		return err
	}
	if err := p.eventWorker(name, pub, tr.Endpoint); err != nil {
		return err
	}
	var sent, skipped atomic.Uint64
	next := 2 * time.Second
	batch := heavy(id)
	p.pace(100, func(n int) {
		for range n {
			if p.since() >= next {
				pub.Skip(gap)
				skipped.Add(gap)
				next += period
			}
			pub.Send(batch(pub.Seq()))
			sent.Add(1)
		}
	})
	p.stat(func() string {
		req, rep := tr.Counts()
		return fmt.Sprintf("%s: %d live batches sent, %d seqs left out (gaps); its replay endpoint got %d requests and trickled %d replies",
			name, sent.Load(), skipped.Load(), req, rep)
	})
	return nil
}

func replayStale(p *Pool) error {
	return p.replayAttack("h-stale", 1, Stale(trickled(1)), 1, 10*time.Second)
}

func replaySlow(p *Pool) error {
	return p.replayAttack("h-slowreplay", 2, InRange(trickled(2)), 100_000, 40*time.Second)
}

func oversized(p *Pool) error {
	p.cfg.Limits.EventMessageBytes = 1 << 20
	pub, err := newPublisher(p.zctx, 1000, 100000)
	if err != nil {
		return err
	}
	if err := p.eventWorker("h-oversized", pub, pub.Replay); err != nil {
		return err
	}
	const id = 3
	var small, big atomic.Uint64
	next := 2 * time.Second
	p.pace(50, func(n int) {
		for range n {
			if p.since() >= next {
				next += 2 * time.Second
				pub.Send(removedBatch(hashes(id, 1<<39+big.Load()*200_000, 200_000)))
				big.Add(1)
			}
			s := pub.Seq()
			pub.Send(storedBatch(hashes(id, s*16, 16), 16, hashes(id, (s-1)*16, 16)))
			small.Add(1)
		}
	})
	p.stat(func() string {
		return fmt.Sprintf("h-oversized: %d small batches and %d of %d bytes sent; %d replay requests served",
			small.Load(), big.Load(), len(removedBatch(hashes(id, 0, 200_000))), pub.Replays())
	})
	return nil
}

func flood(p *Pool) error {
	const id, sets, set = 4, 32, 1024
	pub, err := newPublisher(p.zctx, 1000, 1000)
	if err != nil {
		return err
	}
	if err := p.eventWorker("h-flood", pub, pub.Replay); err != nil {
		return err
	}
	// Payload k stores set k and removes set k-1: whatever kvtop drops,
	// the pool's blocks stay within the 32 sets.
	payloads := make([][]byte, sets)
	for k := range payloads {
		payloads[k] = storedBatch(hashes(id, uint64(k*set), set), 16, hashes(id, uint64((k+sets-1)%sets*set), set))
	}
	var sent atomic.Uint64
	p.pace(3000, func(n int) {
		for range n {
			pub.Send(payloads[pub.Seq()%sets])
			sent.Add(1)
		}
	})
	p.stat(func() string {
		return fmt.Sprintf("h-flood: %d batches of %d bytes sent (%d block events each); %d replay requests served",
			sent.Load(), len(payloads[0]), 2*set, pub.Replays())
	})
	return nil
}

func floodBig(p *Pool) error {
	const id, n = 7, 110_000
	pub, err := newPublisher(p.zctx, 100, 1000)
	if err != nil {
		return err
	}
	if err := p.eventWorker("h-flood-big", pub, pub.Replay); err != nil {
		return err
	}
	payloads := make([][]byte, 8)
	for k := range payloads {
		payloads[k] = removedBatch(hashes(id, uint64(k*n), n))
	}
	var sent atomic.Uint64
	p.pace(300, func(k int) {
		for range k {
			pub.Send(payloads[pub.Seq()%8])
			sent.Add(1)
		}
	})
	p.stat(func() string {
		return fmt.Sprintf("h-flood-big: %d batches of %d bytes sent; %d replay requests served", sent.Load(), len(payloads[0]), pub.Replays())
	})
	return nil
}

func floodStores(p *Pool) error {
	const id, sets, set = 8, 8, 16384
	pub, err := newPublisher(p.zctx, 100, 1000)
	if err != nil {
		return err
	}
	if err := p.eventWorker("h-flood-stores", pub, pub.Replay); err != nil {
		return err
	}
	payloads := make([][]byte, sets)
	for k := range payloads {
		payloads[k] = storedBatch(hashes(id, uint64(k*set), set), 16, hashes(id, uint64((k+sets-1)%sets*set), set))
	}
	var sent atomic.Uint64
	p.pace(300, func(n int) {
		for range n {
			pub.Send(payloads[pub.Seq()%sets])
			sent.Add(1)
		}
	})
	p.stat(func() string {
		return fmt.Sprintf("h-flood-stores: %d batches of %d bytes sent (%d block events each); %d replay requests served",
			sent.Load(), len(payloads[0]), 2*set, pub.Replays())
	})
	return nil
}

func indexCap(p *Pool) error {
	const id, per = 5, 1024
	p.cfg.Limits.IndexBlocks = 2_000_000
	pub, err := newPublisher(p.zctx, 256, 100000)
	if err != nil {
		return err
	}
	if err := p.eventWorker("h-blocks", pub, pub.Replay); err != nil {
		return err
	}
	var sent atomic.Uint64
	p.pace(200, func(n int) {
		for range n {
			pub.Send(storedBatch(hashes(id, pub.Seq()*per, per), 16, nil))
			sent.Add(1)
		}
	})
	p.stat(func() string {
		return fmt.Sprintf("h-blocks: %d distinct blocks stored in %d batches, none removed", sent.Load()*per, sent.Load())
	})
	return nil
}

// authCount counts requests and those with a bearer token.
type authCount struct{ asked, token atomic.Int64 }

func (a *authCount) see(r *http.Request) {
	a.asked.Add(1)
	if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		a.token.Add(1)
	}
}

func redirect(p *Pool) error {
	var sink, https, port authCount
	s, err := serveHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sink.see(r)
		servePage(plainPage())(w, r)
	}))
	if err != nil {
		return err
	}
	p.onClose(func() { s.Close() })
	secure := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		https.see(r)
		http.Redirect(w, r, s.URL+"/metrics", http.StatusFound)
	}))
	secure.Config.ErrorLog = log.New(io.Discard, "", 0) // a client that hangs up mid-handshake is no news
	secure.StartTLS()
	p.onClose(secure.Close)
	ca, err := p.file("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw}), 0o644)
	if err != nil {
		return err
	}
	token, err := p.file("token", []byte("hostile-s3cr3t\n"), 0o640)
	if err != nil {
		return err
	}
	other, err := p.serveWorker(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port.see(r)
		http.Redirect(w, r, s.URL+"/other/metrics", http.StatusTemporaryRedirect)
	}))
	if err != nil {
		return err
	}
	p.add(config.Worker{Name: "h-redirect-https", Metrics: secure.URL + "/metrics", Auth: config.Auth{BearerTokenFile: token, CAFile: ca}})
	p.add(config.Worker{Name: "h-redirect-port", Metrics: other, Auth: config.Auth{BearerTokenFile: token}})
	p.stat(func() string {
		return fmt.Sprintf("redirects: the https target was asked %d times (%d with the token, as configured), the http one %d (%d); where they point was asked %d times, %d with the token",
			https.asked.Load(), https.token.Load(), port.asked.Load(), port.token.Load(), sink.asked.Load(), sink.token.Load())
	})
	return nil
}

func invalid(p *Pool) error {
	start := float64(time.Now().Unix())
	var scrapes atomic.Int64
	pages := map[string]func() []byte{
		// Two engines "0": every series of the engine appears twice.
		"h-dup": func() []byte {
			return vllmPage([]engine{
				{id: "0", waiting: 1, running: 3, kvUsage: 0.3, queries: fp(1000), hits: fp(400), prompt: 1000, blocks: 4096},
				{id: "0", waiting: 2, running: 2, kvUsage: 0.2, queries: fp(1000), hits: fp(400), prompt: 1000, blocks: 4096},
			}, &start, "")
		},
		"h-negative": func() []byte {
			return vllmPage([]engine{{id: "0", waiting: -3, running: -1, kvUsage: 0.3, queries: fp(1000), hits: fp(400), prompt: 1000, blocks: 4096}}, &start, "")
		},
		"h-hits-over": func() []byte {
			t := p.since().Seconds()
			return vllmPage([]engine{{id: "0", running: 1, kvUsage: 0.3, queries: fp(1000 * t), hits: fp(3000 * t), prompt: 1000 * t, blocks: 4096}}, &start, "")
		},
		"h-oscillating": func() []byte {
			t := p.since().Seconds()
			hits := 0.5 * 1000 * t
			if scrapes.Add(1)%2 == 0 {
				hits = 3 * 1000 * t
			}
			return vllmPage([]engine{{id: "0", running: 1, kvUsage: 0.3, queries: fp(1000 * t), hits: fp(hits), prompt: 1000 * t, blocks: 4096}}, &start, "")
		},
	}
	for _, name := range []string{"h-dup", "h-negative", "h-hits-over", "h-oscillating"} {
		page := pages[name]
		url, err := p.serveWorker(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { servePage(page())(w, r) }))
		if err != nil {
			return err
		}
		p.add(config.Worker{Name: name, Metrics: url})
	}
	return nil
}

// Timeline of late-restart (from the pool's start). h-restart lives
// restartCycle: refused until downTo (the restart), then a new process
// whose counters start from 0, idle until storeFrom, storing blocks until
// storeTo, idle again until the next restart.
const (
	lateAt       = 75 * time.Second // h-late's prefix counters appear
	restartCycle = 40 * time.Second
	downTo       = 4 * time.Second
	storeFrom    = 14 * time.Second
	storeTo      = 34 * time.Second
)

func lateRestart(p *Pool) error {
	late, err := p.serveWorker(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := p.since()
		e := engine{id: "0", running: 1, kvUsage: 0.3, prompt: 40_000, blocks: 4096}
		if t >= lateAt { // a burst of 40 requests of 1 000 tokens, 685 of them cached
			e.queries, e.hits = fp(40_000), fp(27_400)
		}
		servePage(vllmPage([]engine{e}, nil, ""))(w, r)
	}))
	if err != nil {
		return err
	}
	p.add(config.Worker{Name: "h-late", Metrics: late})

	var refused atomic.Int64
	restart, err := p.serveWorker(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := p.since() % restartCycle
		if t < downTo {
			refused.Add(1)
			http.Error(w, "engine restarting", http.StatusServiceUnavailable)
			return
		}
		s := (t - downTo).Seconds() // a new process: its counters count from 0
		e := engine{id: "0", running: 1, kvUsage: 0.3, queries: fp(1000 * s), hits: fp(500 * s), prompt: 1000 * s, blocks: 4096}
		servePage(vllmPage([]engine{e}, nil, ""))(w, r)
	}))
	if err != nil {
		return err
	}
	pub, err := newPublisher(p.zctx, 1000, 100000)
	if err != nil {
		return err
	}
	p.add(config.Worker{Name: "h-restart", Metrics: restart, Events: pub.Events, Replay: pub.Replay})
	p.onClose(pub.close)
	const id = 6
	var stored atomic.Uint64
	var life atomic.Int64
	p.pace(10, func(n int) {
		t := p.since()
		if l := int64(t / restartCycle); l != life.Load() {
			life.Store(l)
			pub.Restart() // a new process: seq from 0, nothing published yet
		}
		if c := t % restartCycle; c < storeFrom || c >= storeTo {
			return
		}
		for range n {
			pub.Send(storedBatch(hashes(id, uint64(life.Load())<<24|pub.Seq()*16, 16), 16, nil))
			stored.Add(16)
		}
	})
	p.stat(func() string {
		return fmt.Sprintf("h-restart: %d restarts after a good start (%d scrapes refused), %d blocks stored in all; h-late: counters appear at %s",
			int64((p.since()-downTo)/restartCycle), refused.Load(), stored.Load(), lateAt)
	})
	return nil
}
