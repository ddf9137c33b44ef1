package plannersim

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// perMinute counts arrivals per minute.
func perMinute(l Load) []int {
	out := make([]int, int(l.End()/time.Minute)+1)
	for _, r := range l.Requests {
		out[int(r.Arrival/time.Minute)]++
	}
	return out[:len(out)-1]
}

func TestBurstsLiftTheBaseByTheFactor(t *testing.T) {
	g := Bursts(3, 10, 3, 4*time.Minute, 2*time.Minute, 40*time.Minute, 0)
	l, err := g.Load()
	if err != nil {
		t.Fatal(err)
	}
	m := perMinute(l)
	lo, hi := slices.Min(m), slices.Max(m)
	// 10 req/s is 600 a minute (Poisson: ±25), 30 req/s 1,800 in a burst.
	if lo < 500 || lo > 700 || hi < 1650 || hi > 1950 {
		t.Fatalf("per-minute arrivals from %d to %d, want about 600 and 1800", lo, hi)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestWeeklyWeekendIsLighter(t *testing.T) {
	g := Weekly(1, 2*time.Minute, 5, 40, 15, 0)
	l, err := g.Load()
	if err != nil {
		t.Fatal(err)
	}
	m := perMinute(l) // 2 minutes a day: minutes 1, 3, … are the days' second halves
	weekday, weekend := m[0]+m[1], m[10]+m[11]
	// A day's mean rate is (low + peak) / 2: 22.5 req/s on a weekday, 10
	// on the weekend, × 120 s.
	if weekday < 2500 || weekday > 2900 || weekend < 1050 || weekend > 1350 {
		t.Fatalf("a weekday brings %d requests, a weekend day %d; want about 2700 and 1200", weekday, weekend)
	}
	if l.End() != 14*time.Minute {
		t.Fatalf("a week of 2-minute days ends at %v", l.End())
	}
}

func TestCodeAssistantHasLongPromptsAndShortAnswers(t *testing.T) {
	l, err := CodeAssistant(2, 5*time.Minute, 5, 20, 4000, 5*time.Minute, 0).Load()
	if err != nil {
		t.Fatal(err)
	}
	var in, out []int
	for _, r := range l.Requests {
		in, out = append(in, r.InputTokens), append(out, r.OutputTokens)
	}
	slices.Sort(in)
	slices.Sort(out)
	if m := in[len(in)/2]; m < 3800 || m > 4200 {
		t.Fatalf("median prompt %d, want about 4000", m)
	}
	if m := out[len(out)/2]; m < 22 || m > 28 {
		t.Fatalf("median answer %d, want about 25", m)
	}
	if in[0] < 256 || in[len(in)-1] > 16384 || out[0] < 1 || out[len(out)-1] > 256 {
		t.Fatalf("lengths outside their bounds: prompts %d..%d, answers %d..%d", in[0], in[len(in)-1], out[0], out[len(out)-1])
	}
}

func TestShapesAreSeededAndChecked(t *testing.T) {
	a, _ := Bursts(1, 10, 2, time.Minute, time.Minute, 5*time.Minute, 0).Load()
	b, _ := Bursts(1, 10, 2, time.Minute, time.Minute, 5*time.Minute, 0).Load()
	c, _ := Bursts(2, 10, 2, time.Minute, time.Minute, 5*time.Minute, 0).Load()
	same := func(x, y Load) bool {
		return slices.EqualFunc(x.Requests, y.Requests, func(p, q Request) bool {
			return p.Arrival == q.Arrival && p.InputTokens == q.InputTokens && p.OutputTokens == q.OutputTokens
		})
	}
	if !same(a, b) || same(a, c) {
		t.Fatal("the same seed must draw the same load, another seed another")
	}
	for _, name := range GeneratedShapes {
		if _, err := GeneratedShape(name, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := GeneratedShape("tidal", 1); err == nil || !strings.Contains(err.Error(), "tidal") {
		t.Fatalf("unknown shape: %v", err)
	}
	bad := []Shape{
		{Name: "rate", Duration: time.Minute, Rate: func(time.Duration) float64 { return -1 }, Input: chatInput, Output: chatOutput},
		{Name: "lengths", Duration: time.Minute, Rate: func(time.Duration) float64 { return 1 }, Input: Lengths{Median: 10, Min: 5, Max: 1}, Output: chatOutput},
		{Name: "warm-up", Duration: time.Minute, WarmUp: time.Minute, Rate: func(time.Duration) float64 { return 1 }, Input: chatInput, Output: chatOutput},
		{Name: "no rate", Duration: time.Minute, Input: chatInput, Output: chatOutput},
	}
	for _, s := range bad {
		if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), s.Name) {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}
