package openai

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The engines (vLLM behind FastAPI) read a request body with Python's
// json.loads and validate the result with pydantic v2 in its default lax
// mode: vLLM's request models (vllm/entrypoints/openai/chat_completion/
// protocol.py ChatCompletionRequest and completion/protocol.py
// CompletionRequest at commit d5dba2d7b0ab9b98096560c69db7126b54b14d79, on
// OpenAIBaseModel in engine/protocol.py: extra="allow", never strict)
// declare max_tokens and max_completion_tokens `int | None`, stream
// `bool | None`, add_generation_prompt and continue_final_message `bool`
// (not nullable), prompt `list[int] | list[list[int]] | str | list[str] |
// None`. FastAPI hands pydantic the Python objects json.loads made, so the
// coercions are pydantic-core's Python-input ones (src/input/input_python.rs
// validate_int / validate_bool, src/input/shared.rs, pydantic-core commit
// 383eb95a19433754c0cecf7025b50c26b6d97a36), summarised in pydantic's
// "Conversion Table" (docs.pydantic.dev/latest/concepts/conversion_table).
// This file accepts exactly those spellings for the fields kvgate reads and
// refuses the rest, so kvgate never answers 400 to a request the engine
// would serve. testdata/vllm_lax_verdicts.tsv is the table the tests hold
// it to.

// pyNumber is a JSON number as json.loads returns it: a literal without
// '.', 'e' or 'E' is a Python int (exact, any size), anything else a
// float (Lib/json/scanner.py: NUMBER_RE, then int() or float()); NaN,
// Infinity and -Infinity are floats too (parse_constant).
type pyNumber struct {
	isFloat bool
	// i is the int, saturated at the int64 bounds (big is then set).
	i   int64
	big bool
	f   float64
}

func parsePyNumber(lit string) pyNumber {
	switch lit {
	case "NaN":
		return pyNumber{isFloat: true, f: math.NaN()}
	case "Infinity":
		return pyNumber{isFloat: true, f: math.Inf(1)}
	case "-Infinity":
		return pyNumber{isFloat: true, f: math.Inf(-1)}
	}
	if !strings.ContainsAny(lit, ".eE") {
		n, err := strconv.ParseInt(lit, 10, 64)
		if err != nil { // out of int64 range: Python keeps it exact
			if strings.HasPrefix(lit, "-") {
				return pyNumber{i: math.MinInt64, big: true}
			}
			return pyNumber{i: math.MaxInt64, big: true}
		}
		return pyNumber{i: n}
	}
	f, _ := strconv.ParseFloat(lit, 64) // ±Inf past the float range, as Python's float()
	return pyNumber{isFloat: true, f: f}
}

// floatAsInt is pydantic-core's float_as_int: finite, no fractional part,
// strictly inside the int64 range.
func floatAsInt(f float64) (int64, *Error) {
	switch {
	case math.IsInf(f, 0) || math.IsNaN(f):
		return 0, invalid("", "Input should be a finite number")
	case f != math.Trunc(f):
		return 0, invalid("", "Input should be a valid integer, got a number with a fractional part")
	case f <= math.MinInt64 || f >= math.MaxInt64:
		return 0, invalid("", "Unable to parse input string as an integer, exceeded maximum size")
	}
	return int64(f), nil
}

// laxInt reads an `int | None` field: null → nil; an int; a float with no
// fractional part; a bool (True is 1: bool is an int subclass, accepted in
// lax mode); a string str_as_int accepts. Anything else is refused as
// pydantic refuses it. An int beyond int64 saturates (callers bound it).
func laxInt(s *scanner) (*int64, *Error) {
	k, err := s.peekKind()
	if err != nil {
		return nil, err
	}
	var n int64
	switch k {
	case KindNull:
		return nil, s.literal("null")
	case KindBool:
		b, err := s.readBool()
		if err != nil {
			return nil, err
		}
		if b {
			n = 1
		}
	case KindNumber:
		lit, err := s.readNumber()
		if err != nil {
			return nil, err
		}
		p := parsePyNumber(lit)
		if !p.isFloat {
			n = p.i
			break
		}
		if n, err = floatAsInt(p.f); err != nil {
			return nil, err
		}
	case KindString:
		str, err := s.readString()
		if err != nil {
			return nil, err
		}
		var ok bool
		if n, ok = strAsInt(str); !ok {
			return nil, invalid("", "Input should be a valid integer, unable to parse string as an integer")
		}
	default:
		return nil, invalid("", "Input should be a valid integer, got %s", k)
	}
	return &n, nil
}

// strAsInt is pydantic-core's str_as_int: the string as a JSON integer
// (jiter NumberInt::from_bytes: -?(0|[1-9][0-9]*), nothing after it), or,
// failing that, cleaned as clean_int_str does: surrounding Unicode white
// space trimmed (Rust's str::trim, White_Space, as unicode.IsSpace), one
// leading '+' (not before '-'), leading zeros, a ".0…" tail of zeros, and
// single underscores between digits removed; the cleaned text must then be
// a JSON integer and must differ from the input. More than 4,300 digits is
// refused (jiter's bound, CPython's int-string limit). Beyond int64 the
// value saturates.
func strAsInt(str string) (int64, bool) {
	if n, ok := jsonInt(str); ok {
		return n, true
	}
	cleaned, ok := cleanIntStr(str)
	if !ok {
		return 0, false
	}
	return jsonInt(cleaned)
}

// jsonInt parses -?(0|[1-9][0-9]*) exactly.
func jsonInt(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 4300 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if s[0] == '-' {
			return math.MinInt64, true
		}
		return math.MaxInt64, true
	}
	return n, true
}

func cleanIntStr(s string) (string, bool) {
	before := len(s)
	s = strings.TrimFunc(s, unicode.IsSpace)
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		if strings.HasPrefix(rest, "-") {
			return "", false
		}
		s = rest
	}
	negative := false
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return "", false
		}
		negative, s = true, rest
	}
	s, ok := stripLeadingZeros(s)
	if !ok {
		return "", false
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if frac := s[i+1:]; frac != "" && strings.Trim(frac, "0") == "" {
			s = s[:i]
		}
	}
	sign := ""
	if negative {
		sign = "-"
	}
	if !strings.HasPrefix(s, "_") && !strings.HasSuffix(s, "_") && strings.Contains(s, "_") && !strings.Contains(s, "__") {
		return sign + strings.ReplaceAll(s, "_", ""), true
	}
	if len(s) == before {
		return "", false
	}
	return sign + s, true
}

// stripLeadingZeros is pydantic-core's strip_leading_zeros: zeros (and
// underscores among them) go, one zero stays before a '.' or when all are
// zeros; a first character other than a digit or '-' fails.
func stripLeadingZeros(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	switch c := s[0]; {
	case c == '0':
	case (c >= '1' && c <= '9') || c == '-':
		return s, true
	default:
		return "", false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '0' || c == '_':
		case (c >= '1' && c <= '9') || c == '-':
			return s[i:], true
		case c == '.':
			return s[i-1:], true
		default:
			return "", false
		}
	}
	return s[len(s)-1:], true
}

// laxBool reads a bool field: true/false; the ints 0 and 1; a float
// float_as_int makes 0 or 1; a string str_as_bool accepts ("0", "1", and,
// ASCII case-insensitively, f n no off false / t y on yes true, untrimmed);
// null only when nullable (then def). raw reports the value's Python
// truthiness as json.loads made it, which vLLM's mode="before" validators
// test (check_generation_prompt).
func laxBool(s *scanner, nullable, def bool) (v, raw bool, err *Error) {
	k, err := s.peekKind()
	if err != nil {
		return def, false, err
	}
	switch k {
	case KindNull:
		if !nullable {
			return def, false, invalid("", "Input should be a valid boolean, got null")
		}
		return def, false, s.literal("null")
	case KindBool:
		b, err := s.readBool()
		return b, b, err
	case KindString:
		str, err := s.readString()
		if err != nil {
			return def, false, err
		}
		b, ok := strAsBool(str)
		if !ok {
			return def, str != "", invalid("", "Input should be a valid boolean, unable to interpret input")
		}
		return b, str != "", nil
	case KindNumber:
		lit, err := s.readNumber()
		if err != nil {
			return def, false, err
		}
		p := parsePyNumber(lit)
		n := p.i
		if p.isFloat {
			var ferr *Error
			if n, ferr = floatAsInt(p.f); ferr != nil {
				return def, p.f != 0, invalid("", "Input should be a valid boolean, got %s", lit)
			}
		} else if p.big {
			return def, true, invalid("", "Input should be a valid boolean, got %s", lit)
		}
		switch n {
		case 0:
			return false, false, nil
		case 1:
			return true, true, nil
		}
		return def, true, invalid("", "Input should be a valid boolean, unable to interpret input")
	}
	return def, false, invalid("", "Input should be a valid boolean, got %s", k)
}

func strAsBool(s string) (bool, bool) {
	switch {
	case s == "0":
		return false, true
	case s == "1":
		return true, true
	}
	for _, w := range []string{"f", "n", "no", "off", "false"} {
		if asciiEqualFold(s, w) {
			return false, true
		}
	}
	for _, w := range []string{"t", "y", "on", "yes", "true"} {
		if asciiEqualFold(s, w) {
			return true, true
		}
	}
	return false, false
}

