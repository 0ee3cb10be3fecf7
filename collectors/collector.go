package collectors

import (
	"context"
	"sync"
)

// Collector is one source of observations. Run blocks until ctx is done,
// sending observations on out; it returns only on cancellation or on a
// configuration error it cannot recover from (bad endpoint syntax). Network
// failures are reported as SourceErrors and retried, never returned.
type Collector interface {
	Name() string
	Run(ctx context.Context, out chan<- Observation) error
}

// RunAll runs every collector in its own goroutine until ctx is done, and
// returns the first error any of them returned (nil on clean cancellation).
func RunAll(ctx context.Context, cs []Collector, out chan<- Observation) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, c := range cs {
		wg.Add(1)
		go func(c Collector) {
			defer wg.Done()
			if err := c.Run(ctx, out); err != nil && ctx.Err() == nil {
				once.Do(func() { first = err })
			}
		}(c)
	}
	wg.Wait()
	return first
}
