package picker

import "math"

// The load view never reports negative numbers, but Load is plain data from
// several sources; these accessors read it defensively so that one bad value
// cannot turn a cost into NaN or make a busy worker look idle.

func nonNeg(v int64) float64 {
	if v < 0 {
		return 0
	}
	return float64(v)
}

func nonNegF(v float64) float64 {
	if math.IsNaN(v) || v < 0 || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// inflight is the larger of kvgate's own count and the engine's
// waiting+running: the engine also sees other routers' traffic.
func inflight(l *Load) float64 {
	n := nonNeg(int64(l.InflightRequests))
	if l.HaveEngine {
		if e := nonNeg(int64(l.Waiting)) + nonNeg(int64(l.Running)); e > n {
			n = e
		}
	}
	return n
}

// prefillTokensPerSec is the worker's measured rate, or fallback when it is
// unknown or implausible (below 1 token/s it would make every TTFT infinite).
func prefillTokensPerSec(l *Load, fallback float64) float64 {
	if v := l.PrefillTokensPerSec; measuredRate(v) {
		return v
	}
	return fallback
}

func measuredRate(v float64) bool { return finiteIn(v, 1, maxRate) }

// usedKVBlocks is the decode footprint kvgate routed, or the engine-reported
// usage when that is larger.
func usedKVBlocks(l *Load) float64 {
	used := nonNeg(l.DecodeBlocks)
	if l.HaveEngine && l.KVCapacityBlocks > 0 {
		u := nonNegF(l.KVUsage)
		if u > 1 {
			u = 1
		}
		if e := u * float64(l.KVCapacityBlocks); e > used {
			used = e
		}
	}
	return used
}
