package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// tokenizerFile is the subset of Hugging Face's tokenizer.json this package
// reads. Components stay raw until checked: anything this package does not
// implement exactly is refused rather than approximated.
type tokenizerFile struct {
	Version       string                     `json:"version"`
	Truncation    json.RawMessage            `json:"truncation"`
	Padding       json.RawMessage            `json:"padding"`
	AddedTokens   []addedTokenJSON           `json:"added_tokens"`
	Normalizer    json.RawMessage            `json:"normalizer"`
	PreTokenizer  json.RawMessage            `json:"pre_tokenizer"`
	PostProcessor json.RawMessage            `json:"post_processor"`
	Decoder       json.RawMessage            `json:"decoder"`
	Model         map[string]json.RawMessage `json:"model"`
}

type addedTokenJSON struct {
	ID         *uint32 `json:"id"`
	Content    string  `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized bool    `json:"normalized"`
	Special    bool    `json:"special"`
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// component decodes one pipeline component into its fields and checks that
// it has exactly the expected type and no field outside allowed.
func component(where string, raw json.RawMessage, allowed ...string) (string, map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", nil, fmt.Errorf("%s: %w", where, err)
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil || typ == "" {
		return "", nil, fmt.Errorf("%s: missing or invalid \"type\"", where)
	}
	for k := range fields {
		if k != "type" && !slices.Contains(allowed, k) {
			return typ, nil, fmt.Errorf("%s: unsupported field %q in %s", where, k, typ)
		}
	}
	return typ, fields, nil
}

// field decodes fields[name] into v; a missing field leaves v unchanged.
func field(where string, fields map[string]json.RawMessage, name string, v any) error {
	raw, ok := fields[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: field %q: %w", where, name, err)
	}
	return nil
}

// checkNormalizer accepts no normalizer, NFC, or a Sequence of those.
func checkNormalizer(raw json.RawMessage) (useNFC bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	typ, fields, err := component("normalizer", raw, "normalizers")
	if err != nil {
		return false, err
	}
	switch typ {
	case "NFC":
		if len(fields) != 1 {
			return false, fmt.Errorf("normalizer: NFC with parameters is not supported")
		}
		return true, nil
	case "Sequence":
		var parts []json.RawMessage
		if err := field("normalizer", fields, "normalizers", &parts); err != nil {
			return false, err
		}
		for i, p := range parts {
			n, err := checkNormalizer(p)
			if err != nil {
				return false, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			useNFC = useNFC || n // NFC is idempotent, so repeating it changes nothing
		}
		return useNFC, nil
	}
	return false, fmt.Errorf("normalizer: unsupported type %q (supported: NFC, Sequence of NFC)", typ)
}

// checkPreTokenizer accepts exactly Sequence[Split(<Qwen2 or Llama-3
// pattern>, Isolated, invert=false), ByteLevel(add_prefix_space=false,
// use_regex=false)].
func checkPreTokenizer(raw json.RawMessage) (splitPattern, error) {
	const want = "Sequence[Split(Qwen2 or Llama-3 pattern, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)]"
	if isNull(raw) {
		return splitPattern{}, fmt.Errorf("pre_tokenizer: missing (supported: %s)", want)
	}
	typ, fields, err := component("pre_tokenizer", raw, "pretokenizers")
	if err != nil {
		return splitPattern{}, err
	}
	var parts []json.RawMessage
	if err := field("pre_tokenizer", fields, "pretokenizers", &parts); err != nil {
		return splitPattern{}, err
	}
	if typ != "Sequence" || len(parts) != 2 {
		return splitPattern{}, fmt.Errorf("pre_tokenizer: unsupported %s with %d parts (supported: %s)", typ, len(parts), want)
	}

	typ, split, err := component("pre_tokenizer Sequence[0]", parts[0], "pattern", "behavior", "invert")
	if err != nil {
		return splitPattern{}, err
	}
	if typ != "Split" {
		return splitPattern{}, fmt.Errorf("pre_tokenizer Sequence[0]: unsupported type %q (supported: %s)", typ, want)
	}
	var pattern map[string]string
	var behavior string
	var invert bool
	for name, v := range map[string]any{"pattern": &pattern, "behavior": &behavior, "invert": &invert} {
		if err := field("pre_tokenizer Split", split, name, v); err != nil {
			return splitPattern{}, err
		}
	}
	var p splitPattern
	switch re, ok := pattern["Regex"]; {
	case !ok || len(pattern) != 1:
		return splitPattern{}, fmt.Errorf("pre_tokenizer Split: unsupported pattern %v (only the Qwen2 and Llama-3 regexes are implemented)", pattern)
	case re == patternQwen2:
		p.maxDigits = 1
	case re == patternLlama3:
		p.maxDigits = 3
	default:
		return splitPattern{}, fmt.Errorf("pre_tokenizer Split: unsupported regex %q (only the Qwen2 and Llama-3 regexes are implemented)", re)
	}
	if behavior != "Isolated" || invert {
		return splitPattern{}, fmt.Errorf("pre_tokenizer Split: unsupported behavior %q invert=%v (supported: Isolated, invert=false)", behavior, invert)
	}

	typ, bl, err := component("pre_tokenizer Sequence[1]", parts[1], "add_prefix_space", "trim_offsets", "use_regex")
	if err != nil {
		return splitPattern{}, err
	}
	var addPrefixSpace, useRegex bool
	if err := field("pre_tokenizer ByteLevel", bl, "add_prefix_space", &addPrefixSpace); err != nil {
		return splitPattern{}, err
	}
	if err := field("pre_tokenizer ByteLevel", bl, "use_regex", &useRegex); err != nil {
		return splitPattern{}, err
	}
	// trim_offsets only changes offsets, never ids.
	if typ != "ByteLevel" || addPrefixSpace || useRegex {
		return splitPattern{}, fmt.Errorf("pre_tokenizer Sequence[1]: unsupported %s add_prefix_space=%v use_regex=%v (supported: %s)", typ, addPrefixSpace, useRegex, want)
	}
	return p, nil
}

// checkDecoder accepts the ByteLevel decoder, the only one that inverts the
// byte-level alphabet; its flags only concern offsets.
func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("decoder: missing (supported: ByteLevel)")
	}
	typ, _, err := component("decoder", raw, "add_prefix_space", "trim_offsets", "use_regex")
	if err != nil {
		return err
	}
	if typ != "ByteLevel" {
		return fmt.Errorf("decoder: unsupported type %q (supported: ByteLevel)", typ)
	}
	return nil
}

// specialTemplate is what TemplateProcessing adds around a single sequence
// when special tokens are requested.
type specialTemplate struct {
	prefix, suffix []uint32
}

// checkPostProcessor accepts ByteLevel (offsets only), TemplateProcessing
// and a Sequence of those, and returns the single-sequence template.
func checkPostProcessor(raw json.RawMessage) (specialTemplate, error) {
	var tpl specialTemplate
	if isNull(raw) {
		return tpl, nil
	}
	typ, fields, err := component("post_processor", raw, "add_prefix_space", "trim_offsets", "use_regex", "processors", "single", "pair", "special_tokens")
	if err != nil {
		return tpl, err
	}
	switch typ {
	case "ByteLevel":
		for _, k := range []string{"processors", "single", "pair", "special_tokens"} {
			if _, ok := fields[k]; ok {
				return tpl, fmt.Errorf("post_processor ByteLevel: unexpected field %q", k)
			}
		}
		return tpl, nil
	case "Sequence":
		var parts []json.RawMessage
		if err := field("post_processor", fields, "processors", &parts); err != nil {
			return tpl, err
		}
		for i, p := range parts {
			t, err := checkPostProcessor(p)
			if err != nil {
				return tpl, fmt.Errorf("post_processor Sequence[%d]: %w", i, err)
			}
			if len(t.prefix)+len(t.suffix) > 0 {
				if len(tpl.prefix)+len(tpl.suffix) > 0 {
					return tpl, fmt.Errorf("post_processor Sequence: more than one TemplateProcessing is not supported")
				}
				tpl = t
			}
		}
		return tpl, nil
	case "TemplateProcessing":
		return parseTemplate(fields)
	}
	return tpl, fmt.Errorf("post_processor: unsupported type %q (supported: ByteLevel, TemplateProcessing, Sequence)", typ)
}

func parseTemplate(fields map[string]json.RawMessage) (specialTemplate, error) {
	var tpl specialTemplate
	var single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	}
	var specials map[string]struct {
		IDs []uint32 `json:"ids"`
	}
	if err := field("post_processor TemplateProcessing", fields, "single", &single); err != nil {
		return tpl, err
	}
	if err := field("post_processor TemplateProcessing", fields, "special_tokens", &specials); err != nil {
		return tpl, err
	}
	seenSequence := false
	for i, piece := range single {
		switch {
		case piece.Sequence != nil && piece.SpecialToken == nil:
			if seenSequence || piece.Sequence.ID != "A" {
				return tpl, fmt.Errorf("post_processor TemplateProcessing: single[%d]: unsupported sequence %q", i, piece.Sequence.ID)
			}
			seenSequence = true
		case piece.SpecialToken != nil && piece.Sequence == nil:
			st, ok := specials[piece.SpecialToken.ID]
			if !ok || len(st.IDs) == 0 {
				return tpl, fmt.Errorf("post_processor TemplateProcessing: single[%d]: special token %q not in special_tokens", i, piece.SpecialToken.ID)
			}
			if seenSequence {
				tpl.suffix = append(tpl.suffix, st.IDs...)
			} else {
				tpl.prefix = append(tpl.prefix, st.IDs...)
			}
		default:
			return tpl, fmt.Errorf("post_processor TemplateProcessing: single[%d]: want exactly one of SpecialToken, Sequence", i)
		}
	}
	if !seenSequence {
		return tpl, fmt.Errorf("post_processor TemplateProcessing: single template has no sequence")
	}
	return tpl, nil
}

// modelConfig is a checked BPE model section.
type modelConfig struct {
	vocab        map[string]uint32
	merges       [][2]string
	ignoreMerges bool
}

func checkModel(fields map[string]json.RawMessage) (modelConfig, error) {
	var mc modelConfig
	known := []string{"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"}
	for k := range fields {
		if !slices.Contains(known, k) {
			return mc, fmt.Errorf("model: unsupported field %q", k)
		}
	}
	var typ string
	if err := field("model", fields, "type", &typ); err != nil {
		return mc, err
	}
	if typ != "BPE" {
		return mc, fmt.Errorf("model: unsupported type %q (supported: byte-level BPE)", typ)
	}
	var dropout *float64
	var prefix, suffix *string
	var byteFallback bool
	for name, v := range map[string]any{"dropout": &dropout, "continuing_subword_prefix": &prefix, "end_of_word_suffix": &suffix, "byte_fallback": &byteFallback, "ignore_merges": &mc.ignoreMerges, "vocab": &mc.vocab} {
		if err := field("model", fields, name, v); err != nil {
			return mc, err
		}
	}
	switch {
	case dropout != nil && *dropout != 0:
		return mc, fmt.Errorf("model: BPE dropout %v is not supported (it is random)", *dropout)
	case prefix != nil && *prefix != "":
		return mc, fmt.Errorf("model: continuing_subword_prefix %q is not supported", *prefix)
	case suffix != nil && *suffix != "":
		return mc, fmt.Errorf("model: end_of_word_suffix %q is not supported", *suffix)
	case byteFallback:
		return mc, fmt.Errorf("model: byte_fallback is not supported")
	case len(mc.vocab) == 0:
		return mc, fmt.Errorf("model: empty vocab")
	}
	merges, err := parseMerges(fields["merges"])
	if err != nil {
		return mc, err
	}
	mc.merges = merges
	return mc, nil
}

// parseMerges reads both formats tokenizer.json has used: "left right"
// strings (exactly one space, as tokenizers' deserializer requires) and, since
// tokenizers 0.20, ["left", "right"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("model: merges: %w", err)
	}
	out := make([][2]string, len(items))
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			left, right, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(right, " ") {
				return nil, fmt.Errorf("model: merges[%d] %q: want \"left right\"", i, s)
			}
			out[i] = [2]string{left, right}
			continue
		}
		var pair []string
		if err := json.Unmarshal(it, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("model: merges[%d]: want a \"left right\" string or a [left, right] pair", i)
		}
		out[i] = [2]string{pair[0], pair[1]}
	}
	return out, nil
}
