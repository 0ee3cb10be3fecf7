// Command kvtop-hostile serves one of issue 8's hostile inputs beside a
// well-formed simulated pool and, with -kvtop, measures a kvtop process
// watching it: RSS and CPU every second for -for, then what kvtop said
// about the hostile workers (docs/PERFORMANCE.md, "Hostile inputs").
//
//	go build -o /tmp/kvtop ./cmd/kvtop
//	go run ./sim/hostile/cmd/kvtop-hostile -list
//	go run ./sim/hostile/cmd/kvtop-hostile -input flood -kvtop /tmp/kvtop -for 120s
//	go run ./sim/hostile/cmd/kvtop-hostile -input all -kvtop /tmp/kvtop -for 120s
//	go run ./sim/hostile/cmd/kvtop-hostile -input redirect -write-config h.yaml   # then: kvtop -c h.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kvtop/kvtop/sim/hostile"
)

func main() {
	var (
		input   = flag.String("input", "", "hostile input to serve (see -list), or all (with -kvtop)")
		list    = flag.Bool("list", false, "list the inputs and exit")
		workers = flag.Int("workers", 4, "well-formed simulated workers beside the hostile ones")
		write   = flag.String("write-config", "", "write the kvtop config here (serve mode: default ./kvtop-hostile.yaml)")
		kvtop   = flag.String("kvtop", "", "kvtop binary to measure: runs `kvtop snapshot --for` against the input")
		dur     = flag.Duration("for", 120*time.Second, "how long kvtop collects (with -kvtop)")
		warmup  = flag.Duration("warmup", 10*time.Second, "samples before this are kvtop starting up, not the input (left out of the summary)")
		out     = flag.String("out", "", "folder for each run's samples (CSV), snapshot (JSON) and stderr (with -kvtop)")
		maxRSS  = flag.Int64("max-rss", 4096, "kill kvtop past this RSS, MiB (it grew without bound); 0 = never")
		omit    = flag.String("omit", "", "top-level config keys to leave out, comma separated (an older kvtop that does not know them: -omit replay_deadline)")
	)
	flag.Parse()
	if *list {
		for _, n := range hostile.Names() {
			fmt.Printf("%-13s %s\n", n, hostile.Summary(n))
		}
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	names := []string{*input}
	if *input == "all" && *kvtop != "" {
		names = hostile.Names()
	} else if hostile.Summary(*input) == "" {
		fail(2, "-input %q: want one of %s (or all, with -kvtop)", *input, strings.Join(hostile.Names(), ", "))
	}
	if *kvtop == "" {
		serve(ctx, *input, *workers, *write)
		return
	}
	var rows []string
	for _, n := range names {
		row, err := measure(ctx, n, *workers, *kvtop, *dur, *warmup, *maxRSS<<20, *out, *omit)
		if err != nil {
			fail(1, "%s: %v", n, err)
		}
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println("\n| input | RSS min / median / max (MiB) | slope, last minute (MiB/min) | CPU, % of one core (last minute) | load |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kvtop-hostile: "+format+"\n", args...)
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s kvtop-hostile: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// serve runs the input until interrupted.
func serve(ctx context.Context, name string, workers int, write string) {
	p, err := hostile.Start(ctx, name, hostile.Options{Workers: workers, Logf: logf})
	if err != nil {
		fail(1, "%v", err)
	}
	defer p.Close()
	if write == "" {
		write = "kvtop-hostile.yaml"
	}
	if err := p.WriteConfig(write); err != nil {
		fail(1, "%v", err)
	}
	fmt.Printf("kvtop-hostile: %s: %s\nconfig written to %s (run: kvtop -c %s); Ctrl-C to stop\n", name, hostile.Summary(name), write, write)
	<-ctx.Done()
	for _, l := range p.Stats() {
		fmt.Println(l)
	}
}

// measure runs kvtop against one input and prints what it saw; it returns
// the input's table row.
func measure(ctx context.Context, name string, workers int, kvtop string, dur, warmup time.Duration, maxRSS int64, out, omit string) (string, error) {
	dir, err := os.MkdirTemp("", "kvtop-hostile-run-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	p, err := hostile.Start(ctx, name, hostile.Options{Workers: workers, Dir: dir, Logf: logf})
	if err != nil {
		return "", err
	}
	defer p.Close()
	cfg := filepath.Join(dir, "kvtop.yaml")
	if err := p.WriteConfig(cfg); err != nil {
		return "", err
	}
	if err := omitKeys(cfg, omit); err != nil {
		return "", err
	}
	fmt.Printf("\n== %s: %s\n", name, hostile.Summary(name))
	r, err := hostile.Measure(ctx, kvtop, cfg, dur, maxRSS)
	if err != nil {
		return "", err
	}
	if r.Killed {
		fmt.Printf("KILLED: kvtop's RSS passed %d MiB after %.0f s\n", maxRSS>>20, r.Samples[len(r.Samples)-1].At.Seconds())
	}
	s := hostile.Summarize(r.Samples, warmup, time.Minute)
	fmt.Printf("kvtop snapshot --for %s: exit %d, %d samples, load average %.1f at the start, %.1f at the end\n", dur, r.Exit, s.Samples, r.LoadStart, r.LoadEnd)
	fmt.Printf("RSS %.1f / %.1f / %.1f MiB (min / median / max after %s), last-minute slope %+.2f MiB/min; CPU %.1f%% of one core (last minute %.1f%%)\n",
		s.RSSMin, s.RSSMedian, s.RSSMax, warmup, s.Slope, s.CPU, s.CPULast)
	fmt.Println("what kvtop says:")
	lines, err := hostile.Digest(r.Stdout, p.Hostile)
	if err != nil {
		fmt.Printf("  (no snapshot: %v)\n", err)
	}
	for _, l := range lines {
		fmt.Println("  " + l)
	}
	if st := p.Stats(); len(st) > 0 {
		fmt.Println("what the hostile peers did:")
		for _, l := range st {
			fmt.Println("  " + l)
		}
	}
	if e := strings.TrimSpace(string(r.Stderr)); e != "" {
		fmt.Println("kvtop's stderr:")
		for _, l := range strings.Split(e, "\n") {
			fmt.Println("  " + l)
		}
	}
	if out != "" {
		if err := save(out, name, r); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("| %s | %.0f / %.0f / %.0f | %+.1f | %.1f (%.1f) | %.1f–%.1f |",
		name, s.RSSMin, s.RSSMedian, s.RSSMax, s.Slope, s.CPU, s.CPULast, r.LoadStart, r.LoadEnd), nil
}

// omitKeys drops the top-level keys (comma separated) from the config
// file: their line, and the lines indented under it.
func omitKeys(file, keys string) error {
	if keys == "" {
		return nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	drop := map[string]bool{}
	for _, k := range strings.Split(keys, ",") {
		drop[strings.TrimSpace(k)] = true
	}
	var kept []string
	skipping := false
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && l[0] != ' ' && l[0] != '-' {
			k, _, _ := strings.Cut(l, ":")
			skipping = drop[k]
		}
		if !skipping {
			kept = append(kept, l)
		}
	}
	return os.WriteFile(file, []byte(strings.Join(kept, "\n")), 0o644)
}

// save keeps a run's samples, snapshot and stderr in folder out.
func save(out, name string, r *hostile.Run) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("seconds,rss_bytes,cpu_seconds\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "%.3f,%d,%.2f\n", s.At.Seconds(), s.RSS, s.CPU.Seconds())
	}
	for file, data := range map[string][]byte{name + ".csv": []byte(b.String()), name + ".json": r.Stdout, name + ".stderr": r.Stderr} {
		if err := os.WriteFile(filepath.Join(out, file), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
