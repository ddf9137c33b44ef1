// Package tokenizer is an exact, pure-Go implementation of the Hugging Face
// tokenizers pipeline used by byte-level BPE models such as Qwen2/Qwen3 and
// Llama-3: added tokens, NFC, the Split + ByteLevel pre-tokenizer and BPE.
// It produces the ids vLLM computes (HF encode with add_special_tokens=false,
// special tokens written in the text matched), checked against the official
// binding on the goldens in testdata/. Files using any component it does not
// implement exactly are refused at Load.
package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxFileSize bounds tokenizer.json (large vocabularies are ~10–30 MB).
const MaxFileSize = 256 << 20

// DefaultWordCacheSize is the word cache's default capacity, in pre-tokens.
const DefaultWordCacheSize = 1 << 18

// Tokenizer encodes text to token ids. It is safe for concurrent use.
type Tokenizer struct {
	model      bpeModel
	pattern    splitPattern
	useNFC     bool
	added      []AddedToken
	rawAdded   *addedMatcher // added tokens matched on the raw text
	normAdded  *addedMatcher // added tokens matched on the normalized text
	addedByStr map[string]uint32
	addedByID  map[uint32]string // an added token's content, which Decode writes for its id
	vocab      stringTable       // as written in tokenizer.json (byte-level alphabet) → id
	vocabSize  int               // ids, added tokens included
	template   specialTemplate
	special    SpecialTokens
	cache      *wordCache
}

// SpecialToken is a named special token and its id.
type SpecialToken struct {
	Content string
	ID      uint32
}

// SpecialTokens are the roles named in tokenizer_config.json (nil when the
// file is absent or does not name the role).
type SpecialTokens struct {
	BOS, EOS, PAD, UNK *SpecialToken
}

// Stats are counters since Load.
type Stats struct {
	WordCacheHits   uint64
	WordCacheMisses uint64
	WordCacheResets uint64 // times a cache shard was full and emptied
}

