package plannersim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Generated loads beyond the sine and the traces the planner's defaults
// were chosen on, so that a rule is judged on shapes it was not fitted to:
// bursts on a steady base, a week of diurnal cycles compressed, a code
// assistant's long prompts and short answers. Each comes from a seed; the
// bench runs each on a tuned-on seed and the held-out variants on other
// seeds and parameters (HeldOutShapes), reported but never tuned on.

// Lengths is a log-normal request length: median Median tokens, log
// standard deviation Sigma, clamped to [Min, Max].
type Lengths struct {
	Median   float64
	Sigma    float64
	Min, Max int
}

func (l Lengths) draw(rng *rand.Rand) int {
	v := l.Median * math.Exp(l.Sigma*rng.NormFloat64())
	return min(max(int(math.Round(v)), l.Min), l.Max)
}

func (l Lengths) validate(what string, limit int) error {
	if !(l.Median >= 1) || !(l.Sigma >= 0) || l.Sigma > 3 || l.Min < 1 || l.Max < l.Min || l.Max > limit {
		return fmt.Errorf("%s lengths %+v: want median >= 1, sigma in [0, 3], 1 <= min <= max <= %d", what, l, limit)
	}
	return nil
}

// Shape is a generated load: Poisson arrivals at Rate(t), drawn per 1 s
// slot as Sine's, with log-normal lengths.
type Shape struct {
	Name     string
	Duration time.Duration
	WarmUp   time.Duration
	Rate     func(t time.Duration) float64 // requests per second at t, >= 0
	Input    Lengths
	Output   Lengths
	Seed     uint64
}

// Load draws the arrivals and lengths.
func (s Shape) Load() (Load, error) {
	switch {
	case s.Duration <= 0 || s.Duration > 7*24*time.Hour:
		return Load{}, fmt.Errorf("shape %s: duration %v outside (0, 168h]", s.Name, s.Duration)
	case s.WarmUp < 0 || s.WarmUp >= s.Duration:
		return Load{}, fmt.Errorf("shape %s: warm-up %v outside [0, duration %v)", s.Name, s.WarmUp, s.Duration)
	case s.Rate == nil:
		return Load{}, fmt.Errorf("shape %s: no rate", s.Name)
	}
	if err := s.Input.validate("input", MaxInputTokens); err != nil {
		return Load{}, fmt.Errorf("shape %s: %w", s.Name, err)
	}
	if err := s.Output.validate("output", MaxOutputTokens); err != nil {
		return Load{}, fmt.Errorf("shape %s: %w", s.Name, err)
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x7368617065))
	l := Load{Name: s.Name, Horizon: s.Duration, WarmUp: s.WarmUp}
	for slot := time.Duration(0); slot < s.Duration; slot += time.Second {
		width := min(time.Second, s.Duration-slot)
		rate := s.Rate(slot + width/2)
		if math.IsNaN(rate) || rate < 0 || rate > 1e4 {
			return Load{}, fmt.Errorf("shape %s: rate %v at %v outside [0, 1e4]", s.Name, rate, slot)
		}
		if len(l.Requests)+int(rate)+1 > MaxRequests {
			return Load{}, fmt.Errorf("shape %s: more than %d requests", s.Name, MaxRequests)
		}
		n := poisson(rng, rate*width.Seconds())
		at := make([]time.Duration, n)
		for i := range at {
			at[i] = slot + time.Duration(rng.Int64N(int64(width)))
		}
		slices.Sort(at)
		for _, a := range at {
			l.Requests = append(l.Requests, Request{Arrival: a, InputTokens: s.Input.draw(rng), OutputTokens: s.Output.draw(rng)})
		}
	}
	if len(l.Requests) == 0 {
		return Load{}, fmt.Errorf("shape %s: no arrival", s.Name)
	}
	return l, nil
}

// chatLengths are conversation-like lengths (the Azure 2023 conversation
// trace's medians are about 1,000 prompt and 250 output tokens).
var (
	chatInput  = Lengths{Median: 1000, Sigma: 0.8, Min: 16, Max: 16384}
	chatOutput = Lengths{Median: 200, Sigma: 0.7, Min: 1, Max: 2048}
)

