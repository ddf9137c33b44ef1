package openai

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// plainRunBytewise is plainRun's definition, one byte at a time.
func plainRunBytewise(b []byte) (int, bool) {
	ascii := true
	for i, c := range b {
		if c == '"' || c == '\\' || c < 0x20 {
			return i, ascii
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	return len(b), ascii
}

// Every byte value at every position of a word (and past the last full
// word), after ASCII and non-ASCII filler: the word-at-a-time scan stops
// exactly where the bytewise one does and agrees on ASCII-ness.
func TestPlainRunMatchesBytewise(t *testing.T) {
	for _, filler := range []byte{'a', 0x7f, 0xc3, 0xff, ' '} {
		for size := 0; size <= 19; size++ {
			for at := 0; at < size; at++ {
				for c := 0; c < 256; c++ {
					b := make([]byte, size)
					for i := range b {
						b[i] = filler
					}
					b[at] = byte(c)
					gotN, gotASCII := plainRun(b)
					wantN, wantASCII := plainRunBytewise(b)
					if gotN != wantN || gotASCII != wantASCII {
						t.Fatalf("filler %#x size %d byte %#x at %d: got (%d, %v), want (%d, %v)", filler, size, c, at, gotN, gotASCII, wantN, wantASCII)
					}
				}
			}
		}
	}
}

// Several stop bytes in one word, and bytes one above a stop ('#' after
// '"', ']' after '\\', 0x20 and 0x21 after a control byte) whose borrow
// could flag a lane falsely: random words over such an alphabet stop where
// the bytewise scan does.
func TestPlainRunMatchesBytewiseOnDenseWords(t *testing.T) {
	alphabet := []byte{'"', '#', '\\', ']', 0x00, 0x01, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xc3, 0xff, 'a'}
	rnd := rand.New(rand.NewPCG(27, 3))
	for range 200000 {
		b := make([]byte, rnd.IntN(20))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		gotN, gotASCII := plainRun(b)
		wantN, wantASCII := plainRunBytewise(b)
		if gotN != wantN || gotASCII != wantASCII {
			t.Fatalf("%q: got (%d, %v), want (%d, %v)", b, gotN, gotASCII, wantN, wantASCII)
		}
	}
}

// Strings with escapes between plain runs decode as encoding/json does.
func TestReadStringRunsAroundEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`"plain text that is longer than a word"`: "plain text that is longer than a word",
		`"a\nb"`: "a\nb",
		`"func f() {\n\treturn x * 2\n}\n more words"`: "func f() {\n\treturn x * 2\n}\n more words",
		`"caf\u00e9 and café, \"quoted\" \\ end"`:      "café and café, \"quoted\" \\ end",
		`"ends with escape\n"`:                         "ends with escape\n",
		`"\u4e16\u754c long enough to take a word"`:    "世界 long enough to take a word",
	} {
		s := &scanner{buf: []byte(in), lim: DefaultLimits}
		got, err := s.readString()
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", in, got, want)
		}
		if s.pos != len(in) {
			t.Errorf("%s: stopped at %d of %d", in, s.pos, len(in))
		}
	}
	for _, in := range []string{"\"eight by\x01tes\"", "\"no end here, longer than a word", "\"bad \xff utf8 in a long string\"", "\"bad \xff then\\n escape\"", "\"ctl after\\n esc\x1f\""} {
		s := &scanner{buf: []byte(in), lim: DefaultLimits}
		if got, err := s.readString(); err == nil {
			t.Errorf("%q: accepted as %q", in, got)
		}
	}
}

// readString agrees with encoding/json on strings built from plain runs of
// every length, multi-byte UTF-8 and every escape kind, and rejects what it
// rejects (control characters, bad escapes, a missing closing quote).
func TestReadStringMatchesEncodingJSON(t *testing.T) {
	pieces := []string{"a", "abcdefghijklmnopq", "é", "世界", " ", `\n`, `\t`, `\"`, `\\`, `\/`, `\b`, `\f`, `\r`,
		`\u00e9`, `\u4e16`, `\ud83d\ude00`, `\u0041`}
	bad := []string{"\x01", "\x1f", `\x`, `\u12`, "\n"}
	rnd := rand.New(rand.NewPCG(19, 1))
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		sb.WriteByte('"')
		for n := rnd.IntN(12); n > 0; n-- {
			sb.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		if rnd.IntN(8) == 0 {
			sb.WriteString(bad[rnd.IntN(len(bad))])
		}
		for n := rnd.IntN(4); n > 0; n-- {
			sb.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		if rnd.IntN(16) != 0 {
			sb.WriteByte('"')
		}
		in := sb.String()
		var want string
		wantErr := json.Unmarshal([]byte(in), &want)
		s := &scanner{buf: []byte(in), lim: DefaultLimits}
		got, err := s.readString()
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: readString error %v, encoding/json error %v", in, err, wantErr)
		}
		if err == nil && (got != want || s.pos != len(in)) {
			t.Fatalf("%q: got %q (stopped at %d of %d), want %q", in, got, s.pos, len(in), want)
		}
	}
}

// Escaped strings decoded one after another share the scanner's arena;
// each keeps its own bytes once later ones are decoded after it.
func TestEscapedStringsShareTheArenaWithoutOverlap(t *testing.T) {
	want := []string{"a\nb", "plain", "\t\"quoted\"\t", "caf\u00e9\n", "", "x\\y", strings.Repeat("long\n", 50)}
	var buf []byte
	for _, w := range want {
		q, _ := json.Marshal(w)
		buf = append(buf, q...)
	}
	s := &scanner{buf: buf, lim: DefaultLimits}
	var got []string
	for range want {
		str, err := s.readString()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, str)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("string %d: got %q, want %q", i, got[i], want[i])
		}
	}
	if cap(s.arena) > len(buf) {
		t.Errorf("arena of %d bytes for a %d-byte body", cap(s.arena), len(buf))
	}
}
