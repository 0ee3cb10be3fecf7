//go:build unix

package pool

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used (user + system). On a
// machine shared with other work, a benchmark's wall time is mostly its
// wait for a core; with -cpu 1 its CPU time is its own work (and the GC's).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
