package kvevents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

//go:generate /usr/bin/python3 testdata/gen_trtllm_fixtures.py

// The TensorRT-LLM fixtures are written by gen_trtllm_fixtures.py from its
// model of the engine's KVCacheEventSerializer (not from this package);
// trtllm_expected.json holds what each list must decode to.
func TestTRTLLMFixtures(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "trtllm_expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ef struct {
		Fixtures []struct {
			Name   string `json:"name"`
			File   string `json:"file"`
			DPRank *int   `json:"dp_rank"`
			Events []struct {
				Kind        string   `json:"kind"`
				BlockHashes []uint64 `json:"block_hashes"`
				Parent      *uint64  `json:"parent"`
				TokenIDs    []uint32 `json:"token_ids"`
				BlockSize   int      `json:"block_size"`
				Medium      string   `json:"medium"`
				Err         bool     `json:"err"`
			} `json:"events"`
		} `json:"fixtures"`
	}
	if err := json.Unmarshal(raw, &ef); err != nil {
		t.Fatal(err)
	}
	if len(ef.Fixtures) < 3 {
		t.Fatalf("%d fixtures", len(ef.Fixtures))
	}
	for _, fx := range ef.Fixtures {
		t.Run(fx.Name, func(t *testing.T) {
			payload, err := os.ReadFile(filepath.Join("testdata", fx.File))
			if err != nil {
				t.Fatal(err)
			}
			b, err := NewFormatDecoder(FormatTRTLLM, Limits{}).Decode(payload)
			if err != nil {
				t.Fatal(err)
			}
			if (fx.DPRank != nil) != b.HasDPRank || (fx.DPRank != nil && *fx.DPRank != b.DPRank) {
				t.Fatalf("dp rank %d (has %v), want %v", b.DPRank, b.HasDPRank, fx.DPRank)
			}
			if len(b.Events) != len(fx.Events) {
				t.Fatalf("%d events, want %d", len(b.Events), len(fx.Events))
			}
			for i, want := range fx.Events {
				got := b.Events[i]
				if (got.Err != nil) != want.Err {
					t.Fatalf("event %d: err %v, want err %v", i, got.Err, want.Err)
				}
				if want.Kind != "" && got.Kind.String() != want.Kind {
					t.Fatalf("event %d: kind %s, want %s", i, got.Kind, want.Kind)
				}
				if want.Err {
					continue
				}
				var parent *uint64
				if got.HasParent {
					parent = &got.ParentHash
				}
				if !reflect.DeepEqual(got.BlockHashes, want.BlockHashes) || !reflect.DeepEqual(parent, want.Parent) ||
					!reflect.DeepEqual(got.TokenIDs, want.TokenIDs) || got.BlockSize != want.BlockSize || got.Medium != want.Medium {
					t.Fatalf("event %d: %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// A vLLM decoder refuses a TensorRT-LLM list and the reverse: the kind
// configured per engine decides which reads its stream.
func TestFormatsAreNotMixed(t *testing.T) {
	trt, err := os.ReadFile(filepath.Join("testdata", "trtllm_chain.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewDecoder(Limits{}).Decode(trt); err == nil {
		t.Fatal("the vLLM decoder accepted a TensorRT-LLM list")
	}
	vllm, err := os.ReadFile(filepath.Join("testdata", "map_current.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFormatDecoder(FormatTRTLLM, Limits{}).Decode(vllm); err == nil {
		t.Fatal("the TensorRT-LLM decoder accepted a vLLM batch")
	}
	for kind, want := range map[string]Format{"": FormatVLLM, "vllm": FormatVLLM, "sglang": FormatVLLM, "trtllm": FormatTRTLLM} {
		if f, err := FormatOf(kind); err != nil || f != want {
			t.Errorf("FormatOf(%q) = %v, %v", kind, f, err)
		}
	}
	if _, err := FormatOf("tgi"); err == nil {
		t.Error("FormatOf accepted an unknown kind")
	}
}
