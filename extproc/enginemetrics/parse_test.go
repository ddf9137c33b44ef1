package enginemetrics

import (
	"errors"
	"strings"
	"testing"
)

func mustSample(t *testing.T, body string, sel selector) Sample {
	t.Helper()
	pg, err := parse([]byte(body))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	s, err := pg.sample(sel)
	if err != nil {
		t.Fatalf("sample %+v: %v", sel, err)
	}
	return s
}

func TestParseVLLMDataParallel(t *testing.T) {
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	r0 := mustSample(t, vllmDP2Page, selector{model: model, rank: 0, byRank: true})
	want0 := Sample{Waiting: 2, Running: 7, KVUsage: 0.4375, NumGPUBlocks: 27802, BlockSize: 16, KVCapacityTokens: 27802 * 16}
	if r0 != want0 {
		t.Errorf("rank 0: got %+v, want %+v", r0, want0)
	}
	r1 := mustSample(t, vllmDP2Page, selector{model: model, rank: 1, byRank: true})
	want1 := Sample{Waiting: 0, Running: 3, KVUsage: 0.125, NumGPUBlocks: 27790, BlockSize: 16, KVCapacityTokens: 27790 * 16}
	if r1 != want1 {
		t.Errorf("rank 1: got %+v, want %+v", r1, want1)
	}
	// A worker alone on its page takes it whatever its engine label (vLLM
	// behind an external load balancer numbers its one engine by global
	// rank); the largest of the series is taken.
	alone := mustSample(t, vllmDP2Page, selector{model: model})
	if alone.Running != 7 || alone.Waiting != 2 || alone.KVUsage != 0.4375 {
		t.Errorf("single worker: %+v", alone)
	}
	// A rank the page does not have, or another model, has no series.
	pg, _ := parse([]byte(vllmDP2Page))
	for _, sel := range []selector{{model: model, rank: 2, byRank: true}, {model: "other", rank: 0}} {
		if _, err := pg.sample(sel); !errors.Is(err, errMissing) {
			t.Errorf("%+v: err %v, want missing", sel, err)
		}
	}
}

func TestParseVLLMV0(t *testing.T) {
	got := mustSample(t, vllmV0Page, selector{model: "mistralai/Mistral-7B-Instruct-v0.3"})
	want := Sample{Waiting: 5, Running: 12, KVUsage: 0.9921875, BlockSize: 32}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseSGLang(t *testing.T) {
	got := mustSample(t, sglangPage, selector{model: "Qwen/Qwen3-8B"})
	want := Sample{Waiting: 9, Running: 31, KVUsage: 0.71, KVCapacityTokens: 146776}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParsePrefersCurrentUsageName(t *testing.T) {
	page := `vllm:num_requests_running 1
vllm:num_requests_waiting 0
vllm:gpu_cache_usage_perc 0.9
vllm:kv_cache_usage_perc 0.25
`
	if got := mustSample(t, page, selector{}); got.KVUsage != 0.25 {
		t.Errorf("KVUsage %v, want 0.25 from kv_cache_usage_perc", got.KVUsage)
	}
}

// An unrelated malformed family does not void the sample.
func TestParseIgnoresUnrelatedGarbage(t *testing.T) {
	page := "some_other_metric{a=\"b\" 1 2 3 garbage\n" + vllmV0Page
	if got := mustSample(t, page, selector{}); got.Running != 12 {
		t.Errorf("got %+v", got)
	}
}

func TestParseRejectsBadPages(t *testing.T) {
	base := "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.5\n"
	cases := map[string]string{
		"syntax":            "vllm:num_requests_running{engine=\"0\" 1\n",
		"usage > 1":         strings.Replace(base, "0.5", "1.5", 1),
		"usage negative":    strings.Replace(base, "0.5", "-0.1", 1),
		"usage NaN":         strings.Replace(base, "0.5", "NaN", 1),
		"running fraction":  strings.Replace(base, "running 1", "running 1.5", 1),
		"waiting negative":  strings.Replace(base, "waiting 2", "waiting -2", 1),
		"waiting +Inf":      strings.Replace(base, "waiting 2", "waiting +Inf", 1),
		"waiting huge":      strings.Replace(base, "waiting 2", "waiting 1e300", 1),
		"no usage":          "vllm:num_requests_running 1\nvllm:num_requests_waiting 2\n",
		"no running":        "vllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.5\n",
		"empty":             "",
		"block size 0":      base + "vllm:cache_config_info{block_size=\"0\",num_gpu_blocks=\"10\"} 1\n",
		"blocks negative":   base + "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"-10\"} 1\n",
		"sglang bad tokens": base + "sglang:max_total_num_tokens 1.5\n",
		"duplicate type":    base + "# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running counter\n",
	}
	for name, body := range cases {
		pg, err := parse([]byte(body))
		if err == nil {
			_, err = pg.sample(selector{})
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
