package plannersim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/lab/enginesim"
	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
)

// Profile grid: the lengths and loads measured, as `kvgate planner
// profile` sweeps a real engine.
var (
	profileInputs      = []int{256, 512, 1024, 2048, 3072, 4096, 8192, 16384}
	profileConcurrency = []int{1, 2, 4, 8, 16, 32, 64}
	profileContexts    = []int{512, 1024, 2048, 4096, 8192, 16384}
	profileBatches     = []int{1, 4, 16, 32, 64, 128, 192, 256}
)

// profileDecodeTokens is how many tokens each decode measurement generates
// per sequence.
const profileDecodeTokens = 64

// ProfileFromTimingModel measures one simulated replica (engine cfg, the
// defaults of Config when zero, as Run's replicas get them) the way
// `kvgate planner profile` measures a real engine, in virtual time:
//
//   - prefill: for each input length and concurrency c, c requests of
//     unique prompts and one output token kept in flight (closed loop) for
//     4c+16 completions; TTFT p90 and prompt tokens per second over the run;
//   - decode: for each context length and batch b that fits the KV cache,
//     b sequences whose prompt KV arrives transferred (as on a P/D decode
//     worker) each generate profileDecodeTokens tokens; ITL is the mean
//     inter-token gap, tokens per second b × tokens / elapsed.
func ProfileFromTimingModel(cfg enginesim.Config) (perfmodel.Profile, error) {
	if cfg.BlockSize == 0 && cfg.NumGPUBlocks == 0 {
		cfg.BlockSize, cfg.NumGPUBlocks = DefaultBlockSize, DefaultGPUBlocks
	}
	if err := cfg.Validate(); err != nil {
		return perfmodel.Profile{}, err
	}
	p := perfmodel.Profile{Engine: "enginesim (Dynamo mocker timing model)", Model: "simulated"}
	var salt uint32
	prompt := func(n int) []uint32 {
		// Unique prompts: no prefix-cache hits between measurements.
		salt++
		t := make([]uint32, n)
		for i := range t {
			t[i] = salt<<8 | uint32(i%251)
		}
		return t
	}
	for _, in := range profileInputs {
		for _, c := range profileConcurrency {
			pt, err := measurePrefill(cfg, in, c, prompt)
			if err != nil {
				return perfmodel.Profile{}, err
			}
			p.Prefill = append(p.Prefill, pt)
		}
	}
	capacity := cfg.NumGPUBlocks * cfg.BlockSize
	for _, ctxLen := range profileContexts {
		for _, b := range profileBatches {
			if b*(ctxLen+profileDecodeTokens+cfg.BlockSize) > capacity {
				break // would preempt: the replica cannot hold that batch
			}
			pt, err := measureDecode(cfg, ctxLen, b, prompt)
			if err != nil {
				return perfmodel.Profile{}, err
			}
			p.Decode = append(p.Decode, pt)
		}
	}
	if err := p.Validate(); err != nil {
		return perfmodel.Profile{}, fmt.Errorf("profile from the timing model: %w", err)
	}
	return p, nil
}

func measurePrefill(cfg enginesim.Config, in, c int, prompt func(int) []uint32) (perfmodel.PrefillPoint, error) {
	e, err := enginesim.New(cfg, nil)
	if err != nil {
		return perfmodel.PrefillPoint{}, err
	}
	total := 4*c + 16
	sent, done := 0, 0
	var ttfts []float64
	submit := func(at time.Duration) error {
		sent++
		return e.Submit(enginesim.Request{ID: strconv.Itoa(sent), Tokens: prompt(in), MaxTokens: 1, Arrival: at})
	}
	for range c {
		if err := submit(0); err != nil {
			return perfmodel.PrefillPoint{}, fmt.Errorf("profile prefill %d tokens: %w", in, err)
		}
	}
	var end time.Duration
	for done < total {
		t, ok := e.NextEventTime()
		if !ok {
			return perfmodel.PrefillPoint{}, fmt.Errorf("profile prefill %d tokens × %d: engine idle after %d of %d", in, c, done, total)
		}
		for _, o := range e.Advance(t) {
			if !o.Done {
				continue
			}
			done++
			ttfts = append(ttfts, ms(o.FirstTokenAt-o.Arrival))
			end = o.FinishedAt
			if sent < total {
				if err := submit(o.FinishedAt); err != nil {
					return perfmodel.PrefillPoint{}, err
				}
			}
		}
	}
	return perfmodel.PrefillPoint{
		InputTokens:     in,
		Concurrency:     c,
		TTFTSeconds:     percentile(ttfts, 0.9) / 1000,
		TokensPerSecond: float64(total*in) / end.Seconds(),
	}, nil
}

func measureDecode(cfg enginesim.Config, ctxLen, b int, prompt func(int) []uint32) (perfmodel.DecodePoint, error) {
	e, err := enginesim.New(cfg, nil)
	if err != nil {
		return perfmodel.DecodePoint{}, err
	}
	for i := range b {
		r := enginesim.Request{ID: strconv.Itoa(i), Tokens: prompt(ctxLen), MaxTokens: profileDecodeTokens, KVTransferred: true}
		if err := e.Submit(r); err != nil {
			return perfmodel.DecodePoint{}, fmt.Errorf("profile decode context %d × %d: %w", ctxLen, b, err)
		}
	}
	var itlSum float64
	var first, end time.Duration
	done := 0
	for done < b {
		t, ok := e.NextEventTime()
		if !ok {
			return perfmodel.DecodePoint{}, fmt.Errorf("profile decode context %d × %d: engine idle after %d", ctxLen, b, done)
		}
		for _, o := range e.Advance(t) {
			if !o.Done {
				if first == 0 || o.FirstTokenAt < first {
					first = o.FirstTokenAt
				}
				continue
			}
			done++
			itlSum += ms(o.MeanITL())
			end = max(end, o.FinishedAt)
		}
	}
	return perfmodel.DecodePoint{
		ContextTokens: ctxLen,
		Batch:         b,
		ITLSeconds:    itlSum / float64(b) / 1000,
		// Tokens after the first (the first comes with the admission step).
		TokensPerSecond: float64(b*(profileDecodeTokens-1)) / (end - first).Seconds(),
	}, nil
}
