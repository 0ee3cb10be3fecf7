package pool

import (
	"math"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/snapshot"
)

// Throughput: prompt and generation tokens per second and finished
// requests per second, from the engines' counters (vllm:prompt_tokens_total,
// vllm:generation_tokens_total, vllm:request_success_total; SGLang's
// prompt_tokens_total, generation_tokens_total, num_requests_total) over
// the window. The counter windows handle resets (a decrease counts the new
// value) and process restarts (the next value counts whole); a rate is
// the increase over the span the samples really cover.

// Throughput counters, in the order of engine.tput.
const (
	tputPrompt = iota
	tputGeneration
	tputFinished
	nTput
)

// tputFields are the counters' snapshot words (collectors' notes).
var tputFields = [nTput]string{"prompt_tokens", "generation_tokens", "requests_finished"}

// applyThroughput records one scrape's counters. A value the collector
// rejected is neither present nor absent; a negative one is no counter.
func (e *engine) applyThroughput(em *collectors.EngineMetrics, at time.Time, window time.Duration, inv map[invalidKey]bool) {
	for k, p := range [nTput]*float64{em.PromptTokens, em.GenerationTokens, em.RequestsFinished} {
		if inv[invalidKey{em.Engine, tputFields[k]}] {
			continue
		}
		v := finite(p)
		if v != nil && *v < 0 {
			continue
		}
		e.tput[k].observe(at, v, window)
	}
}

func (e *engine) throughputRestarted() {
	for k := range e.tput {
		e.tput[k].restarted()
	}
}

// tputAcc sums per-second rates of several counters of each kind.
type tputAcc struct {
	v  [nTput]float64
	ok [nTput]bool
}

func (a *tputAcc) addEngine(e *engine, now time.Time, w time.Duration) {
	for k := range e.tput {
		d, cov, ok := e.tput[k].delta(now, w)
		if !ok || cov <= 0 {
			continue
		}
		a.v[k] += d / cov.Seconds()
		a.ok[k] = true
	}
}

func (a *tputAcc) merge(o tputAcc) {
	for k := range a.v {
		if o.ok[k] {
			a.v[k] += o.v[k]
			a.ok[k] = true
		}
	}
}

// figures are the rates as a row holds them, in one allocation: tokens
// per second and finished requests per second (nil where unknown).
func (a tputAcc) figures() (snapshot.Tokens, *float64) {
	vals := new([nTput]float64)
	var out [nTput]*float64
	for k := range a.v {
		if a.ok[k] && !math.IsNaN(a.v[k]) && !math.IsInf(a.v[k], 0) {
			vals[k] = a.v[k]
			out[k] = &vals[k]
		}
	}
	return snapshot.Tokens{Prompt: out[tputPrompt], Generation: out[tputGeneration]}, out[tputFinished]
}

// throughput is a worker's rates: its worker-level counters where the page
// has them (SGLang counts tokens per server, not per rank), else the sum
// over its engines. Never both: the same tokens would count twice.
func (w *worker) throughput(names []string, now time.Time, win time.Duration) tputAcc {
	var acc, tot tputAcc
	if w.totals != nil {
		tot.addEngine(w.totals, now, win)
	}
	for _, name := range names { // in name order: the same float sum every time
		acc.addEngine(w.engines[name], now, win)
	}
	for k := range acc.v {
		if tot.ok[k] {
			acc.v[k], acc.ok[k] = tot.v[k], true
		}
	}
	return acc
}
