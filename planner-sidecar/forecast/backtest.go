package forecast

import (
	"math"
	"time"
)

// Sample is one observation of a series.
type Sample struct {
	T time.Time
	V float64
}

// Backtest replays series through f: after each observation it predicts
// horizon ahead and compares with the series' value at the first sample at
// or after that time. It returns the mean absolute error and the mean
// absolute percentage error (over actual values ≠ 0, as a fraction:
// 0.1 = 10 %). Samples must be in time order; f should be fresh.
func Backtest(series []Sample, f Forecaster, horizon time.Duration) (mae, mape float64) {
	var absSum, pctSum float64
	var n, np int
	j := 0
	for i, s := range series {
		f.Observe(s.T, s.V)
		want := s.T.Add(horizon)
		if j <= i {
			j = i + 1
		}
		for j < len(series) && series[j].T.Before(want) {
			j++
		}
		if j >= len(series) {
			break
		}
		got := f.Predict(horizon)
		actual := series[j].V
		e := math.Abs(got - actual)
		absSum += e
		n++
		if actual != 0 {
			pctSum += e / math.Abs(actual)
			np++
		}
	}
	if n > 0 {
		mae = absSum / float64(n)
	}
	if np > 0 {
		mape = pctSum / float64(np)
	}
	return mae, mape
}
