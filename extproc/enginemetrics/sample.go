// Package enginemetrics polls the engines' Prometheus /metrics pages (vLLM
// and SGLang) for their own load signals: queue depth, running requests and
// KV-cache usage, which include traffic that other routers sent.
package enginemetrics

import "time"

// Sample is one worker's engine-reported load at a point in time.
type Sample struct {
	Waiting int     // requests queued in the engine
	Running int     // requests in the running batch
	KVUsage float64 // fraction of device KV cache in use, [0, 1]
	// NumGPUBlocks and BlockSize come from vLLM's cache_config_info; 0 =
	// unknown (SGLang, or vLLM before memory profiling).
	NumGPUBlocks int64
	BlockSize    int
	// KVCapacityTokens is the device KV capacity in tokens: num_gpu_blocks ×
	// block_size for vLLM, sglang:max_total_num_tokens for SGLang; 0 = unknown.
	KVCapacityTokens int64
	At               time.Time // when the page was received
}