// Load reads tokenizer.json (and, if present, tokenizer_config.json) from dir.
func Load(dir string) (*Tokenizer, error) {
	data, err := readBounded(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "tokenizer.json"), err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := readBounded(cfgPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := t.readSpecialRoles(cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	}
	return t, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("tokenizer: %s is larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// Parse builds a Tokenizer from the contents of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f tokenizerFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("truncation: not supported (it would cut the ids)")
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("padding: not supported (it would add ids)")
	}
	t := &Tokenizer{cache: newWordCache(DefaultWordCacheSize)}
	var err error
	if t.useNFC, err = checkNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pattern, err = checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err = checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if t.template, err = checkPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if f.Model == nil {
		return nil, fmt.Errorf("model: missing")
	}
	mc, err := checkModel(f.Model)
	if err != nil {
		return nil, err
	}
	if err := t.buildModel(mc); err != nil {
		return nil, err
	}
	if err := t.buildAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

// maxID bounds ids so that a hostile file cannot make Load allocate
// unbounded id tables.
const maxID = 1 << 24

func (t *Tokenizer) buildModel(mc modelConfig) error {
	t.model.ignoreMerges = mc.ignoreMerges
	maxSeen := uint32(0)
	for tok, id := range mc.vocab {
		if id >= maxID {
			return fmt.Errorf("model: vocab id %d of %q is too large", id, tok)
		}
		maxSeen = max(maxSeen, id)
	}
	// The tables keep no Go string or slice per token (stringTable); the
	// map decoded from the file is dropped once Parse returns.
	toks := make([]string, 0, len(mc.vocab))
	for tok := range mc.vocab {
		toks = append(toks, tok)
	}
	slices.Sort(toks) // a fixed layout, whatever the map's order
	ids := make([]uint32, len(toks))
	for i, tok := range toks {
		ids[i] = mc.vocab[tok]
	}
	t.vocab = newStringTable(toks, ids, nil)
	raw := make([]string, maxSeen+1)
	decodable := make([]bool, maxSeen+1)
	for tok, id := range mc.vocab {
		b, ok := byteLevelToBytes(tok)
		if !ok {
			// Not reachable by byte-level BPE; decoded as its text, as the
			// ByteLevel decoder does for characters outside the alphabet.
			raw[id] = tok
			continue
		}
		raw[id], decodable[id] = string(b), true
	}
	// Only ignore_merges looks words up whole; otherwise the table is
	// Decode's id → bytes and indexes nothing.
	t.model.rawVocab = newStringTable(raw, nil, func(id int) bool { return mc.ignoreMerges && decodable[id] })
	t.vocabSize = len(raw)
	for b := 0; b < 256; b++ {
		id, ok := mc.vocab[string(byteToRune[b])]
		if !ok {
			return fmt.Errorf("model: vocab lacks byte 0x%02x (%q); not a byte-level BPE vocabulary", b, byteToRune[b])
		}
		t.model.byteID[b] = id
	}
	t.model.merges = make(map[uint64]uint64, len(mc.merges))
	for rank, m := range mc.merges {
		left, okL := mc.vocab[m[0]]
		right, okR := mc.vocab[m[1]]
		merged, okM := mc.vocab[m[0]+m[1]]
		if !okL || !okR || !okM {
			return fmt.Errorf("model: merges[%d] %q + %q: token not in vocab", rank, m[0], m[1])
		}
		// A repeated pair keeps its last rank, as tokenizers' HashMap
		// collect does.
		t.model.merges[pairKey(left, right)] = uint64(rank)<<32 | uint64(merged)
	}
	return nil
}

// buildAdded registers the added tokens the way tokenizers' deserializer
// does (tokenizer/serialization.rs then AddedVocabulary::add_tokens): the
// "id" written in the file is NOT used. A token whose content is in the
// model vocabulary takes that id; any other takes the next id after the
// largest added id, or len(vocab) for the first. The binding measured this:
// tokens appended with ids 151700+ to the Qwen3 file got 151669+.
func (t *Tokenizer) buildAdded(tokens []addedTokenJSON) error {
	t.addedByStr = make(map[string]uint32, len(tokens))
	t.addedByID = make(map[uint32]string, len(tokens))
	vocabLen := uint32(t.vocab.entries())
	nextID, haveAdded := uint32(0), false
	for i, a := range tokens {
		if a.Content == "" {
			continue // ignored by add_tokens
		}
		if !utf8.ValidString(a.Content) {
			return fmt.Errorf("added_tokens[%d]: content is not valid UTF-8", i)
		}
		if _, dup := t.addedByStr[a.Content]; dup {
			return fmt.Errorf("added_tokens[%d] %q: duplicate content", i, a.Content)
		}
		id, inVocab := t.vocab.lookup(a.Content)
		if !inVocab {
			switch {
			case !haveAdded:
				id = vocabLen
			case nextID >= vocabLen:
				id = nextID
			default:
				id = vocabLen
			}
		}
		if id >= maxID {
			return fmt.Errorf("added_tokens[%d] %q: id %d is too large", i, a.Content, id)
		}
		if a.ID != nil && *a.ID != id {
			slog.Warn("tokenizer: added token gets a different id than written, as in Hugging Face tokenizers",
				"token", a.Content, "written", *a.ID, "id", id)
		}
		if !haveAdded || id+1 > nextID {
			nextID = id + 1 // next id = largest added id + 1
		}
		haveAdded = true
		t.addedByStr[a.Content] = id
		t.added = append(t.added, AddedToken{ID: id, Content: a.Content, Special: a.Special, Normalized: a.Normalized, LStrip: a.LStrip, RStrip: a.RStrip, SingleWord: a.SingleWord})
		t.vocabSize = max(t.vocabSize, int(id)+1)
		t.addedByID[id] = a.Content
	}
	t.rawAdded = newAddedMatcher(t.added, func(a AddedToken) bool { return !a.Normalized }, func(a AddedToken) string { return a.Content })
	t.normAdded = newAddedMatcher(t.added, func(a AddedToken) bool { return a.Normalized }, func(a AddedToken) string {
		if t.useNFC {
			return nfc(a.Content)
		}
		return a.Content
	})
	return nil
}

// readSpecialRoles reads bos/eos/pad/unk from tokenizer_config.json, where
// each is a string or an object with "content".
func (t *Tokenizer) readSpecialRoles(data []byte) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return err
	}
	for name, dst := range map[string]**SpecialToken{"bos_token": &t.special.BOS, "eos_token": &t.special.EOS, "pad_token": &t.special.PAD, "unk_token": &t.special.UNK} {
		raw, ok := cfg[name]
		if !ok || isNull(raw) {
			continue
		}
		var content string
		if err := json.Unmarshal(raw, &content); err != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(raw, &obj); err != nil {
				return fmt.Errorf("%s: want a string or {\"content\": ...}", name)
			}
			content = obj.Content
		}
		id, ok := t.TokenID(content)
		if !ok {
			// Metadata only: encoding does not depend on it, so a stale
			// role is reported rather than failing the load.
			slog.Warn("tokenizer: tokenizer_config.json names a token not in the vocabulary", "role", name, "token", content)
			continue
		}
		*dst = &SpecialToken{Content: content, ID: id}
	}
	return nil
}

