package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"

	"github.com/dlclark/regexp2"
)

// regexpPieces splits s with the real pattern run by a backtracking engine
// (regexp2), the slow reference for splitPattern.
func regexpPieces(t *testing.T, re *regexp2.Regexp, s string) []string {
	t.Helper()
	var out []string
	m, err := re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, m.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func scannerPieces(p splitPattern, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		end := p.next(s, i)
		out = append(out, s[i:end])
		i = end
	}
	return out
}

// comparableWithRegexp2 excludes what regexp2 sees differently by design:
// it uses Go's Unicode 15.0 tables (the reference uses 16.0) and .NET case
// folding, under which U+017F does not match "s".
func comparableWithRegexp2(s string) bool {
	for _, r := range s {
		if r == 0x17F {
			return false
		}
		c := classify(r)
		if (c == classLetter) != unicode.IsLetter(r) || (c == classNumber) != unicode.IsNumber(r) {
			return false
		}
	}
	return true
}

var scannerAlphabet = []string{
	" ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2028", "\u3000", "\u0085", "\v", "\f",
	"a", "Z", "é", "ß", "я", "中", "ー", "ـ", "\u0301", "\u0e31",
	"0", "7", "٣", "²", "Ⅻ", "½",
	"'", "'s", "'S", "'re", "'VE", "'ll", "'d", "'m", "'t", "'x",
	".", ",", "!", "?", "-", "_", "(", "]", "\"", "😀", "\u200d", "\ufe0f", "€", "\x00",
}

func TestScannerMatchesRegexp2(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern string
		p       splitPattern
	}{{"qwen2", patternQwen2, splitPattern{maxDigits: 1}}, {"llama3", patternLlama3, splitPattern{maxDigits: 3}}} {
		t.Run(tc.name, func(t *testing.T) {
			re := regexp2.MustCompile(tc.pattern, regexp2.Unicode)
			var texts []string
			for _, c := range readCases(t, "golden_qwen3.jsonl") {
				texts = append(texts, c.Text)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 20000 {
				var b strings.Builder
				for n := 1 + rng.IntN(16); n > 0; n-- {
					b.WriteString(scannerAlphabet[rng.IntN(len(scannerAlphabet))])
				}
				texts = append(texts, b.String())
			}
			checked, bad := 0, 0
			for _, s := range texts {
				if !comparableWithRegexp2(s) {
					continue
				}
				checked++
				got, want := scannerPieces(tc.p, s), regexpPieces(t, re, s)
				if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
					if bad++; bad <= 5 {
						t.Errorf("%q:\n got  %q\n want %q", s, got, want)
					}
				}
			}
			if checked < 15000 {
				t.Fatalf("only %d texts comparable", checked)
			}
			t.Logf("%d texts, %d differ", checked, bad)
		})
	}
}
