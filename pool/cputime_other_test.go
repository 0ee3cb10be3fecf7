//go:build !unix

package pool

import "time"

// cpuTime is unknown here: benchmarks report no CPU-time figure.
func cpuTime() time.Duration { return 0 }
