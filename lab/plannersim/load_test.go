package plannersim

import (
	"math"
	"testing"
	"time"
)

func TestScale(t *testing.T) {
	base := func() Load {
		l := Load{Name: "l"}
		for i := range 1000 {
			l.Requests = append(l.Requests, Request{Arrival: time.Duration(i) * time.Second, InputTokens: 10, OutputTokens: 2})
		}
		return l
	}
	l := base()
	if err := l.Scale(4, 1, 1); err != nil {
		t.Fatal(err)
	}
	if len(l.Requests) != 1000 || l.Requests[999].Arrival != 999*time.Second/4 {
		t.Errorf("time scale 4: %d requests, last at %v; want 1000, the last at %v", len(l.Requests), l.Requests[999].Arrival, 999*time.Second/4)
	}
	for _, c := range []struct{ rate, lo, hi float64 }{{2.5, 2400, 2600}, {0.5, 440, 560}} {
		l := base()
		if err := l.Scale(1, c.rate, 1); err != nil {
			t.Fatal(err)
		}
		if n := float64(len(l.Requests)); n < c.lo || n > c.hi {
			t.Errorf("rate scale %v: %v requests, want about %v", c.rate, n, 1000*c.rate)
		}
		if err := l.Validate(); err != nil {
			t.Errorf("rate scale %v: %v", c.rate, err)
		}
		if last := l.Requests[len(l.Requests)-1].Arrival; last > 999*time.Second {
			t.Errorf("rate scale %v: copies beyond the timeline, last at %v", c.rate, last)
		}
	}
	for _, bad := range [][2]float64{{0, 1}, {1, 0}, {math.NaN(), 1}, {1, math.Inf(1)}, {1, 1e9}} {
		l := base()
		if err := l.Scale(bad[0], bad[1], 1); err == nil {
			t.Errorf("Scale(%v, %v) accepted", bad[0], bad[1])
		}
	}
}

func TestSineRate(t *testing.T) {
	s := Sine{Duration: 20 * time.Minute, Period: 10 * time.Minute, MinRate: 2, MaxRate: 20, ISL: 100, OSL: 10, Seed: 3}
	if r := s.Rate(0); math.Abs(r-2) > 1e-9 {
		t.Errorf("rate at 0 = %v, want the minimum 2", r)
	}
	if r := s.Rate(5 * time.Minute); math.Abs(r-20) > 1e-9 {
		t.Errorf("rate at half a period = %v, want the maximum 20", r)
	}
	l, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	// Expected count: mean rate 11 req/s over 1200 s; Poisson sd ≈ 115.
	if n := len(l.Requests); n < 13200-600 || n > 13200+600 {
		t.Errorf("%d arrivals, want about 13200", n)
	}
	l2, _ := s.Load()
	if len(l2.Requests) != len(l.Requests) || l2.Requests[100].Arrival != l.Requests[100].Arrival {
		t.Error("the same seed drew different arrivals")
	}
	for _, bad := range []Sine{{}, {Duration: time.Minute, Period: time.Minute, MinRate: 5, MaxRate: 1, ISL: 1, OSL: 1}, {Duration: time.Minute, Period: time.Minute, MaxRate: 1, ISL: 0, OSL: 1}} {
		if _, err := bad.Load(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestNormalizeGivesDistinctIDs(t *testing.T) {
	l := Load{Name: "n", Requests: []Request{
		{InputTokens: 1024, OutputTokens: 1, HashIDs: []uint64{7, 8}},
		{InputTokens: 1025, OutputTokens: 1},
		{InputTokens: 1, OutputTokens: 1},
	}}
	if err := l.Normalize(); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{7: true, 8: true}
	for _, r := range l.Requests[1:] {
		for _, id := range r.HashIDs {
			if seen[id] {
				t.Errorf("hash id %d reused", id)
			}
			seen[id] = true
		}
	}
	if len(l.Requests[1].HashIDs) != 3 || len(l.Requests[2].HashIDs) != 1 {
		t.Errorf("hash ids per request %d, %d; want 3 and 1 (one per 512 tokens)", len(l.Requests[1].HashIDs), len(l.Requests[2].HashIDs))
	}
	if err := l.Validate(); err != nil {
		t.Error(err)
	}
}

func TestRateSeriesAndBacktest(t *testing.T) {
	l := &Load{Name: "r", Horizon: 90 * time.Second}
	for i := range 90 {
		// 1 req/s for the first 30 s, 2 for the next 30, 3 for the last.
		for j := 0; j <= i/30; j++ {
			l.Requests = append(l.Requests, Request{Arrival: time.Duration(i) * time.Second, InputTokens: 1, OutputTokens: 1})
		}
	}
	s := RateSeries(l, 30*time.Second)
	if len(s) != 4 || s[0].V != 1 || s[1].V != 2 || s[2].V != 3 || s[3].V != 0 {
		t.Fatalf("series %+v, want 1, 2, 3 req/s then the empty interval at the horizon", s)
	}
	res, err := Backtest(s[:3], []time.Duration{30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Forecaster == "constant" && (r.MAE != 1 || math.Abs(r.MAPE-(0.5+1.0/3)/2) > 1e-12) {
			// Constant predicts the last value: errors |1−2| and |2−3|.
			t.Errorf("constant: MAE %v MAPE %v, want 1 and %v", r.MAE, r.MAPE, (0.5+1.0/3)/2)
		}
	}
}
