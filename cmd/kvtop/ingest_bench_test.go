package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/config"
	"github.com/kvtop/kvtop/pool"
	"github.com/kvtop/kvtop/sim/kvcache"
	"github.com/kvtop/kvtop/sim/wire"
	"github.com/kvtop/kvtop/snapshot"
)

// End-to-end ingest: a publisher process blasting realistic vLLM batches
// at full speed over real ZMQ tcp on 127.0.0.1 into kvtop's whole event
// path (SUB reader and decoder, seq machine, the engine's observation
// channel, the pool goroutine's index), counted from the pool's snapshots.
//
// The publisher is this test binary run again (TestIngestPublisher), so
// kvtop's CPU is this process's alone (or, for /process, the real binary's
// `kvtop snapshot`). Shape, from the environment:
//
//	KVTOP_INGEST_PUBS    publishers (workers), default 1
//	KVTOP_INGEST_STORED  BlockStored events of 16 blocks per batch, default 8
//	KVTOP_INGEST_WINDOW  seconds measured after a 2 s warm-up, default 5
//	KVTOP_INGEST_RATE    block events/s sent in all, paced; default 0: full speed
//
// A batch is a busy vLLM step in its ≥ 0.24 layout (map events, uint64
// hashes): STORED prefill chunks of 16 blocks with their token ids (16 a
// block, vocabulary-sized, parent-chained) and, as vLLM sends them, one
// BlockRemoved per evicted block for as many blocks: 2×16×STORED block
// events. Every publisher churns its own 64 k resident blocks. Run with
//
//	go test -run '^$' -bench IngestZMQ -benchtime 1x ./cmd/kvtop/
//
// Metrics: blockevents/s applied by the pool per second of wall time (and
// batches/s), blockevents/cpu-s per second of kvtop's CPU (user + system),
// cpu-cores, and lost/s: batches the publishers sent that kvtop missed (the
// PUB's or SUB's high-water mark, or kvtop's own queue): a max-rate
// publisher outruns any reader, so the applied rate is kvtop's ceiling.
// missing is the seqs the streams found absent (gaps: what a PUB dropped
// at its high-water mark, or kvtop's queue), and behind the batches sent
// but not applied when the publisher stopped (at most a refresh's worth
// for a reader that keeps up; a backlog in the sockets otherwise).
//
// One fast stream (issue 23): 20 000 batches/s of one 16-block chunk and
// its 16 removals (32 block events) for 10 s:
//
//	KVTOP_INGEST_STORED=1 KVTOP_INGEST_RATE=640000 KVTOP_INGEST_WINDOW=10 \
//	  go test -run '^$' -bench IngestZMQ/engine -benchtime 1x ./cmd/kvtop/
func BenchmarkIngestZMQ(b *testing.B) {
	b.Run("engine", func(b *testing.B) { benchIngest(b, false) })
	b.Run("process", func(b *testing.B) { benchIngest(b, true) })
}

const ingestResident = 64 << 10 // blocks per publisher

func benchIngest(b *testing.B, process bool) {
	pubs := ingestEnv("KVTOP_INGEST_PUBS", 1)
	stored := ingestEnv("KVTOP_INGEST_STORED", 8)
	window := time.Duration(ingestEnv("KVTOP_INGEST_WINDOW", 5)) * time.Second
	blocksPerBatch := 2 * 16 * stored

	pub := exec.Command(os.Args[0], "-test.run=^TestIngestPublisher$")
	pub.Env = append(os.Environ(), "KVTOP_INGEST_PUBLISHER=1")
	stdout, _ := pub.StdoutPipe()
	stdin, _ := pub.StdinPipe() // closed: the publisher stops
	pub.Stderr = os.Stderr
	if err := pub.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = pub.Wait() }()
	var eps []string
	sc := bufio.NewScanner(stdout)
	for len(eps) < pubs && sc.Scan() {
		if ep, ok := strings.CutPrefix(sc.Text(), "endpoint "); ok {
			eps = append(eps, ep)
		}
	}
	if len(eps) < pubs {
		b.Fatalf("publisher gave %d endpoints, want %d", len(eps), pubs)
	}

	c := config.Defaults()
	c.Refresh = pool.MinRefresh // the last snapshot is at most this old
	for i, ep := range eps {
		c.Workers = append(c.Workers, config.Worker{Name: fmt.Sprintf("w%d", i), Events: ep})
	}
	b.ResetTimer()
	var r ingestRun
	if process {
		r = ingestProcess(b, c, window)
	} else {
		r = ingestEngine(b, c, window)
	}
	b.StopTimer()
	stdin.Close()
	sent := ingestSent(sc)
	b.ReportMetric(float64(r.batches*uint64(blocksPerBatch))/r.wall.Seconds(), "blockevents/s")
	b.ReportMetric(float64(r.batches)/r.wall.Seconds(), "batches/s")
	b.ReportMetric(float64(r.batches*uint64(blocksPerBatch))/r.cpu.Seconds(), "blockevents/cpu-s")
	b.ReportMetric(r.cpu.Seconds()/r.wall.Seconds(), "cpu-cores")
	if sent > 0 {
		b.ReportMetric(float64(sent-min(sent, r.total))/r.elapsed.Seconds(), "lost/s")
	}
	b.ReportMetric(float64(r.dropped)/r.elapsed.Seconds(), "dropped/s")
	b.ReportMetric(float64(r.missing), "missing")
	if sent > 0 {
		b.ReportMetric(float64(sent-min(sent, r.total)), "behind")
	}
	b.ReportMetric(r.sys.Seconds()/r.cpu.Seconds(), "sys-share")
	if r.switches > 0 {
		b.ReportMetric(float64(r.switches)/r.wall.Seconds(), "ctxsw/s")
	}
	if r.batches == 0 {
		b.Fatal("no batch applied")
	}
}

