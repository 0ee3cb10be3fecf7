package collectors

import (
	"cmp"
	"strconv"
)

// CompareEngines is the order of MetricsScrape.Engines: engine labels
// numerically when both are numbers (DP ranks: "2" before "10"), else as
// text. The pool sorts by it too, so both agree on the order.
func CompareEngines(a, b string) int {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return cmp.Compare(x, y)
	}
	return cmp.Compare(a, b)
}
