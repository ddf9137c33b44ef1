package kvevents

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

//go:generate /usr/bin/python3 testdata/gen_fixtures.py

// expectedFile mirrors testdata/expected.json, written by gen_fixtures.py
// from its own model of vLLM's encoding (not from this package).
type expectedFile struct {
	Fixtures []struct {
		Name      string  `json:"name"`
		File      string  `json:"file"`
		Canonical *string `json:"canonical"`
		Batch     struct {
			TS     float64 `json:"ts"`
			DPRank *int    `json:"dp_rank"`
			Events []struct {
				Kind        string   `json:"kind"`
				BlockHashes []uint64 `json:"block_hashes"`
				Parent      *uint64  `json:"parent"`
				TokenIDs    []uint32 `json:"token_ids"`
				BlockSize   int      `json:"block_size"`
				LoRAID      *int     `json:"lora_id"`
				LoRAName    string   `json:"lora_name"`
				Medium      string   `json:"medium"`
				GroupIdx    int      `json:"group_idx"`
				HasGroupIdx bool     `json:"has_group_idx"`
				SpecKind    string   `json:"spec_kind"`
				CacheSalt   string   `json:"cache_salt"`
				Locality    string   `json:"locality"`
			} `json:"events"`
		} `json:"batch"`
	} `json:"fixtures"`
}

type fixture struct {
	name      string
	payload   []byte
	want      Batch
	canonical string // "", "array" or "map": Encode must reproduce the bytes
}

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ef expectedFile
	if err := json.Unmarshal(raw, &ef); err != nil {
		t.Fatal(err)
	}
	if len(ef.Fixtures) == 0 {
		t.Fatal("expected.json lists no fixtures")
	}
	kinds := map[string]Kind{"BlockStored": BlockStored, "BlockRemoved": BlockRemoved, "AllBlocksCleared": AllBlocksCleared}
	var out []fixture
	for _, f := range ef.Fixtures {
		payload, err := os.ReadFile(filepath.Join("testdata", f.File))
		if err != nil {
			t.Fatal(err)
		}
		fx := fixture{name: f.Name, payload: payload}
		if f.Canonical != nil {
			fx.canonical = *f.Canonical
		}
		fx.want.TS = f.Batch.TS
		if f.Batch.DPRank != nil {
			fx.want.DPRank, fx.want.HasDPRank = *f.Batch.DPRank, true
		}
		for _, e := range f.Batch.Events {
			k, ok := kinds[e.Kind]
			if !ok {
				t.Fatalf("%s: unknown kind %q in expected.json", f.Name, e.Kind)
			}
			ev := Event{Kind: k, BlockSize: e.BlockSize, LoRAName: e.LoRAName, Medium: e.Medium, GroupIdx: e.GroupIdx,
				HasGroupIdx: e.HasGroupIdx, SpecKind: e.SpecKind, CacheSalt: e.CacheSalt, Locality: e.Locality}
			if len(e.BlockHashes) > 0 {
				ev.BlockHashes = e.BlockHashes
			}
			if len(e.TokenIDs) > 0 {
				ev.TokenIDs = e.TokenIDs
			}
			if e.Parent != nil {
				ev.ParentHash, ev.HasParent = *e.Parent, true
			}
			if e.LoRAID != nil {
				ev.LoRAID, ev.HasLoRAID = *e.LoRAID, true
			}
			fx.want.Events = append(fx.want.Events, ev)
		}
		out = append(out, fx)
	}
	return out
}

func TestDecodeFixtures(t *testing.T) {
	for _, fx := range loadFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			got, err := decodeFresh(fx.payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, fx.want) {
				t.Fatalf("Decode mismatch\n got %+v\nwant %+v", got, fx.want)
			}
		})
	}
}

// Fixtures in the current schema's canonical form must be reproduced byte
// for byte, which checks Encode against the generator's msgspec model.
func TestEncodeMatchesFixtures(t *testing.T) {
	n := 0
	for _, fx := range loadFixtures(t) {
		if fx.canonical == "" {
			continue
		}
		n++
		enc := EncodingArray
		switch fx.canonical {
		case "map":
			enc = EncodingMap
		case "mapbatch":
			enc = EncodingMapBatch
		}
		got, err := Encode(fx.want, enc)
		if err != nil {
			t.Fatalf("%s: Encode: %v", fx.name, err)
		}
		if !bytes.Equal(got, fx.payload) {
			t.Errorf("%s: Encode differs from the fixture\n got %x\nwant %x", fx.name, got, fx.payload)
		}
	}
	if n < 2 {
		t.Fatalf("only %d canonical fixtures; want an array and a map one", n)
	}
}