// Encode returns the ids of text without adding special tokens (HF
// encode(text, add_special_tokens=False)); added and special tokens written
// in the text are matched, as vLLM does. Text is expected to be valid UTF-8
// (it comes from JSON); each invalid byte is encoded as U+FFFD.
func (t *Tokenizer) Encode(text string) []uint32 {
	return t.EncodeAppend(make([]uint32, 0, len(text)/3+1), text)
}

// EncodeWithSpecialTokens is Encode plus what the post-processor adds with
// add_special_tokens=True (Llama-3: a leading <|begin_of_text|>), as vLLM's
// completions endpoint tokenizes prompts.
func (t *Tokenizer) EncodeWithSpecialTokens(dst []uint32, text string) []uint32 {
	dst, _ = t.encodeSpecial(dst, text, nil)
	return dst
}

// EncodeAppend appends the ids of text (as Encode) to dst.
func (t *Tokenizer) EncodeAppend(dst []uint32, text string) []uint32 {
	dst, _ = t.encodeAppend(dst, text, nil)
	return dst
}

// EncodeOptions select what EncodeBounded does besides Encode's work.
type EncodeOptions struct {
	// SpecialTokens adds the post-processor's tokens, as
	// EncodeWithSpecialTokens.
	SpecialTokens bool
	// Cache, when set, reuses the ids of segments seen before, as
	// EncodeCached (ignored with SpecialTokens).
	Cache  *SegmentCache
	Limits Limits
}

// EncodeBounded appends the ids of text to dst like EncodeAppend (or
// EncodeWithSpecialTokens, EncodeCached per o), stopping as soon as a limit
// is passed or ctx ends: the error is then a *TooManyTokensError, a
// *WordTooLongError or ctx's error, and the ids are incomplete. The ids of a
// completed encode are exactly those of the unbounded entry points.
func (t *Tokenizer) EncodeBounded(ctx context.Context, dst []uint32, text string, o EncodeOptions) ([]uint32, error) {
	b := newBudget(ctx, len(dst), o.Limits)
	if !b.alive() {
		return dst, b.err
	}
	switch {
	case o.SpecialTokens:
		return t.encodeSpecial(dst, text, b)
	case o.Cache != nil:
		return t.encodeCached(dst, text, o.Cache, b)
	}
	return t.encodeAppend(dst, text, b)
}

func (t *Tokenizer) encodeSpecial(dst []uint32, text string, b *budget) ([]uint32, error) {
	dst = append(dst, t.template.prefix...)
	dst, err := t.encodeAppend(dst, text, b)
	if err != nil {
		return dst, err
	}
	dst = append(dst, t.template.suffix...)
	if b != nil {
		return dst, b.result(len(dst))
	}
	return dst, nil
}

