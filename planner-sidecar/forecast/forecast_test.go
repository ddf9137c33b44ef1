package forecast

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func all(t *testing.T) map[string]Forecaster {
	t.Helper()
	out := map[string]Forecaster{}
	for _, k := range Kinds {
		f, err := New(k, Params{})
		if err != nil {
			t.Fatal(err)
		}
		out[k] = f
	}
	return out
}

func TestConstantSeriesConvergesToTheConstant(t *testing.T) {
	for kind, f := range all(t) {
		// Start away from the constant so convergence is exercised.
		f.Observe(t0, 3)
		for i := 1; i <= 200; i++ {
			f.Observe(t0.Add(time.Duration(i)*time.Second), 7)
		}
		for _, h := range []time.Duration{0, time.Second, time.Minute} {
			if got := f.Predict(h); math.Abs(got-7) > 1e-6 {
				t.Errorf("%s: Predict(%s) = %v, want 7", kind, h, got)
			}
		}
	}
}

// line is a noise-free ramp: 10 + 2·t (t in seconds).
func line(sec float64) float64 { return 10 + 2*sec }

func TestRampTrendForecastersConvergeToTheLine(t *testing.T) {
	for _, kind := range []string{"holt", "kalman"} {
		f, _ := New(kind, Params{})
		const n = 300
		for i := 0; i <= n; i++ {
			f.Observe(t0.Add(time.Duration(i)*time.Second), line(float64(i)))
		}
		for _, h := range []time.Duration{0, 10 * time.Second, 2 * time.Minute} {
			want := line(n + h.Seconds())
			if got := f.Predict(h); math.Abs(got-want) > 1e-6*want {
				t.Errorf("%s: Predict(%s) = %v, want %v", kind, h, got, want)
			}
		}
	}
}

func TestRampIrregularIntervalsHolt(t *testing.T) {
	// The trend is per second, so uneven steps still land on the line.
	f := NewHolt(0.5, 0.3, 0)
	sec := 0.0
	for i := 0; i < 400; i++ {
		sec += []float64{1, 2.5, 0.5}[i%3]
		f.Observe(t0.Add(time.Duration(sec*float64(time.Second))), line(sec))
	}
	want := line(sec + 30)
	if got := f.Predict(30 * time.Second); math.Abs(got-want) > 1e-6*want {
		t.Errorf("Predict = %v, want %v", got, want)
	}
}

func TestRampEWMALagsByTheAnalyticSteadyStateError(t *testing.T) {
	// EWMA on a ramp of slope b sampled every Δ: the level settles at
	// line(t) − b·Δ·(1−α)/α. With b = 2, Δ = 1 s: α = 0.5 → 2, α = 0.2 → 8.
	for _, c := range []struct{ alpha, lag float64 }{{0.5, 2}, {0.2, 8}} {
		f := NewEWMA(c.alpha)
		const n = 400
		for i := 0; i <= n; i++ {
			f.Observe(t0.Add(time.Duration(i)*time.Second), line(float64(i)))
		}
		want := line(n) - c.lag
		if got := f.Predict(time.Minute); math.Abs(got-want) > 1e-6 {
			t.Errorf("alpha %v: Predict = %v, want %v", c.alpha, got, want)
		}
	}
}

func TestConstantPredictsLastValue(t *testing.T) {
	f := &Constant{}
	if f.Predict(time.Second) != 0 {
		t.Fatal("want 0 before any observation")
	}
	f.Observe(t0, 5)
	f.Observe(t0.Add(time.Second), 9)
	if got := f.Predict(time.Hour); got != 9 {
		t.Fatalf("got %v, want 9", got)
	}
}

