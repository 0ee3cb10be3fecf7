package tap

import (
	"sync/atomic"

	"github.com/kvtop/kvtop/snapshot"
)

// Stats counts what a Proxy did since it started.
type Stats struct {
	Requests  int64 // every request forwarded, inspected or not
	Recorded  int64 // records handed to Options.Record
	Unsampled int64 // inspectable requests left out by Sample
	// Unread counts records with part of the exchange not inspected
	// (Record.Unread says what): bad input is counted, never fatal.
	Unread int64
	// By end: finished, truncated, failed, left, unknown.
	Finished, Truncated, Failed, Left, Unknown int64
	ClientSlow                                 int64
	Inflight                                   int64
	SharedHighBytes                            int64 // the most of the shared buffer ever in use
}

type counters struct {
	requests, recorded, unsampled, unread atomic.Int64
	finished, truncated, failed, left     atomic.Int64
	unknown, slow                         atomic.Int64
}

func (c *counters) count(r *Record) {
	c.recorded.Add(1)
	if r.Unread != "" {
		c.unread.Add(1)
	}
	if r.ClientSlow {
		c.slow.Add(1)
	}
	switch r.Class() {
	case snapshot.ClientFinished:
		c.finished.Add(1)
	case snapshot.ClientTruncated:
		c.truncated.Add(1)
	case snapshot.ClientFailed:
		c.failed.Add(1)
	case snapshot.ClientLeft:
		c.left.Add(1)
	default:
		c.unknown.Add(1)
	}
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	c := &p.stats
	return Stats{
		Requests: c.requests.Load(), Recorded: c.recorded.Load(), Unsampled: c.unsampled.Load(), Unread: c.unread.Load(),
		Finished: c.finished.Load(), Truncated: c.truncated.Load(), Failed: c.failed.Load(), Left: c.left.Load(),
		Unknown: c.unknown.Load(), ClientSlow: c.slow.Load(), Inflight: p.inflight.Load(), SharedHighBytes: p.shared.high.Load(),
	}
}
