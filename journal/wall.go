package journal

import (
	"github.com/kvtop/kvtop/collectors"
)

// wallClock returns o with every time on the wall clock alone
// (collectors.Observation.WallClock): what the live pool applies then is
// exactly what a replay of the journal does. A type the journal has no
// coding for is returned as it is.
func wallClock(o collectors.Observation) collectors.Observation {
	if codingOf(o) == nil {
		return o
	}
	return o.WallClock()
}
