package openai

import (
	"strconv"
	"strings"
	"unicode"
)

// pythonStr is Python's str() of a JSON value as json.loads made it: vLLM's
// Anthropic conversion writes a tool_result's block list into the tool
// message as str(block.content) (vllm/entrypoints/anthropic/serving.py,
// _convert_anthropic_to_openai_request, commit 82df3f491008), so the prompt
// holds the list's repr: dicts and lists as Python prints them, strings
// quoted by repr's rules (CPython Objects/unicodeobject.c
// unicode_repr: single quotes unless the text holds a ' and no ", escapes
// \\, \t, \n, \r, and \xNN / \uNNNN / \UNNNNNNNN for what str.isprintable
// refuses), True/False/None, ints as written, floats by float_repr.
func pythonStr(v Value) string {
	if v.Kind == KindString {
		return v.Text
	}
	var b strings.Builder
	appendPythonRepr(&b, v)
	return b.String()
}

func appendPythonRepr(b *strings.Builder, v Value) {
	switch v.Kind {
	case KindNull:
		b.WriteString("None")
	case KindBool:
		if v.Bool {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case KindNumber:
		b.WriteString(pythonNumber(v.Text))
	case KindString:
		appendPythonStringRepr(b, v.Text)
	case KindArray:
		b.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			appendPythonRepr(b, it)
		}
		b.WriteByte(']')
	case KindObject:
		b.WriteByte('{')
		for i, m := range v.Members {
			if i > 0 {
				b.WriteString(", ")
			}
			appendPythonStringRepr(b, m.Key)
			b.WriteString(": ")
			appendPythonRepr(b, m.Value)
		}
		b.WriteByte('}')
	}
}

// pythonNumber is repr() of the int or float json.loads makes of lit.
func pythonNumber(lit string) string {
	p := parsePyNumber(lit)
	if !p.isFloat {
		if p.big {
			return strings.TrimPrefix(lit, "+")
		}
		return strconv.FormatInt(p.i, 10)
	}
	f := p.f
	switch {
	case f != f:
		return "nan"
	case f > 1.7976931348623157e308:
		return "inf"
	case f < -1.7976931348623157e308:
		return "-inf"
	}
	// float_repr_style 'short': the shortest digits that round-trip,
	// scientific when the exponent is below -4 or at least 16.
	digits := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(digits, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		e := strconv.Itoa(exp)
		if len(e) < 2 {
			e = "0" + e
		}
		return mant + "e" + sign + e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func appendPythonStringRepr(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x7f && r >= 0x20:
			b.WriteRune(r)
		case !unicode.IsPrint(r):
			// Go's IsPrint and Python's isprintable agree: neither takes
			// C* or Z* other than the ASCII space.
			switch {
			case r < 0x100:
				b.WriteString(`\x`)
				b.WriteString(hex(uint32(r), 2))
			case r < 0x10000:
				b.WriteString(`\u`)
				b.WriteString(hex(uint32(r), 4))
			default:
				b.WriteString(`\U`)
				b.WriteString(hex(uint32(r), 8))
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
}

func hex(n uint32, width int) string {
	s := strconv.FormatUint(uint64(n), 16)
	return strings.Repeat("0", width-len(s)) + s
}
