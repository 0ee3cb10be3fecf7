package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/sim/engine"
)

// A disaggregated pool (issue 27): --pd P:D runs P prefill workers (w0…)
// and D decode workers after them. The router sends each request to a
// prefill worker, which computes the prompt and its first token (the
// request's prefill leg: max_tokens 1, as llm-d's and Dynamo's P/D
// proxies send it); then the decode leg goes to the least loaded decode
// worker, whose engine receives the prompt's KV by transfer and generates
// the rest. The router's decision and outcome are the request's: chosen
// the prefill worker, TTFT and end to end from the decode leg.

// ParsePD reads --pd's "P:D" (both at least 1).
func ParsePD(s string) (prefill, decode int, err error) {
	p, d, ok := strings.Cut(s, ":")
	if ok {
		prefill, err = strconv.Atoi(strings.TrimSpace(p))
		if err == nil {
			decode, err = strconv.Atoi(strings.TrimSpace(d))
		}
	}
	if !ok || err != nil || prefill < 1 || decode < 1 {
		return 0, 0, fmt.Errorf("--pd %q: want P:D, prefill and decode workers, each at least 1 (e.g. 2:4)", s)
	}
	return prefill, decode, nil
}

// pdTransferDelay is the decode leg's delay after its prefill leg ends:
// NIXL's handshake and notification; the blocks' own transfer time is the
// decode engine's step (engine.transfer).
const pdTransferDelay = 2 * time.Millisecond

// pdLeg is a request in its prefill leg: the output it still owes.
type pdLeg struct {
	outputLen int
	arrival   time.Duration
	tag       any
}

// isDecode reports whether worker w is a decode worker.
func (s *Sim) isDecode(w int) bool { return s.pd > 0 && w >= s.o.Workers-s.pd }

// Role is worker w's role in the pool: "prefill" or "decode" with --pd,
// "" otherwise.
func (s *Sim) Role(w int) string {
	switch {
	case s.pd == 0:
		return ""
	case s.isDecode(w):
		return "decode"
	}
	return "prefill"
}

// prefillLeg turns a routed request into its prefill leg (one output
// token), remembering what the decode leg owes.
func (s *Sim) prefillLeg(q *engine.Request) {
	if s.pd == 0 || q.Transfer {
		return
	}
	s.legs[q] = pdLeg{outputLen: q.OutputLen, arrival: q.Arrival, tag: q.Tag}
	q.OutputLen = 1
}

// finished takes an engine's result: a prefill leg's hands its decode leg
// to a decode worker; any other goes to the router, a decode leg's timed
// from the request's arrival.
func (s *Sim) finished(res engine.Result) {
	leg, ok := s.legs[res.Req]
	if !ok {
		if res.Req.Transfer {
			if orig, ok := s.decodeOf[res.Req]; ok {
				delete(s.decodeOf, res.Req)
				res.Req, res.Queue, res.CachedTokens = orig.req, orig.queue, orig.cached
				res.TTFT += orig.wait
				res.E2E = res.End - orig.req.Arrival
			}
		}
		s.router.Done(res)
		return
	}
	delete(s.legs, res.Req)
	if res.Status != engine.Finished {
		res.Req.OutputLen = leg.outputLen
		s.router.Done(res)
		return
	}
	d := &engine.Request{
		ID: res.Req.ID, Tokens: res.Req.Tokens, Hashes: res.Req.Hashes, PromptLen: res.Req.PromptLen,
		OutputLen: leg.outputLen, Length: res.Req.Length, Arrival: res.End + pdTransferDelay, Tag: res.Req.Tag, Transfer: true,
	}
	res.Req.OutputLen = leg.outputLen
	w := s.decodeWorker()
	if w < 0 || !s.workers[w].Engines[s.pickRank(w, d)].Submit(d) {
		res.Status = engine.Aborted // no decode worker could take it
		s.router.Done(res)
		return
	}
	s.decodeOf[d] = decodeLeg{req: res.Req, queue: res.Queue, cached: res.CachedTokens, wait: d.Arrival - res.Req.Arrival}
}

// decodeLeg is what a decode leg's result needs of its request.
type decodeLeg struct {
	req    *engine.Request
	queue  time.Duration
	cached int
	wait   time.Duration // from the request's arrival to the decode leg's
}

// decodeWorker is the least loaded decode worker that is up (-1: none).
func (s *Sim) decodeWorker() int {
	best, load := -1, 0
	for w := s.o.Workers - s.pd; w < s.o.Workers; w++ {
		if s.workers[w].Down() {
			continue
		}
		l := 0
		for _, e := range s.workers[w].Engines {
			l += e.Load()
		}
		if best < 0 || l < load {
			best, load = w, l
		}
	}
	return best
}

// dropLeg forgets a prefill leg no engine took.
func (s *Sim) dropLeg(q *engine.Request) {
	if leg, ok := s.legs[q]; ok {
		q.OutputLen = leg.outputLen
		delete(s.legs, q)
	}
}