func TestBacktestNaiveOnRamp(t *testing.T) {
	// The naive forecast on a ramp is always off by slope × horizon: with
	// samples every 1 s and horizon 3 s, every error is 6; the percentage
	// error of sample i is 6 / line(i+3).
	var s []Sample
	for i := 0; i < 50; i++ {
		s = append(s, Sample{t0.Add(time.Duration(i) * time.Second), line(float64(i))})
	}
	mae, mape := Backtest(s, &Constant{}, 3*time.Second)
	if math.Abs(mae-6) > 1e-12 {
		t.Errorf("mae = %v, want 6", mae)
	}
	var want float64
	for i := 0; i+3 < 50; i++ {
		want += 6 / line(float64(i+3))
	}
	want /= 47
	if math.Abs(mape-want) > 1e-12 {
		t.Errorf("mape = %v, want %v", mape, want)
	}
	// Holt learns the trend: after warm-up its errors vanish, so its MAE is
	// well under the naive one.
	hmae, _ := Backtest(s, NewHolt(0.5, 0.3, 0), 3*time.Second)
	if hmae >= mae/2 {
		t.Errorf("holt mae %v not under half the naive %v", hmae, mae)
	}
}

func TestBacktestEmptyAndShort(t *testing.T) {
	if mae, mape := Backtest(nil, &Constant{}, time.Second); mae != 0 || mape != 0 {
		t.Fatal("empty series must give zero errors")
	}
	s := []Sample{{t0, 1}, {t0.Add(time.Second), 0}}
	mae, mape := Backtest(s, &Constant{}, time.Second)
	if mae != 1 || mape != 0 {
		t.Fatalf("got mae %v mape %v; want 1 and 0 (zero actuals are left out of MAPE)", mae, mape)
	}
}

func TestNewRejectsUnknownAndBadParams(t *testing.T) {
	if _, err := New("arima", Params{}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, err := New("ewma", Params{Alpha: 1.5}); err == nil {
		t.Error("alpha 1.5 accepted")
	}
}

func TestDampedHoltLevelsOffAtTauTimesTheTrend(t *testing.T) {
	// On the exact line 10 + 2t (sampled at 0, 10, 20 s) the first
	// difference sets trend 2/s and level 30 at 20 s; the third sample
	// lies on the line the damped one-step forecast undershoots, so the
	// check is on the forecast's shape, from its own level and trend:
	// Predict(h) − level = trend × τ(1 − e^{−h/τ}), which tends to trend × τ.
	tau := 60 * time.Second
	h := NewHolt(0.5, 0.3, tau)
	for _, sec := range []float64{0, 10, 20} {
		h.Observe(t0.Add(time.Duration(sec*float64(time.Second))), line(sec))
	}
	level := h.Predict(0)
	for _, hz := range []time.Duration{30 * time.Second, 2 * time.Minute, time.Hour} {
		want := level + h.trend*tau.Seconds()*(1-math.Exp(-hz.Seconds()/tau.Seconds()))
		if got := h.Predict(hz); math.Abs(got-want) > 1e-9 {
			t.Fatalf("h=%v: %v, want %v", hz, got, want)
		}
	}
	if far := h.Predict(time.Hour) - level; math.Abs(far-h.trend*tau.Seconds()) > 1e-6*math.Abs(h.trend*tau.Seconds()) {
		t.Fatalf("an hour out the trend adds %v, want about τ × trend = %v", far, h.trend*tau.Seconds())
	}
	// Undamped, the same samples give the line itself (level 30, trend 2).
	u := NewHolt(0.5, 0.3, 0)
	for _, sec := range []float64{0, 10, 20} {
		u.Observe(t0.Add(time.Duration(sec*float64(time.Second))), line(sec))
	}
	if got := u.Predict(time.Minute); math.Abs(got-line(80)) > 1e-9 {
		t.Fatalf("undamped: %v, want %v", got, line(80))
	}
	// Damped, the second step's trend is the first difference (2/s, the
	// damping only acts from the third sample on); at 20 s the level is
	// 0.5 × 50 + 0.5 × (30 + 2 × 60(1 − e^{−1/6})) and below the line.
	wantLevel := 0.5*line(20) + 0.5*(line(10)+2*60*(1-math.Exp(-10.0/60)))
	if math.Abs(level-wantLevel) > 1e-9 || level >= line(20) {
		t.Fatalf("damped level %v, want %v (< %v)", level, wantLevel, line(20))
	}
	if _, err := New("holt", Params{TrendDamping: -time.Second}); err == nil {
		t.Fatal("negative damping accepted")
	}
}