// asciiEqualFold is Rust's eq_ignore_ascii_case: only A-Z fold (Go's
// strings.EqualFold would also take "yeſ" for "yes").
func asciiEqualFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// jsonText is the body as the engine's json.loads reads it. FastAPI reads
// a JSON body with Starlette's Request.json, json.loads(body) on the bytes
// (fastapi/routing.py get_request_handler; starlette/requests.py), and
// CPython's json.loads decodes bytes in the encoding detect_encoding names
// (Lib/json/__init__.py): a UTF-32 or UTF-16 byte-order mark, or the
// pattern of zero bytes in the first four, selects UTF-32/UTF-16 (big- or
// little-endian), a UTF-8 mark "utf-8-sig" (the mark dropped), anything
// else UTF-8. UTF-8 text is used in place; other encodings are transcoded
// (at most 1.5 times the body). A second mark, or text the codec refuses,
// is refused there too (json.loads raises, FastAPI answers 400). One
// deliberate difference stands: an unpaired surrogate, which Python's
// "surrogatepass" lets through, is refused here as in UTF-8 strings
// (readString: the engine's tokenizer cannot encode it).
func jsonText(body []byte) ([]byte, *Error) {
	b := body
	switch {
	case hasPrefix(b, 0x00, 0x00, 0xFE, 0xFF):
		return fromUTF32(b[4:], true)
	case hasPrefix(b, 0xFF, 0xFE, 0x00, 0x00):
		return fromUTF32(b[4:], false)
	case hasPrefix(b, 0xFE, 0xFF):
		return fromUTF16(b[2:], true)
	case hasPrefix(b, 0xFF, 0xFE):
		return fromUTF16(b[2:], false)
	case hasPrefix(b, 0xEF, 0xBB, 0xBF):
		return b[3:], nil
	}
	switch {
	case len(b) >= 4 && b[0] == 0 && b[1] != 0:
		return fromUTF16(b, true)
	case len(b) >= 4 && b[0] == 0:
		return fromUTF32(b, true)
	case len(b) >= 4 && b[1] == 0 && (b[2] != 0 || b[3] != 0):
		return fromUTF16(b, false)
	case len(b) >= 4 && b[1] == 0:
		return fromUTF32(b, false)
	case len(b) == 2 && b[0] == 0:
		return fromUTF16(b, true)
	case len(b) == 2 && b[1] == 0:
		return fromUTF16(b, false)
	}
	return b, nil
}

func hasPrefix(b []byte, p ...byte) bool {
	if len(b) < len(p) {
		return false
	}
	for i, c := range p {
		if b[i] != c {
			return false
		}
	}
	return true
}

func fromUTF16(b []byte, bigEndian bool) ([]byte, *Error) {
	if len(b)%2 != 0 {
		return nil, invalid("", "request body: truncated UTF-16 data")
	}
	out := make([]byte, 0, len(b)*3/2)
	unit := func(i int) rune {
		if bigEndian {
			return rune(b[i])<<8 | rune(b[i+1])
		}
		return rune(b[i+1])<<8 | rune(b[i])
	}
	for i := 0; i < len(b); i += 2 {
		r := unit(i)
		if r >= 0xD800 && r < 0xDC00 && i+3 < len(b) {
			if lo := unit(i + 2); lo >= 0xDC00 && lo < 0xE000 {
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				i += 2
			}
		}
		if r >= 0xD800 && r < 0xE000 {
			return nil, invalid("", "request body: unpaired UTF-16 surrogate at byte %d", i)
		}
		out = utf8.AppendRune(out, r)
	}
	return out, nil
}

func fromUTF32(b []byte, bigEndian bool) ([]byte, *Error) {
	if len(b)%4 != 0 {
		return nil, invalid("", "request body: truncated UTF-32 data")
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i += 4 {
		var r rune
		if bigEndian {
			r = rune(b[i])<<24 | rune(b[i+1])<<16 | rune(b[i+2])<<8 | rune(b[i+3])
		} else {
			r = rune(b[i+3])<<24 | rune(b[i+2])<<16 | rune(b[i+1])<<8 | rune(b[i])
		}
		if r < 0 || r > unicode.MaxRune || (r >= 0xD800 && r < 0xE000) {
			return nil, invalid("", "request body: invalid UTF-32 code point at byte %d", i)
		}
		out = utf8.AppendRune(out, r)
	}
	return out, nil
}
