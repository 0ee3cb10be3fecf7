package promapi

import (
	"context"

	"github.com/kvtop/kvtop/collectors"
)

// Refresh runs one round of the source, for benchmarks.
func (s *Source) Refresh(ctx context.Context) []collectors.Observation { return s.refresh(ctx) }

// Status runs the targets query alone, for benchmarks.
func (s *Source) Status(ctx context.Context) (int, error) {
	_, err := s.queryRaw(ctx, s.q.status, &s.status)
	return len(s.status.samples), err
}
