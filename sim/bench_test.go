package sim_test

import (
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/sim"
)

// BenchmarkPublishedBlockEvents runs a live sim (wall clock, time
// compressed) and counts, from raw SUB sockets on every publisher, the
// KV events and block hashes that actually arrive. It measures a fixed
// window (KVTOP_BENCH_WINDOW, default 5s) whatever b.N is: run it with
// -benchtime 1x. The sim's shape comes from KVTOP_BENCH_WORKERS / _RATE /
// _SPEED / _POLICY. CPU is this process's (sim + counters), in cores.
func BenchmarkPublishedBlockEvents(b *testing.B) {
	workers := envInt("KVTOP_BENCH_WORKERS", 16)
	rate := envFloat("KVTOP_BENCH_RATE", 400)
	speed := envFloat("KVTOP_BENCH_SPEED", 20)
	window := time.Duration(envFloat("KVTOP_BENCH_WINDOW", 5) * float64(time.Second))
	policy := os.Getenv("KVTOP_BENCH_POLICY")
	s, err := sim.Start(nil, sim.Options{Workers: workers, Rate: rate, Speed: speed, Policy: policy, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	zc, err := zmq.NewContext()
	if err != nil {
		b.Fatal(err)
	}
	defer zc.Term()

	var events, blocks, batches, gaps atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range s.Endpoints().Workers {
		sub, _ := zc.NewSocket(zmq.SUB)
		sub.SetLinger(0)
		sub.SetRcvhwm(0)
		sub.SetSubscribe("")
		sub.SetRcvtimeo(100 * time.Millisecond)
		if err := sub.Connect(w.Events[0]); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			counting := false
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				msg, err := sub.RecvMessageBytes(0)
				if err != nil || len(msg) != 3 {
					continue
				}
				seq := binary.BigEndian.Uint64(msg[1])
				if counting && seq != last+1 {
					gaps.Add(1)
				}
				counting, last = true, seq
				ne, nk := countPayload(msg[2])
				events.Add(int64(ne))
				blocks.Add(int64(nk))
				batches.Add(1)
			}
		}()
	}
	time.Sleep(time.Second) // let the subscriptions land and the pool warm up
	e0, k0, n0, g0 := events.Load(), blocks.Load(), batches.Load(), gaps.Load()
	cpu0, t0 := cpuTime(), time.Now()
	b.ResetTimer()
	time.Sleep(window)
	e1, k1, n1, g1 := events.Load(), blocks.Load(), batches.Load(), gaps.Load()
	el := time.Since(t0).Seconds()
	cpu := (cpuTime() - cpu0).Seconds() / el
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(e1-e0)/el, "events/s")
	b.ReportMetric(float64(k1-k0)/el, "blocks/s")
	b.ReportMetric(float64(n1-n0)/el, "batches/s")
	b.ReportMetric(cpu, "cpu-cores")
	b.ReportMetric(float64(g1-g0), "seq-gaps")
}

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return d
}

func envFloat(k string, d float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(k), 64); err == nil {
		return v
	}
	return d
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countPayload counts the events of a batch and the block hashes they
// carry, with a minimal msgpack walker (no allocation): fast enough to keep
// up with the publishers.
func countPayload(p []byte) (events, blocks int) {
	r := mpReader{p: p}
	if n, ok := r.arrayLen(); !ok || n < 2 {
		return 0, 0
	}
	r.skip() // ts
	n, ok := r.arrayLen()
	if !ok {
		return 0, 0
	}
	for i := 0; i < n && r.err == nil; i++ {
		events++
		if m, ok := r.mapLen(); ok {
			for j := 0; j < m; j++ {
				if key := r.str(); key == "block_hashes" {
					k, _ := r.arrayLen()
					blocks += k
					for x := 0; x < k; x++ {
						r.skip()
					}
				} else {
					r.skip()
				}
			}
		} else if a, ok := r.arrayLen(); ok {
			r.skip() // tag
			if a > 1 {
				k, _ := r.arrayLen()
				blocks += k
				for x := 0; x < k; x++ {
					r.skip()
				}
			}
			for x := 2; x < a; x++ {
				r.skip()
			}
		}
	}
	return events, blocks
}

type mpReader struct {
	p   []byte
	i   int
	err error
}

var errShort = errors.New("payload too short")

func (r *mpReader) byte() byte {
	if r.i >= len(r.p) {
		r.err = errShort
		return 0xc0
	}
	c := r.p[r.i]
	r.i++
	return c
}

func (r *mpReader) n(k int) uint64 {
	if r.i+k > len(r.p) {
		r.err, r.i = errShort, len(r.p)
		return 0
	}
	var x uint64
	for _, c := range r.p[r.i : r.i+k] {
		x = x<<8 | uint64(c)
	}
	r.i += k
	return x
}

func (r *mpReader) arrayLen() (int, bool) {
	if r.i >= len(r.p) {
		return 0, false
	}
	switch c := r.p[r.i]; {
	case c&0xf0 == 0x90:
		r.i++
		return int(c & 0x0f), true
	case c == 0xdc:
		r.i++
		return int(r.n(2)), true
	case c == 0xdd:
		r.i++
		return int(r.n(4)), true
	}
	return 0, false
}

func (r *mpReader) mapLen() (int, bool) {
	if r.i >= len(r.p) {
		return 0, false
	}
	switch c := r.p[r.i]; {
	case c&0xf0 == 0x80:
		r.i++
		return int(c & 0x0f), true
	case c == 0xde:
		r.i++
		return int(r.n(2)), true
	case c == 0xdf:
		r.i++
		return int(r.n(4)), true
	}
	return 0, false
}

func (r *mpReader) str() string {
	c := r.byte()
	var n int
	switch {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n = int(r.n(1))
	default:
		r.i--
		r.skip()
		return ""
	}
	if r.i+n > len(r.p) {
		r.err = errShort
		return ""
	}
	s := string(r.p[r.i : r.i+n])
	r.i += n
	return s
}

// skip passes one value.
func (r *mpReader) skip() {
	c := r.byte()
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c&0xe0 == 0xa0:
		r.i += int(c & 0x1f)
	case c&0xf0 == 0x90:
		for k := int(c & 0x0f); k > 0; k-- {
			r.skip()
		}
	case c&0xf0 == 0x80:
		for k := 2 * int(c&0x0f); k > 0; k-- {
			r.skip()
		}
	case c == 0xcc || c == 0xd0:
		r.i++
	case c == 0xcd || c == 0xd1:
		r.i += 2
	case c == 0xce || c == 0xd2 || c == 0xca:
		r.i += 4
	case c == 0xcf || c == 0xd3 || c == 0xcb:
		r.i += 8
	case c == 0xc4 || c == 0xd9:
		r.i += int(r.n(1))
	case c == 0xc5 || c == 0xda:
		r.i += int(r.n(2))
	case c == 0xc6 || c == 0xdb:
		r.i += int(r.n(4))
	case c == 0xdc || c == 0xdd:
		k := 2
		if c == 0xdd {
			k = 4
		}
		for m := r.n(k); m > 0 && r.err == nil; m-- {
			r.skip()
		}
	default:
		r.err = errShort
	}
	if r.i > len(r.p) {
		r.err, r.i = errShort, len(r.p)
	}
}
