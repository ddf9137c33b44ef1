package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

var goldenModels = []string{"qwen3", "llama3_1"}

// checkCases compares every case exactly and reports the exactness rate.
func checkCases(t *testing.T, cases []goldenCase, encode func(string) []uint32) {
	t.Helper()
	if len(cases) == 0 {
		t.Fatal("no golden cases")
	}
	bad := 0
	for i, c := range cases {
		got := encode(c.Text)
		if slices.Equal(got, c.IDs) {
			continue
		}
		bad++
		if bad <= 5 {
			t.Errorf("case %d %q:\n%s", i, truncate(c.Text, 200), firstDifference(got, c.IDs))
		}
	}
	t.Logf("%d/%d exact (%.2f %%)", len(cases)-bad, len(cases), 100*float64(len(cases)-bad)/float64(len(cases)))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func firstDifference(got, want []uint32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(i-3, 0)
	return fmt.Sprintf("  first difference at id %d (got %d ids, want %d)\n  got  …%v\n  want …%v", i, len(got), len(want), got[lo:min(i+6, len(got))], want[lo:min(i+6, len(want))])
}

func TestGoldenCorpus(t *testing.T) {
	for _, m := range goldenModels {
		t.Run(m, func(t *testing.T) {
			tok := loadModel(t, m)
			checkCases(t, readCases(t, "golden_"+m+".jsonl"), tok.Encode)
		})
	}
}

// TestGoldenFuzz checks a second random set, generated with an unrelated
// seed, that the implementation was not tuned on.
func TestGoldenFuzz(t *testing.T) {
	for _, m := range goldenModels {
		t.Run(m, func(t *testing.T) {
			tok := loadModel(t, m)
			checkCases(t, readCases(t, "golden_fuzz_"+m+".jsonl"), tok.Encode)
		})
	}
}

func TestGoldenWithSpecialTokens(t *testing.T) {
	for _, m := range goldenModels {
		t.Run(m, func(t *testing.T) {
			tok := loadModel(t, m)
			checkCases(t, readCases(t, "golden_special_"+m+".jsonl"), func(s string) []uint32 {
				return tok.EncodeWithSpecialTokens(nil, s)
			})
		})
	}
}

// TestGoldenAddedTokenFlags covers lstrip, rstrip, single_word and
// normalized, which the shipped models do not use: the golden's first line
// lists tokens the oracle appended to the Qwen3 file.
func TestGoldenAddedTokenFlags(t *testing.T) {
	lines := readGolden(t, "golden_added_flags.jsonl")
	var head struct {
		AddedTokens []json.RawMessage `json:"added_tokens"`
	}
	if err := json.Unmarshal(lines[0], &head); err != nil || len(head.AddedTokens) == 0 {
		t.Fatalf("golden_added_flags.jsonl header: %v", err)
	}
	var file map[string]json.RawMessage
	if err := json.Unmarshal(readModelFile(t, "qwen3"), &file); err != nil {
		t.Fatal(err)
	}
	var added []json.RawMessage
	if err := json.Unmarshal(file["added_tokens"], &added); err != nil {
		t.Fatal(err)
	}
	file["added_tokens"], _ = json.Marshal(append(added, head.AddedTokens...))
	data, _ := json.Marshal(file)
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for i, l := range lines[1:] {
		var c goldenCase
		if err := json.Unmarshal(l, &c); err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
		cases = append(cases, c)
	}
	checkCases(t, cases, tok.Encode)
}
