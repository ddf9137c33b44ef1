// Package chattemplate renders a model's Jinja chat template for an OpenAI
// chat request the way vLLM does (transformers' apply_chat_template semantics),
// so kvgate tokenizes exactly the prompt the engine will see.
package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Config is what a model's tokenizer_config.json contributes to rendering.
type Config struct {
	// Templates maps template names to sources. A plain string chat_template
	// is stored as "default".
	Templates map[string]string
	// SpecialTokens are the special tokens transformers passes to every
	// template (its special_tokens_map): bos_token, eos_token, unk_token,
	// pad_token when set.
	SpecialTokens map[string]string
	// AdditionalSpecialTokens is additional_special_tokens, also passed.
	AdditionalSpecialTokens []string
}

// maxConfigBytes bounds tokenizer_config.json; real ones are under 100 KB
// (Llama 3.1's is 51 KB), a chat template alone rarely over 20 KB.
const maxConfigBytes = 16 << 20

// ParseConfig reads tokenizer_config.json contents.
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("tokenizer config of %d bytes exceeds %d", len(data), maxConfigBytes)
	}
	// Only the fields used here are decoded; others (model_max_length can be
	// 1e30) stay raw.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("tokenizer config: %w", err)
	}
	c := &Config{Templates: map[string]string{}, SpecialTokens: map[string]string{}}
	if t, ok := raw["chat_template"]; ok && string(t) != "null" {
		var s string
		if err := json.Unmarshal(t, &s); err == nil {
			c.Templates["default"] = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(t, &named); err != nil {
				return nil, fmt.Errorf("tokenizer config: chat_template is neither a string nor a list of {name, template}: %w", err)
			}
			for i, n := range named {
				if n.Name == "" {
					return nil, fmt.Errorf("tokenizer config: chat_template[%d] has no name", i)
				}
				c.Templates[n.Name] = n.Template
			}
		}
	}
	for _, name := range []string{"bos_token", "eos_token", "unk_token", "pad_token"} {
		tok, err := specialToken(raw[name])
		if err != nil {
			return nil, fmt.Errorf("tokenizer config: %s: %w", name, err)
		}
		if tok != "" {
			c.SpecialTokens[name] = tok
		}
	}
	if a, ok := raw["additional_special_tokens"]; ok && string(a) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(a, &list); err != nil {
			return nil, fmt.Errorf("tokenizer config: additional_special_tokens: %w", err)
		}
		for i, item := range list {
			tok, err := specialToken(item)
			if err != nil {
				return nil, fmt.Errorf("tokenizer config: additional_special_tokens[%d]: %w", i, err)
			}
			c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, tok)
		}
	}
	return c, nil
}

// specialToken accepts a token as a string, null, or an AddedToken object
// {"content": …} as older tokenizer configs write it.
func specialToken(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("expected a string or an object with content")
	}
	return *obj.Content, nil
}

// LoadDir reads a Hugging Face model directory: tokenizer_config.json, and
// chat_template.jinja when present, which transformers (>= 4.43 saves the
// template there) prefers over the config's default template.
func LoadDir(dir string) (*Config, error) {
	data, err := readBounded(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	jinja, err := readBounded(filepath.Join(dir, "chat_template.jinja"))
	switch {
	case err == nil:
		c.Templates["default"] = string(jinja)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if len(c.Templates) == 0 {
		return nil, fmt.Errorf("%s: no chat template in tokenizer_config.json or chat_template.jinja", dir)
	}
	return c, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes exceeds %d", path, st.Size(), maxConfigBytes)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}
