package hostile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Sample is one reading of a process from /proc.
type Sample struct {
	At  time.Duration // since the process started being sampled
	RSS int64         // resident set size, bytes (VmRSS)
	CPU time.Duration // user + system time so far
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux the project runs on.
const clockTick = 100

// ReadProc reads a process's RSS and CPU time.
func ReadProc(pid int) (rss int64, cpu time.Duration, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	rss = -1
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb << 10
		}
	}
	if rss < 0 {
		return 0, 0, fmt.Errorf("pid %d: no VmRSS (exited?)", pid)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// utime and stime are fields 14 and 15, counted after its ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("pid %d: unreadable stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("pid %d: short stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return rss, time.Duration(ut+st) * time.Second / clockTick, nil
}

// Usage is a run's RSS and CPU.
type Usage struct {
	Samples                   int
	Duration                  time.Duration
	RSSMin, RSSMedian, RSSMax float64 // MiB
	// Slope is the RSS trend over the last minute (least squares), MiB per
	// minute: flat is within a few MiB of 0.
	Slope float64
	// CPU is the mean share of one core over the run, CPULast over the
	// last minute, in percent.
	CPU, CPULast float64
}

// Summarize reads samples (in order) over the run, from warmup on (the
// process starting up is not the input), and over its last window.
func Summarize(ss []Sample, warmup, window time.Duration) Usage {
	var s Usage
	for len(ss) > 2 && ss[0].At < warmup {
		ss = ss[1:]
	}
	if len(ss) < 2 {
		return s
	}
	s.Samples = len(ss)
	first, last := ss[0], ss[len(ss)-1]
	s.Duration = last.At - first.At
	rss := make([]float64, len(ss))
	for i, x := range ss {
		rss[i] = float64(x.RSS) / (1 << 20)
	}
	sorted := append([]float64(nil), rss...)
	sort.Float64s(sorted)
	s.RSSMin, s.RSSMax = sorted[0], sorted[len(sorted)-1]
	s.RSSMedian = median(sorted)
	s.CPU = 100 * (last.CPU - first.CPU).Seconds() / s.Duration.Seconds()
	k := len(ss) - 1
	for k > 0 && last.At-ss[k-1].At <= window {
		k--
	}
	tail := ss[k:]
	if d := last.At - tail[0].At; d > 0 {
		s.CPULast = 100 * (last.CPU - tail[0].CPU).Seconds() / d.Seconds()
	}
	s.Slope = slope(tail) * 60 / (1 << 20)
	return s
}

// median of sorted values.
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// slope is the least-squares RSS trend of ss, bytes per second.
func slope(ss []Sample) float64 {
	if len(ss) < 2 {
		return 0
	}
	var sx, sy float64
	for _, s := range ss {
		sx += s.At.Seconds()
		sy += float64(s.RSS)
	}
	n := float64(len(ss))
	mx, my := sx/n, sy/n
	var num, den float64
	for _, s := range ss {
		dx := s.At.Seconds() - mx
		num += dx * (float64(s.RSS) - my)
		den += dx * dx
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// Run is one measured kvtop process.
type Run struct {
	Samples []Sample
	Stdout  []byte // the snapshot (json)
	Stderr  []byte
	Exit    int
	// Load is /proc/loadavg's 1-minute figure at the start and the end.
	LoadStart, LoadEnd float64
	// Killed says kvtop was stopped at MaxRSS: it grew past the bound.
	Killed bool
}

// Measure runs `kvtop snapshot -c cfg --for d --format json` and samples
// the process every second until it exits; past maxRSS bytes (0: no
// bound) it is killed, so that a kvtop that grows without bound cannot
// take the machine. args are added to kvtop's.
func Measure(ctx context.Context, kvtop, cfg string, d time.Duration, maxRSS int64, args ...string) (*Run, error) {
	r := &Run{LoadStart: loadAvg()}
	var out, errb bytes.Buffer
	argv := append([]string{"snapshot", "-c", cfg, "--for", d.String(), "--format", "json"}, args...)
	cmd := exec.CommandContext(ctx, kvtop, argv...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t0 := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sample := func() {
		if rss, cpu, err := ReadProc(cmd.Process.Pid); err == nil {
			r.Samples = append(r.Samples, Sample{At: time.Since(t0), RSS: rss, CPU: cpu})
			if maxRSS > 0 && rss > maxRSS && !r.Killed {
				r.Killed = true
				_ = cmd.Process.Kill()
			}
		}
	}
	sample()
	var err error
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-tick.C:
			sample()
		}
	}
	r.LoadEnd = loadAvg()
	r.Stdout, r.Stderr = out.Bytes(), errb.Bytes()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Exit, err = ee.ExitCode(), nil
	}
	return r, err
}

func loadAvg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
