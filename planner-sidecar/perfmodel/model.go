package perfmodel

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Model answers the sizing questions from a profile. It is immutable and
// safe for concurrent use; online correction lives in Correction, owned by
// whoever decides (so two policies sharing a Model do not disturb each other).
type Model struct {
	prefill []curveAt // by input length, ascending
	decode  []curveAt // by context length, ascending
}

// curveAt is the load curve measured at one input (or context) length:
// points in increasing concurrency, each a (latency, throughput) pair.
type curveAt struct {
	length float64
	points []loadPoint
}

type loadPoint struct {
	load       int     // concurrency or batch
	latency    float64 // seconds
	throughput float64 // tokens per second
}

// New builds a Model; the profile is validated first.
func New(p Profile) (*Model, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	m := &Model{}
	pre := map[int][]loadPoint{}
	for _, q := range p.Prefill {
		pre[q.InputTokens] = append(pre[q.InputTokens], loadPoint{q.Concurrency, q.TTFTSeconds, q.TokensPerSecond})
	}
	dec := map[int][]loadPoint{}
	for _, q := range p.Decode {
		dec[q.ContextTokens] = append(dec[q.ContextTokens], loadPoint{q.Batch, q.ITLSeconds, q.TokensPerSecond})
	}
	var err error
	if m.prefill, err = curves(pre, "prefill", "concurrency"); err != nil {
		return nil, err
	}
	if m.decode, err = curves(dec, "decode", "batch"); err != nil {
		return nil, err
	}
	return m, nil
}

func curves(by map[int][]loadPoint, kind, loadName string) ([]curveAt, error) {
	out := make([]curveAt, 0, len(by))
	for l, pts := range by {
		slices.SortFunc(pts, func(a, b loadPoint) int { return a.load - b.load })
		for i := 1; i < len(pts); i++ {
			if pts[i].load == pts[i-1].load {
				return nil, fmt.Errorf("profile: %s: length %d has two points at %s %d", kind, l, loadName, pts[i].load)
			}
		}
		out = append(out, curveAt{length: float64(l), points: pts})
	}
	slices.SortFunc(out, func(a, b curveAt) int { return int(a.length - b.length) })
	return out, nil
}

// PrefillThroughput is the prompt tokens per second one replica prefills
// with input length inputTokens while its TTFT stays at or under ttft.
// Between profiled loads it interpolates linearly to where the latency
// crosses the target; between profiled lengths, linearly in length
// (clamped at the ends). When even the lightest profiled load misses the
// target, it returns that load's throughput: more replicas cannot make one
// request faster, so sizing asks for enough to keep each at that load.
func (m *Model) PrefillThroughput(inputTokens float64, ttft time.Duration) float64 {
	return acrossLengths(m.prefill, inputTokens, func(c curveAt) float64 { return c.throughputAt(ttft.Seconds()) })
}

// DecodeThroughput is the output tokens per second one replica produces
// with sequences of about contextTokens while its ITL stays at or under itl.
func (m *Model) DecodeThroughput(contextTokens float64, itl time.Duration) float64 {
	return acrossLengths(m.decode, contextTokens, func(c curveAt) float64 { return c.throughputAt(itl.Seconds()) })
}

// ExpectedTTFT is the TTFT the profile predicts for one replica prefilling
// tokensPerSecond prompt tokens per second at input length inputTokens.
func (m *Model) ExpectedTTFT(inputTokens, tokensPerSecond float64) time.Duration {
	return seconds(acrossLengths(m.prefill, inputTokens, func(c curveAt) float64 { return c.latencyAt(tokensPerSecond) }))
}

// ExpectedITL is the ITL the profile predicts for one replica producing
// tokensPerSecond output tokens per second at context contextTokens.
func (m *Model) ExpectedITL(contextTokens, tokensPerSecond float64) time.Duration {
	return seconds(acrossLengths(m.decode, contextTokens, func(c curveAt) float64 { return c.latencyAt(tokensPerSecond) }))
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s < 0 {
		return 0
	}
	if s > 1e6 {
		s = 1e6
	}
	return time.Duration(s * float64(time.Second))
}

// acrossLengths evaluates f at the two profiled lengths around x and
// interpolates linearly; outside the profiled range it uses the nearest.
func acrossLengths(cs []curveAt, x float64, f func(curveAt) float64) float64 {
	if math.IsNaN(x) {
		x = 0
	}
	if x <= cs[0].length || len(cs) == 1 {
		return f(cs[0])
	}
	last := cs[len(cs)-1]
	if x >= last.length {
		return f(last)
	}
	i, _ := slices.BinarySearchFunc(cs, x, func(c curveAt, x float64) int {
		switch {
		case c.length < x:
			return -1
		case c.length > x:
			return 1
		}
		return 0
	})
	if cs[i].length == x {
		return f(cs[i])
	}
	a, b := cs[i-1], cs[i]
	w := (x - a.length) / (b.length - a.length)
	return f(a)*(1-w) + f(b)*w
}

// throughputAt is the throughput where latency reaches target, walking the
// curve in increasing load up to the first point past the target.
func (c curveAt) throughputAt(target float64) float64 {
	p := c.points
	if p[0].latency > target {
		return p[0].throughput
	}
	best := p[0].throughput
	for i := 1; i < len(p); i++ {
		if p[i].latency <= target {
			best = max(best, p[i].throughput)
			continue
		}
		a, b := p[i-1], p[i]
		if b.latency > a.latency {
			w := (target - a.latency) / (b.latency - a.latency)
			best = max(best, a.throughput+w*(b.throughput-a.throughput))
		}
		break
	}
	return best
}

// latencyAt is the latency at a given throughput: the unloaded latency
// below the lightest point, linear between points, and past the heaviest
// point the last segment's slope extended (one point: latency grows in
// proportion to throughput, as a saturated queue's does).
func (c curveAt) latencyAt(thr float64) float64 {
	p := c.points
	if thr <= p[0].throughput {
		return p[0].latency
	}
	for i := 1; i < len(p); i++ {
		a, b := p[i-1], p[i]
		if thr <= b.throughput {
			if b.throughput <= a.throughput {
				return b.latency
			}
			w := (thr - a.throughput) / (b.throughput - a.throughput)
			return a.latency + w*(b.latency-a.latency)
		}
	}
	last := p[len(p)-1]
	if len(p) == 1 {
		return last.latency * thr / last.throughput
	}
	prev := p[len(p)-2]
	if last.throughput > prev.throughput && last.latency > prev.latency {
		return last.latency + (thr-last.throughput)*(last.latency-prev.latency)/(last.throughput-prev.throughput)
	}
	return last.latency * thr / last.throughput
}
