package plannersim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
)

// Request is one arrival of a load shape.
type Request struct {
	Arrival      time.Duration // from the start of the load
	InputTokens  int
	OutputTokens int
	// HashIDs are the prompt's 512-token blocks, prefix-chained, as in a
	// Mooncake trace: requests sharing leading ids share a cached prefix on
	// a replica that served one of them. Nil for loads without prefix
	// information; Load.Normalize gives those unique ids, so they never hit.
	HashIDs []uint64
}

// Load is a request sequence in arrival order.
type Load struct {
	Name     string
	Requests []Request
	// Horizon is the end of the load: billing and the policies' decisions
	// stop there (requests still in flight finish afterwards). Zero: the
	// last arrival.
	Horizon time.Duration
	// WarmUp is a leading span that is simulated but not scored: requests
	// arriving before it count in no figure and GPU-hours are billed from
	// it on, so that dynamic policies are measured in their steady state
	// (with a forecast history and a fleet they sized themselves), not on
	// a cold start that static fleets, sized in hindsight, do not have.
	WarmUp time.Duration
}

// Bounds on a load, so that a bad flag or file is an error and not an
// allocation failure.
const (
	MaxRequests     = 1 << 22
	MaxInputTokens  = replay.MaxInputLength
	MaxOutputTokens = replay.MaxOutputLength
)

// Validate reports the first request a simulation cannot run.
func (l *Load) Validate() error {
	if len(l.Requests) == 0 {
		return fmt.Errorf("load %s: no requests", l.Name)
	}
	if len(l.Requests) > MaxRequests {
		return fmt.Errorf("load %s: %d requests, more than %d", l.Name, len(l.Requests), MaxRequests)
	}
	var last time.Duration
	for i, r := range l.Requests {
		switch {
		case r.Arrival < last:
			return fmt.Errorf("load %s: request %d arrives at %v, before request %d (want arrival order)", l.Name, i, r.Arrival, i-1)
		case r.InputTokens < 1 || r.InputTokens > MaxInputTokens:
			return fmt.Errorf("load %s: request %d: input tokens %d outside [1, %d]", l.Name, i, r.InputTokens, MaxInputTokens)
		case r.OutputTokens < 1 || r.OutputTokens > MaxOutputTokens:
			return fmt.Errorf("load %s: request %d: output tokens %d outside [1, %d]", l.Name, i, r.OutputTokens, MaxOutputTokens)
		case r.HashIDs != nil && len(r.HashIDs) != (r.InputTokens+replay.TraceBlockSize-1)/replay.TraceBlockSize:
			return fmt.Errorf("load %s: request %d: %d hash ids for %d input tokens", l.Name, i, len(r.HashIDs), r.InputTokens)
		}
		last = r.Arrival
	}
	if l.Horizon != 0 && l.Horizon < last {
		return fmt.Errorf("load %s: horizon %v before the last arrival %v", l.Name, l.Horizon, last)
	}
	if l.WarmUp < 0 || (l.WarmUp > 0 && l.WarmUp >= l.End()) {
		return fmt.Errorf("load %s: warm-up %v outside [0, the load's end %v)", l.Name, l.WarmUp, l.End())
	}
	if l.Requests[len(l.Requests)-1].Arrival < l.WarmUp {
		return fmt.Errorf("load %s: no request after the warm-up %v", l.Name, l.WarmUp)
	}
	return nil
}

// End is the load's horizon.
func (l *Load) End() time.Duration {
	if l.Horizon > 0 {
		return l.Horizon
	}
	return l.Requests[len(l.Requests)-1].Arrival
}

