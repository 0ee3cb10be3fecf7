package pool

import (
	"math"
	"sort"

	"github.com/kvtop/kvtop/snapshot"
)

// loadSkew is max/mean and the Gini coefficient of queue depths. Both are
// unknown with fewer than two values; max/mean is unknown when the mean is
// 0, while Gini is then 0 (all equal), a real value.
func loadSkew(q []float64) snapshot.Skew {
	if len(q) < 2 {
		return snapshot.Skew{}
	}
	for _, v := range q {
		if math.IsInf(v*float64(len(q)), 0) {
			return snapshot.Skew{} // absurd inputs: unknown rather than Inf
		}
	}
	var sum, mx float64
	for _, v := range q {
		sum += v
		mx = math.Max(mx, v)
	}
	mean := sum / float64(len(q))
	var sk snapshot.Skew
	if mean > 0 {
		sk.MaxOverMean = fp(mx / mean)
	}
	sk.Gini = fraction(gini(q))
	return sk
}

// gini = Σi Σj |xi − xj| / (2 n² mean), computed in O(n log n) on sorted
// values; 0 when every value is equal (including all 0).
func gini(q []float64) float64 {
	x := append([]float64(nil), q...)
	sort.Float64s(x)
	n := float64(len(x))
	var sum, weighted float64
	for i, v := range x {
		sum += v
		weighted += float64(2*(i+1)-len(x)-1) * v
	}
	if sum == 0 {
		return 0
	}
	return weighted / (n * sum)
}
