package tap

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kvtop/kvtop/collectors"
)

// Outcome is the record as the pool takes it: an outcome observed at the
// client (Observer client), seen at `at` on kvtop's clock.
func (r *Record) Outcome(source string, at time.Time) *collectors.Outcome {
	done := r.Done()
	o := &collectors.Outcome{
		TS: r.Ended, RequestID: r.RequestID, Worker: r.Worker, HTTPStatus: r.HTTPStatus,
		PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens, OutputTokens: r.OutputTokens,
		TTFTMS: msp(r.TTFT), TTFBMS: msp(r.TTFB), MaxGapMS: msp(r.MaxGap), Breaks: intp(r.Breaks),
		PromptChars: r.PromptChars, FinishReason: r.Finish, Done: &done, End: string(r.End),
		ClientSlow: r.ClientSlow, Observer: collectors.ObserverClient, Format: "tap", Source: source, At: at,
	}
	e2e := ms(r.Ended.Sub(r.Arrived))
	o.E2EMS = &e2e
	return o
}

// Tap is one pass-through run inside kvtop (config taps:).
type Tap struct {
	Options
	Listen string
	TLS    *tls.Config
	Sink   *Sink // also written there, when set
}

// Collector runs taps and sends their records to the pool: a collectors.
// Collector, so a tap is one more source of observations.
type Collector struct {
	taps []Tap
}

// NewCollector checks the taps' options (nothing listens before Run).
func NewCollector(taps []Tap) (*Collector, error) {
	for _, t := range taps {
		if _, err := New(t.Options); err != nil {
			return nil, fmt.Errorf("tap %s: %w", t.Name, err)
		}
	}
	return &Collector{taps: taps}, nil
}

// Name implements collectors.Collector.
func (c *Collector) Name() string { return "taps" }

// statusEvery is how often a tap's reading state goes to the pool, when
// it changed.
const statusEvery = 2 * time.Second

// Run listens on every tap's address (an address in use is fatal: the
// operator asked for it) and serves until ctx is done.
func (c *Collector) Run(ctx context.Context, out chan<- collectors.Observation) error {
	var lns []net.Listener
	for _, t := range c.taps {
		ln, err := net.Listen("tcp", t.Listen)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("tap %s: %w", t.Name, err)
		}
		lns = append(lns, ln)
	}
	var wg sync.WaitGroup
	for i, t := range c.taps {
		source := "tap " + t.Name
		send := func(o collectors.Observation) {
			select {
			case out <- o:
			case <-ctx.Done():
			}
		}
		o := t.Options
		sink := t.Sink
		o.Record = func(r *Record) {
			if sink != nil {
				sink.Write(r)
			}
			send(r.Outcome(source, time.Now()))
		}
		p, err := New(o)
		if err != nil {
			return err // checked by NewCollector
		}
		wg.Add(2)
		go func(ln net.Listener, tc *tls.Config) {
			defer wg.Done()
			_ = Serve(ctx, ln, p, tc, 5*time.Second, nil)
		}(lns[i], t.TLS)
		go func() {
			defer wg.Done()
			reportStatus(ctx, p, source+" "+lns[i].Addr().String()+" → "+t.Upstream, send)
		}()
	}
	wg.Wait()
	return nil
}

// reportStatus tells the pool what a tap is doing, as a decision log's
// reading state: records made, requests not sampled, bad input.
func reportStatus(ctx context.Context, p *Proxy, source string, send func(collectors.Observation)) {
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	var last Stats
	for first := true; ; first = false {
		if s := p.Stats(); first || s != last {
			last = s
			st := &collectors.DecisionSource{Source: source, Format: "tap", Detected: "kvtop", Lines: uint64(s.Requests),
				Outcomes: uint64(s.Recorded), Bad: uint64(s.Unread), Skipped: uint64(s.Unsampled), SkippedBy: map[string]uint64{}, At: time.Now()}
			if s.Unsampled > 0 {
				st.SkippedBy["not sampled"] = uint64(s.Unsampled)
			}
			send(st)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
