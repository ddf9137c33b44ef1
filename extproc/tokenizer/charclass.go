package tokenizer

import "unicode"

// charClass is how the pre-tokenizer pattern sees one code point: \p{L},
// \p{N}, \s, or none of them.
type charClass uint8

const (
	classOther charClass = iota
	classLetter
	classNumber
	classSpace
)

// The classes follow Unicode 16.0, the version of the Oniguruma tables in
// Hugging Face tokenizers 0.23.2 (measured: testdata/unicode_classes.txt).
// Go's unicode package is 15.0, which among others lacks CJK Extension I
// (U+2EBF0–U+2EE5D, 15.1) and the 16.0 scripts (Garay, Todhri, Kirat Rai…),
// so the generated letter16/number16 tables are used instead.

// bmpClass is the class of every BMP code point, precomputed (64 KiB)
// because nearly all text is in the BMP and a table lookup is several times
// faster than a range-table search.
var bmpClass = func() *[0x10000]charClass {
	var t [0x10000]charClass
	for r := rune(0); r < 0x10000; r++ {
		t[r] = classifyTables(r)
	}
	return &t
}()

// asciiClass is bmpClass's first 128 entries, kept separate so the hot
// ASCII path touches one cache line pair.
var asciiClass = func() (t [128]charClass) {
	copy(t[:], bmpClass[:128])
	return t
}()

func classify(r rune) charClass {
	if r < 0x10000 {
		if r < 0 {
			return classOther
		}
		return bmpClass[r]
	}
	return classifyTables(r)
}

// classifySlow classifies a non-ASCII code point.
func classifySlow(r rune) charClass { return classify(r) }

func classifyTables(r rune) charClass {
	switch {
	case unicode.Is(letter16, r):
		return classLetter
	case unicode.Is(number16, r):
		return classNumber
	case isWhiteSpace(r):
		return classSpace
	}
	return classOther
}

// isWhiteSpace is Oniguruma's Unicode \s: the White_Space property, which
// has not changed since Unicode 6.3.
func isWhiteSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0:
		return true
	}
	return r > 0xFF && unicode.Is(unicode.White_Space, r)
}
