package tap

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tap's overhead, for docs/PERFORMANCE.md. The tap runs in a process
// of its own (this binary, re-run as one), in front of an upstream and
// clients in the benchmark's, all on 127.0.0.1; it records every request
// (to a Sink on io.Discard: the real writer). Latency runs the same load
// straight at the upstream and through the tap, in turns, and reports
// both and the difference.

// stampUpstream streams n chunks per request, gap apart, each carrying
// its send time; the first right after the headers. A request with
// X-Hold waits on hold before its last chunk.
func stampUpstream(n int, gap time.Duration, hold chan struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := http.NewResponseController(w)
		for i := 0; i < n; i++ {
			if i > 0 && gap > 0 {
				time.Sleep(gap)
			}
			if i == n-1 && hold != nil && r.Header.Get("X-Hold") != "" {
				<-hold
			}
			fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"t=%d "},"finish_reason":null}]}`+"\n\n", time.Now().UnixNano())
			fl.Flush()
		}
		io.WriteString(w, finishChunk("stop")+usageChunk(200, 128, n)+doneEvent)
	}))
}

type latencies struct {
	mu           sync.Mutex
	chunk, first []float64 // µs
}

// stream sends one request and reads it line by line, timing each chunk
// from its send stamp and the first byte from the request.
func (l *latencies) stream(c *http.Client, url string, body []byte, h map[string]string) error {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var chunk []float64
	first := -1.0
	for {
		line, err := br.ReadSlice('\n')
		now := time.Now()
		if first < 0 && len(line) > 0 {
			first = float64(now.Sub(start).Microseconds())
		}
		if i := bytes.Index(line, []byte(`"t=`)); i >= 0 {
			end := bytes.IndexByte(line[i+3:], ' ')
			if ns, perr := strconv.ParseInt(string(line[i+3:i+3+end]), 10, 64); perr == nil {
				chunk = append(chunk, float64(now.UnixNano()-ns)/1e3)
			}
		}
		if err != nil {
			break
		}
	}
	l.mu.Lock()
	l.chunk = append(l.chunk, chunk...)
	l.first = append(l.first, first)
	l.mu.Unlock()
	return nil
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(p/100*float64(len(s))))]
}

func client() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0, DisableCompression: true}}
}

// tapProc is a tap in a process of its own (this test binary, run as
// one), as it runs in front of a router: its own scheduler, its own CPU
// time and memory to measure.
type tapProc struct {
	url, stats string
	cmd        *exec.Cmd
	stdin      io.WriteCloser
}

// TestMain runs the child tap when asked to.
func TestMain(m *testing.M) {
	if up := os.Getenv("KVTOP_TAP_BENCH_CHILD"); up != "" {
		childTap(up)
		return
	}
	os.Exit(m.Run())
}

// childTap serves a tap on a free port and what it measured of itself on
// another (its heap; the forward and hop times since the last ?reset),
// until stdin closes.
func childTap(upstream string) {
	var mu sync.Mutex
	var fwd, hop []float64
	add := func(v *[]float64) func(time.Duration) {
		return func(d time.Duration) { mu.Lock(); *v = append(*v, float64(d.Nanoseconds())/1e3); mu.Unlock() }
	}
	sink := NewSink(io.Discard)
	p, err := New(Options{Upstream: upstream, Record: sink.Write, onForward: add(&fwd), onHop: add(&hop)})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	st, _ := net.Listen("tcp", "127.0.0.1:0")
	fmt.Println(ln.Addr(), st.Addr())
	if f := os.Getenv("KVTOP_TAP_BENCH_CPUPROFILE"); f != "" {
		out, _ := os.Create(f)
		pprof.StartCPUProfile(out)
		defer pprof.StopCPUProfile()
	}
	go http.Serve(ln, p)
	go http.Serve(st, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Query().Has("reset") {
			fwd, hop = fwd[:0], hop[:0]
			return
		}
		if r.URL.Query().Has("times") {
			fmt.Fprint(w, pct(fwd, 50), pct(fwd, 99), pct(hop, 50), pct(hop, 99))
			return
		}
		fmt.Fprint(w, heap())
	}))
	io.Copy(io.Discard, os.Stdin)
}

// times is what the child measured of itself since the last reset, µs:
// arrival to forwarding, p50 and p99; read to flush, p50 and p99.
func (t *tapProc) times(reset bool) (f50, f99, h50, h99 float64) {
	q := "?times"
	if reset {
		q = "?reset"
	}
	resp, err := http.Get(t.stats + q)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	fmt.Fscan(resp.Body, &f50, &f99, &h50, &h99)
	return
}

func startTapProc(b *testing.B, upstream string) *tapProc {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KVTOP_TAP_BENCH_CHILD="+upstream)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var addr, stats string
	if _, err := fmt.Fscan(stdout, &addr, &stats); err != nil {
		b.Fatal(err)
	}
	t := &tapProc{url: "http://" + addr, stats: "http://" + stats, cmd: cmd, stdin: stdin}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return t
}

