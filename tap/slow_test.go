package tap

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallBuffers keeps the kernel from absorbing a slow client's backlog, so
// the tap's own queue is what fills.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

func slowClient() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10) })
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// A client that stops reading: tap queues up to the stream's cap (its
// reserve, then the shared budget), then waits on the client — marked
// client-slow — and never holds more. When the client reads again every
// byte arrives, unchanged and in order. Meanwhile another client's stream
// flows: the slow one cannot starve it.
func TestSlowClientBoundedAndLossless(t *testing.T) {
	var want strings.Builder
	var steps []step
	for i := 0; len(want.String()) < 2<<20; i++ {
		s := chatChunk(fmt.Sprintf("%06d %s", i, strings.Repeat("x", 900)))
		steps = append(steps, step{data: s})
		want.WriteString(s)
	}
	steps = append(steps, step{data: finishChunk("stop")}, step{data: doneEvent})
	want.WriteString(finishChunk("stop") + doneEvent)
	up := newUpstream(t, func(r *http.Request) script {
		if r.Header.Get("X-Request-Id") == "fast" {
			return script{steps: []step{{data: chatChunk("a")}, {data: finishChunk("stop")}, {data: doneEvent}}}
		}
		return script{steps: steps}
	})

	const reserve, perStream, shared = 16 << 10, 96 << 10, 64 << 10
	recs := make(chan *Record, 4)
	p, err := New(Options{Upstream: up.URL, StreamReserve: reserve, StreamBuffer: perStream, SharedBuffer: shared,
		Record: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p)
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(chatBody("s", "u", true)))
	req.Header.Set("X-Request-Id", "slow")
	resp, err := slowClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	// Not reading: wait until the tap has spent the shared budget on it.
	for deadline := time.Now().Add(20 * time.Second); p.Stats().SharedHighBytes < shared-readSize; {
		if time.Now().After(deadline) {
			t.Fatalf("the tap queued only %d shared bytes for a client that does not read", p.Stats().SharedHighBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Another client, meanwhile, gets its whole stream.
	fr, fb, err := post(t, context.Background(), srv.URL, "/v1/chat/completions", chatBody("s", "u", true), map[string]string{"X-Request-Id": "fast"})
	if err != nil || fr.StatusCode != 200 || !bytes.HasSuffix(fb, []byte(doneEvent)) {
		t.Fatalf("the other client: err %v body %q", err, fb)
	}
	if r := <-recs; r.RequestID != "fast" || r.End != EndDone || r.ClientSlow {
		t.Fatalf("fast: %s slow %v", r.End, r.ClientSlow)
	}

	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(first) + string(rest); got != want.String() {
		t.Fatalf("the slow client got %d bytes, want %d (first difference at %d)", len(got), want.Len(), firstDiff(got, want.String()))
	}
	r := <-recs
	if r.RequestID != "slow" || r.End != EndDone || !r.ClientSlow || r.Stalled <= 0 {
		t.Fatalf("slow: end %s, client slow %v, stalled %v", r.End, r.ClientSlow, r.Stalled)
	}
	if s := p.Stats(); s.SharedHighBytes > shared || s.ClientSlow != 1 {
		t.Fatalf("shared buffer high %d of %d, slow %d", s.SharedHighBytes, shared, s.ClientSlow)
	}
	if !strings.Contains(recordLine(r), `"client_slow":true`) {
		t.Fatalf("the record line does not say so: %s", recordLine(r))
	}
}

func firstDiff(a, b string) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
