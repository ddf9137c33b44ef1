package plannersim

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
)

// replicaState is where a replica is in its life.
type replicaState int

const (
	provisioning replicaState = iota // asked for, not ready: billed, gets nothing
	ready                            // routable
	draining                         // gets nothing new; leaves when idle
)

// replica is one engine of a pool.
type replica struct {
	name     string
	seq      int // creation order: the router's tie-break
	eng      *enginesim.Engine
	state    replicaState
	readyAt  time.Duration // provisioning: when it becomes ready
	inflight int           // requests submitted and not finished
	// busyAt is the engine's busy time at busySince (the last utilisation
	// reading, or when the replica became ready).
	busyAt, busySince time.Duration
}

// pool is one set of interchangeable replicas.
type pool struct {
	name     string
	replicas []*replica // live ones (any state), creation order
	created  int
	target   int   // serving replicas (ready + provisioning) last asked for
	queue    []int // requests waiting for a ready replica (none ready yet)
}

func (p *pool) count(s replicaState) int {
	n := 0
	for _, r := range p.replicas {
		if r.state == s {
			n++
		}
	}
	return n
}

// pick is the ready replica with the fewest requests in flight (ties: the
// oldest), nil when none is ready.
func (p *pool) pick() *replica {
	var best *replica
	for _, r := range p.replicas {
		if r.state == ready && (best == nil || r.inflight < best.inflight) {
			best = r
		}
	}
	return best
}

// fleet is the simulated fleet's replicas, their life cycle and billing.
type fleet struct {
	cfg   Config
	pools map[string]*pool
	order []*pool

	warmUp   time.Duration // scale events before it are not counted
	horizon  time.Duration
	billedAt time.Duration // GPU-seconds are accrued up to here
	gpuSec   float64
	events   int // scale events: a pool's target changed
}

// newFleet bills from warmUp to horizon.
func newFleet(cfg Config, warmUp, horizon time.Duration) *fleet {
	f := &fleet{cfg: cfg, pools: map[string]*pool{}, warmUp: warmUp, horizon: horizon, billedAt: warmUp}
	for _, name := range cfg.Mode.Pools() {
		p := &pool{name: name}
		f.pools[name] = p
		f.order = append(f.order, p)
	}
	return f
}

// accrue bills every live replica from the last call (or the warm-up's
// end) up to t (capped at the horizon).
func (f *fleet) accrue(t time.Duration) {
	t = min(t, f.horizon)
	if t <= f.billedAt {
		return
	}
	n := 0
	for _, p := range f.order {
		n += len(p.replicas)
	}
	f.gpuSec += float64(n*f.cfg.GPUsPerReplica) * (t - f.billedAt).Seconds()
	f.billedAt = t
}

func (f *fleet) add(p *pool, now time.Duration, delay time.Duration) (*replica, error) {
	eng, err := enginesim.New(f.cfg.Engine, nil)
	if err != nil {
		return nil, err
	}
	p.created++
	r := &replica{name: fmt.Sprintf("%s-%d", p.name, p.created), seq: p.created, eng: eng, state: provisioning, readyAt: now + delay}
	if delay == 0 {
		r.state = ready
	}
	p.replicas = append(p.replicas, r)
	return r, nil
}

func (f *fleet) remove(p *pool, r *replica) {
	p.replicas = slices.DeleteFunc(p.replicas, func(x *replica) bool { return x == r })
}

// nextReady is the earliest provisioning replica's ready time.
func (f *fleet) nextReady() (time.Duration, bool) {
	best, ok := time.Duration(0), false
	for _, p := range f.order {
		for _, r := range p.replicas {
			if r.state == provisioning && (!ok || r.readyAt < best) {
				best, ok = r.readyAt, true
			}
		}
	}
	return best, ok
}

// scale moves pool p toward target serving replicas (ready +
// provisioning): up by taking back draining replicas first (warm, ready at
// once) then provisioning new ones; down by cancelling provisioning ones
// (newest first) then draining the ready ones with the fewest requests.
// Draining replicas with nothing in flight leave at once.
func (f *fleet) scale(p *pool, target int, now time.Duration) error {
	target = min(max(target, f.cfg.MinReplicas), f.cfg.MaxReplicas)
	if target != p.target {
		if now >= f.warmUp {
			f.events++
		}
		p.target = target
	}
	serving := p.count(ready) + p.count(provisioning)
	for ; serving < target; serving++ {
		var back *replica
		for _, r := range p.replicas {
			if r.state == draining && (back == nil || r.inflight > back.inflight) {
				back = r
			}
		}
		if back != nil {
			back.state = ready
			continue
		}
		if _, err := f.add(p, now, f.cfg.ProvisionDelay); err != nil {
			return err
		}
	}
	for i := len(p.replicas) - 1; i >= 0 && serving > target; i-- {
		if r := p.replicas[i]; r.state == provisioning {
			f.remove(p, r)
			serving--
		}
	}
	for serving > target {
		var victim *replica
		for _, r := range p.replicas {
			if r.state == ready && (victim == nil || r.inflight < victim.inflight) {
				victim = r
			}
		}
		if victim == nil {
			break
		}
		victim.state = draining
		if victim.inflight == 0 {
			f.remove(p, victim)
		}
		serving--
	}
	return nil
}

// drainNamed marks the named ready replicas of p draining (a policy that
// chooses which to drain), and removes the named draining idle ones.
func (f *fleet) drainNamed(p *pool, drain, remove []string) {
	for _, name := range drain {
		for _, r := range p.replicas {
			if r.name == name && r.state == ready {
				r.state = draining
			}
		}
	}
	for _, name := range remove {
		for _, r := range p.replicas {
			if r.name == name && r.state == draining && r.inflight == 0 {
				f.remove(p, r)
				break
			}
		}
	}
	for _, r := range slices.Clone(p.replicas) {
		if r.state == draining && r.inflight == 0 {
			f.remove(p, r)
		}
	}
}
