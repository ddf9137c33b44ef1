package forecast

import (
	"math"
	"time"
)

// Seasonal forecasts a signal that repeats: once its own history shows a
// period, the forecast h ahead is the current level plus the change the
// signal made over the same stretch one period ago ("seasonal naive" with
// an additive level shift, the simplest member of the Holt–Winters family).
// Request load is diurnal and weekly; a trend forecaster extrapolates a
// quarter period's slope past the turn, a seasonal one has seen the turn.
// Dynamo's planner offers Prophet for the same reason (its load predictors
// are constant, ARIMA and Prophet, planner/utils/load_predictor.py).
//
// The period is the lag, in samples, with the highest autocorrelation
// after the autocorrelation has first gone negative (so a trend, whose
// autocorrelation stays positive, is no period), among lags that leave at
// least two whole periods in the history, and only if that correlation
// reaches MinCorrelation. Without a period Predict returns the level; a
// caller keeps its own forecaster for that case (Period reports which).
// Samples are assumed about evenly spaced (a control loop's interval): a
// lag in samples is turned into time by the mean spacing.
type Seasonal struct {
	// MinCorrelation is the autocorrelation a period must reach; default
	// DefaultSeasonalMinCorrelation.
	MinCorrelation float64
	// MinPeriod is the shortest period looked for; default 4 samples.
	MinPeriod time.Duration
	// MaxSamples bounds the history; default MaxSeasonalSamples.
	MaxSamples int

	hist   []Sample
	period int // in samples; 0 = none
	corr   float64
	// detectedAt is the history length at the last detection.
	detectedAt int
}

// DefaultSeasonalMinCorrelation: a sine with Poisson arrivals at tens of
// requests per second correlates above 0.95 with itself a period later;
// an aperiodic trace's best lag (the Azure conversation trace's) stays
// well below.
const DefaultSeasonalMinCorrelation = 0.8

// MaxSeasonalSamples bounds the history. At a 30 s interval it holds 68
// hours, so a daily period (two of them needed) is found. The O(n²)
// autocorrelation scan (33 M multiply-adds at the bound) runs again only
// once the history has grown or moved by a 64th, at most once a sample.
const MaxSeasonalSamples = 8192

// NewSeasonal returns a Seasonal with default settings.
func NewSeasonal() *Seasonal { return &Seasonal{} }

// Observe appends a sample and re-detects the period.
func (s *Seasonal) Observe(t time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if n := len(s.hist); n > 0 && t.Before(s.hist[n-1].T) {
		return // out of order: ignored, as the history must stay sorted
	}
	limit := s.MaxSamples
	if limit <= 0 || limit > MaxSeasonalSamples {
		limit = MaxSeasonalSamples
	}
	for len(s.hist) >= limit {
		copy(s.hist, s.hist[1:])
		s.hist = s.hist[:len(s.hist)-1]
	}
	s.hist = append(s.hist, Sample{T: t, V: v})
	if s.detectedAt--; s.detectedAt <= 0 {
		s.period, s.corr = s.detect()
		s.detectedAt = max(1, len(s.hist)/64)
	}
}

// spacing is the mean time between samples.
func (s *Seasonal) spacing() time.Duration {
	n := len(s.hist)
	if n < 2 {
		return 0
	}
	return s.hist[n-1].T.Sub(s.hist[0].T) / time.Duration(n-1)
}

func (s *Seasonal) detect() (int, float64) {
	n := len(s.hist)
	minCorr := s.MinCorrelation
	if minCorr == 0 {
		minCorr = DefaultSeasonalMinCorrelation
	}
	minLag := 4
	if gap := s.spacing(); gap > 0 && s.MinPeriod > 0 {
		minLag = max(minLag, int(math.Ceil(float64(s.MinPeriod)/float64(gap))))
	}
	if n < 2*minLag {
		return 0, 0
	}
	mean := 0.0
	for _, x := range s.hist {
		mean += x.V
	}
	mean /= float64(n)
	// r(L) is the correlation of the demeaned series with itself L samples
	// later, over the overlap.
	r := func(lag int) float64 {
		var xy, xx, yy float64
		for i := 0; i+lag < n; i++ {
			a, b := s.hist[i].V-mean, s.hist[i+lag].V-mean
			xy += a * b
			xx += a * a
			yy += b * b
		}
		if xx == 0 || yy == 0 {
			return 0
		}
		return xy / math.Sqrt(xx*yy)
	}
	corr := make([]float64, n/2+1)
	crossed, top := false, math.Inf(-1)
	for lag := 1; lag <= n/2; lag++ {
		c := r(lag)
		if !crossed {
			crossed = c < 0
			corr[lag] = math.Inf(-1)
			continue
		}
		corr[lag] = c
		if lag >= minLag {
			top = max(top, c)
		}
	}
	if top < minCorr {
		return 0, 0
	}
	// Multiples of the period correlate about as well as the period: the
	// shortest lag within 0.02 of the best is the period.
	for lag := minLag; lag <= n/2; lag++ {
		if corr[lag] >= top-0.02 {
			return lag, corr[lag]
		}
	}
	return 0, 0
}

// Period is the detected period (0 when none) and its autocorrelation.
func (s *Seasonal) Period() (time.Duration, float64) {
	return time.Duration(s.period) * s.spacing(), s.corr
}

// around is the mean of the samples within one sample of index i.
func (s *Seasonal) around(i int) float64 {
	lo, hi := max(i-1, 0), min(i+1, len(s.hist)-1)
	sum := 0.0
	for j := lo; j <= hi; j++ {
		sum += s.hist[j].V
	}
	return sum / float64(hi-lo+1)
}

// Predict is the level (the last sample) plus the change over the same
// stretch whole periods ago, each end the mean of three samples to halve
// the noise; the level alone without a period (0 before any sample).
func (s *Seasonal) Predict(h time.Duration) float64 {
	n := len(s.hist)
	if n == 0 {
		return 0
	}
	now := n - 1
	level := s.hist[now].V
	gap := s.spacing()
	if s.period == 0 || gap <= 0 {
		return level
	}
	ahead := int(math.Round(float64(h) / float64(gap)))
	// Go back as many whole periods as put the target in the past.
	back := s.period * max(1, (ahead+s.period-1)/s.period)
	from, to := now-back, now-back+ahead
	if from < 0 || to > now {
		return level
	}
	return level + s.around(to) - s.around(from)
}
