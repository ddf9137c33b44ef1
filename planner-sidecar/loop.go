// Package planner is the `kvgate planner` sidecar's control loop: every
// interval it collects what each pool did, lets the policy decide, has the
// actuator carry the decision out (unless advisory), journals the
// decision with everything behind it, and exports metrics. The parts are
// in the sub-packages; this one only wires them.
package plannersidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/actuate"
	"github.com/kvgate/kvgate/planner-sidecar/collect"
	"github.com/kvgate/kvgate/planner-sidecar/journal"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Loop is one planner.
type Loop struct {
	Policy    plan.Policy
	Collector collect.Collector
	Actuator  actuate.Actuator
	// Advisory decides and journals but applies nothing.
	Advisory bool
	Journal  *journal.Writer // nil: no journal
	Metrics  *Metrics        // nil: no metrics
	Interval time.Duration
	Log      *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu       sync.Mutex
	draining map[string]string // replica → pool, as applied
	last     time.Time
}

// Step runs one interval: collect, decide, apply, journal. It returns the
// journal entry; an error is returned only when the journal could not be
// written (collection and actuation failures are logged, counted and
// journaled, and the loop carries on).
func (l *Loop) Step(ctx context.Context) (journal.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	if l.draining == nil {
		l.draining = map[string]string{}
	}
	obs, errs := l.Collector.Collect(ctx, now, maps.Clone(l.draining))
	for _, err := range errs {
		src := "collect"
		var se *collect.SourceError
		if errors.As(err, &se) {
			src = se.Source
		}
		l.Metrics.collectError(src)
		l.log().Warn("planner: collect", "err", err)
	}
	if !l.Advisory {
		cur, err := l.Actuator.Current(ctx)
		if err != nil {
			l.Metrics.collectError("actuator")
			l.log().Warn("planner: current sizes", "err", err)
		}
		// Requested but not yet seen: provisioning. Without it the policy
		// would ask again for replicas that are on their way.
		for pool, n := range cur {
			o := obs.Pools[pool]
			o.Pending = max(0, n-o.Replicas-o.Draining)
			if obs.Pools == nil {
				obs.Pools = map[string]plan.PoolObservation{}
			}
			obs.Pools[pool] = o
		}
	}
	d := l.Policy.Decide(obs)
	e := journal.Entry{Time: now, Policy: l.Policy.Name(), Advisory: l.Advisory, Observation: obs, Decision: d}
	if !l.Advisory {
		if err := l.Actuator.Apply(ctx, d); err != nil {
			e.Error = err.Error()
			l.Metrics.collectError("actuator")
			l.log().Error("planner: apply", "err", err)
		} else {
			e.Applied = true
			for pool, names := range d.Drain {
				for _, n := range names {
					l.draining[n] = pool
				}
			}
			for _, names := range d.Remove {
				for _, n := range names {
					delete(l.draining, n)
				}
			}
		}
	}
	l.Metrics.observe(obs, d)
	l.last = now
	l.log().Info("planner: decision", "advisory", l.Advisory, "desired", d.Desired, "reason", d.Reason)
	if l.Journal != nil {
		if err := l.Journal.Append(e); err != nil {
			return e, err
		}
	}
	return e, nil
}

// Run steps every interval until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	if l.Interval <= 0 {
		return fmt.Errorf("planner: interval %s must be > 0", l.Interval)
	}
	t := time.NewTicker(l.Interval)
	defer t.Stop()
	for {
		if _, err := l.Step(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Healthy reports whether a decision was made within three intervals.
func (l *Loop) Healthy(now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		return errors.New("no decision yet")
	}
	if age := now.Sub(l.last); age > 3*l.Interval {
		return fmt.Errorf("last decision %s ago", age.Round(time.Second))
	}
	return nil
}

func (l *Loop) log() *slog.Logger {
	if l.Log == nil {
		return slog.Default()
	}
	return l.Log
}