// Scale reshapes a load: timeScale > 0 plays it that many times faster
// (every arrival divided by it: the same requests in less time);
// rateScale > 0 keeps the timeline and multiplies the arrival rate, by
// thinning (< 1: each request kept with probability rateScale) or by adding
// copies (> 1: floor(rateScale)−1 copies plus one more with probability of
// the fraction), each copy arriving uniformly at random between its
// original and the next arrival so as not to stack bursts. Copies keep
// their original's hash ids (the same prompt asked again).
func (l *Load) Scale(timeScale, rateScale float64, seed uint64) error {
	if !(timeScale > 0) || math.IsInf(timeScale, 0) || timeScale > 1e6 {
		return fmt.Errorf("time scale %v: want > 0 and at most 1e6", timeScale)
	}
	if !(rateScale > 0) || math.IsInf(rateScale, 0) || rateScale > 1000 {
		return fmt.Errorf("rate scale %v: want > 0 and at most 1000", rateScale)
	}
	if float64(len(l.Requests))*math.Ceil(rateScale) > MaxRequests {
		return fmt.Errorf("rate scale %v: %d requests would exceed %d", rateScale, len(l.Requests), MaxRequests)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7261746573))
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) / timeScale) }
	out := make([]Request, 0, int(float64(len(l.Requests))*rateScale)+1)
	for i, r := range l.Requests {
		next := l.End()
		if i+1 < len(l.Requests) {
			next = l.Requests[i+1].Arrival
		}
		copies := int(rateScale)
		if rng.Float64() < rateScale-float64(copies) {
			copies++
		}
		for c := 0; c < copies; c++ {
			q := r
			if c > 0 && next > r.Arrival {
				q.Arrival = r.Arrival + time.Duration(rng.Int64N(int64(next-r.Arrival)))
			}
			q.Arrival = scaled(q.Arrival)
			out = append(out, q)
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("rate scale %v left no request of %d", rateScale, len(l.Requests))
	}
	slices.SortStableFunc(out, func(a, b Request) int { return int(a.Arrival - b.Arrival) })
	l.Requests = out
	if l.Horizon > 0 {
		l.Horizon = scaled(l.Horizon)
	}
	l.WarmUp = scaled(l.WarmUp)
	return nil
}

// errNoHashSpace is returned when unique hash ids would overflow the 32
// bits replay.Tokens turns them into.
var errNoHashSpace = errors.New("more prompt blocks than 32-bit hash ids")

// Normalize gives requests without hash ids fresh ones, distinct from every
// id in the load, so that their prompts share nothing.
func (l *Load) Normalize() error {
	var next uint64
	for _, r := range l.Requests {
		for _, id := range r.HashIDs {
			next = max(next, id+1)
		}
	}
	for i := range l.Requests {
		r := &l.Requests[i]
		if r.HashIDs != nil {
			continue
		}
		n := (r.InputTokens + replay.TraceBlockSize - 1) / replay.TraceBlockSize
		if next+uint64(n) > math.MaxUint32 {
			return fmt.Errorf("load %s: %w", l.Name, errNoHashSpace)
		}
		r.HashIDs = make([]uint64, n)
		for j := range r.HashIDs {
			r.HashIDs[j] = next
			next++
		}
	}
	return nil
}

// tokens is the request's prompt as token ids (see replay.Tokens).
func (r Request) tokens() []uint32 {
	return replay.Tokens(nil, replay.TraceRequest{InputLength: r.InputTokens, HashIDs: r.HashIDs})
}

// FromMooncake turns a parsed Mooncake trace into a load.
func FromMooncake(name string, trace []replay.TraceRequest) Load {
	l := Load{Name: name, Requests: make([]Request, len(trace))}
	t0 := trace[0].Timestamp
	for i, t := range trace {
		l.Requests[i] = Request{
			Arrival:      time.Duration(t.Timestamp-t0) * time.Millisecond,
			InputTokens:  t.InputLength,
			OutputTokens: max(1, t.OutputLength),
			HashIDs:      t.HashIDs,
		}
	}
	return l
}

// LoadMooncake reads a Mooncake JSONL trace (lab/replay's parser: bounded,
// errors name file and line).
func LoadMooncake(path string, limit int) (Load, error) {
	trace, err := replay.LoadTrace(path, limit)
	if err != nil {
		return Load{}, err
	}
	return FromMooncake(path, trace), nil
}
