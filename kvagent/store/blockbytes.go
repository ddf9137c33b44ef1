package store

import (
	"fmt"
	"math/bits"
)

// BlockBytesFor is the size of one KV block: layers × kvHeads × headDim ×
// 2 (K and V) × dtypeBytes × tokensPerBlock.
func BlockBytesFor(layers, kvHeads, headDim, dtypeBytes, tokensPerBlock int) (int, error) {
	factors := []struct {
		name string
		v    int
	}{{"layers", layers}, {"kv_heads", kvHeads}, {"head_dim", headDim}, {"dtype_bytes", dtypeBytes}, {"tokens_per_block", tokensPerBlock}}
	n := uint64(2)
	for _, f := range factors {
		if f.v <= 0 {
			return 0, fmt.Errorf("block bytes: %s must be > 0, got %d", f.name, f.v)
		}
		hi, lo := bits.Mul64(n, uint64(f.v))
		if hi != 0 || lo > 1<<40 {
			return 0, fmt.Errorf("block bytes: layers %d × kv_heads %d × head_dim %d × 2 × dtype_bytes %d × tokens_per_block %d exceeds 1 TiB",
				layers, kvHeads, headDim, dtypeBytes, tokensPerBlock)
		}
		n = lo
	}
	return int(n), nil
}
