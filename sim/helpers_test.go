package sim_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvtop/kvtop/sim"
	"github.com/kvtop/kvtop/sim/wirecheck"
)

// Everything here talks to the sim from outside, over real sockets on
// 127.0.0.1: a raw SUB, a raw DEALER, HTTP GET, the decisions file.

const deadline = 10 * time.Second

func startSim(t *testing.T, o sim.Options) *sim.Sim {
	t.Helper()
	o.Manual = true
	if o.Workers == 0 {
		o.Workers = 3
	}
	o.Logf = t.Logf
	s, err := sim.Start(nil, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func advance(t *testing.T, s *sim.Sim, d time.Duration) {
	t.Helper()
	if err := s.Advance(d); err != nil {
		t.Fatal(err)
	}
}

func zctx(t *testing.T) *zmq.Context {
	t.Helper()
	c, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Term() })
	return c
}

var monitors atomic.Int64

// subscribe connects a SUB to a publisher and waits until the connection is
// up. PUB drops what it sends before a subscription arrives (the slow
// joiner): tests subscribe before they move the sim's clock, and give the
// subscription a moment to reach the publisher.
func subscribe(t *testing.T, c *zmq.Context, endpoint string) *zmq.Socket {
	t.Helper()
	sub, err := c.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	sub.SetLinger(0)
	sub.SetRcvhwm(0) // keep everything: tests read after the clock moved
	mon := fmt.Sprintf("inproc://sub-monitor-%d", monitors.Add(1))
	if err := sub.Monitor(mon, zmq.EVENT_HANDSHAKE_SUCCEEDED); err != nil {
		t.Fatal(err)
	}
	pair, _ := c.NewSocket(zmq.PAIR)
	defer pair.Close()
	pair.SetLinger(0)
	if err := pair.Connect(mon); err != nil {
		t.Fatal(err)
	}
	sub.SetSubscribe("")
	if err := sub.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	pair.SetRcvtimeo(deadline)
	if ev, _, _, err := pair.RecvEvent(0); err != nil || ev != zmq.EVENT_HANDSHAKE_SUCCEEDED {
		t.Fatalf("SUB to %s: no handshake (%v, %v)", endpoint, ev, err)
	}
	sub.Monitor("", 0)
	time.Sleep(200 * time.Millisecond) // let the subscription reach the PUB (not an assertion)
	return sub
}

// recv reads n messages, failing after the deadline.
func recv(t *testing.T, sock *zmq.Socket, n int) [][][]byte {
	t.Helper()
	var out [][][]byte
	poller := zmq.NewPoller()
	poller.Add(sock, zmq.POLLIN)
	end := time.Now().Add(deadline)
	for len(out) < n {
		left := time.Until(end)
		if left <= 0 {
			t.Fatalf("received %d messages, want %d", len(out), n)
		}
		ready, err := poller.Poll(left)
		if err != nil {
			t.Fatal(err)
		}
		if len(ready) == 0 {
			continue
		}
		msg, err := sock.RecvMessageBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msg)
	}
	return out
}

// pending reads whatever arrives within a short while (for "nothing more").
func pending(t *testing.T, sock *zmq.Socket, wait time.Duration) [][][]byte {
	t.Helper()
	var out [][][]byte
	poller := zmq.NewPoller()
	poller.Add(sock, zmq.POLLIN)
	for {
		ready, err := poller.Poll(wait)
		if err != nil || len(ready) == 0 {
			return out
		}
		msg, err := sock.RecvMessageBytes(0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, msg)
	}
}

// replay asks a replay endpoint for everything from seq on, with a raw
// DEALER, and returns the replies up to and including the end marker.
func replay(t *testing.T, c *zmq.Context, endpoint string, from uint64) [][][]byte {
	t.Helper()
	d, err := c.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.SetLinger(0)
	d.SetRcvhwm(0)
	if err := d.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	seq := binary.BigEndian.AppendUint64(nil, from)
	if _, err := d.SendMessage([]byte{}, seq); err != nil {
		t.Fatal(err)
	}
	var out [][][]byte
	for {
		msg := recv(t, d, 1)[0]
		out = append(out, msg)
		if len(msg) >= 3 && binary.BigEndian.Uint64(msg[len(msg)-2]) == wirecheck.EndSeq {
			return out
		}
	}
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	c := http.Client{Timeout: deadline}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

type page map[string]*dto.MetricFamily

func scrape(t *testing.T, url string) page {
	t.Helper()
	code, body := get(t, url)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("GET %s: not the Prometheus text format: %v", url, err)
	}
	return fams
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// sum adds a family's samples (filtered by label=value pairs).
func (p page) sum(name string, filter ...string) float64 {
	var s float64
	f := p[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(filter); i += 2 {
			if label(m, filter[i]) != filter[i+1] {
				continue next
			}
		}
		s += sampleValue(m)
	}
	return s
}

// numGPUBlocks reads the cache size from vllm:cache_config_info.
func (p page) numGPUBlocks(t *testing.T, engine string) int {
	t.Helper()
	for _, m := range p["vllm:cache_config_info"].GetMetric() {
		if label(m, "engine") == engine {
			n, err := strconv.Atoi(label(m, "num_gpu_blocks"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no cache_config_info for engine %s", engine)
	return 0
}

func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("decisions: bad line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// stream follows one publisher from outside: seq order and residency.
type stream struct {
	name     string
	next     uint64
	started  bool
	resident map[uint64]int
	total    int
	maxTotal int
	kinds    map[string]int
	hashKind map[string]int
	above63  int
	negative int
}

func newStream(name string) *stream {
	return &stream{name: name, resident: map[uint64]int{}, kinds: map[string]int{}, hashKind: map[string]int{}}
}

func (s *stream) apply(t *testing.T, b *wirecheck.Batch) {
	t.Helper()
	for _, e := range b.Events {
		s.kinds[e.Kind]++
		if e.HashKind != "" {
			s.hashKind[e.HashKind]++
		}
		for _, k := range e.Keys {
			if k > 1<<63-1 {
				s.above63++
			}
			if e.HashKind == "int64" && int64(k) < 0 {
				s.negative++
			}
			switch e.Kind {
			case "BlockStored":
				s.resident[k]++
				s.total++
			case "BlockRemoved":
				if s.resident[k] == 0 {
					t.Fatalf("%s: BlockRemoved %016x, which was never stored", s.name, k)
				}
				s.resident[k]--
				s.total--
			}
		}
		if e.Kind == "AllBlocksCleared" {
			s.resident = map[uint64]int{}
			s.total = 0
		}
		s.maxTotal = max(s.maxTotal, s.total)
	}
}

type (
	zmqSocket = zmq.Socket
	dtoFamily = dto.MetricFamily
	dtoMetric = dto.Metric
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }
