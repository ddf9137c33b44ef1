package openai

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Every spelling pydantic's str_as_int / float_as_int accepts for an int n
// reads as n, and the near misses it refuses are refused (pydantic-core
// src/input/shared.rs; the verdict table checks the same rules against
// pydantic itself on fixed rows, this on many values).
func TestLaxIntSpellings(t *testing.T) {
	rnd := rand.New(rand.NewPCG(31, 6))
	for i := 0; i < 2000; i++ {
		n := rnd.Int64N(1 << 40)
		if i%3 == 0 {
			n = rnd.Int64N(100)
		}
		d := strconv.FormatInt(n, 10)
		accepted := []string{d, d + ".0", d + ".000", `"` + d + `"`, `" ` + d + ` "`, `"+` + d + `"`, `"00` + d + `"`,
			`"` + d + `.0"`, `"\t` + d + `.00\n"`, "true"}
		if n < 1<<53 {
			accepted = append(accepted, d+"e0", d+"0e-1")
		}
		if len(d) > 1 {
			accepted = append(accepted, `"`+d[:1]+"_"+d[1:]+`"`)
		}
		for _, a := range accepted {
			want := n
			if a == "true" {
				want = 1
			}
			got, err := laxInt(newScanner([]byte(a), DefaultLimits))
			if err != nil || got == nil || *got != want {
				t.Fatalf("%s: got %v %v, want %d", a, got, err, want)
			}
		}
		refused := []string{d + ".5", `"` + d + `.5"`, `"` + d + `."`, `"` + d + `e0"`, `"_` + d + `"`,
			`"+-` + d + `"`, `"--` + d + `"`, `"0x` + d + `"`, `"` + d + `a"`, `[` + d + `]`, `{}`, `""`}
		for _, r := range refused {
			if got, err := laxInt(newScanner([]byte(r), DefaultLimits)); err == nil {
				t.Fatalf("%s accepted as %d", r, *got)
			}
		}
	}
	for _, r := range []string{"NaN", "Infinity", "-Infinity", "1e400", "9223372036854775807.0", "-9223372036854775808.0"} {
		if got, err := laxInt(newScanner([]byte(r), DefaultLimits)); err == nil {
			t.Errorf("%s accepted as %d", r, *got)
		}
	}
}

// laxBool takes exactly pydantic's bool spellings: the words in any ASCII
// case, 0 and 1 as ints, floats or strings; no other value.
func TestLaxBoolSpellings(t *testing.T) {
	words := map[string]bool{"0": false, "1": true, "f": false, "n": false, "no": false, "off": false, "false": false,
		"t": true, "y": true, "on": true, "yes": true, "true": true}
	for w, want := range words {
		for _, spelling := range []string{w, strings.ToUpper(w), strings.ToUpper(w[:1]) + w[1:]} {
			got, _, err := laxBool(newScanner([]byte(`"`+spelling+`"`), DefaultLimits), true, false)
			if err != nil || got != want {
				t.Errorf("%q: got %v %v, want %v", spelling, got, err, want)
			}
		}
	}
	for lit, want := range map[string]bool{"0": false, "1": true, "0.0": false, "1.0": true, "1e0": true, "-0.0": false, "true": true, "false": false} {
		got, _, err := laxBool(newScanner([]byte(lit), DefaultLimits), true, false)
		if err != nil || got != want {
			t.Errorf("%s: got %v %v, want %v", lit, got, err, want)
		}
	}
	for _, r := range []string{"2", "-1", "0.5", "2.0", "NaN", `" true"`, `"yeſ"`, `"enabled"`, `""`, `[]`, `{}`, "99999999999999999999"} {
		if got, _, err := laxBool(newScanner([]byte(r), DefaultLimits), true, false); err == nil {
			t.Errorf("%s accepted as %v", r, got)
		}
	}
	if _, _, err := laxBool(newScanner([]byte("null"), DefaultLimits), false, true); err == nil {
		t.Error("null accepted for a bool that is not nullable")
	}
}

// strAsInt never panics, and the int it reads reads back from its own
// decimal spelling (testdata/pydantic_lax_scalars.tsv holds the verdicts).
func FuzzStrAsInt(f *testing.F) {
	for _, s := range []string{"2", " 2 ", "+2", "002", "2.0", "2.", "1_000", "1__0", "_1", "-0", "-00.000", "0_0", "0-5", "+-1", "", "١٢"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := strAsInt(s)
		if !ok {
			return
		}
		if back, ok := strAsInt(strconv.FormatInt(n, 10)); !ok || back != n {
			t.Fatalf("%q read as %d, which reads back as %d %v", s, n, back, ok)
		}
	})
}

// laxInt and laxBool give pydantic's verdict and value on every row of
// testdata/pydantic_lax_scalars.tsv: 2,000 random short strings over the
// characters the cleaning rules look at (digits, '_', signs, '.', white
// space, 'e', 'x'), and the JSON number literals, each run through
// pydantic itself by gen_vllm_verdicts.py.
func TestLaxScalarsAgreeWithPydantic(t *testing.T) {
	data, err := os.ReadFile("testdata/pydantic_lax_scalars.tsv")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for n, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 4 {
			t.Fatalf("line %d: %d columns", n+1, len(cols))
		}
		rows++
		in, wantInt, wantBool := cols[1], cols[2], cols[3]
		got, err := laxInt(newScanner([]byte(in), DefaultLimits))
		switch {
		case wantInt == "-" && err == nil:
			t.Errorf("line %d: int from %s: pydantic refuses, kvgate reads %d", n+1, in, *got)
		case wantInt != "-" && err != nil:
			t.Errorf("line %d: int from %s: pydantic reads %s, kvgate refuses: %v", n+1, in, wantInt, err)
		case wantInt != "-":
			want, perr := strconv.ParseInt(wantInt, 10, 64)
			if perr != nil { // beyond int64: kvgate saturates, its bounds then refuse
				want = math.MaxInt64
				if strings.HasPrefix(wantInt, "-") {
					want = math.MinInt64
				}
			}
			if *got != want {
				t.Errorf("line %d: int from %s: pydantic %s, kvgate %d", n+1, in, wantInt, *got)
			}
		}
		b, _, err := laxBool(newScanner([]byte(in), DefaultLimits), false, false)
		switch {
		case wantBool == "-" && err == nil:
			t.Errorf("line %d: bool from %s: pydantic refuses, kvgate reads %v", n+1, in, b)
		case wantBool != "-" && err != nil:
			t.Errorf("line %d: bool from %s: pydantic reads %s, kvgate refuses: %v", n+1, in, wantBool, err)
		case wantBool != "-" && strconv.FormatBool(b) != wantBool:
			t.Errorf("line %d: bool from %s: pydantic %s, kvgate %v", n+1, in, wantBool, b)
		}
	}
	if rows < 2000 {
		t.Fatalf("%d rows", rows)
	}
}
