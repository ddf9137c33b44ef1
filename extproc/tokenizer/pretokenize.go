package tokenizer

import "unicode/utf8"

// The two Split patterns this package implements. They are the Qwen2/Qwen3
// and the Llama-3 pre-tokenizer regexes, identical except for the number
// rule. Go's regexp cannot run them (no lookahead for `\s+(?!\S)`), so
// splitPattern.next reproduces, alternative by alternative, what the
// backtracking engine (Oniguruma, used by Hugging Face tokenizers) matches.
const (
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitPattern is one of the supported patterns; maxDigits is the upper
// bound of its number rule (1 for \p{N}, 3 for \p{N}{1,3}).
type splitPattern struct {
	maxDigits int
}

// decodeClass decodes the code point at s[i] (i < len(s)) and classifies it.
func decodeClass(s string, i int) (r rune, size int, c charClass) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), 1, asciiClass[b]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, classifySlow(r)
}

// next returns the end of the pre-token that starts at s[i] (i < len(s)).
// The pattern's alternatives are tried in their written order, each with
// the backtracking a regex engine would do; every code point is covered by
// some alternative, so the pre-tokens tile the input.
func (p splitPattern) next(s string, i int) int {
	r, n, c := decodeClass(s, i)

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if end := contractionEnd(s, i+1); end > 0 {
			return end
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+ : the optional prefix is greedy, so a
	// non-letter that is followed by a letter is taken along with it.
	if c == classLetter {
		return runEnd(s, i+n, classLetter)
	}
	if c != classNumber && r != '\r' && r != '\n' && i+n < len(s) {
		if _, _, c2 := decodeClass(s, i+n); c2 == classLetter {
			return runEnd(s, i+n, classLetter)
		}
	}

	// \p{N} or \p{N}{1,3}
	if c == classNumber {
		end := i + n
		for k := 1; k < p.maxDigits && end < len(s); k++ {
			_, n2, c2 := decodeClass(s, end)
			if c2 != classNumber {
				break
			}
			end += n2
		}
		return end
	}

	// ` ?[^\s\p{L}\p{N}]+[\r\n]*` : only U+0020 may lead, and only when an
	// "other" character follows it.
	start := -1
	if c == classOther {
		start = i
	} else if r == ' ' && i+1 < len(s) {
		if _, _, c2 := decodeClass(s, i+1); c2 == classOther {
			start = i + 1
		}
	}
	if start >= 0 {
		end := runEnd(s, start, classOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}

	// Here s[i] is whitespace. Scan the whole whitespace run once.
	j, last, count, lastNewline := i, i, 0, -1
	for j < len(s) {
		r2, n2, c2 := decodeClass(s, j)
		if c2 != classSpace {
			break
		}
		if r2 == '\r' || r2 == '\n' {
			lastNewline = j
		}
		last = j
		j += n2
		count++
	}
	// \s*[\r\n]+ : \s* backtracks from the end of the run to the last CR or
	// LF in it, then [\r\n]+ takes that one character (none follows it
	// within the run).
	if lastNewline >= 0 {
		return lastNewline + 1
	}
	// \s+(?!\S) : at the end of the input the whole run; before a
	// non-space, \s+ gives back one character so the lookahead sees a space.
	// With a one-character run that fails and \s+ takes it alone.
	if j == len(s) || count == 1 {
		return j
	}
	return last
}

// contractionEnd matches the case-insensitive contraction suffixes after an
// apostrophe at s[i-1]; it returns the end, or 0 if none matches.
// Under Unicode case folding U+017F LATIN SMALL LETTER LONG S also matches
// "s" (measured against the binding: "'ſt" splits as "'ſ" + "t").
func contractionEnd(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	switch s[i] | 0x20 {
	case 's', 't', 'm', 'd': // b|0x20 folds only A–Z onto a–z here
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && s[i+1]|0x20 == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && s[i+1]|0x20 == 'l' {
			return i + 2
		}
	}
	if s[i] == 0xC5 && i+1 < len(s) && s[i+1] == 0xBF { // U+017F
		return i + 2
	}
	return 0
}

// runEnd returns the end of the run of characters of class c starting at i.
func runEnd(s string, i int, c charClass) int {
	for i < len(s) {
		_, n, c2 := decodeClass(s, i)
		if c2 != c {
			break
		}
		i += n
	}
	return i
}
