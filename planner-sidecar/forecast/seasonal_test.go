package forecast

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// wave is 30 + 25·sin(2π t / 10 min), a 10-minute cycle.
func wave(t time.Duration) float64 { return 30 + 25*math.Sin(2*math.Pi*t.Seconds()/600) }

func TestSeasonalFindsThePeriodAndForecastsTheTurn(t *testing.T) {
	s := NewSeasonal()
	const step = 30 * time.Second
	var at time.Duration
	for ; at <= 30*time.Minute; at += step {
		s.Observe(t0.Add(at), wave(at))
	}
	at -= step // the last sample's time
	p, corr := s.Period()
	if p != 10*time.Minute || corr < 0.99 {
		t.Fatalf("period %v (correlation %.3f), want 10m0s", p, corr)
	}
	// The forecast is the last sample plus the wave's change over the
	// same stretch a period (past 10 minutes: two periods) ago, which is
	// its change ahead: the wave itself, up to the three-sample means at
	// the analogues (within 1 % of the swing). The last sample is at
	// 30 min, the wave at its middle rising; 150 s on it peaks, where a
	// trend forecast would have carried the slope past 55.
	for _, h := range []time.Duration{0, 150 * time.Second, 5 * time.Minute, 12 * time.Minute} {
		// At the peak the three-sample mean flattens the wave by
		// 25 × (1 − (1 + 2 cos(2π/20)) / 3) = 0.82.
		if got, want := s.Predict(h), wave(at+h); math.Abs(got-want) > 0.85 {
			t.Errorf("Predict(%v) = %.2f, want %.2f", h, got, want)
		}
	}
}

func TestSeasonalSeesNoPeriodInARampOrNoise(t *testing.T) {
	ramp, noise := NewSeasonal(), NewSeasonal()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 240 {
		at := t0.Add(time.Duration(i) * 30 * time.Second)
		ramp.Observe(at, 10+float64(i))
		noise.Observe(at, 50+10*rng.NormFloat64())
	}
	for name, s := range map[string]*Seasonal{"ramp": ramp, "noise": noise} {
		if p, corr := s.Period(); p != 0 {
			t.Errorf("%s: period %v (correlation %.2f), want none", name, p, corr)
		}
		// Without a period: the level, the last sample.
		want := s.hist[len(s.hist)-1].V
		if got := s.Predict(time.Minute); got != want {
			t.Errorf("%s: Predict = %v, want the level %v", name, got, want)
		}
	}
}

func TestSeasonalIsBounded(t *testing.T) {
	s := &Seasonal{MaxSamples: 100}
	for i := range 110 {
		s.Observe(t0.Add(time.Duration(i)*time.Second), float64(i%7))
	}
	s.Observe(t0, 1) // out of order: ignored
	s.Observe(t0.Add(time.Hour*10), math.NaN())
	if len(s.hist) != 100 {
		t.Fatalf("history %d samples, bound 100", len(s.hist))
	}
	if p, _ := s.Period(); p != 7*time.Second {
		t.Fatalf("period %v, want 7s", p)
	}
	if (&Seasonal{}).Predict(time.Minute) != 0 {
		t.Fatal("empty forecaster predicts")
	}
}
