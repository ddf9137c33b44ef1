package plannersim

import (
	"fmt"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// Mode is how the fleet splits the work.
type Mode string

const (
	// Disaggregated: a prefill pool computes prompts and samples the first
	// token, a decode pool receives the KV and generates the rest.
	Disaggregated Mode = "disagg"
	// Aggregated: one pool of replicas doing both.
	Aggregated Mode = "agg"
)

// ParseMode validates a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Disaggregated, Aggregated:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: want disagg or agg", s)
}

// Pools are the pool names of the mode, prefill first.
func (m Mode) Pools() []string {
	if m == Aggregated {
		return []string{plan.PoolAggregated}
	}
	return []string{plan.PoolPrefill, plan.PoolDecode}
}

// Defaults.
const (
	DefaultProvisionDelay = 120 * time.Second
	DefaultInterval       = 30 * time.Second
	DefaultTTFT           = 2 * time.Second
	DefaultITL            = 50 * time.Millisecond
	DefaultMaxReplicas    = 64
	DefaultBlockSize      = 512
	DefaultGPUBlocks      = enginesim.DefaultNumGPUBlocks * enginesim.DefaultBlockSize / DefaultBlockSize
	// sampleEvery is how often queue depth and KV usage are sampled for the
	// interval means a policy sees, as a 1 s Prometheus scrape would.
	sampleEvery = time.Second
)

// Config describes the simulated fleet. Zero fields take the defaults.
type Config struct {
	Mode Mode // default Disaggregated
	// Engine is every replica's engine; zero fields take enginesim's
	// defaults (the Dynamo mocker's H100-class engine), except the block:
	// 512 tokens (the trace's block) × 2,048 blocks, the mocker's 1 Mi
	// tokens of KV in 8× fewer, larger blocks — the same capacity and
	// timing, for an eighth of the block bookkeeping (most of the
	// simulator's CPU time at 64-token blocks).
	Engine         enginesim.Config
	GPUsPerReplica int           // default 1
	ProvisionDelay time.Duration // from a scale-up to a ready replica; default 120 s; NoProvisionDelay for none
	Interval       time.Duration // between policy decisions; default 30 s
	TTFT, ITL      time.Duration // SLA targets; default 2 s, 50 ms
	// Initial is the ready replicas per pool at time 0 for policies that
	// do not say (plan.Policy has no initial size); default 1 per pool.
	// Static fleets start at their size.
	Initial     map[string]int
	MinReplicas int // per pool, default 1: a pool never empties, so requests always have somewhere to go
	MaxReplicas int // per pool, default 64
}

// NoProvisionDelay asks for replicas that are ready at once.
const NoProvisionDelay = time.Duration(-1)

func (c Config) withDefaults() Config {
	if c.Engine.BlockSize == 0 && c.Engine.NumGPUBlocks == 0 {
		c.Engine.BlockSize, c.Engine.NumGPUBlocks = DefaultBlockSize, DefaultGPUBlocks
	}
	if c.Mode == "" {
		c.Mode = Disaggregated
	}
	if c.GPUsPerReplica == 0 {
		c.GPUsPerReplica = 1
	}
	switch c.ProvisionDelay {
	case 0:
		c.ProvisionDelay = DefaultProvisionDelay
	case NoProvisionDelay:
		c.ProvisionDelay = 0
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.TTFT == 0 {
		c.TTFT = DefaultTTFT
	}
	if c.ITL == 0 {
		c.ITL = DefaultITL
	}
	if c.MinReplicas == 0 {
		c.MinReplicas = 1
	}
	if c.MaxReplicas == 0 {
		c.MaxReplicas = DefaultMaxReplicas
	}
	return c
}

// Validate reports the first bad field, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	switch {
	case c.GPUsPerReplica < 1 || c.GPUsPerReplica > 64:
		return fmt.Errorf("GPUs per replica %d outside [1, 64]", c.GPUsPerReplica)
	case c.ProvisionDelay < 0 || c.ProvisionDelay > 24*time.Hour:
		return fmt.Errorf("provision delay %v outside [0, 24h]", c.ProvisionDelay)
	case c.Interval < time.Second || c.Interval > time.Hour:
		return fmt.Errorf("interval %v outside [1s, 1h]", c.Interval)
	case c.TTFT <= 0 || c.ITL <= 0:
		return fmt.Errorf("SLA targets TTFT %v, ITL %v: want > 0", c.TTFT, c.ITL)
	case c.MinReplicas < 1 || c.MaxReplicas < c.MinReplicas || c.MaxReplicas > 1024:
		return fmt.Errorf("replicas per pool [%d, %d]: want 1 <= min <= max <= 1024", c.MinReplicas, c.MaxReplicas)
	}
	for pool, n := range c.Initial {
		if !c.hasPool(pool) {
			return fmt.Errorf("initial replicas: pool %q is not one of %v", pool, c.Mode.Pools())
		}
		if n < c.MinReplicas || n > c.MaxReplicas {
			return fmt.Errorf("initial replicas of %s: %d outside [%d, %d]", pool, n, c.MinReplicas, c.MaxReplicas)
		}
	}
	return nil
}

func (c Config) hasPool(name string) bool {
	for _, p := range c.Mode.Pools() {
		if p == name {
			return true
		}
	}
	return false
}
