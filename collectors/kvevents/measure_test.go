//go:build kvtop_measure

package kvevents

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/sim/hostile"
)

// rssMiB reads this process's resident set size.
func rssMiB() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// TestMeasureTrickleReplay: a publisher sends hash-heavy live batches
// (~27 kB each, 400/s) after one dropped seq; its ROUTER answers the replay
// with one reply every 200 ms, forever: a stale one (seq 0, below the seq
// asked for), or with MEASURE_MODE=slow the next seq of a 100 000-seq gap.
// Logs RSS and heap each second; asserts nothing. (The whole kvtop process
// under the same attack: sim/hostile, input replay-stale.) Run with
//
//	MEASURE_SECS=40 go test -tags kvtop_measure -run TestMeasureTrickleReplay -v ./collectors/kvevents/
func TestMeasureTrickleReplay(t *testing.T) {
	secs := 60
	if s := os.Getenv("MEASURE_SECS"); s != "" {
		secs, _ = strconv.Atoi(s)
	}
	slow := os.Getenv("MEASURE_MODE") == "slow"
	pub, _ := zmq.NewSocket(zmq.XPUB)
	defer pub.Close()
	_ = pub.SetSndhwm(100000)
	events := bindLoopback(t, pub, 0)
	// The trickler: one reply every 200 ms per request, forever: a stale
	// one (seq 0), or the next seq of the gap.
	reply := func(uint64, int) (uint64, []byte) { return 0, batchSeq(0, 0) }
	if slow {
		reply = hostile.InRange(func(seq uint64) []byte { return batchSeq(0, int(seq)) })
	}
	tr, err := hostile.NewTrickler(nil, 200*time.Millisecond, reply)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	replay := tr.Endpoint
	c, err := New(Options{Endpoints: []Endpoint{{Worker: "w0", Events: events, Replay: replay}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan collectors.Observation, 1024)
	var mu sync.Mutex
	var last *collectors.StreamStatus
	applied := 0
	go func() {
		for o := range out {
			mu.Lock()
			switch o := o.(type) {
			case *collectors.StreamStatus:
				last = o
			case *collectors.EventBatch:
				applied++
			}
			mu.Unlock()
		}
	}()
	go func() { _ = c.Run(ctx, out) }()
	p := &testPub{t: t, pub: pub}
	p.o.ring = 1
	p.waitSubscribed()
	hs := make([]uint64, 3000)
	payload := func(seq int) []byte {
		for i := range hs {
			hs[i] = uint64(seq)<<20 | uint64(i) | 1<<63
		}
		return batchSeq(0, seq, removedMap(hs...))
	}
	t.Logf("batch payload %d bytes", len(payload(1)))
	seq := 0
	send := func() {
		_, _ = pub.SendMessage("", seq8(uint64(seq)), payload(seq))
		seq++
	}
	send()
	gap := 1
	if slow {
		gap = 100000
	}
	seq += gap // never sent: a gap, whose replay the trickler stalls
	start := time.Now()
	var ms runtime.MemStats
	next := time.Second
	for time.Since(start) < time.Duration(secs)*time.Second {
		for k := 0; k < 40; k++ {
			send()
		}
		time.Sleep(100 * time.Millisecond)
		if el := time.Since(start); el >= next {
			next += time.Second
			runtime.ReadMemStats(&ms)
			mu.Lock()
			state := "?"
			if last != nil {
				state = string(last.State)
			}
			n := applied
			mu.Unlock()
			t.Logf("t=%2.0fs rss=%6.1f MiB heap_inuse=%6.1f MiB state=%s applied=%d sent=%d",
				el.Seconds(), rssMiB(), float64(ms.HeapInuse)/(1<<20), state, n, seq)
		}
	}
}
