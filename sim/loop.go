package sim

import (
	"fmt"
	"runtime"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim/engine"
	"github.com/kvtop/kvtop/sim/internal/promtext"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/router"
	"github.com/kvtop/kvtop/sim/scenario"
)

// loop is the sim's only goroutine touching engines, the router and the
// ZMQ sockets. It advances the simulated clock in fixed quanta, so a run is
// a function of its seed and options alone, whatever the wall clock does;
// between quanta it serves replay requests.
func (s *Sim) loop() {
	runtime.LockOSThread() // ZMQ sockets stay on one OS thread
	defer close(s.stopped)
	poller := zmq.NewPoller()
	for _, w := range s.workers {
		for _, sock := range w.Sockets() {
			poller.Add(sock, zmq.POLLIN)
		}
	}
	wallQuantum := time.Duration(float64(Quantum) / s.o.Speed)
	next := time.Now()
	behind := false
	polls := 0
	var lastCmd time.Time
	for {
		for drained := false; !drained; {
			select {
			case <-s.stop:
				return
			case fn := <-s.cmds:
				fn()
				lastCmd = time.Now()
			default:
				drained = true
			}
		}
		timeout := 20 * time.Millisecond
		if s.o.Manual && time.Since(lastCmd) < manualBusy {
			// Commands are coming one after the other (a test pacing
			// the clock a quantum at a time): take the next one within
			// a millisecond, not after a 20 ms poll.
			timeout = time.Millisecond
		}
		if !s.o.Manual {
			now := time.Now()
			for n := 0; !now.Before(next) && n < 1000; n++ {
				s.quantum()
				next = next.Add(wallQuantum)
			}
			if lag := now.Sub(next); lag > time.Second {
				if !behind {
					s.logf("sim: the clock fell %s behind (machine too slow for this speed); skipping ahead", lag.Round(time.Millisecond))
					behind = true
				}
				next = now
			}
			timeout = min(max(time.Until(next), time.Millisecond), timeout)
		}
		if !s.o.Manual && polls%replayPollEvery != 0 {
			// Between replay checks the loop only sleeps: a zmq_poll
			// over every ROUTER each quantum was a third of the
			// simulator's CPU (a few µs a socket a call), and twenty
			// simulators were what kept the 1 000-worker measurement
			// from leaving kvtop a core.
			polls++
			time.Sleep(timeout)
			continue
		}
		polls++
		if !s.o.Manual {
			timeout = 0
		}
		if ready, err := poller.Poll(timeout); err == nil && len(ready) > 0 {
			for _, w := range s.workers {
				w.ServeReplays()
			}
		}
	}
}

// manualBusy is how long after a command a manual clock keeps waiting for
// the next one a millisecond at a time (an idle one polls every 20 ms).
const manualBusy = 100 * time.Millisecond

// replayPollEvery is how many quanta apart a running simulator checks its
// replay sockets: a request waits at most ~40 ms more for its answer.
const replayPollEvery = 4

// quantum advances the simulated clock by one Quantum.
func (s *Sim) quantum() {
	end := s.now + Quantum
	for _, c := range s.player.Due(s.now) {
		if c.Phase != "" {
			s.phase.Store(c.Phase)
			s.logf("t=%s phase: %s", s.now.Round(time.Second), c.Phase)
		}
		for _, a := range c.Actions {
			s.apply(a)
		}
	}
	for len(s.timers) > 0 && s.timers[0].at <= s.now {
		t := s.timers[0]
		s.timers = s.timers[1:]
		t.fn()
	}
	for _, a := range s.router.Route(end) {
		w := s.workers[a.Worker]
		if w.Down() {
			s.router.Rejected(a.Req, "worker restarting")
			continue
		}
		rank := s.pickRank(a.Worker, a.Req)
		s.router.Dispatched(a.Req, rank)
		s.prefillLeg(a.Req)
		if !w.Engines[rank].Submit(a.Req) {
			s.dropLeg(a.Req)
			s.router.Rejected(a.Req, "queue full")
		}
	}
	for wi, w := range s.workers {
		for r, e := range w.Engines {
			e.Run(end, func(at time.Duration, events []kvcache.Event) { s.emit(wi, r, at, events) })
		}
	}
	for _, w := range s.workers {
		for _, e := range w.Engines {
			for _, res := range e.TakeResults() {
				s.finished(res)
			}
		}
	}
	if err := s.router.Flush(); err != nil {
		s.logf("sim: writing %s: %v", s.decisions, err)
	}
	s.now = end
	if s.o.Duration > 0 && s.now >= s.o.Duration && !s.doneSet {
		s.doneSet = true
		close(s.done)
	}
}

