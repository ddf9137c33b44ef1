package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestCharClassesMatchOracle compares the class of every code point with
// what the binding's pre-tokenizer showed (testdata/unicode_classes.txt,
// written by scripts/oracle/tokenizer_golden.js).
func TestCharClassesMatchOracle(t *testing.T) {
	want := make(map[rune]charClass, 0x110000)
	for i, line := range readGolden(t, "unicode_classes.txt") {
		f := strings.Fields(string(line))
		if len(f) != 3 {
			t.Fatalf("line %d: %q", i+1, line)
		}
		lo, err1 := strconv.ParseUint(f[0], 16, 32)
		hi, err2 := strconv.ParseUint(f[1], 16, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("line %d: %q", i+1, line)
		}
		c := map[string]charClass{"L": classLetter, "N": classNumber, "S": classSpace, "O": classOther}[f[2]]
		for r := rune(lo); r <= rune(hi); r++ {
			want[r] = c
		}
	}
	// The oracle's "!"+c probe joins "!" with CR or LF through
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`, so it reports them as other; they are \s.
	want['\n'], want['\r'] = classSpace, classSpace
	bad := 0
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		w, ok := want[r]
		if !ok {
			t.Fatalf("unicode_classes.txt lacks U+%04X", r)
		}
		if got := classify(r); got != w {
			if bad++; bad <= 20 {
				t.Errorf("U+%04X: class %d, oracle %d", r, got, w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d code points classified differently from the oracle", bad)
	}
}

// TestNFCMatchesOracle runs the oracle's NFC probes for every code point:
// code points listed in testdata/nfc_probes.txt must give the listed
// results, every other one must leave all probes unchanged.
func TestNFCMatchesOracle(t *testing.T) {
	parse := func(hexes string) string {
		var b strings.Builder
		for _, h := range strings.Fields(hexes) {
			v, err := strconv.ParseUint(h, 16, 32)
			if err != nil {
				t.Fatalf("bad hex %q", h)
			}
			b.WriteRune(rune(v))
		}
		return b.String()
	}
	listed := map[rune][]string{}
	for i, line := range readGolden(t, "nfc_probes.txt") {
		f := strings.Split(string(line), "\t")
		if len(f) != 5 {
			t.Fatalf("line %d: %q", i+1, line)
		}
		cp, err := strconv.ParseUint(f[0], 16, 32)
		if err != nil {
			t.Fatalf("line %d: %q", i+1, line)
		}
		for _, p := range f[1:] {
			listed[rune(cp)] = append(listed[rune(cp)], parse(p))
		}
	}
	bad := 0
	for r := rune(0); r <= 0x10FFFF; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		c := string(r)
		probes := []string{c, "x" + c + "\u0334", c + "\u0301", c + "\u0334"}
		want, ok := listed[r]
		if !ok {
			want = probes
		}
		for k, p := range probes {
			if got := nfc(p); got != want[k] {
				if bad++; bad <= 20 {
					t.Errorf("NFC(%s) = %s, oracle %s", hexRunes(p), hexRunes(got), hexRunes(want[k]))
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d NFC probes differ from the oracle", bad)
	}
}

// TestNFCSupplementaryStarter is golang/go#81028's case: x/text before the
// fix composed U+E004B U+0301 into U+1E30. The binding leaves it unchanged.
func TestNFCSupplementaryStarter(t *testing.T) {
	for _, in := range []string{"\U000E004B\u0301", "\U00010041\u0301", "\u05D2\u0307"} {
		want := readNFCProbe(t, in)
		if got := nfc(in); got != want {
			t.Errorf("NFC(%s) = %s, want %s", hexRunes(in), hexRunes(got), hexRunes(want))
		}
	}
}

// readNFCProbe returns the oracle's NFC of c+U+0301 or c+U+0307 style
// probes when listed, else the input itself (the oracle left it unchanged).
func readNFCProbe(t *testing.T, in string) string {
	rs := []rune(in)
	for _, line := range readGolden(t, "nfc_probes.txt") {
		f := strings.Split(string(line), "\t")
		if f[0] == strconv.FormatInt(int64(rs[0]), 16) && len(rs) == 2 && rs[1] == 0x301 {
			var b strings.Builder
			for _, h := range strings.Fields(f[3]) {
				v, _ := strconv.ParseUint(h, 16, 32)
				b.WriteRune(rune(v))
			}
			return b.String()
		}
	}
	return in
}

func hexRunes(s string) string {
	var parts []string
	for _, r := range s {
		parts = append(parts, fmt.Sprintf("U+%04X", r))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
