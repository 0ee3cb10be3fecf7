// Package hostile serves the hostile inputs of issue 8 on 127.0.0.1 beside
// a well-formed simulated pool (package sim), writes a kvtop config that
// points at both, and measures a kvtop process watching them: RSS and CPU
// from /proc every second, and what kvtop told the operator (the snapshot's
// errors, worker states and stream counters).
//
// Each input is one named set of hostile workers (Names, Summary): metrics
// pages too large or too slow, replay endpoints that trickle, event streams
// that flood, oversize or overfill the index, targets that redirect with a
// bearer token, values that cannot be true, counters that appear late and
// workers that restart without process_start_time_seconds. "baseline" is
// the simulated pool alone, one worker larger, for comparison.
//
// Run it with cmd/kvtop-hostile (docs/PERFORMANCE.md, "Hostile inputs"):
//
//	go build -o /tmp/kvtop ./cmd/kvtop
//	go run ./sim/hostile/cmd/kvtop-hostile -input flood -kvtop /tmp/kvtop -for 120s
//
// or without -kvtop to serve the input until interrupted, with the config
// written for a kvtop started by hand. Like package sim it does not import
// kvtop's collectors: the hostile peers speak the wire formats themselves.
package hostile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/sim"
)

// Options configure a hostile pool.
type Options struct {
	// Workers is how many well-formed simulated workers run beside the
	// hostile ones (default 4; baseline runs one more).
	Workers int
	// Dir holds the files the config points at (token, CA). "" = a
	// temporary folder, removed by Close.
	Dir string
	// Logf receives the simulated pool's log lines (nil: dropped).
	Logf func(format string, args ...any)
}

// Pool is a running hostile input and the simulated pool beside it.
type Pool struct {
	Name string
	cfg  config.Config
	// Hostile lists the names of the hostile workers in the config.
	Hostile []string

	t0     time.Time // when the pool started: the inputs' timelines start here
	dir    string
	tmp    bool
	zctx   *zmq.Context
	sim    *sim.Sim
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed []func()
	stats  []func() string
}

type input struct {
	name, summary string
	start         func(p *Pool) error // nil: the simulated pool alone
}

// Names lists the inputs, baseline first.
func Names() []string {
	ns := make([]string, len(inputs))
	for i, in := range inputs {
		ns[i] = in.name
	}
	return ns
}

// Summary says what an input serves ("" for an unknown name).
func Summary(name string) string {
	for _, in := range inputs {
		if in.name == name {
			return in.summary
		}
	}
	return ""
}

// Start serves the named input. Close releases everything.
func Start(ctx context.Context, name string, o Options) (_ *Pool, err error) {
	var in *input
	for i := range inputs {
		if inputs[i].name == name {
			in = &inputs[i]
		}
	}
	if in == nil {
		return nil, fmt.Errorf("no hostile input %q (want one of %s)", name, strings.Join(Names(), ", "))
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	p := &Pool{Name: name, dir: o.Dir, t0: time.Now()}
	p.ctx, p.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.dir == "" {
		if p.dir, err = os.MkdirTemp("", "kvtop-hostile-"); err != nil {
			return nil, err
		}
		p.tmp = true
	}
	n := o.Workers
	if in.start == nil {
		n++
	}
	p.sim, err = sim.Start(p.ctx, sim.Options{Workers: n, Logf: o.Logf})
	if err != nil {
		return nil, err
	}
	p.cfg = p.sim.Config()
	p.cfg.Pool = "hostile-" + name
	if p.zctx, err = zmq.NewContext(); err != nil {
		return nil, err
	}
	if in.start != nil {
		if err := in.start(p); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return p, nil
}

// Config is the kvtop config for the simulated workers and the hostile
// ones (with the limits the input needs lowered to show their plateau).
func (p *Pool) Config() config.Config { return p.cfg }

// WriteConfig writes Config to path.
func (p *Pool) WriteConfig(path string) error {
	return config.Write(path, p.cfg, "kvtop config for kvtop-hostile -input "+p.Name+" ("+Summary(p.Name)+").\nValid while it runs: its ports are chosen at start.")
}

// Stats says what the hostile peers did (batches sent, replies trickled,
// tokens seen where they must not be), one line per peer.
func (p *Pool) Stats() []string {
	var out []string
	for _, f := range p.stats {
		out = append(out, f())
	}
	sort.Strings(out)
	return out
}

// Close stops the hostile peers and the simulated pool.
func (p *Pool) Close() error {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	for i := len(p.closed) - 1; i >= 0; i-- {
		p.closed[i]()
	}
	p.closed = nil
	var errs []error
	if p.sim != nil {
		errs = append(errs, p.sim.Close())
		p.sim = nil
	}
	if p.zctx != nil {
		errs = append(errs, p.zctx.Term())
		p.zctx = nil
	}
	if p.tmp {
		errs = append(errs, os.RemoveAll(p.dir))
		p.tmp = false
	}
	return errors.Join(errs...)
}

// file writes a file of the pool's folder and returns its path.
func (p *Pool) file(name string, data []byte, mode os.FileMode) (string, error) {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	return path, os.Chmod(path, mode)
}

// add puts a hostile worker in the config.
func (p *Pool) add(w config.Worker) {
	if w.DPRanks == 0 {
		w.DPRanks = 1
	}
	if w.Engine == "" {
		w.Engine = "vllm"
	}
	p.cfg.Workers = append(p.cfg.Workers, w)
	p.Hostile = append(p.Hostile, w.Name)
}

// go runs f until the pool closes.
func (p *Pool) run(f func(ctx context.Context)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f(p.ctx)
	}()
}

// onClose registers a release, run in reverse order by Close.
func (p *Pool) onClose(f func()) { p.closed = append(p.closed, f) }

// stat registers a line of Stats.
func (p *Pool) stat(f func() string) { p.stats = append(p.stats, f) }