// emit publishes one engine step's events and feeds the router's index,
// hashed with the worker's own seed when it has one: its cache still hits
// its own blocks, but no hash it publishes matches the pool's.
func (s *Sim) emit(w, rank int, at time.Duration, events []kvcache.Event) {
	s.roots.saw(w, events, s.seeds[w])
	if s.ledger != nil {
		s.ledger.saw(w, rank, events, s.seeds)
	}
	events, s.hashBuf = kvcache.Reseed(events, s.seeds[w], s.evBuf, s.hashBuf)
	if s.seeds[w] != 0 {
		s.evBuf = events
	}
	ts := promtext.Unix(s.wallNow())
	if s.dyn != nil {
		if err := s.dyn.publish(w, rank, events); err != nil {
			s.logf("sim: w%d rank %d publish to NATS: %v", w, rank, err)
		}
	} else if err := s.workers[w].Publish(rank, ts, events); err != nil {
		s.logf("sim: w%d rank %d publish: %v", w, rank, err)
	}
	s.router.Observe(w, events, at)
}

// pickRank is the worker's own data-parallel balancing, as vLLM's front
// end does it: the engine with the lowest waiting*4 + running, blind to the
// cache (ties rotate).
func (s *Sim) pickRank(w int, _ *engine.Request) int {
	engines := s.workers[w].Engines
	n := len(engines)
	if n == 1 {
		return 0
	}
	s.rankTurn++
	best, bestScore := -1, 0
	for k := 0; k < n; k++ {
		r := (s.rankTurn + k) % n
		if sc := engines[r].Score(); best < 0 || sc < bestScore {
			best, bestScore = r, sc
		}
	}
	return best
}

// apply carries out one scenario action now.
func (s *Sim) apply(a scenario.Action) {
	s.logf("t=%s   %s", s.now.Round(time.Second), a)
	switch a := a.(type) {
	case scenario.EventLoss:
		if s.dyn != nil {
			s.dynWithhold(a.Worker, a.Rank, a.Batches)
		} else if p := s.pub(a.Worker, a.Rank); p != nil {
			p.Withhold(a.Batches)
		}
	case scenario.ReplayOverflow:
		if s.dyn != nil {
			s.dynWithhold(a.Worker, a.Rank, 128+max(a.Extra, 1))
		} else if p := s.pub(a.Worker, a.Rank); p != nil {
			p.Withhold(p.RingCap() + max(a.Extra, 1))
		}
	case scenario.WorkerRestart:
		s.restartWorker(a)
	case scenario.RouterRestart:
		s.router.Restart()
	case scenario.SlowScrape:
		if a.Worker < len(s.workers) {
			s.workers[a.Worker].SetScrapeDelay(a.Delay)
		}
	case scenario.HotPrefix:
		s.router.Workload().SetHot(s.now, a.Rate)
		t := a.Threshold
		if t == 0 {
			t = DefaultThreshold
		}
		s.router.SetThreshold(t)
	case scenario.Truncate:
		s.router.SetTruncate(a.Fraction)
	case scenario.SlowFirstToken:
		if a.Worker >= 0 && a.Worker < len(s.workers) {
			s.workers[a.Worker].SetFirstTokenDelay(a.Delay)
		}
	case scenario.CutStreams:
		if a.Worker >= 0 && a.Worker < len(s.workers) {
			s.workers[a.Worker].CutEvery(a.Every)
		}
	case scenario.ClientLoad:
		if s.clients != nil {
			s.clients.setRate(a.Rate)
		}
	case scenario.ClearCache:
		if a.Worker < len(s.workers) && a.Rank < len(s.workers[a.Worker].Engines) {
			e := s.workers[a.Worker].Engines[a.Rank]
			e.ClearCache()
			if ev := e.Flush(); len(ev) > 0 {
				s.emit(a.Worker, a.Rank, s.now, ev)
			}
		}
	case scenario.SetRate:
		s.router.Workload().SetRate(s.now, s.baseRate*a.Factor)
	case scenario.HashSeed:
		if a.Worker >= 0 && a.Worker < len(s.workers) {
			s.seeds[a.Worker] = a.Seed
		}
	case scenario.Tiers:
		s.setTiers(a)
	case scenario.ReportFull:
		s.router.Workload().SetReportFull(a.Fraction)
	case scenario.Unique:
		s.router.Workload().SetUnique(a.Share, a.Turns)
	case scenario.Policy:
		p := s.basePolicy
		if a.Name != "" {
			var err error
			if p, err = router.ParsePolicy(a.Name); err != nil {
				s.logf("sim: %v", err)
				return
			}
		}
		s.router.SetPolicy(p)
	}
}

