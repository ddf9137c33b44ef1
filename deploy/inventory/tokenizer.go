package inventory

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// writeTinyModel writes a minimal Hugging Face model directory (a
// byte-level BPE tokenizer.json with the 256 byte symbols and no merges,
// and a tokenizer_config.json with a one-line chat template) into dir. The
// router only serves workers whose model has a tokenizer loaded, and its
// per-worker metrics exist only once it serves one; the inventory must not
// depend on `make models` having fetched real tokenizer files.
func writeTinyModel(dir string) error {
	vocab := map[string]int{}
	for b, r := range gpt2ByteRunes() {
		vocab[string(r)] = b
	}
	// The split pattern is Qwen2's (extproc/tokenizer accepts the patterns
	// of the model families it supports, not arbitrary ones).
	const pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	tok := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": []any{},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}},
		"post_processor": byteLevel, "decoder": byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []any{}},
	}
	cfg := map[string]any{"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
	for name, v := range map[string]any{"tokenizer.json": tok, "tokenizer_config.json": cfg} {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("tiny model: %w", err)
		}
	}
	return nil
}

// gpt2ByteRunes is GPT-2's bytes_to_unicode table: printable bytes map to
// themselves, the rest to code points from U+0100 on.
func gpt2ByteRunes() [256]rune {
	var out [256]rune
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			out[b] = rune(b)
		} else {
			out[b] = rune(256 + n)
			n++
		}
	}
	return out
}
