package pool

import (
	"time"

	"github.com/kvtop/kvtop/snapshot"
)

// routerPredictions fills what router r believes, in its own units: the
// predicted hit rates, the transfer estimates over the window (ms), and,
// per worker (named as the pool names it; a Dynamo rank folds into its
// worker), its role and its frontend's load. A router that is not up
// shows none of it: its last scrape is not now.
func (s *State) routerPredictions(r *router, row *snapshot.Router, now time.Time) {
	row.Roles, row.ActivePrefillTokens, row.ActiveDecodeBlocks = map[string]string{}, map[string]float64{}, map[string]float64{}
	var acc latAcc
	acc.add(&r.transferEst, now, s.window)
	row.KVTransferEstimatedMS = acc.latency("the router exposes no KV transfer estimate")
	rm := r.dyn
	if rm == nil || !r.up {
		return
	}
	row.PredictedHitRate, row.SharedCacheHitRate = fraction01(rm.PredictedHit), fraction01(rm.SharedCacheHit)
	for label, role := range rm.Roles {
		row.Roles[s.workerName(label)] = role
	}
	for label, v := range rm.ActivePrefillTokens {
		row.ActivePrefillTokens[s.workerName(label)] += v
	}
	for label, v := range rm.ActiveDecodeBlocks {
		row.ActiveDecodeBlocks[s.workerName(label)] += v
	}
}

// fraction01 copies a fraction that must lie within 0..1; nil otherwise.
func fraction01(p *float64) *float64 {
	if p == nil || *p < 0 || *p > 1 {
		return nil
	}
	return fp(*p)
}
