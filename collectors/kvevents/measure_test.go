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
// Logs RSS and heap each second; asserts nothing. Run with
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
	router, _ := zmq.NewSocket(zmq.ROUTER)
	replay := bindLoopback(t, router, 0)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the trickler: one stale reply every 200 ms per request, forever
		defer router.Close()
		var peers [][]byte
		var sent []int
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for {
				f, err := router.RecvMessageBytes(zmq.DONTWAIT)
				if err != nil {
					break
				}
				peers = append(peers, f[0])
				sent = append(sent, 0)
			}
			for k, id := range peers {
				seq := uint64(0)
				if slow {
					seq = 1 + uint64(sent[k])
					sent[k]++
				}
				_, _ = router.SendMessage(id, "", "", seq8(seq), batchSeq(0, int(seq)))
			}
		}
	}()
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
