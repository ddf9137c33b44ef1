package plannersim

import (
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/forecast"
)

// RateSeries is the load's request rate per interval (requests per second
// arriving in [k·interval, (k+1)·interval)), the series the planner
// forecasts, up to the load's horizon.
func RateSeries(l *Load, interval time.Duration) []forecast.Sample {
	n := int(l.End()/interval) + 1
	counts := make([]int, n)
	for _, r := range l.Requests {
		counts[min(int(r.Arrival/interval), n-1)]++
	}
	out := make([]forecast.Sample, n)
	for k, c := range counts {
		// Observed at the interval's end, as the control loop sees it.
		out[k] = forecast.Sample{T: Epoch.Add(time.Duration(k+1) * interval), V: float64(c) / interval.Seconds()}
	}
	return out
}

// BacktestResult is one forecaster's error at one horizon.
type BacktestResult struct {
	Forecaster string
	Horizon    time.Duration
	MAE        float64 // requests per second
	MAPE       float64 // fraction
}

// Backtest runs every forecaster kind (forecast.Kinds, default parameters)
// over series at each horizon, each on a fresh forecaster.
func Backtest(series []forecast.Sample, horizons []time.Duration) ([]BacktestResult, error) {
	var out []BacktestResult
	for _, kind := range forecast.Kinds {
		for _, h := range horizons {
			f, err := forecast.New(kind, forecast.Params{})
			if err != nil {
				return nil, err
			}
			mae, mape := forecast.Backtest(series, f, h)
			out = append(out, BacktestResult{Forecaster: kind, Horizon: h, MAE: mae, MAPE: mape})
		}
	}
	return out, nil
}
