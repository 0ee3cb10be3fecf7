package kube

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/kvtop/kvtop/collectors"
)

// forwarder keeps a port-forward to one pod open: one local loopback port
// per remote port, chosen once and kept across re-opens, so the ZMQ
// sockets on them reconnect by themselves when the forward comes back.
// A forward that drops (the API server closed it, the pod went away, the
// network) is reopened after a back-off, and each failure is a
// SourceError on the pod.
type forwarder struct {
	pod, namespace string
	remote         []int       // the remote ports, in the order asked
	local          map[int]int // remote → local port
	cancel         context.CancelFunc
	done           chan struct{}
}

// forwardBackoff bounds the wait between re-opens.
const (
	forwardRetryMin = 500 * time.Millisecond
	forwardRetryMax = 10 * time.Second
)

// newForwarder picks the local ports and starts forwarding.
// groups are runs of consecutive remote ports (one DP rank each): each
// gets a run of consecutive local ports, so rank r is still base+r.
func newForwarder(ctx context.Context, cfg *rest.Config, namespace, pod string, groups [][]int, errs chan<- collectors.Observation) (*forwarder, error) {
	f := &forwarder{pod: pod, namespace: namespace, local: map[int]int{}, done: make(chan struct{})}
	for _, g := range groups {
		f.remote = append(f.remote, g...)
		base, err := freePorts(len(g))
		if err != nil {
			return nil, fmt.Errorf("port-forward %s: no local ports: %w", pod, err)
		}
		for i, r := range g {
			f.local[r] = base + i
		}
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward %s: %w", pod, err)
	}
	u, err := url.Parse(strings.TrimRight(cfg.Host, "/") + cfg.APIPath)
	if err != nil {
		return nil, fmt.Errorf("port-forward %s: API server URL: %w", pod, err)
	}
	u.Path = strings.TrimRight(u.Path, "/") + fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", namespace, pod)
	fctx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	go f.loop(fctx, rt, upgrader, u, errs)
	return f, nil
}

// endpoint is the ZMQ endpoint that reaches remote port r of the pod.
func (f *forwarder) endpoint(r int) string {
	return "tcp://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(f.local[r]))
}

// note says the path, for the worker screen: "port-forward
// 127.0.0.1:41234→5557, 127.0.0.1:41235→5558".
func (f *forwarder) note(remote []int) string {
	var parts []string
	for _, r := range remote {
		parts = append(parts, fmt.Sprintf("127.0.0.1:%d→%d", f.local[r], r))
	}
	return "port-forward " + strings.Join(parts, ", ")
}

func (f *forwarder) stop() {
	f.cancel()
	<-f.done
}

func (f *forwarder) loop(ctx context.Context, rt http.RoundTripper, up spdy.Upgrader, u *url.URL, errs chan<- collectors.Observation) {
	defer close(f.done)
	ports := make([]string, 0, len(f.local))
	for r, l := range f.local {
		ports = append(ports, fmt.Sprintf("%d:%d", l, r))
	}
	source := f.pod + " port-forward"
	wait := forwardRetryMin
	for ctx.Err() == nil {
		dialer := spdy.NewDialer(up, &http.Client{Transport: rt}, http.MethodPost, u)
		var errOut lineWriter
		var said time.Time
		errOut.on = func(line string) { // one line per failed connection: rate-limited
			if time.Since(said) >= 5*time.Second {
				said = time.Now()
				report(ctx, errs, source, "refused", line)
			}
		}
		pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, ports, nil, nil, &errOut)
		if err == nil {
			start := time.Now()
			err = pf.ForwardPorts()
			if time.Since(start) > 10*time.Second {
				wait = forwardRetryMin // it worked for a while: retry soon
			}
		}
		if ctx.Err() != nil {
			return
		}
		msg := "closed"
		if err != nil {
			msg = err.Error()
		}
		report(ctx, errs, source, "refused", fmt.Sprintf("port-forward to %s/%s lost (%s); kvtop reopens it in %v", f.namespace, f.pod, msg, wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, forwardRetryMax)
	}
}

// report sends a SourceError, abandoned on shutdown.
func report(ctx context.Context, errs chan<- collectors.Observation, source, kind, msg string) {
	if errs == nil {
		return
	}
	select {
	case errs <- &collectors.SourceError{Source: source, Kind: kind, Message: msg, At: time.Now()}:
	case <-ctx.Done():
	}
}

// lineWriter calls on for every complete line written to it (the port
// forwarder's error output: one line per failed connection).
type lineWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	on  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	var lines []string
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.Reset()
			w.buf.WriteString(line)
			break
		}
		if s := strings.TrimSpace(line); s != "" {
			lines = append(lines, s)
		}
	}
	if w.buf.Len() > 4096 {
		w.buf.Reset()
	}
	w.mu.Unlock()
	for _, l := range lines {
		w.on(l)
	}
	return len(p), nil
}

// freePorts finds n consecutive free loopback ports and returns the
// first: the kernel picks the first, the others are tried after it.
func freePorts(n int) (int, error) {
	var last error
	for try := 0; try < 50; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		base := l.Addr().(*net.TCPAddr).Port
		held := []net.Listener{l}
		ok := base+n-1 <= 65535
		for i := 1; ok && i < n; i++ {
			li, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok, last = false, err
				break
			}
			held = append(held, li)
		}
		for _, h := range held {
			h.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports: %v", n, last)
}