func (t *Tokenizer) encodeAppend(dst []uint32, text string, b *budget) ([]uint32, error) {
	if !utf8.ValidString(text) {
		text = toValidUTF8(text)
	}
	if t.rawAdded == nil {
		dst = t.encodeNormalizing(dst, text, b)
	} else {
		t.rawAdded.split(text, t.added, func(s addedSplit) bool {
			if s.token >= 0 {
				dst = append(dst, t.added[s.token].ID)
			} else {
				dst = t.encodeNormalizing(dst, text[s.start:s.end], b)
			}
			return !b.stopped()
		})
	}
	if b != nil {
		return dst, b.result(len(dst))
	}
	return dst, nil
}

// toValidUTF8 replaces each invalid byte with U+FFFD, so that encoding never
// sees invalid UTF-8 (Rust strings, which the reference works on, cannot
// hold it).
func toValidUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func (t *Tokenizer) encodeNormalizing(dst []uint32, piece string, b *budget) []uint32 {
	if t.useNFC {
		piece = nfc(piece)
	}
	if t.normAdded == nil {
		return t.encodePlain(dst, piece, b)
	}
	t.normAdded.split(piece, t.added, func(s addedSplit) bool {
		if s.token >= 0 {
			dst = append(dst, t.added[s.token].ID)
		} else {
			dst = t.encodePlain(dst, piece[s.start:s.end], b)
		}
		return !b.stopped()
	})
	return dst
}

// encodePlain pre-tokenizes normalized text without added tokens and runs
// BPE on each pre-token, through the word cache. With a budget, each
// pre-token is accounted before its BPE runs: the token limit is checked on
// the ids so far, so encoding stops within one pre-token of it.
func (t *Tokenizer) encodePlain(dst []uint32, s string, b *budget) []uint32 {
	for i := 0; i < len(s); {
		end := t.pattern.next(s, i)
		word := s[i:end]
		i = end
		if b != nil && !b.word(len(dst), len(word)) {
			return dst
		}
		if len(word) == 1 {
			dst = append(dst, t.model.byteID[word[0]])
			continue
		}
		if len(word) > maxCachedWord {
			dst = t.model.encodeWord(dst, word, b)
			continue
		}
		var hit bool
		if dst, hit = t.cache.appendCached(dst, word); hit {
			continue
		}
		n := len(dst)
		dst = t.model.encodeWord(dst, word, b)
		if b.stopped() {
			return dst // abandoned mid-merge: its ids are incomplete
		}
		t.cache.put(word, dst[n:])
	}
	return dst
}

// Decode turns ids back into text through the ByteLevel decoder; unknown
// ids are skipped and invalid UTF-8 (a multi-byte character cut between
// tokens) becomes U+FFFD. Meant for debugging and tests.
func (t *Tokenizer) Decode(ids []uint32) string {
	var b []byte
	for _, id := range ids {
		if content, ok := t.addedByID[id]; ok {
			b = append(b, content...)
		} else {
			b = append(b, t.model.rawVocab.entry(id)...)
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// TokenID returns the id of a token as written in tokenizer.json (an added
// token's content, or a vocabulary entry in the byte-level alphabet, e.g.
// "Ġthe").
func (t *Tokenizer) TokenID(token string) (uint32, bool) {
	if id, ok := t.addedByStr[token]; ok {
		return id, true
	}
	return t.vocab.lookup(token)
}

// AddedTokens returns the added tokens in file order.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// SpecialTokens returns the roles named in tokenizer_config.json.
func (t *Tokenizer) SpecialTokens() SpecialTokens { return t.special }

// VocabSize is the number of ids, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// Stats returns the counters since Load.
func (t *Tokenizer) Stats() Stats {
	hits, misses, resets := t.cache.counters()
	return Stats{WordCacheHits: hits, WordCacheMisses: misses, WordCacheResets: resets}
}

// ResetWordCache empties the word cache (for cold-cache benchmarks).
func (t *Tokenizer) ResetWordCache() { t.cache.reset() }