// cpu is the child's CPU time so far (user + system, 10 ms ticks).
func (t *tapProc) cpu() time.Duration {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", t.cmd.Process.Pid))
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// heap is the child's live heap and stacks after a GC.
func (t *tapProc) heap() uint64 {
	resp, err := http.Get(t.stats)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var n uint64
	fmt.Fscan(resp.Body, &n)
	return n
}

// rss is the child's resident memory.
func (t *tapProc) rss() uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", t.cmd.Process.Pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

var benchBody = []byte(chatBody(strings.Repeat("You are a careful assistant. ", 40), "Explain the tap.", true))

// BenchmarkAddedLatency: n concurrent streams of 40 chunks 20 ms apart
// (a 50 tokens/s stream), three rounds each way; reported in µs: the
// chunk's delay from the upstream's write to the client's read, and the
// time from the request to the first byte, at p50 and p99, straight
// and through the tap; and the tap's own part as it measured it: from a
// request's arrival to its forwarding (own-forward), from a read of the
// upstream to its flush to the client (own-hop).
//
//	go test -run '^$' -bench AddedLatency -benchtime 1x ./tap/
func BenchmarkAddedLatency(b *testing.B) {
	for _, n := range []int{1, 50, 200} {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			up := stampUpstream(40, 20*time.Millisecond, nil)
			defer up.Close()
			tp := startTapProc(b, up.URL)
			tp.times(true)
			var direct, tapped latencies
			c := client()
			rounds := 3
			if n == 1 {
				rounds = 30
			}
			for i := 0; i < b.N; i++ {
				for r := 0; r < rounds; r++ {
					for _, x := range []struct {
						url string
						l   *latencies
					}{{up.URL, &direct}, {tp.url, &tapped}} {
						var wg sync.WaitGroup
						for k := 0; k < n; k++ {
							wg.Add(1)
							go func() {
								defer wg.Done()
								if err := x.l.stream(c, x.url, benchBody, nil); err != nil {
									b.Error(err)
								}
							}()
						}
						wg.Wait()
					}
				}
			}
			f50, f99, h50, h99 := tp.times(false)
			b.ReportMetric(f50, "own-forward-p50-µs")
			b.ReportMetric(f99, "own-forward-p99-µs")
			b.ReportMetric(h50, "own-hop-p50-µs")
			b.ReportMetric(h99, "own-hop-p99-µs")
			for _, m := range []struct {
				name string
				v    []float64
			}{{"chunk", nil}, {"first", nil}} {
				d, t := direct.chunk, tapped.chunk
				if m.name == "first" {
					d, t = direct.first, tapped.first
				}
				for _, p := range []float64{50, 99} {
					b.ReportMetric(pct(d, p), fmt.Sprintf("direct-%s-p%.0f-µs", m.name, p))
					b.ReportMetric(pct(t, p), fmt.Sprintf("tap-%s-p%.0f-µs", m.name, p))
					b.ReportMetric(pct(t, p)-pct(d, p), fmt.Sprintf("added-%s-p%.0f-µs", m.name, p))
				}
			}
		})
	}
}

// heap is the live heap and the goroutine stacks after a GC.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// BenchmarkMemoryPerStream: 200 streams held open mid-response through a
// fresh tap process: its live heap and stacks (after a GC) and its
// resident memory, per stream, against the same process before them —
// each stream's connections (client and upstream) included.
//
//	go test -run '^$' -bench MemoryPerStream -benchtime 1x ./tap/
func BenchmarkMemoryPerStream(b *testing.B) {
	const n = 200
	for i := 0; i < b.N; i++ {
		hold := make(chan struct{})
		up := stampUpstream(3, 0, hold)
		tp := startTapProc(b, up.URL)
		c := client()
		open := func() (heap, rss uint64) {
			var l latencies
			var wg sync.WaitGroup
			for k := 0; k < n; k++ {
				wg.Add(1)
				go func() { defer wg.Done(); l.stream(c, tp.url, benchBody, map[string]string{"X-Hold": "1"}) }()
			}
			time.Sleep(2 * time.Second) // every stream open and waiting on its last chunk
			heap, rss = tp.heap(), tp.rss()
			close(hold)
			wg.Wait()
			hold = make(chan struct{})
			return heap, rss
		}
		idleHeap, idleRSS := tp.heap(), tp.rss() // a fresh process: no connection yet
		busyHeap, busyRSS := open()
		b.ReportMetric(float64(int64(busyHeap)-int64(idleHeap))/n, "heap-B/stream")
		b.ReportMetric(float64(idleHeap)/(1<<20), "idle-heap-MiB")
		b.ReportMetric(float64(int64(busyRSS)-int64(idleRSS))/n, "rss-B/stream")
		b.ReportMetric(float64(idleRSS)/(1<<20), "idle-rss-MiB")
		c.CloseIdleConnections()
		up.Close()
	}
}

// BenchmarkCPUPer1000Requests: 1 000 streamed requests of 40 chunks, 50
// at a time with no gaps (as fast as they go), through a tap process: its
// CPU time (user + system) per 1 000 requests.
//
//	go test -run '^$' -bench CPUPer1000 -benchtime 3x ./tap/
func BenchmarkCPUPer1000Requests(b *testing.B) {
	up := stampUpstream(40, 0, nil)
	defer up.Close()
	tp := startTapProc(b, up.URL)
	c := client()
	run := func() {
		var l latencies
		jobs := make(chan struct{})
		var wg sync.WaitGroup
		for k := 0; k < 50; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range jobs {
					if err := l.stream(c, tp.url, benchBody, nil); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for k := 0; k < 1000; k++ {
			jobs <- struct{}{}
		}
		close(jobs)
		wg.Wait()
	}
	run() // warm the connections and the process
	b.ResetTimer()
	t0 := tp.cpu()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(float64(tp.cpu()-t0)/float64(b.N)/1e6, "tap-cpu-ms/1000req")
}