// dynWithhold drops worker w's next n events before they reach NATS.
func (s *Sim) dynWithhold(w, rank, n int) {
	if w < 0 || w >= len(s.dyn.withhold) || rank < 0 || rank >= len(s.dyn.withhold[w]) {
		s.logf("sim: no publisher w%d rank %d", w, rank)
		return
	}
	s.dyn.withhold[w][rank] += n
}

func (s *Sim) pub(w, rank int) interface {
	Withhold(int)
	RingCap() int
} {
	if w < 0 || w >= len(s.workers) || rank < 0 || rank >= len(s.workers[w].Pubs) {
		s.logf("sim: no publisher w%d rank %d", w, rank)
		return nil
	}
	return s.workers[w].Pubs[rank]
}

func (s *Sim) restartWorker(a scenario.WorkerRestart) {
	if a.Worker < 0 || a.Worker >= len(s.workers) {
		return
	}
	w := s.workers[a.Worker]
	if w.Down() {
		return
	}
	s.ledgerRestart(a.Worker)
	for _, res := range w.Restart(s.now, s.wallNow()) {
		s.finished(res)
	}
	w.SetDown(true)
	s.router.SetDown(a.Worker, true)
	s.router.Forget(a.Worker)
	s.after(a.Down, func() {
		for _, e := range w.Engines {
			e.SetBlocks(a.Blocks)
		}
		s.seeds[a.Worker] = a.Seed
		s.ledgerRestart(a.Worker)
		w.Restart(s.now, s.wallNow()) // the new process starts now: start time, seq 0
		if s.dynIDs != nil {
			s.dynIDs.renew(a.Worker) // Dynamo: a new worker id…
		}
		if s.dyn != nil {
			s.dyn.restart(a.Worker) // …and event ids from 1
		}
		w.SetDown(false)
		s.router.SetDown(a.Worker, false)
		s.logf("t=%s w%d is back (empty cache, seq from 0)", s.now.Round(time.Second), a.Worker)
	})
}

// ledgerRestart tells the ledger (if any) that worker w's engines are
// about to be reset.
func (s *Sim) ledgerRestart(w int) {
	if s.ledger != nil {
		s.ledger.restart(w, s.workers[w].Engines)
	}
}

func (s *Sim) after(d time.Duration, fn func()) {
	t := timer{at: s.now + d, fn: fn}
	i := len(s.timers)
	for i > 0 && s.timers[i-1].at > t.at {
		i--
	}
	s.timers = append(s.timers[:i], append([]timer{t}, s.timers[i:]...)...)
}

// do runs fn on the loop goroutine and waits for it.
func (s *Sim) do(fn func()) error {
	ran := make(chan struct{})
	select {
	case s.cmds <- func() { fn(); close(ran) }:
	case <-s.stopped:
		return fmt.Errorf("sim: closed")
	}
	select {
	case <-ran:
		return nil
	case <-s.stopped:
		return fmt.Errorf("sim: closed")
	}
}

// Inject applies a scenario action now (tests, and operators via code).
func (s *Sim) Inject(a scenario.Action) error { return s.do(func() { s.apply(a) }) }

// Advance runs d of simulated time at once (Manual mode; in live mode it
// adds d on top of the running clock). Replay requests that arrive meanwhile
// are served after it returns.
func (s *Sim) Advance(d time.Duration) error {
	return s.do(func() {
		for end := s.now + d; s.now < end; {
			s.quantum()
		}
	})
}

// Now is the simulated time since start.
func (s *Sim) Now() time.Duration {
	var now time.Duration
	s.do(func() { now = s.now })
	return now
}
