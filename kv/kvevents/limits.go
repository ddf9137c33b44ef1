package kvevents

// Limits bounds what one payload may make the decoder do. A zero field
// takes its default from DefaultLimits.
type Limits struct {
	MaxPayloadBytes   int // whole payload
	MaxEvents         int // events per batch
	MaxHashesPerEvent int // block_hashes entries per event
	MaxTokensPerEvent int // token_ids entries per event
	MaxBlockSize      int // largest accepted block_size
	MaxStringBytes    int // medium, lora_name, map keys, tags
	MaxHashBytes      int // a block hash sent as bytes (SHA-256 is 32)
	MaxSkipDepth      int // nesting of a skipped (unknown or ignored) value
	MaxSkipBytes      int // encoded size of one skipped value
}

// DefaultLimits are generous for real engines: vLLM publishes one batch per
// scheduler step, and a step stores at most max_num_batched_tokens tokens
// (a few thousand to a few hundred thousand).
func DefaultLimits() Limits {
	return Limits{
		MaxPayloadBytes:   64 << 20,
		MaxEvents:         1 << 20,
		MaxHashesPerEvent: 1 << 18,
		MaxTokensPerEvent: 1 << 22,
		MaxBlockSize:      1 << 16,
		MaxStringBytes:    1 << 10,
		MaxHashBytes:      64,
		MaxSkipDepth:      32,
		MaxSkipBytes:      1 << 20,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.MaxPayloadBytes, d.MaxPayloadBytes)
	set(&l.MaxEvents, d.MaxEvents)
	set(&l.MaxHashesPerEvent, d.MaxHashesPerEvent)
	set(&l.MaxTokensPerEvent, d.MaxTokensPerEvent)
	set(&l.MaxBlockSize, d.MaxBlockSize)
	set(&l.MaxStringBytes, d.MaxStringBytes)
	set(&l.MaxHashBytes, d.MaxHashBytes)
	set(&l.MaxSkipDepth, d.MaxSkipDepth)
	set(&l.MaxSkipBytes, d.MaxSkipBytes)
	return l
}
