package journal

import (
	"github.com/kvtop/kvtop/collectors"
)

// wallClock returns o with every time on the wall clock alone: a shallow
// copy (o is the collector's, and may share slices with what it still
// holds), with copies of the parts that hold times. Decoded times have no
// monotonic reading, and Go compares two times on the monotonic clock
// when both have one, on the wall clock otherwise: the live pool applying
// this computes exactly what a replay of the journal does. A type the
// journal does not know is returned as it is.
func wallClock(o collectors.Observation) collectors.Observation {
	switch v := o.(type) {
	case *collectors.MetricsScrape:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		if v.Err != nil {
			e := *v.Err
			e.At = e.At.Round(0)
			c.Err = &e
		}
		return &c
	case *collectors.EventBatch:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		return &c
	case *collectors.StreamReset:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		return &c
	case *collectors.StreamStatus:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		c.LastMessage = c.LastMessage.Round(0)
		if v.History != nil {
			c.History = make([]collectors.StreamIncident, len(v.History))
			for i, in := range v.History {
				in.Start, in.End = in.Start.Round(0), in.End.Round(0)
				c.History[i] = in
			}
		}
		return &c
	case *collectors.Decision:
		if v == nil {
			return o
		}
		c := *v
		c.At, c.TS = c.At.Round(0), c.TS.Round(0)
		return &c
	case *collectors.Outcome:
		if v == nil {
			return o
		}
		c := *v
		c.At, c.TS = c.At.Round(0), c.TS.Round(0)
		return &c
	case *collectors.SourceError:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		return &c
	case *collectors.DecisionSource:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		return &c
	case *collectors.TargetChange:
		if v == nil {
			return o
		}
		c := *v
		c.At = c.At.Round(0)
		if v.Kube != nil {
			k := *v.Kube
			k.Started, k.Created = k.Started.Round(0), k.Created.Round(0)
			if lt := v.Kube.LastTermination; lt != nil {
				t := *lt
				t.At = t.At.Round(0)
				k.LastTermination = &t
			}
			c.Kube = &k
		}
		return &c
	}
	return o
}
