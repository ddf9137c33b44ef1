package plannersim

import (
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/forecast"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// The oracle planner is plan.SLA with forecasts read from the load itself:
// a diagnosis, not a policy. Run beside the planner, it splits what the
// planner misses into what better forecasting could recover (the gap
// between the two) and what stays with perfect forecasts — the provisioning
// delay, the decision interval, the sizing model and the scale-down gates.

// oracleSeries is a load's per-interval signals as the planner observes
// them: request rate and mean input and output tokens of the arrivals in
// [k·interval, (k+1)·interval), observed at the interval's end (the
// lengths of an interval without arrivals are the previous interval's).
type oracleSeries struct {
	interval            time.Duration
	rate, input, output []float64
}

func newOracleSeries(l *Load, interval time.Duration) *oracleSeries {
	n := int(l.End()/interval) + 1
	s := &oracleSeries{interval: interval, rate: make([]float64, n), input: make([]float64, n), output: make([]float64, n)}
	count := make([]int, n)
	for _, r := range l.Requests {
		k := min(int(r.Arrival/interval), n-1)
		count[k]++
		s.input[k] += float64(r.InputTokens)
		s.output[k] += float64(r.OutputTokens)
	}
	for k, c := range count {
		s.rate[k] = float64(c) / interval.Seconds()
		switch {
		case c > 0:
			s.input[k] /= float64(c)
			s.output[k] /= float64(c)
		case k > 0:
			s.input[k], s.output[k] = s.input[k-1], s.output[k-1]
		}
	}
	return s
}

// at is the signal observed at time t (the interval ending at or just
// after t), clamped to the load.
func (s *oracleSeries) at(v []float64, t time.Time) float64 {
	k := int((t.Sub(Epoch)+s.interval-1)/s.interval) - 1
	return v[min(max(k, 0), len(v)-1)]
}

// oracle is a forecast.Forecaster that knows the future of one signal.
type oracle struct {
	series *oracleSeries
	signal []float64
	last   time.Time
	seen   bool
}

func (o *oracle) Observe(t time.Time, _ float64) { o.last, o.seen = t, true }

// Predict is the signal actually observed horizon after the last
// observation: exact forecasts at every horizon.
func (o *oracle) Predict(h time.Duration) float64 {
	if !o.seen {
		return 0
	}
	return o.series.at(o.signal, o.last.Add(h))
}

// oracleForecasts gives plan.NewSLAForecasts exact forecasts of every
// pool's signals (all pools see the same arrivals).
func oracleForecasts(l *Load, interval time.Duration) func(pool, signal string) forecast.Forecaster {
	s := newOracleSeries(l, interval)
	return func(_, signal string) forecast.Forecaster {
		v := s.rate
		switch signal {
		case plan.SignalInputTokens:
			v = s.input
		case plan.SignalOutputTokens:
			v = s.output
		}
		return &oracle{series: s, signal: v}
	}
}
