package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// nfc applies NFC as Hugging Face tokenizers 0.23.2 does. Its normalizer
// (crate unicode-normalization-alignments) has Unicode 9.0 data, while
// golang.org/x/text/unicode/norm has 15.0 (on Go < 1.27): a code point
// assigned after 9.0 is, for the reference, a plain starter that never
// reorders, decomposes or composes (measured: U+07FD, U+1ABF… stay in place;
// testdata/nfc_probes.txt). Such a starter also blocks everything across it,
// so NFC(a x b) = NFC(a) x NFC(b): the text is cut at those code points and
// each part normalized alone.
//
// golang/go#81028 (combine() truncating code points to 16 bits, so that e.g.
// U+E004B U+0301 became U+1E30) is fixed in golang.org/x/text v0.42.0, which
// go.mod requires; TestNFCMatchesOracle checks that case and every code point
// against the binding, so a downgrade cannot slip through.
func nfc(s string) string {
	// Text below U+0300 is always NFC and can never compose with a
	// neighbour below U+0300, so the common case returns without calling
	// into norm (which itself returns s without allocating when its quick
	// check passes).
	i := 0
	for i < len(s) && s[i] < 0xCC { // 0xCC: first lead byte of U+0300 and above
		i++
	}
	if i == len(s) {
		return s
	}
	var b *strings.Builder
	start := 0
	for j := i; j < len(s); {
		if s[j] < 0xCC {
			j++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[j:])
		if newerThanUnicode9(r) {
			if b == nil {
				b = &strings.Builder{}
				b.Grow(len(s))
			}
			b.WriteString(norm.NFC.String(s[start:j]))
			b.WriteString(s[j : j+n])
			start = j + n
		}
		j += n
	}
	if b == nil {
		return norm.NFC.String(s)
	}
	b.WriteString(norm.NFC.String(s[start:]))
	return b.String()
}

// bmpUnassigned9 is unassignedInUnicode9 as a BMP bitmap (8 KiB): this check
// runs on every non-Latin character of normalized text.
var bmpUnassigned9 = func() *[0x10000 / 64]uint64 {
	var bits [0x10000 / 64]uint64
	for r := rune(0); r < 0x10000; r++ {
		if unicode.Is(unassignedInUnicode9, r) {
			bits[r/64] |= 1 << (r % 64)
		}
	}
	return &bits
}()

// newerThanUnicode9 reports whether r (>= U+0300) was unassigned in 9.0.
func newerThanUnicode9(r rune) bool {
	if r < 0x10000 {
		return bmpUnassigned9[r/64]&(1<<(r%64)) != 0
	}
	return unicode.Is(unassignedInUnicode9, r)
}