// ingestRun is what one measurement counted.
type ingestRun struct {
	batches   uint64        // applied within the window
	wall, cpu time.Duration // the window, and kvtop's CPU over it
	total     uint64        // applied from the start (to count what was lost)
	dropped   uint64        // of the lost, those kvtop's own queue dropped
	missing   uint64        // seqs the streams found absent (gaps)
	switches  int64         // context switches of kvtop's threads over the window (0: not counted)
	sys       time.Duration // of cpu, in the kernel
	elapsed   time.Duration // from the start to the last snapshot
}

// ingestEngine runs the engine `kvtop snapshot` runs, in this process.
func ingestEngine(b *testing.B, c config.Config, window time.Duration) ingestRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng, err := startEngine(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	p := eng.Pool
	p.SetRefresh(pool.MinRefresh)
	start := time.Now()
	snapAfter := func(t time.Time) *snapshot.Snapshot {
		for s := range p.Snapshots() {
			if s.At.After(t) {
				return s
			}
		}
		b.Fatal("pool stopped")
		return nil
	}
	s0 := snapAfter(start.Add(2 * time.Second))
	cpu0, sys0 := ingestCPU()
	cs0 := ingestSwitches()
	s1 := snapAfter(s0.At.Add(window))
	cpu1, sys1 := ingestCPU()
	cs1 := ingestSwitches()
	n1, d1 := ingestBatches(s1)
	n0, _ := ingestBatches(s0)
	return ingestRun{
		batches: n1 - n0, wall: s1.At.Sub(s0.At), cpu: cpu1 - cpu0, sys: sys1 - sys0,
		total: n1, dropped: d1, missing: ingestMissing(s1), elapsed: s1.At.Sub(start),
		switches: cs1 - cs0,
	}
}

// ingestProcess runs the real binary's `kvtop snapshot` twice as long as
// the warm-up, then the window, and reads the counts from its JSON: the
// wall time and CPU are the whole process's (warm-up and start included,
// so its figures are a little lower than the window's).
func ingestProcess(b *testing.B, c config.Config, window time.Duration) ingestRun {
	dir := b.TempDir()
	cfg := filepath.Join(dir, "kvtop.yaml")
	if err := config.Write(cfg, c, ""); err != nil {
		b.Fatal(err)
	}
	exe := filepath.Join(dir, "kvtop")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	total := 2*time.Second + window
	cmd := exec.Command(exe, "snapshot", "--config", cfg, "--for", total.String(), "--format", "json")
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil && len(out) == 0 {
		b.Fatalf("kvtop snapshot: %v", err)
	}
	var s snapshot.Snapshot
	if err := json.Unmarshal(out, &s); err != nil {
		b.Fatalf("kvtop snapshot output: %v", err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	n, d := ingestBatches(&s)
	return ingestRun{batches: n, wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), sys: time.Duration(ru.Stime.Nano()),
		total: n, dropped: d, missing: ingestMissing(&s), elapsed: wall}
}

// ingestBatches sums the streams' applied and dropped batches.
func ingestBatches(s *snapshot.Snapshot) (applied, dropped uint64) {
	for _, w := range s.Workers {
		for _, st := range w.Streams {
			applied += st.Batches
			dropped += st.Dropped
		}
	}
	return applied, dropped
}

// ingestMissing sums the seqs the streams found absent.
func ingestMissing(s *snapshot.Snapshot) (missing uint64) {
	for _, w := range s.Workers {
		for _, st := range w.Streams {
			missing += st.Missing
		}
	}
	return missing
}

// ingestSent reads the publisher's last words: the batches it sent.
func ingestSent(sc *bufio.Scanner) uint64 {
	var n uint64
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "sent "); ok {
			n, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	return n
}

// ingestCPU is this process's CPU time, and the kernel's part of it.
func ingestCPU() (cpu, sys time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}

// ingestSwitches counts the context switches of this process's threads
// (voluntary and not): the wake-ups a paced reader saves.
func ingestSwitches() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Nvcsw + ru.Nivcsw
}