// Bursts is a steady base rate with bursts: burst starts are a Poisson
// process (mean gap MeanGap), each lasts an exponential time (mean
// MeanLength, clamped to [1 min, 8 min]) at Factor × the base, reached
// and left over 30 s ramps. Bursts are drawn from the seed, so two seeds
// are two different traces of the same kind.
func Bursts(seed uint64, base, factor float64, meanGap, meanLength, duration, warmUp time.Duration) Shape {
	rng := rand.New(rand.NewPCG(seed, 0x6275727374))
	type burst struct{ from, to time.Duration }
	var bursts []burst
	for t := time.Duration(0); t < duration; {
		t += time.Duration(rng.ExpFloat64() * float64(meanGap))
		length := min(max(time.Duration(rng.ExpFloat64()*float64(meanLength)), time.Minute), 8*time.Minute)
		bursts = append(bursts, burst{t, t + length})
		t += length
	}
	const ramp = 30 * time.Second
	rate := func(t time.Duration) float64 {
		lift := 0.0
		for _, b := range bursts {
			switch {
			case t < b.from-ramp || t > b.to+ramp:
			case t < b.from:
				lift = max(lift, 1-float64(b.from-t)/float64(ramp))
			case t <= b.to:
				lift = 1
			default:
				lift = max(lift, 1-float64(t-b.to)/float64(ramp))
			}
		}
		return base * (1 + (factor-1)*lift)
	}
	return Shape{
		Name:     fmt.Sprintf("bursts %g→%g req/s (every %v for %v on average), chat lengths, seed %d", base, base*factor, meanGap, meanLength, seed),
		Duration: duration, WarmUp: warmUp, Rate: rate, Input: chatInput, Output: chatOutput, Seed: seed,
	}
}

// Weekly is seven diurnal cycles of length day (a week compressed
// 24 h / day times): each day the rate rises from low to a peak at
// midday and back ((1 − cos) / 2), the peak high on the five weekdays and
// weekend on the last two.
func Weekly(seed uint64, day time.Duration, low, high, weekend float64, warmUp time.Duration) Shape {
	rate := func(t time.Duration) float64 {
		d := int(t / day)
		peak := high
		if d%7 >= 5 {
			peak = weekend
		}
		phase := float64(t%day) / float64(day)
		return low + (peak-low)*(1-math.Cos(2*math.Pi*phase))/2
	}
	return Shape{
		Name:     fmt.Sprintf("week of %v days, %g→%g req/s (weekend %g), chat lengths, seed %d", day, low, high, weekend, seed),
		Duration: 7 * day, WarmUp: warmUp, Rate: rate, Input: chatInput, Output: chatOutput, Seed: seed,
	}
}

// CodeAssistant is a code-completion mix — long prompts (the file and its
// context), short answers (the Azure 2023 code trace's medians are about
// 2,000 prompt and under 30 output tokens) — on a diurnal cycle.
func CodeAssistant(seed uint64, period time.Duration, low, high, promptMedian float64, duration, warmUp time.Duration) Shape {
	rate := func(t time.Duration) float64 {
		return low + (high-low)*(1-math.Cos(2*math.Pi*float64(t)/float64(period)))/2
	}
	return Shape{
		Name:     fmt.Sprintf("code assistant %g→%g req/s, period %v, prompts ~%g tokens, answers ~25, seed %d", low, high, period, promptMedian, seed),
		Duration: duration, WarmUp: warmUp, Rate: rate, Seed: seed,
		Input:  Lengths{Median: promptMedian, Sigma: 0.5, Min: 256, Max: 16384},
		Output: Lengths{Median: 25, Sigma: 0.7, Min: 1, Max: 256},
	}
}

// The generated shapes of the bench, by --shape name: the tuned-on seed
// (1) with the parameters below. Warm-ups let a dynamic policy start from
// its own steady state: two periods where the load repeats (what the
// planner's seasonal detection needs), else ten minutes.
func GeneratedShape(name string, seed uint64) (Shape, error) {
	switch name {
	case "bursts":
		return Bursts(seed, 40, 2.5, 8*time.Minute, 3*time.Minute, 70*time.Minute, 10*time.Minute), nil
	case "weekly":
		return Weekly(seed, 15*time.Minute, 15, 120, 60, 30*time.Minute), nil
	case "code":
		return CodeAssistant(seed, 20*time.Minute, 6, 40, 4000, 80*time.Minute, 40*time.Minute), nil
	}
	return Shape{}, fmt.Errorf("generated shape %q: want bursts, weekly or code", name)
}

// GeneratedShapes are GeneratedShape's names.
var GeneratedShapes = []string{"bursts", "weekly", "code"}

// HeldOutShapes are variants the planner's rules were never tuned on:
// other seeds and parameters of each kind.
func HeldOutShapes() []Shape {
	return []Shape{
		Bursts(7, 25, 3, 6*time.Minute, 2*time.Minute, 70*time.Minute, 10*time.Minute),
		Weekly(7, 12*time.Minute, 20, 90, 40, 24*time.Minute),
		CodeAssistant(7, 25*time.Minute, 4, 30, 6000, 90*time.Minute, 50*time.Minute),
	}
}
