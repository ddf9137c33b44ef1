package enginemetrics

import "testing"

// FuzzParse: parse and sample never panic, and every accepted sample is in
// range.
func FuzzParse(f *testing.F) {
	for _, p := range []string{vllmDP2Page, vllmV0Page, sglangPage,
		"vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5",
		"# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running_bucket{le=\"1\"} 1\n",
		"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"9223372036854775807\"} 1\n",
	} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 64<<10 {
			return
		}
		pg, err := parse(body)
		if err != nil {
			return
		}
		for _, sel := range []selector{{}, {rank: 1, byRank: true}, {model: "meta-llama/Llama-3.1-8B-Instruct"}} {
			s, err := pg.sample(sel)
			if err != nil {
				continue
			}
			if s.Waiting < 0 || s.Running < 0 || !(s.KVUsage >= 0 && s.KVUsage <= 1) ||
				s.NumGPUBlocks < 0 || s.BlockSize < 0 || s.KVCapacityTokens < 0 {
				t.Fatalf("out-of-range sample %+v from %q", s, body)
			}
		}
	})
}