func ingestEnv(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return d
}

// TestIngestPublisher is BenchmarkIngestZMQ's publisher process (skipped
// otherwise): it binds one XPUB per publisher, says where ("endpoint …"),
// and once each has its subscriber sends batches as fast as it can until
// its stdin closes, then says how many it sent ("sent N").
func TestIngestPublisher(t *testing.T) {
	if os.Getenv("KVTOP_INGEST_PUBLISHER") != "1" {
		t.Skip("BenchmarkIngestZMQ's publisher process")
	}
	pubs := ingestEnv("KVTOP_INGEST_PUBS", 1)
	stored := ingestEnv("KVTOP_INGEST_STORED", 8)
	socks := make([]*zmq.Socket, pubs)
	for i := range socks {
		s, err := zmq.NewSocket(zmq.XPUB)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SetLinger(0)
		_ = s.SetSndhwm(100000) // vLLM's publisher's
		if err := s.Bind("tcp://127.0.0.1:*"); err != nil {
			t.Fatal(err)
		}
		ep, _ := s.GetLastEndpoint()
		fmt.Printf("endpoint %s\n", ep)
		socks[i] = s
	}
	stop := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(stop)
	}()
	sent := make(chan uint64)
	for i, s := range socks {
		go func() {
			if _, err := s.RecvBytes(0); err != nil { // the subscription
				sent <- 0
				return
			}
			perSec := float64(ingestEnv("KVTOP_INGEST_RATE", 0)) / float64(pubs*32*stored) // batches
			sent <- ingestPublish(s, ingestPayloads(uint64(i+1)<<48, stored), perSec, stop)
		}()
	}
	var n uint64
	for range socks {
		n += <-sent
	}
	fmt.Printf("sent %d\n", n)
}

// ingestPublish sends payloads in a loop, seq from 0, until stop: perSec
// batches a second (as many as were due, every 100 µs), or with 0 as fast
// as it can.
func ingestPublish(s *zmq.Socket, payloads [][]byte, perSec float64, stop <-chan struct{}) uint64 {
	topic := []byte("kv@bench@model")
	seq := make([]byte, 8)
	var n uint64
	start := time.Now()
	for {
		if n%64 == 0 {
			select {
			case <-stop:
				return n
			default:
			}
		}
		if perSec > 0 && float64(n) >= time.Since(start).Seconds()*perSec {
			time.Sleep(100 * time.Microsecond)
			select {
			case <-stop:
				return n
			default:
			}
			continue
		}
		binary.BigEndian.PutUint64(seq, n)
		_, _ = s.SendBytes(topic, zmq.SNDMORE)
		_, _ = s.SendBytes(seq, zmq.SNDMORE)
		if _, err := s.SendBytes(payloads[n%uint64(len(payloads))], 0); err != nil {
			return n
		}
		n++
	}
}

// ingestPayloads encodes one cycle of a publisher's churn: batch j stores
// 16×stored new blocks and evicts those stored ingestResident blocks ago,
// over a ring of twice as many hashes (base tells publishers apart).
func ingestPayloads(base uint64, stored int) [][]byte {
	per := 16 * stored
	ring := 2 * ingestResident
	n := ring / per
	lag := ingestResident / per
	hash := func(i int) uint64 { return base | uint64(i%ring) + 1 }
	tokens := make([]uint32, 16*16)
	for i := range tokens {
		tokens[i] = uint32((i*2654435761)>>7) % 151936 // a vocabulary's worth
	}
	f := wire.Format{Encoding: wire.Map, Hash: wire.HashUint64, Batch: wire.ArrayBatch}
	out := make([][]byte, n)
	for j := range out {
		var evs []kvcache.Event
		for e := 0; e < stored; e++ {
			first := j*per + 16*e
			hs := make([]uint64, 16)
			for k := range hs {
				hs[k] = hash(first + k)
			}
			ev := kvcache.Event{Kind: kvcache.Stored, Hashes: hs, Tokens: tokens}
			if e > 0 {
				ev.Parent, ev.HasParent = hash(first-1), true
			}
			evs = append(evs, ev)
		}
		gone := ((j-lag)%n + n) % n
		for k := 0; k < per; k++ {
			evs = append(evs, kvcache.Event{Kind: kvcache.Removed, Hashes: []uint64{hash(gone*per + k)}})
		}
		out[j] = f.AppendBatch(nil, 1.8e9+float64(j)/1000, evs, 0)
	}
	return out
}
