package plannersim

import (
	"slices"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// observer turns what happened in the fleet over one interval into the
// plan.Observation a policy gets — the figures a Prometheus scrape of the
// engines (vLLM metric names) and the router would give — and keeps the
// timeline for charts.
type observer struct {
	fleet    *fleet
	pools    map[string]*poolWindow
	timeline []Point
	// systemSum sums, over samples, the requests in the fleet.
	systemSum     float64
	systemSamples int
}

// poolWindow accumulates one pool's figures over the current interval.
type poolWindow struct {
	arrivals          int
	inTok, outTok     float64
	cached, prompt    float64
	ttfts, itls       []float64 // ms
	queueSum, kvSum   float64   // summed over samples
	samples, kvSample int
}

// UtilizationObserver is implemented by policies that also read each
// pool's GPU utilisation (the fraction of the interval its ready replicas
// spent computing, as DCGM's DCGM_FI_DEV_GPU_UTIL reports it), which
// plan.Observation does not carry. The simulator calls it before Decide.
type UtilizationObserver interface {
	ObserveUtilization(pool string, busy float64)
}

func newObserver(f *fleet) *observer {
	o := &observer{fleet: f, pools: map[string]*poolWindow{}}
	for _, p := range f.order {
		o.pools[p.name] = &poolWindow{}
	}
	return o
}

func (o *observer) arrival(pool string, r Request) {
	w := o.pools[pool]
	w.arrivals++
	w.inTok += float64(r.InputTokens)
	w.outTok += float64(r.OutputTokens)
}

func (o *observer) firstToken(pool string, ttftMs float64, cached, prompt int) {
	w := o.pools[pool]
	w.ttfts = append(w.ttfts, ttftMs)
	w.cached += float64(cached)
	w.prompt += float64(prompt)
}

func (o *observer) finished(pool string, itlMs float64, hasITL bool) {
	if hasITL {
		o.pools[pool].itls = append(o.pools[pool].itls, itlMs)
	}
}

// sample reads queue depth (vllm:num_requests_waiting summed over the
// pool's replicas, plus requests the router holds for want of a ready
// replica) and KV usage (vllm:kv_cache_usage_perc, mean over ready
// replicas).
func (o *observer) sample(scored bool) {
	inSystem := 0
	defer func() {
		if scored {
			o.systemSum += float64(inSystem)
			o.systemSamples++
		}
	}()
	for _, p := range o.fleet.order {
		inSystem += len(p.queue)
		w := o.pools[p.name]
		q := len(p.queue)
		kv, n := 0.0, 0
		for _, r := range p.replicas {
			if r.state == provisioning {
				continue
			}
			inSystem += r.inflight
			st := r.eng.Stats()
			q += st.Waiting
			if r.state == ready {
				kv += st.KVUsage
				n++
			}
		}
		w.queueSum += float64(q)
		w.samples++
		if n > 0 {
			w.kvSum += kv / float64(n)
			w.kvSample++
		}
	}
}

// utilization is, per pool, the mean busy fraction of its ready replicas
// since the last call.
func (o *observer) utilization(now time.Duration) map[string]float64 {
	out := map[string]float64{}
	for _, p := range o.fleet.order {
		sum, n := 0.0, 0
		for _, r := range p.replicas {
			if r.state == provisioning {
				continue
			}
			busy := r.eng.Stats().BusyTime
			if r.state == ready && now > r.busySince {
				sum += min(1, (busy-r.busyAt).Seconds()/(now-r.busySince).Seconds())
				n++
			}
			r.busyAt, r.busySince = busy, now
		}
		if n > 0 {
			out[p.name] = sum / float64(n)
		}
	}
	return out
}

func (o *observer) observation(now time.Time, interval time.Duration) plan.Observation {
	obs := plan.Observation{Time: now, Pools: map[string]plan.PoolObservation{}}
	for _, p := range o.fleet.order {
		w := o.pools[p.name]
		po := plan.PoolObservation{
			Replicas:    p.count(ready),
			Draining:    p.count(draining),
			Pending:     p.count(provisioning),
			RequestRate: float64(w.arrivals) / interval.Seconds(),
		}
		if w.arrivals > 0 {
			po.MeanInputTokens = w.inTok / float64(w.arrivals)
			po.MeanOutputTokens = w.outTok / float64(w.arrivals)
		}
		if w.prompt > 0 {
			po.CacheHitRate = w.cached / w.prompt
		}
		po.TTFTP90 = msDuration(percentile(slices.Clone(w.ttfts), 0.9))
		po.ITLP90 = msDuration(percentile(slices.Clone(w.itls), 0.9))
		if w.samples > 0 {
			po.QueueDepth = w.queueSum / float64(w.samples)
		}
		if w.kvSample > 0 {
			po.KVUsage = w.kvSum / float64(w.kvSample)
		}
		obs.Pools[p.name] = po
	}
	return obs
}

// point records the fleet and the interval's latencies after a decision.
func (o *observer) point(t time.Duration, obs plan.Observation, reason string) {
	pt := Point{T: t, Serving: map[string]int{}, Ready: map[string]int{}, Decision: reason}
	var ttfts, itls []float64
	for _, p := range o.fleet.order {
		w := o.pools[p.name]
		pt.Serving[p.name] = p.count(ready) + p.count(provisioning)
		pt.Ready[p.name] = p.count(ready)
		pt.Billed += len(p.replicas) * o.fleet.cfg.GPUsPerReplica
		ttfts = append(ttfts, w.ttfts...)
		itls = append(itls, w.itls...)
	}
	pt.Rate = obs.Pools[o.fleet.order[0].name].RequestRate
	pt.TTFTP90 = percentile(ttfts, 0.9)
	pt.ITLP90 = percentile(itls, 0.9)
	o.timeline = append(o.timeline, pt)
}

func (o *observer) reset() {
	for name := range o.pools {
		w := o.pools[name]
		*w = poolWindow{ttfts: w.ttfts[:0], itls: w.itls[:0]}
	}
}

func msDuration(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
