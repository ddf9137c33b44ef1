package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyFile is a minimal byte-level BPE tokenizer.json (all 256 byte
// symbols, one merge) in the Qwen2 shape; refusal cases mutate it.
func tinyFile(t *testing.T) map[string]any {
	t.Helper()
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	vocab["ab"] = 256
	raw := `{
	  "version": "1.0", "truncation": null, "padding": null,
	  "added_tokens": [{"id": 257, "content": "<|x|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
	  "normalizer": {"type": "NFC"},
	  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
	    {"type": "Split", "pattern": {"Regex": ` + jsonString(patternQwen2) + `}, "behavior": "Isolated", "invert": false},
	    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
	  "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
	  "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
	  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "",
	            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "merges": [["a", "b"]]}
	}`
	var f map[string]any
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		t.Fatal(err)
	}
	f["model"].(map[string]any)["vocab"] = vocab
	return f
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func parseMap(t *testing.T, f map[string]any) (*Tokenizer, error) {
	t.Helper()
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(data)
}

func TestParseTinyFile(t *testing.T) {
	tok, err := parseMap(t, tinyFile(t))
	if err != nil {
		t.Fatal(err)
	}
	// Structural facts of the tiny file, not computed by the code under
	// test: "ab" is one merge (id 256), bytes map to their own ids, and the
	// added token takes len(vocab) = 257.
	got := tok.Encode("ab<|x|>c")
	want := []uint32{256, 257, 'c'}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("Encode = %v, want %v", got, want)
	}
	if s := tok.Decode(got); s != "ab<|x|>c" {
		t.Fatalf("Decode = %q", s)
	}
	// The string-merge format is read like the pair format.
	f := tinyFile(t)
	f["model"].(map[string]any)["merges"] = []any{"a b"}
	tok2, err := parseMap(t, f)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("ab"); len(got) != 1 || got[0] != 256 {
		t.Fatalf("string merges: Encode = %v", got)
	}
}

func TestLoadRefusesUnsupported(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(f map[string]any) {
			keys := strings.Split(path, ".")
			m := f
			for _, k := range keys[:len(keys)-1] {
				switch next := m[k].(type) {
				case map[string]any:
					m = next
				case []any:
					m = next[0].(map[string]any)
				}
			}
			m[keys[len(keys)-1]] = v
		}
	}
	splitWith := func(regex string) func(map[string]any) {
		return func(f map[string]any) {
			pts := f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
			pts[0].(map[string]any)["pattern"] = map[string]any{"Regex": regex}
		}
	}
	cases := []struct {
		name, wantErr string
		mutate        func(map[string]any)
	}{
		{"WordPiece model", "model: unsupported type \"WordPiece\"", set("model.type", "WordPiece")},
		{"Unigram model", "model: unsupported type \"Unigram\"", set("model.type", "Unigram")},
		{"byte fallback", "byte_fallback", set("model.byte_fallback", true)},
		{"dropout", "dropout", set("model.dropout", 0.1)},
		{"subword prefix", "continuing_subword_prefix", set("model.continuing_subword_prefix", "##")},
		{"unknown model field", "unsupported field \"fancy\"", set("model.fancy", 1)},
		{"NFKC", "normalizer: unsupported type \"NFKC\"", set("normalizer", map[string]any{"type": "NFKC"})},
		{"Lowercase in sequence", "Lowercase", set("normalizer", map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Lowercase"}}})},
		{"Metaspace", "pre_tokenizer", set("pre_tokenizer", map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true})},
		{"ByteLevel alone", "pre_tokenizer", set("pre_tokenizer", map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})},
		{"GPT-2 pattern", "unsupported regex", splitWith(`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`)},
		{"Split removed behavior", "Isolated", func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Removed"
		}},
		{"Split string pattern", "unsupported pattern", func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"String": " "}
		}},
		{"ByteLevel prefix space", "add_prefix_space=true", func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[1].(map[string]any)["add_prefix_space"] = true
		}},
		{"WordPiece decoder", "WordPiece", set("decoder", map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true})},
		{"no decoder", "decoder: missing", set("decoder", nil)},
		{"BertProcessing", "BertProcessing", set("post_processor", map[string]any{"type": "BertProcessing", "sep": []any{"[SEP]", 1}, "cls": []any{"[CLS]", 2}})},
		{"truncation", "truncation", set("truncation", map[string]any{"max_length": 10})},
		{"padding", "padding", set("padding", map[string]any{"strategy": "BatchLongest"})},
		{"byte missing from vocab", "lacks byte", func(f map[string]any) {
			delete(f["model"].(map[string]any)["vocab"].(map[string]any), "a")
		}},
		{"merge out of vocab", "not in vocab", set("model.merges", []any{[]any{"a", "zz"}})},
		{"bad merge string", "want \"left right\"", set("model.merges", []any{"a b c"})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tinyFile(t)
			tc.mutate(f)
			_, err := parseMap(t, f)
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestLoadBoundsAndErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("accepted invalid JSON")
	}
	for _, junk := range []string{``, `null`, `[]`, `{"model": null}`, `{"model": {"type": "BPE"}}`} {
		if _, err := Parse([]byte(junk)); err == nil {
			t.Errorf("Parse(%q) accepted", junk)
		}
	}
}

func TestSpecialTokenRoles(t *testing.T) {
	llama := loadModel(t, "llama3_1")
	sp := llama.SpecialTokens()
	// Values as written in the shipped tokenizer_config.json / tokenizer.json.
	if sp.BOS == nil || sp.BOS.Content != "<|begin_of_text|>" || sp.BOS.ID != 128000 {
		t.Errorf("llama BOS = %+v", sp.BOS)
	}
	if sp.EOS == nil || sp.EOS.Content != "<|eot_id|>" || sp.EOS.ID != 128009 {
		t.Errorf("llama EOS = %+v", sp.EOS)
	}
	qwen := loadModel(t, "qwen3")
	sq := qwen.SpecialTokens()
	if sq.BOS != nil || sq.EOS == nil || sq.EOS.Content != "<|im_end|>" || sq.EOS.ID != 151645 || sq.PAD == nil || sq.PAD.ID != 151643 {
		t.Errorf("qwen roles = BOS %+v EOS %+v PAD %+v", sq.BOS, sq.EOS, sq.PAD)
	}
	if id, ok := qwen.TokenID("<|im_start|>"); !ok || id != 151644 {
		t.Errorf("TokenID(<|im_start|>) = %d, %v", id, ok)
	}
	if _, ok := qwen.TokenID("definitely not a token"); ok {
		t.Error("TokenID found a non-token")
	}
}
