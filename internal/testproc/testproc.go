// Package testproc is what tests need to run the real programs they test
// against (Debian's prometheus, promtool and etcd-server): the program
// itself, a free port on 127.0.0.1, and a place for its output. It is
// imported by tests only.
package testproc

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// Binary finds program name, which Debian's package debian installs. CI
// installs it (.ci/run, make test-deps): there a missing program fails the
// test; elsewhere the test skips, saying how to install it.
func Binary(t testing.TB, name, debian string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed: CI installs Debian's %s package (.ci/run)", name, debian)
		}
		t.Skipf("%s is not installed (make test-deps installs Debian's %s package)", name, debian)
	}
	return p
}

// FreeAddr is a TCP address on 127.0.0.1 that nothing listens on now
// ("127.0.0.1:41234").
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Output collects a process's stdout and stderr for a failure message;
// String gives its last Tail bytes (all of it when Tail is 0).
type Output struct {
	Tail int
	mu   sync.Mutex
	b    bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.b.String()
	if o.Tail > 0 && len(s) > o.Tail {
		s = "…" + s[len(s)-o.Tail:]
	}
	return s
}
